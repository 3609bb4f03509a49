//! The `worker` binary: flags, logs, then [`swarm_worker::run`] until SIGTERM or Ctrl-C.

swarm_runtime::role_allocator!();

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use swarm_runtime::CommonArgs;

/// A Swarm worker replica: executes tasks of one pool.
#[derive(Debug, Parser)]
#[command(name = "worker", version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    health: swarm_runtime::health::HealthArgs,
    /// The pool this worker serves.
    #[arg(long, env = "SWARM_POOL", default_value = "general")]
    pool: String,
    /// Root folder of the file tools; paths outside it are refused. Default:
    /// a folder of its own, `$XDG_DATA_HOME/swarm/workspace` (or
    /// `~/.local/share/swarm/workspace`), created if missing; never the
    /// directory the worker happens to be started from.
    #[arg(long, env = "SWARM_WORKSPACE")]
    workspace_root: Option<PathBuf>,
    /// Tasks run at once.
    #[arg(long, env = "SWARM_WORKER_CONCURRENCY", default_value_t = 16)]
    concurrency: usize,
    /// Copies of each stream and bucket it creates (3 for a production cluster).
    #[arg(long, env = "SWARM_REPLICAS", default_value_t = 1)]
    replicas: usize,
    /// Seconds before an unacknowledged assignment is redelivered (extended while a task runs).
    #[arg(long, env = "SWARM_WORKER_ACK_WAIT", default_value_t = 30)]
    ack_wait: u64,
    /// Seconds one task may run before it fails with a timeout.
    #[arg(long, env = "SWARM_TASK_TIMEOUT", default_value_t = 600)]
    task_timeout: u64,
    /// Seconds a destructive tool call waits for `swarm approve` before it counts as denied.
    #[arg(long, env = "SWARM_APPROVAL_WAIT", default_value_t = 600)]
    approval_wait: u64,
    /// Remote A2A agents a persona may hand its tasks to (`a2a_url`):
    /// URL prefixes, comma-separated; none by default. A persona's
    /// `a2a_credential: "<name>"` sends the token in
    /// `SWARM_A2A_CREDENTIAL_<NAME>` as a bearer token.
    #[arg(long, env = "SWARM_A2A_ALLOW", default_value = "")]
    a2a_allow: String,
    /// Skill ids this pool offers on its agent card, beside one per tool
    /// (comma-separated): a persona's `skill` is routed to a pool that
    /// offers it.
    #[arg(
        long,
        env = "SWARM_WORKER_SKILLS",
        default_value = "",
        value_delimiter = ','
    )]
    skills: Vec<String>,
    /// An MCP server run as a child process over stdio, whose tools the
    /// worker offers as `mcp__NAME__<tool>`: `NAME=COMMAND ARGS...`, the
    /// command line split as a shell would. Repeatable; in the environment,
    /// several separated by `;`.
    #[arg(long = "mcp-server", env = "SWARM_MCP_SERVERS", value_delimiter = ';')]
    mcp_servers: Vec<String>,
    /// An MCP server over streamable HTTP: `NAME=URL`, with the bearer token
    /// in `SWARM_MCP_TOKEN_<NAME>` if it needs one. Repeatable; in the
    /// environment, several separated by `;`.
    #[arg(long = "mcp-url", env = "SWARM_MCP_URLS", value_delimiter = ';')]
    mcp_urls: Vec<String>,
    /// A JSON file of MCP servers in the shape MCP clients share:
    /// `{"mcpServers": {"NAME": {"command": ..., "args": [...], "env": {...}}
    /// or {"url": ..., "headers": {...}}}}`.
    #[arg(long, env = "SWARM_MCP_CONFIG")]
    mcp_config: Option<PathBuf>,
    /// Seconds one MCP tool call may take before it fails.
    #[arg(long, env = "SWARM_MCP_TIMEOUT", default_value_t = 60)]
    mcp_timeout: u64,
    /// Model requests in flight at once across every worker calling the
    /// same endpoint and model (shared through JetStream); unset: no cap.
    #[arg(long, env = "SWARM_MODEL_MAX_CONCURRENT")]
    model_max_concurrent: Option<u32>,
    /// Model requests per minute across every worker of the endpoint and
    /// model; unset: what the provider's `x-ratelimit-*` headers say.
    #[arg(long, env = "SWARM_MODEL_RPM")]
    model_rpm: Option<u64>,
    /// Model tokens (prompt and reply) per minute across every worker of
    /// the endpoint and model; unset: what the provider's headers say.
    #[arg(long, env = "SWARM_MODEL_TPM")]
    model_tpm: Option<u64>,
    /// The model the agent loop talks to.
    #[command(flatten)]
    provider: swarm_agent::provider::ProviderArgs,
    /// Optional tools and gates.
    #[command(flatten)]
    tools: swarm_agent::tools::ToolArgs,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let agent_id = swarm_runtime::start_role(&cli.common, &cli.health, "worker").await?;
    let mut config = swarm_worker::WorkerConfig::new(cli.common.nats.clone(), agent_id);
    config.pool = cli.pool;
    config.workspace_root = cli
        .workspace_root
        .unwrap_or_else(swarm_worker::default_workspace);
    config.concurrency = cli.concurrency;
    config.replicas = cli.replicas;
    config.drain_timeout = cli.common.drain_timeout();
    config.ack_wait = Duration::from_secs(cli.ack_wait.max(3));
    config.task_timeout = Duration::from_secs(cli.task_timeout.max(1));
    config.approval_wait = Duration::from_secs(cli.approval_wait.max(1));
    config.provider = cli.provider.config_for_role("WORKER")?;
    config.tool_args = cli.tools;
    config.remote = swarm_worker::RemoteConfig::from_env_and(&cli.a2a_allow);
    config.skills = cli
        .skills
        .iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    config.mcp = swarm_worker::mcp::McpConfig::parse(
        &cli.mcp_servers,
        &cli.mcp_urls,
        cli.mcp_config.as_deref(),
        |name| std::env::var(swarm_worker::mcp::token_var(name)).ok(),
    )?;
    config.mcp.call_timeout = Duration::from_secs(cli.mcp_timeout.max(1));
    config.model_limits = swarm_agent::provider::limit::Limits {
        max_concurrent: cli.model_max_concurrent.filter(|n| *n > 0),
        requests_per_minute: cli.model_rpm.filter(|n| *n > 0),
        tokens_per_minute: cli.model_tpm.filter(|n| *n > 0),
    };
    swarm_runtime::finish_role(swarm_worker::run(config, swarm_runtime::shutdown::signal()).await)
}
