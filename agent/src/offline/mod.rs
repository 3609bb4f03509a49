//! The offline provider and planner: a deterministic, rule-based stand-in
//! for a model, used by `swarm demo`, by the tests and by any deployment
//! that names no model (`SWARM_PROVIDER=offline`, the default).
//!
//! It reads what a task or a mission asks for from its wording alone, by
//! plain rules (`intent`: keywords, quoted text, tokens that look like
//! paths), and then does real work with the real tools:
//!
//! - [`OfflineProvider`] (`provider`): an agent that turns the requests it
//!   recognises into tool calls, one step at a time, and composes its
//!   answer from their actual outputs, saying that it comes from the
//!   offline provider;
//! - [`offline_plan`] (`planner`): a mission's text to a task graph by its
//!   layout (numbered steps chain, bullets fan out, "then" sequences), each
//!   task staffed by a persona whose tools fit it.
//!
//! It is honest about what it is: not a language model, it never guesses.
//! When no tool fits a request, a tool it needs is not offered, or a tool
//! call fails, it gives up with the reason, and the task fails rather than
//! pass off a reply about a failure as a result. The same input always
//! gets the same output.

mod intent;
mod planner;
mod provider;

pub use planner::{OFFLINE_PLANNER, PersonaOffer, offline_plan, personas};
pub use provider::OfflineProvider;
