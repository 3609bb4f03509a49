//! The client side of Swarm, for the `swarm` command, the benchmarks, the
//! whole-system tests and any other program that talks to a cluster over
//! NATS:
//!
//! - [`client`]: submit a mission ([`client::submit`]), follow it to its
//!   final report ([`client::watch`]), read a swarm's state and mission
//!   record ([`client::state`], [`client::lookup`]), wait for and fetch its
//!   HTML report, list and decide approval requests, answer a task's
//!   question, cancel a swarm and collect what a finished one left
//!   ([`client::gc`]);
//! - [`inspect`]: any stored message or bucket value, decoded to JSON
//!   whatever its codec (`swarm inspect`);
//! - [`list`]: the newest swarms, a page at a time, at a cost that grows
//!   with the page and not with the swarms that have ever run;
//! - [`agents`]: the running replicas' agent cards (`swarm agents`);
//! - [`a2a`]: an A2A client over the NATS binding of the gateway;
//! - [`exit`]: the exit code each failure calls for, which the calls above
//!   attach to their errors.
//!
//! Nothing here prints: showing the answers is the `swarm` command's job.

pub mod a2a;
pub mod agents;
pub mod client;
pub mod exit;
pub mod inspect;
pub mod list;
