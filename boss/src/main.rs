//! The `boss` binary: flags, logs, then [`swarm_boss::run`] until SIGTERM or Ctrl-C.

use std::path::PathBuf;

use clap::Parser;
use swarm_runtime::CommonArgs;

/// A Swarm boss replica: mission intake, planning, reports.
#[derive(Debug, Parser)]
#[command(name = "boss", version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    swarm_runtime::telemetry::init(cli.common.log_format);
    let mut config =
        swarm_boss::BossConfig::new(cli.common.nats.clone(), cli.common.agent_id("boss"));
    config.reports_dir = cli.reports_dir;
    config.replicas = cli.replicas;
    config.drain_timeout = cli.common.drain_timeout();
    if let Some(n) = cli.max_mission_bytes {
        config.limits.max_mission_bytes = n;
    }
    if let Some(n) = cli.max_tasks {
        config.limits.max_tasks = n;
    }
    swarm_boss::run(config, swarm_runtime::shutdown::signal()).await
}
