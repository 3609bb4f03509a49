//! What the `swarm` command shows, as a library so that `tests/tables.rs`
//! can snapshot it: progress lines, tables and report summaries
//! ([`display`]) and the live view of a swarm being followed
//! ([`progress`]), and Swarm as an MCP server for `swarm mcp` ([`mcp`]).
//!
//! Talking to a cluster is `swarm_client`'s; running a local one is
//! `swarm_local`'s. The command itself is `src/main.rs`.

pub mod display;
pub mod mcp;
pub mod progress;
