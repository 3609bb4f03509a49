//! The `swarm` command-line client as a library: talking to a cluster
//! ([`client`]), listing swarms cheaply ([`list`]), showing what it says
//! ([`display`], [`progress`]), its exit codes ([`exit`]), the demo's
//! workspace ([`demo`]), and the local cluster supervisor ([`local`]) that
//! `swarm up`, `swarm demo` and the whole-system tests share.

pub mod client;
pub mod demo;
pub mod display;
pub mod exit;
pub mod list;
pub mod local;
pub mod progress;
