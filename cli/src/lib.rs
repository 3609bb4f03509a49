//! The `swarm` command-line client as a library: talking to a cluster
//! ([`client`]), showing what it says ([`display`]), and the local cluster
//! supervisor ([`local`]) that `swarm up`, `swarm demo` and the whole-system
//! tests share.

pub mod client;
pub mod display;
pub mod local;
