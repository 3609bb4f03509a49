//! The local cluster supervisor: runs a nats-server and the `boss`,
//! `manager` and `worker` binaries as child processes on this machine, for
//! `swarm up`, `swarm demo`, the whole-system tests (through
//! `swarm-testkit`) and the benchmarks. Everything is used from the crate's
//! root; the modules are:
//!
//! - `config`: what a cluster runs and where ([`LocalOptions`]);
//! - `process`: one supervised child and its log ([`ManagedProcess`]);
//! - `cpus`: which CPUs a child runs on ([`NatsCpus`]);
//! - `nats`: the nats-server binary and process ([`NatsProcess`]);
//! - `ready`: what a started cluster still lacks before it takes missions;
//! - `cluster`: the whole cluster ([`LocalCluster`]).
//!
//! Every child writes its stdout and stderr to one log file under
//! `<data_dir>/logs/` (`nats-server.log`, `boss-1.log`, `worker-2.log`, ...),
//! appended across restarts. Children stay in the supervisor's process group
//! on purpose: a Ctrl-C in the terminal reaches them too, so an interrupted
//! test run leaves no orphans behind. [`LocalCluster::stop`] is the ordered
//! shutdown (roles first, then the broker).

mod cluster;
mod config;
mod cpus;
mod nats;
mod process;
mod ready;

pub use cluster::LocalCluster;
pub use config::{DEFAULT_POOL, LocalOptions};
pub use cpus::NatsCpus;
pub use nats::{NatsProcess, nats_server_bin};
pub use process::{ManagedProcess, log_tail};
pub use ready::BOSS_SERVICE;
