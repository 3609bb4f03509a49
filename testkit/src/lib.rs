//! Test support for Swarm: real nats-server processes ([`NatsServer`]) and
//! whole-system clusters of the Swarm binaries ([`Cluster`]), each in its own
//! temporary directory and killed on `Drop`.
//!
//! Process handling is `swarm_cli::local`'s, the same code `swarm up` runs.
//! Set `SWARM_KEEP_TEST_DIRS=1` to keep the temporary directories (stores and
//! logs) for a look after the test; their paths are printed.

// A test-support crate reports misuse by panicking, as the tests using it do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster;
mod nats;
mod scratch;

pub use cluster::{Cluster, ClusterBuilder, bin_dir};
pub use nats::{NatsServer, dev_nats_conf};
pub use swarm_cli::local::{
    self, DEFAULT_POOL, LocalCluster, LocalOptions, ManagedProcess, NatsProcess,
};
