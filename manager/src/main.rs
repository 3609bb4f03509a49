//! The `manager` binary: flags, logs, then [`swarm_manager::run`] until SIGTERM or Ctrl-C.

swarm_runtime::role_allocator!();

use std::time::Duration;

use clap::Parser;
use swarm_runtime::CommonArgs;

/// A Swarm manager replica: runs swarms' task graphs.
#[derive(Debug, Parser)]
#[command(name = "manager", version, about)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    health: swarm_runtime::health::HealthArgs,
    /// Copies of each stream and bucket it creates (3 for a production cluster).
    #[arg(long, env = "SWARM_REPLICAS", default_value_t = 1)]
    replicas: usize,
    /// Seconds the server waits for an event's ack before redelivering it
    /// (default 1.5, or 30 with a model reviewer, whose calls a redelivery
    /// would pay for twice). A takeover waits for this long.
    #[arg(long, env = "SWARM_MANAGER_ACK_WAIT")]
    ack_wait: Option<f64>,
    /// Seconds the server keeps a partition pinned to its owner after the
    /// owner stops pulling; then the replica that took the partition over
    /// is served.
    #[arg(long, env = "SWARM_MANAGER_PIN_TTL", default_value_t = 1.0)]
    pin_ttl: f64,
    /// Replicas that may die applying one redelivered event, after the
    /// first, before it is set aside as a dead letter and its swarm fails
    /// (raise it where replicas are killed often for reasons of their own).
    #[arg(long, env = "SWARM_MANAGER_POISON_DEATHS", default_value_t = swarm_manager::poison::DEATHS_ALLOWED)]
    poison_deaths: u32,
    /// The model that reviews results and summarises reports (`offline`: rule-based review only).
    #[command(flatten)]
    provider: swarm_agent::provider::ProviderArgs,
    /// Most swarms this replica works on at once (the rest wait for a replica with room).
    #[arg(long, env = "SWARM_MANAGER_MAX_SWARMS", default_value_t = 1000)]
    max_swarms: usize,
    /// Which programs tasks' `command` gates may run on this host (each
    /// check in a temporary folder of its own).
    #[command(flatten)]
    command_gates: swarm_agent::tools::CommandGateArgs,
    /// The secret assignment tokens are made from; every replica needs the
    /// same. Default: derived from the manager's NATS password, token or
    /// credentials; with none of those (a development server without
    /// users) results are not checked for tokens.
    #[arg(long, env = "SWARM_TOKEN_KEY", hide_env_values = true)]
    token_key: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let agent_id = swarm_runtime::start_role(&cli.common, &cli.health, "manager").await?;
    let mut config = swarm_manager::ManagerConfig::new(cli.common.nats.clone(), agent_id);
    config.drain_timeout = cli.common.drain_timeout();
    config.replicas = cli.replicas;
    config.deaths_allowed = cli.poison_deaths.max(1);

    config.max_swarms = cli.max_swarms.max(1);
    let provider = cli.provider.config_for_role("MANAGER")?;
    if provider.kind != swarm_agent::provider::ProviderKind::Offline {
        config.reviewer = Some(provider.build()?);
    }
    // A takeover waits for this long, so keep it short; but a batch held
    // for a model's review must not be handed to another replica meanwhile.
    let default_ack_wait = if config.reviewer.is_some() { 30.0 } else { 1.5 };
    let seconds = |s: f64| Duration::from_secs_f64(if s.is_finite() { s.max(0.5) } else { 0.5 });
    config.ack_wait = seconds(cli.ack_wait.unwrap_or(default_ack_wait));
    config.pin_ttl = seconds(cli.pin_ttl);
    config.gate_options = swarm_agent::gates::GateOptions {
        commands: cli.command_gates.policy(),
        // A temporary folder per check: the manager has no workspace.
        command_dir: None,
        ..Default::default()
    };
    let nats = &cli.common.nats;
    let secret = match (&cli.token_key, &nats.password, &nats.token, &nats.creds) {
        (Some(key), ..) => Some(key.as_bytes().to_vec()),
        (None, Some(password), ..) => Some(password.as_bytes().to_vec()),
        (None, None, Some(token), _) => Some(token.as_bytes().to_vec()),
        (None, None, None, Some(creds)) => Some(std::fs::read(creds)?),
        (None, None, None, None) => None,
    };
    config.token_key = secret.map_or_else(swarm_manager::token::TokenKey::none, |s| {
        swarm_manager::token::TokenKey::new(&s)
    });
    swarm_runtime::finish_role(swarm_manager::run(config, swarm_runtime::shutdown::signal()).await)
}
