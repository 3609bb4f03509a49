//! Test support for Swarm: real nats-server processes ([`NatsServer`]) and
//! whole-system clusters of the Swarm binaries ([`Cluster`]), each in its own
//! temporary directory and killed on `Drop`.
//!
//! Process handling is `swarm_local`'s, the same code `swarm up` runs.
//! Set `SWARM_KEEP_TEST_DIRS=1` to keep the temporary directories (stores and
//! logs) for a look after the test; their paths are printed.

// A test-support crate reports misuse by panicking, as the tests using it do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod binary;
mod cluster;
mod llm;
mod nats;
mod nats_cluster;
mod scratch;

pub use cluster::{Cluster, ClusterBuilder, TEST_TOKEN_KEY, bin_dir};
pub use llm::{
    Match, MockLlm, MockToolCall, Recorded, Reply, Rule, Wire, anthropic_events, anthropic_text,
    anthropic_tool_use, openai_events, openai_text, openai_tool_calls,
};
pub use nats::{NatsServer, dev_nats_conf};
pub use nats_cluster::{
    NatsCluster, NatsNode, ROLES, ROUTE_PASSWORD, ROUTE_PASSWORD_VAR, ROUTE_USER, Role, free_port,
    http_get, prod_nats_dir, role, single_node_cluster_conf,
};
pub use swarm_local::{DEFAULT_POOL, LocalCluster, LocalOptions, ManagedProcess, NatsProcess};
