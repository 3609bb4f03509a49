//! The Swarm manager: turns a deployment into a task graph, assigns ready
//! tasks to worker pools, tracks `SwarmState` in JetStream KV, reviews each
//! result through quality gates, asks for revisions, and publishes exactly
//! one `FinalReport` per swarm.
//!
//! [`machine`] holds every decision as a pure function, on a swarm's state
//! and the [`index`] over its tasks; [`service`] is the NATS layer around
//! it; [`report`] builds the final report.

pub mod index;
pub mod machine;
pub mod poison;
pub mod report;
pub mod service;
pub mod token;

pub use service::{ManagerConfig, run};
