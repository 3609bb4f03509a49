//! Agents for Swarm: what a worker runs between receiving a task and
//! submitting its result.
//!
//! - [`tools`]: the [`Tool`] trait, the built-in read-only tools
//!   and the [`ToolRegistry`] that offers them.
//! - [`chat`]: the [`Provider`] trait every model backend implements, and
//!   the conversation it answers.
//! - [`provider`]: the HTTP backends, and [`ProviderConfig`], which picks
//!   one (or the offline provider).
//! - [`offline`]: the [`OfflineProvider`] and [`offline_plan`], a
//!   deterministic rule-based stand-in for a model that needs no network
//!   and says so.
//! - [`task`]: a task as the agent sees it ([`AgentTask`]).
//! - [`agent_loop`]: [`run_task`], the loop that asks a
//!   provider for the next action, runs tool calls and returns an outcome.
//! - [`planner`]: asking a model to turn a mission into a task graph
//!   ([`planner::plan_with_provider`]).
//! - [`gates`]: checks a result must pass, and [`budget`]: the token and
//!   cost bounds of a mission.
//! - [`review`]: a model reviewing a result for the manager, and writing
//!   the final report's summary.
//!
//! Nothing here speaks NATS: the worker and the boss carry the results.

pub mod agent_loop;
pub mod budget;
pub mod chat;
mod command;
pub mod gates;
pub mod offline;
pub mod planner;
mod prompt;
pub mod provider;
pub mod review;
pub mod task;
mod text;
pub mod tools;

pub use agent_loop::{
    AgentEvent, AgentOutcome, AgentRun, RunOptions, SyntheticTools, WRITING_TAIL_BYTES,
    answer_feedback, run_agent, run_task,
};
pub use budget::Budget;
pub use chat::{Provider, ProviderError};
pub use gates::{BuildGate, Gate, GateChain, GateCheck, GateSpec};
pub use offline::{OfflineProvider, offline_plan};
pub use prompt::render_task_message;
pub use provider::{AnthropicProvider, OpenAiProvider, ProviderArgs, ProviderConfig, ProviderKind};
pub use task::{AgentTask, ContextItem, ExplicitCall};
pub use tools::{Approver, Tool, ToolError, ToolRegistry, ToolSpec, ToolsConfig};
