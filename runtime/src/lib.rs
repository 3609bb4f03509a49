//! NATS plumbing shared by the Swarm roles: connecting with the NATS
//! ecosystem's options ([`config`]), refusing servers that are too old
//! ([`version`]), creating streams and buckets idempotently ([`infra`]),
//! putting A2AP messages on the wire and reading them back ([`wire`]),
//! retrying transient faults ([`retry`]), shutting down on a signal
//! ([`shutdown`]), asking the boss's desk of approvals and questions
//! ([`desk`]), setting up logs ([`telemetry`]), and serving health
//! probes ([`health`]) and Prometheus metrics ([`metrics`]).

pub mod config;
pub mod desk;
pub mod health;
pub mod infra;
pub mod metrics;
pub mod retry;
pub mod shutdown;
pub mod telemetry;
pub mod version;
pub mod wire;

pub use config::{CommonArgs, NatsArgs};
pub use infra::Infra;

#[doc(hidden)]
pub use mimalloc as __mimalloc;

/// Makes mimalloc the allocator of the binary whose `main.rs` invokes it
/// (every role does): a role makes many small, short-lived allocations per
/// message, and mimalloc serves them from per-thread pages faster than the
/// system allocator (docs/decisions.md, "Release profile and allocator").
#[macro_export]
macro_rules! role_allocator {
    () => {
        #[global_allocator]
        static GLOBAL: $crate::__mimalloc::MiMalloc = $crate::__mimalloc::MiMalloc;
    };
}

/// Errors of the shared NATS plumbing.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to NATS at {url}: {reason}")]
    Connect {
        /// The URL tried.
        url: String,
        /// What the client said.
        reason: String,
    },
    /// The server is older than Swarm supports.
    #[error(
        "nats-server {found} is too old: Swarm needs {required} or newer (older ones lack pinned consumers and Debian's 2.9.10 has a clustered compare-and-swap bug; deploy/nats-server.sh installs one)"
    )]
    ServerTooOld {
        /// The server's version.
        found: String,
        /// The oldest supported version.
        required: String,
    },
    /// JetStream is not enabled on the server.
    #[error(
        "JetStream is not available on the server: {0} (start nats-server with -js or a jetstream block)"
    )]
    NoJetStream(String),
    /// A stream, bucket or consumer could not be created or read.
    #[error("cannot set up {what}: {reason}")]
    Setup {
        /// The stream, bucket or consumer.
        what: String,
        /// What the server said.
        reason: String,
    },
    /// The server accepted a configuration but dropped part of it.
    #[error("the server changed the configuration of {what}: {detail}")]
    ConfigMismatch {
        /// The stream or bucket.
        what: String,
        /// Which field differs.
        detail: String,
    },
    /// A publish or request failed.
    #[error("NATS operation failed: {0}")]
    Nats(String),
    /// A payload could not be encoded.
    #[error(transparent)]
    Codec(#[from] swarm_common::CodecError),
}

/// What every role binary does before its `run`: logs in the chosen
/// format, metrics, and the health server (when its port is set). Returns
/// the process's agent id.
pub async fn start_role(
    common: &CommonArgs,
    health: &health::HealthArgs,
    role: &str,
) -> Result<String, RuntimeError> {
    telemetry::init(common.log_format);
    health::spawn(health, common.nats.clone(), role, format!("{role}-health")).await?;
    Ok(common.agent_id(role))
}
