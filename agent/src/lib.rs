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
//!   mission's text into a task graph without a model, and
//!   [`plan_with_provider`], which asks a model for one.
//! - [`gates`]: checks a result must pass, and [`budget`]: the token and
//!   cost bounds of a mission.
//! - [`review`]: a model reviewing a result for the manager, and writing
//!   the final report's summary.
//!
//! Nothing here speaks NATS: the worker and the boss carry the results.

pub mod agent_loop;
pub mod budget;
pub mod gates;
mod intent;
pub mod planner;
mod prompt;
pub mod provider;
pub mod review;
pub mod tools;

pub use agent_loop::{
    AgentEvent, AgentOutcome, AgentRun, AgentTask, ContextItem, ExplicitCall, RunOptions,
    SyntheticTools, answer_feedback, run_agent, run_task,
};
pub use budget::Budget;
pub use gates::{BuildGate, Gate, GateChain, GateCheck, GateSpec};
pub use planner::offline_plan;
pub use provider::{
    AnthropicProvider, OfflineProvider, OpenAiProvider, Provider, ProviderArgs, ProviderConfig,
    ProviderError, ProviderKind,
};
pub use tools::{Approver, Tool, ToolError, ToolRegistry, ToolSpec, ToolsConfig};
