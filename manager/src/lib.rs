//! The Swarm manager: turns a deployment into a task graph, assigns ready
//! tasks to worker pools, tracks `SwarmState` in JetStream KV, reviews each
//! result through quality gates, asks for revisions, and publishes exactly
//! one `FinalReport` per swarm.
//!
//! [`machine`] holds what an event does to a swarm as pure functions, on a
//! swarm's state and the [`index`] over its tasks; [`driver`] holds, as a
//! pure state machine per swarm, when a state is read, written and acked
//! and which side effects wait for the write; [`service`] is the NATS layer
//! that carries out what the drivers decide; [`report`] builds the final
//! report.

pub mod driver;
pub mod index;
pub mod machine;
pub mod poison;
pub mod report;
pub mod service;
pub mod token;

pub use service::{ManagerConfig, run};
