//! NATS plumbing shared by the Swarm roles: connecting with the NATS
//! ecosystem's options ([`config`]), refusing servers that are too old
//! ([`version`]), creating streams and buckets idempotently ([`infra`]),
//! putting A2AP messages on the wire and reading them back ([`wire`]),
//! retrying transient faults ([`retry`]), shutting down on a signal
//! ([`shutdown`]), asking the boss's desk of approvals and questions
//! ([`desk`]), setting up logs and traces ([`telemetry`]), carrying the
//! trace context in headers ([`trace`]), answering the protocol
//! handshake ([`hello`]), and serving health probes ([`health`]) and
//! Prometheus metrics ([`metrics`]).

pub mod cards;
pub mod config;
pub mod desk;
pub mod health;
pub mod hello;
pub mod infra;
pub mod metrics;
pub mod retry;
pub mod shutdown;
pub mod skills;
pub mod states;
pub mod telemetry;
pub mod trace;
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

/// The error that caused a [`RuntimeError`], kept whole: an async-nats
/// error with its kind, an I/O error, a codec error, or (for a cause with no
/// error type of its own) a sentence.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of the shared NATS plumbing. Each keeps the error that caused it
/// ([`std::error::Error::source`]), as async-nats's own errors do, and
/// repeats its text after a colon so that a log line that prints only this
/// error still says why.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The server could not be reached or refused the connection.
    #[error("cannot connect to NATS at {url}: {source}")]
    Connect {
        /// The URL tried.
        url: String,
        /// What the client said: an `async_nats::ConnectError` (whose kind
        /// tells a refused connection from bad credentials), or why the
        /// options were refused before connecting.
        source: Cause,
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
    NoJetStream(#[source] Cause),
    /// A stream, bucket or consumer could not be created or read.
    #[error("cannot set up {what}: {source}")]
    Setup {
        /// The stream, bucket or consumer.
        what: String,
        /// What the server or the client said.
        source: Cause,
    },
    /// The server accepted a configuration but dropped part of it.
    #[error("the server changed the configuration of {what}: {detail}")]
    ConfigMismatch {
        /// The stream or bucket.
        what: String,
        /// Which field differs.
        detail: String,
    },
    /// A publish, request or read failed.
    #[error("{what}: {source}")]
    Nats {
        /// What was being done ("publishing to a2ap.s1.result.t1").
        what: String,
        /// The client's error, with its kind.
        source: Cause,
    },
    /// A payload could not be encoded.
    #[error(transparent)]
    Codec(#[from] swarm_common::CodecError),
}

impl RuntimeError {
    /// A failed NATS operation: `what` was being done, `source` went wrong.
    pub fn nats(what: impl Into<String>, source: impl Into<Cause>) -> RuntimeError {
        RuntimeError::Nats {
            what: what.into(),
            source: source.into(),
        }
    }

    /// A stream, bucket or consumer that could not be set up.
    pub fn setup(what: impl Into<String>, source: impl Into<Cause>) -> RuntimeError {
        RuntimeError::Setup {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// What every role binary does before its `run`: logs in the chosen
/// format (and traces as `role`, when an OTLP endpoint is set), metrics,
/// and the health server (when its port is set). Returns the process's
/// agent id. The binary ends with [`finish_role`].
pub async fn start_role(
    common: &CommonArgs,
    health: &health::HealthArgs,
    role: &str,
) -> Result<String, RuntimeError> {
    telemetry::init(common.log_format, role);
    wire::set_codec(common.codec.into());
    health::spawn(health, common.nats.clone(), role, format!("{role}-health")).await?;
    Ok(common.agent_id(role))
}

/// What every role binary does after its `run`: exports the spans still
/// queued (nothing when traces are off), then passes `run`'s outcome on.
pub fn finish_role<T>(outcome: T) -> T {
    telemetry::shutdown();
    outcome
}
