//! The `gateway` binary: flags, logs, then the A2A server until SIGTERM or Ctrl-C.

swarm_runtime::role_allocator!();

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use async_nats::service::ServiceExt as _;
use clap::Parser;
use swarm_runtime::CommonArgs;

/// A Swarm A2A gateway replica: the A2A v1.0 agent of the swarm (JSON-RPC
/// and HTTP+JSON), stateless.
#[derive(Debug, Parser)]
#[command(name = "gateway", version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    health: swarm_runtime::health::HealthArgs,
    /// Address the A2A server listens on.
    #[arg(long, env = "SWARM_GATEWAY_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Base URL callers reach the gateway at, as the agent card names it
    /// (behind a proxy or an ingress); default `http://<listen>`.
    #[arg(long, env = "SWARM_GATEWAY_PUBLIC_URL")]
    public_url: Option<String>,
    /// The callers' tokens: `name:token` entries, comma- or line-separated.
    #[arg(long, env = "SWARM_GATEWAY_TOKENS", hide_env_values = true)]
    tokens: Option<String>,
    /// A file of tokens in the same form (a mounted secret).
    #[arg(long, env = "SWARM_GATEWAY_TOKENS_FILE")]
    tokens_file: Option<PathBuf>,
    /// Serve callers without tokens on an address other than loopback.
    #[arg(long, env = "SWARM_GATEWAY_ALLOW_ANONYMOUS")]
    allow_anonymous: bool,
    /// The NATS user the gateway answers questions and decides approvals
    /// as (the boss's SWARM_APPROVERS must name it).
    #[arg(long, env = "SWARM_GATEWAY_DESK_USER", default_value = "gateway")]
    desk_user: String,
    /// Seconds a SendMessage without `returnImmediately` waits for its task
    /// to end before answering with it as it stands.
    #[arg(long, env = "SWARM_GATEWAY_SEND_WAIT", default_value_t = 30)]
    send_wait: u64,
    /// Take push notification webhooks on loopback, private and link-local
    /// addresses (refused by default: a caller could reach the gateway's
    /// own network through them).
    #[arg(long, env = "SWARM_GATEWAY_PUSH_ALLOW_PRIVATE")]
    push_allow_private: bool,
    /// Most streams (SendStreamingMessage, SubscribeToTask) one caller may
    /// have open at once.
    #[arg(
        long,
        env = "SWARM_GATEWAY_MAX_STREAMS_PER_CALLER",
        default_value_t = 32
    )]
    max_streams_per_caller: usize,
    /// Most streams open at once on this gateway.
    #[arg(long, env = "SWARM_GATEWAY_MAX_STREAMS", default_value_t = 1024)]
    max_streams: usize,
    /// The URL the card names for the A2A NATS binding
    /// (`nats://host:port/a2a.rpc`, docs/a2a-nats.md); default: the first
    /// of --nats-url. The binding is served either way.
    #[arg(long, env = "SWARM_GATEWAY_NATS_BINDING_URL")]
    nats_binding_url: Option<String>,
    /// Serve the web console at `/` (`--console=false` for the A2A API alone).
    #[arg(long, env = "SWARM_GATEWAY_CONSOLE", default_value_t = true, action = clap::ArgAction::Set)]
    console: bool,
    /// Copies of each stream and bucket it creates, when it is the first
    /// role to start (3 for a production cluster).
    #[arg(long, env = "SWARM_REPLICAS", default_value_t = 1)]
    replicas: usize,
    /// Largest mission accepted, in bytes (as the boss's).
    #[arg(long, env = "SWARM_MAX_MISSION_BYTES")]
    max_mission_bytes: Option<usize>,
    /// Most tasks in one plan (as the boss's).
    #[arg(long, env = "SWARM_MAX_TASKS")]
    max_tasks: Option<usize>,
    /// The optional tools the workers offer (same flags and variables as
    /// the workers'), for the card's skills.
    #[command(flatten)]
    tools: swarm_agent::tools::ToolArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let agent_id = swarm_runtime::start_role(&cli.common, &cli.health, "gateway").await?;
    let mut tokens = String::new();
    if let Some(t) = &cli.tokens {
        tokens.push_str(t);
        tokens.push('\n');
    }
    if let Some(path) = &cli.tokens_file {
        tokens.push_str(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading the tokens file {}", path.display()))?,
        );
    }
    let tokens = swarm_gateway::parse_tokens(&tokens)?;
    if tokens.is_empty() && !cli.listen.ip().is_loopback() && !cli.allow_anonymous {
        anyhow::bail!(
            "the gateway would serve anyone on {}: give it tokens (SWARM_GATEWAY_TOKENS or \
             --tokens-file), or pass --allow-anonymous",
            cli.listen
        );
    }
    let mut limits = swarm_common::Limits::default();
    if let Some(n) = cli.max_mission_bytes {
        limits.max_mission_bytes = n;
    }
    if let Some(n) = cli.max_tasks {
        limits.max_tasks = n;
    }
    swarm_runtime::health::starting();
    let client = cli.common.nats.connect(&agent_id).await?;
    // Binds to the streams and buckets (creating what is missing, where
    // this user may), as every role does.
    let infra = swarm_runtime::infra::Infra::open(&client, cli.replicas).await?;
    let nc = client.clone();
    let bound = swarm_gateway::bind(swarm_gateway::GatewayConfig {
        client,
        listen: cli.listen,
        public_url: cli.public_url,
        tokens,
        limits,
        desk_user: cli.desk_user,
        send_wait: std::time::Duration::from_secs(cli.send_wait),
        tool_names: swarm_boss::worker_tool_names(&cli.tools),
        push_allow_private: cli.push_allow_private,
        max_streams_per_caller: cli.max_streams_per_caller,
        max_streams: cli.max_streams,
        console: cli.console,
        nats_url: Some(cli.nats_binding_url.clone().unwrap_or_else(|| {
            let first = cli
                .common
                .nats
                .url
                .split(',')
                .next()
                .unwrap_or_default()
                .trim();
            format!(
                "{}/{}",
                first.trim_end_matches('/'),
                swarm_gateway::nats::RPC_SUBJECT
            )
        })),
    })
    .await?;
    tracing::info!(
        listen = %bound.local_addr,
        url = %bound.public_url,
        %agent_id,
        "gateway ready: its A2A card is at {}/.well-known/agent-card.json",
        bound.public_url
    );
    if cli.console {
        tracing::info!("the console is at {}/", bound.public_url);
    }
    let mut card = swarm_runtime::cards::card("gateway", &agent_id);
    card.url = Some(bound.public_url.clone());
    card.skills = bound.skills.clone();
    // A NATS service as the other roles are (`$SRV.PING`, `INFO` and
    // `STATS`), its card the metadata.
    let service = nc
        .service_builder()
        .description("Swarm A2A gateway: the swarm as an A2A v1.0 agent")
        .metadata(card.metadata())
        .start("gateway", env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("starting the gateway service: {e}"))?;
    let card = swarm_runtime::cards::publish(&infra.agents, card).await;
    swarm_runtime::health::started();
    let served = swarm_gateway::serve(bound, async {
        swarm_runtime::shutdown::signal().await;
        swarm_runtime::health::stopping();
    })
    .await;
    let _ = service.stop().await;
    card.withdraw().await;
    swarm_runtime::finish_role(served)
}
