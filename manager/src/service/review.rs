//! The checks a result passes that need I/O, made before its batch is
//! applied: the task's gates, then the model reviewer (only for a result
//! every other check passed, so no model is paid to read an empty answer).
//!
//! With a model, a result that will fail its task for good also gets the
//! model's tasks to add, sent as a `Replan` before the result is applied
//! ([`swarm_common::replan`]).
//!
//! The driver asks for them once per batch ([`crate::driver::Request::Review`]),
//! outside its compare-and-swap rounds, so a lost race does not pay twice;
//! the verdicts travel with each result into [`crate::machine::apply`].

use chrono::Utc;
use swarm_agent::gates::GateChain;
use swarm_agent::review::{
    ReplanRequest, ReviewRequest, replan_with_provider, review_with_provider,
};
use swarm_common::replan::{self, Replan};
use swarm_common::{Envelope, GateVerdict, ResultSubmission, TaskStatus, subjects};
use swarm_runtime::wire;
use tracing::{Instrument as _, info, warn};

use super::Ctx;
use crate::index::Indexed;
use crate::machine::{self, Event};

/// Adds to each result of the current attempt and revision of its task the
/// verdicts of the task's gates and of the model reviewer, if any; then, for
/// a result that will fail its task for good, asks the model for tasks to
/// add and sends them as a [`Replan`] before the result is applied.
pub(super) async fn review<'a>(
    ctx: &Ctx,
    state: &Indexed,
    results: impl Iterator<Item = crate::driver::ToReview<'a>>,
) {
    for (seq, submission, review, replan) in results {
        let Some(task) = state.task(&submission.task_id) else {
            continue;
        };
        let current = !task.status.is_terminal()
            && task.attempt == submission.attempt
            && task.revision == submission.revision;
        if !current {
            continue;
        }
        if submission.status == swarm_common::TaskStatus::Completed {
            let span = swarm_runtime::otel_span!(
                "review",
                otel.name = format!("review {}", submission.task_id),
                swarm.task_id = %submission.task_id,
                swarm.attempt = i64::from(submission.attempt),
                swarm.revision = i64::from(submission.revision),
            );
            check(ctx, state, task, submission, review)
                .instrument(span)
                .await;
        }
        *replan = replan_if_failing(ctx, state, seq, submission, review).await;
    }
}

/// The task's gates, then the model reviewer for a result every other
/// check passed.
async fn check(
    ctx: &Ctx,
    state: &Indexed,
    task: &swarm_common::TaskState,
    submission: &mut ResultSubmission,
    review: &mut Vec<GateVerdict>,
) {
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
        return;
    };
    if !rules_pass || review.iter().any(|v| !v.passed) {
        return;
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

/// If the swarm may grow, the manager has a model, and this result will fail
/// its task for good (decided by applying it to a copy of the state, so the
/// rule is the machine's own), asks the model for tasks to add and sends its
/// answer, or why there is none, as a [`Replan`]. True once it is stored:
/// the result, applied, then holds the task's dependents for it.
async fn replan_if_failing(
    ctx: &Ctx,
    state: &Indexed,
    seq: u64,
    submission: &ResultSubmission,
    review: &[GateVerdict],
) -> bool {
    let Some(model) = &ctx.reviewer else {
        return false;
    };
    let task_id = submission.task_id.as_str();
    let Some(i) = state.position(task_id) else {
        return false;
    };
    let task = &state.tasks[i];
    let has_fallback = task.definition.on_failure.is_some();
    if !state.replan || !machine::replans_left(state) {
        return false;
    }
    // The copy below costs the whole state: make it only for a result that
    // can fail its task (a failure, or a check it did not pass) or that may
    // finish a mission the model is to judge.
    let may_fail = submission.status != TaskStatus::Completed
        || review.iter().any(|v| !v.passed)
        || machine::review(submission, task, state.limits.max_result_bytes)
            .iter()
            .any(|v| !v.passed);
    let may_replan = may_fail && !has_fallback;
    if !may_replan && state.success_criteria.is_empty() {
        return false;
    }
    let mut probe = state.clone();
    let event = Event::Result {
        seq,
        submission: Box::new(submission.clone()),
        review: review.to_vec(),
        replan: false,
    };
    machine::apply(&mut probe, seq, &event, Utc::now());
    let Some(after) = probe.task(task_id) else {
        return false;
    };
    // A failure the plan has no fallback for, or the last task of a
    // mission with success criteria to judge it by.
    let failed = after.status == TaskStatus::Failed && !has_fallback;
    let finished =
        probe.status == swarm_common::SwarmStatus::Completed && !state.success_criteria.is_empty();
    if !failed && !finished {
        return false;
    }
    let request = ReplanRequest {
        criteria: state.success_criteria.clone(),
        mission: state.mission.clone(),
        directive: state.manager_directive.clone(),
        personas: state
            .workers
            .iter()
            .map(|w| format!("- {} ({}): tools {}", w.name, w.role, w.tools.join(", ")))
            .collect(),
        tasks: probe
            .tasks
            .iter()
            .map(|t| {
                let said = match t.status {
                    TaskStatus::Completed => t.result_preview.as_str(),
                    _ => t.error.as_deref().unwrap_or(""),
                };
                format!(
                    "- {} [{:?}] {}: {}",
                    t.definition.task_id, t.status, t.definition.title, said
                )
            })
            .collect(),
        failed_task: if failed {
            task_id.to_string()
        } else {
            String::new()
        },
        failed_description: if failed {
            after.definition.description.clone()
        } else {
            String::new()
        },
        failed_error: if failed {
            after.error.clone().unwrap_or_default()
        } else {
            String::new()
        },
    };
    let check = |tasks: &[swarm_common::TaskDefinition], replaces: Option<&str>| {
        machine::check_added(state, tasks, replaces).map_err(|e| e.message)
    };
    let mut body = Replan {
        task_id: task_id.to_string(),
        attempt: submission.attempt,
        revision: submission.revision,
        tasks: Vec::new(),
        replaces: None,
        reason: String::new(),
        model: model.name().to_string(),
        metrics: Default::default(),
        token: ctx.token_key.token(
            &state.swarm_id,
            &replan::replan_token_task(task_id),
            submission.attempt,
            submission.revision,
        ),
    };
    match replan_with_provider(model.as_ref(), &request, check).await {
        Ok(answer) => {
            info!(%task_id, added = answer.tasks.len(), "the model replanned after a failure");
            body.tasks = answer.tasks;
            body.replaces = answer.replaces;
            body.reason = answer.reason;
            body.metrics
                .insert("input_tokens".into(), answer.usage.input_tokens as f64);
            body.metrics
                .insert("output_tokens".into(), answer.usage.output_tokens as f64);
            body.metrics.insert("cost_usd".into(), answer.cost_usd);
        }
        Err(e) => {
            warn!(%task_id, error = %e.message, "the model could not replan; the failure takes its course");
            body.reason = format!("the model gave no tasks: {}", e.message);
        }
    }
    let swarm_id = state.swarm_id.as_str();
    let env = Envelope::new(ctx.agent_id.as_str(), "manager", swarm_id, task_id, body);
    let msg_id = replan::replan_msg_id(swarm_id, task_id, submission.attempt, submission.revision);
    match wire::publish(
        &ctx.infra.js,
        subjects::replan(swarm_id, task_id),
        &env,
        Some(&msg_id),
    )
    .await
    {
        Ok(_) => true,
        Err(e) => {
            warn!(%task_id, error = %e, "cannot send the replan; the failure takes its course");
            false
        }
    }
}
