//! Agents for Swarm: what a worker runs between receiving a task and
//! submitting its result.
//!
//! - [`tools`]: the [`Tool`] trait, the built-in read-only tools
//!   and the [`ToolRegistry`] that offers them.
//! - [`provider`]: the [`Provider`] trait every model
//!   backend implements, and the [`OfflineProvider`],
//!   a deterministic rule-based agent that needs no network and says so.
//! - [`agent_loop`]: [`run_task`], the loop that asks a
//!   provider for the next action, runs tool calls and returns an outcome.
//! - [`planner`]: [`offline_plan`], which turns a
//!   mission's text into a task graph without a model.
//!
//! Nothing here speaks NATS: the worker and the boss carry the results.

pub mod agent_loop;
mod intent;
pub mod planner;
mod prompt;
pub mod provider;
pub mod tools;

pub use agent_loop::{AgentOutcome, AgentTask, ContextItem, ExplicitCall, run_task};
pub use planner::offline_plan;
pub use provider::{OfflineProvider, Provider, ProviderError};
pub use tools::{Tool, ToolError, ToolRegistry, ToolSpec};
