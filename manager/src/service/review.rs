//! The checks a result passes that need I/O, made before its batch is
//! applied: the task's gates, then the model reviewer (only for a result
//! every other check passed, so no model is paid to read an empty answer).
//!
//! The driver asks for them once per batch ([`crate::driver::Request::Review`]),
//! outside its compare-and-swap rounds, so a lost race does not pay twice;
//! the verdicts travel with each result into [`crate::machine::apply`].

use swarm_agent::gates::GateChain;
use swarm_agent::review::{ReviewRequest, review_with_provider};
use swarm_common::{GateVerdict, ResultSubmission};
use tracing::{info, warn};

use super::Ctx;
use crate::index::Indexed;
use crate::machine;

/// Adds to each result of the current attempt and revision of its task the
/// verdicts of the task's gates and of the model reviewer, if any.
pub(super) async fn review<'a>(
    ctx: &Ctx,
    state: &Indexed,
    results: impl Iterator<Item = (&'a mut ResultSubmission, &'a mut Vec<GateVerdict>)>,
) {
    for (submission, review) in results {
        let Some(task) = state.task(&submission.task_id) else {
            continue;
        };
        let current = !task.status.is_terminal()
            && task.attempt == submission.attempt
            && task.revision == submission.revision;
        if !current || submission.status != swarm_common::TaskStatus::Completed {
            continue;
        }
        let verdict = |gate: String, passed: bool, reason: String| GateVerdict {
            gate,
            passed,
            reason,
            revision: submission.revision,
        };
        if !task.definition.gates.is_empty() {
            let chain = GateChain::from_specs(&task.definition.gates, &ctx.gate_options);
            for (name, check) in chain.check(&submission.result).await {
                review.push(verdict(name, check.passed, check.reason));
            }
        }
        let rules_pass = machine::review(submission, task, state.limits.max_result_bytes)
            .iter()
            .all(|v| v.passed);
        let Some(reviewer) = &ctx.reviewer else {
            continue;
        };
        if !rules_pass || review.iter().any(|v| !v.passed) {
            continue;
        }
        let request = ReviewRequest {
            directive: state.manager_directive.clone(),
            task_title: task.definition.title.clone(),
            task_description: task.definition.description.clone(),
            result: submission.result.clone(),
            criteria: task.definition.gates.iter().map(|g| g.name()).collect(),
        };
        match review_with_provider(reviewer.as_ref(), &request).await {
            Ok(v) => {
                let m = &mut submission.metrics;
                *m.entry("input_tokens".into()).or_insert(0.0) += v.usage.input_tokens as f64;
                *m.entry("output_tokens".into()).or_insert(0.0) += v.usage.output_tokens as f64;
                *m.entry("cost_usd".into()).or_insert(0.0) += v.cost_usd;
                info!(task_id = %task.definition.task_id, approved = v.approved, "model review");
                review.push(verdict("model_review".into(), v.approved, v.feedback));
            }
            Err(e) => {
                // A reviewer that cannot answer does not block the swarm: the
                // rule-based review stands, and the report says so.
                warn!(task_id = %task.definition.task_id, error = %e.message, "model review failed; the rule-based review stands");
                review.push(verdict(
                    "model_review".into(),
                    true,
                    format!("not reviewed by the model: {}", e.message),
                ));
            }
        }
    }
}
