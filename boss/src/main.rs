//! The `boss` binary: flags, logs, then [`swarm_boss::run`] until SIGTERM or Ctrl-C.

swarm_runtime::role_allocator!();

use std::path::PathBuf;

use clap::Parser;
use swarm_runtime::CommonArgs;

/// A Swarm boss replica: mission intake, planning, reports.
#[derive(Debug, Parser)]
#[command(name = "boss", version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    health: swarm_runtime::health::HealthArgs,
    /// Folder the HTML reports are written to.
    #[arg(long, env = "SWARM_REPORTS_DIR", default_value = "reports")]
    reports_dir: PathBuf,
    /// Copies of each stream and bucket it creates (3 for a production cluster).
    #[arg(long, env = "SWARM_REPLICAS", default_value_t = 1)]
    replicas: usize,
    /// Largest mission accepted, in bytes.
    #[arg(long, env = "SWARM_MAX_MISSION_BYTES")]
    max_mission_bytes: Option<usize>,
    /// Most tasks in one plan.
    #[arg(long, env = "SWARM_MAX_TASKS")]
    max_tasks: Option<usize>,
    /// NATS users who may approve, deny and answer (comma-separated).
    #[arg(long, env = "SWARM_APPROVERS", default_value = "client,gateway")]
    approvers: String,
    /// NATS users who may record and close approval requests and questions (comma-separated).
    #[arg(long, env = "SWARM_DESK_WORKERS", default_value = "worker")]
    desk_workers: String,
    /// The model that plans missions (`offline`: the rule-based planner).
    #[command(flatten)]
    provider: swarm_agent::provider::ProviderArgs,
    /// The optional tools the workers offer (same flags and variables as the workers'), so plans may name them.
    #[command(flatten)]
    tools: swarm_agent::tools::ToolArgs,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let agent_id = swarm_runtime::start_role(&cli.common, &cli.health, "boss").await?;
    let mut config = swarm_boss::BossConfig::new(cli.common.nats.clone(), agent_id);
    config.reports_dir = cli.reports_dir;
    config.replicas = cli.replicas;
    config.drain_timeout = cli.common.drain_timeout();
    if let Some(n) = cli.max_mission_bytes {
        config.limits.max_mission_bytes = n;
    }
    if let Some(n) = cli.max_tasks {
        config.limits.max_tasks = n;
    }
    let provider = cli.provider.config_for_role("BOSS")?;
    if provider.kind != swarm_agent::provider::ProviderKind::Offline {
        config.planner = Some(provider.build()?);
    }
    config.tool_names = swarm_boss::worker_tool_names(&cli.tools);
    config.approvers = swarm_boss::desk::users(&cli.approvers);
    config.desk_workers = swarm_boss::desk::users(&cli.desk_workers);
    swarm_runtime::finish_role(swarm_boss::run(config, swarm_runtime::shutdown::signal()).await)
}
