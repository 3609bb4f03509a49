//! What goes out: assignments (posted, confirmed, or sent and awaited), the
//! final report, the workers' stop and dead letters.
//!
//! The driver ([`crate::driver`]) decides what goes out and whether before
//! or after the state write; this module encodes and publishes it. An
//! assignment carries the dependencies' results a swarm's actor has at
//! hand ([`Results`]) and its token ([`crate::token`]).

use std::collections::HashMap;

use anyhow::Context as _;
use async_nats::jetstream::{self, context::PublishAckFuture};
use chrono::Utc;
use swarm_common::{Control, Envelope, ErrorBody, ErrorMessage, FinalReport, subjects};
use swarm_runtime::wire;
use tracing::{Instrument as _, info, warn};

use super::Ctx;
use crate::driver::{Assignment, Posted};
use crate::index::Indexed;
use swarm_agent::review::summarize_with_provider;

/// Accepted results' texts a swarm's actor keeps, by stream sequence, so an
/// assignment can carry its dependencies' results and the report needs no
/// reads. Bounded: what does not fit is read from the stream instead.
#[derive(Default)]
pub(super) struct Results {
    texts: HashMap<u64, String>,
    bytes: usize,
}

/// Most bytes of result text one swarm's actor keeps.
const RESULT_CACHE_BYTES: usize = 1 << 20;
/// Most bytes of dependency results carried inside one assignment.
const INLINE_CONTEXT_BYTES: usize = 64 * 1024;

impl Results {
    pub(super) fn remember(&mut self, seq: u64, text: &str) {
        if self.bytes + text.len() <= RESULT_CACHE_BYTES && !self.texts.contains_key(&seq) {
            self.bytes += text.len();
            self.texts.insert(seq, text.to_owned());
        }
    }

    /// Fills in the context results of `assignment` that are at hand, within
    /// [`INLINE_CONTEXT_BYTES`]; the worker reads the others from the stream.
    fn inline(&self, assignment: &mut swarm_common::TaskAssignment) {
        let mut budget = INLINE_CONTEXT_BYTES;
        for c in &mut assignment.context {
            if let Some(text) = self.texts.get(&c.result_seq)
                && text.len() <= budget
            {
                budget -= text.len();
                c.result = Some(text.clone());
            }
        }
    }
}

/// Most assignment acks awaited at once (well below the connection's limit).
const ACK_WINDOW: usize = 1024;

/// Publishes assignments, each with its dependencies' results that are at
/// hand: all sent first, then every ack awaited (one round trip, not one per task).
pub(super) async fn send(
    ctx: &Ctx,
    swarm_id: &str,
    results: &Results,
    assigns: Vec<Assignment>,
) -> anyhow::Result<()> {
    await_acks(queue(ctx, swarm_id, results, assigns).await?).await
}

/// Hands assignments to the connection and returns the futures of their acks.
pub(super) async fn queue(
    ctx: &Ctx,
    swarm_id: &str,
    results: &Results,
    assigns: Vec<Assignment>,
) -> anyhow::Result<Vec<PublishAckFuture>> {
    let mut acks = Vec::with_capacity(assigns.len());
    for (i, assign) in assigns.into_iter().enumerate() {
        // Let the connection write out what is queued now and then, so the
        // first workers start while the rest of a wide fan-out is encoded.
        if i > 0 && i % 16 == 0 {
            tokio::task::yield_now().await;
        }
        let (subject, env, msg_id) = envelope(ctx, swarm_id, results, assign);
        let span = attempt_span(&subject, &env.body);
        acks.push(
            wire::send(&ctx.infra.js, subject, &env, Some(&msg_id))
                .instrument(span)
                .await?,
        );
        // The connection lets only so many publishes wait for their acks
        // (5,000 by default) and the next one blocks until one is taken: a
        // wider fan-out waits for its acks a window at a time.
        if acks.len() >= ACK_WINDOW {
            await_acks(std::mem::take(&mut acks)).await?;
        }
    }
    Ok(acks)
}

/// Posts assignments without asking for the server's answers
/// ([`wire::Posted`]) and returns them, to be confirmed before a state
/// that records them is written ([`confirm_posted`]).
pub(super) async fn post(
    ctx: &Ctx,
    swarm_id: &str,
    results: &Results,
    assigns: Vec<Assignment>,
) -> anyhow::Result<Vec<(String, wire::Posted)>> {
    let mut posted = Vec::with_capacity(assigns.len());
    for (i, assign) in assigns.into_iter().enumerate() {
        // As in `queue`: the first workers start early.
        if i > 0 && i % 16 == 0 {
            tokio::task::yield_now().await;
        }
        let (subject, env, msg_id) = envelope(ctx, swarm_id, results, assign);
        let span = attempt_span(&subject, &env.body);
        let message = span.in_scope(|| wire::Posted::new(subject, &env, &msg_id))?;
        message.send(&ctx.infra.js).await?;
        posted.push((msg_id, message));
    }
    Ok(posted)
}

/// The span of a task's attempt (and revision) on the manager's side: the
/// assignment's publish, whose context the assignment carries, so that the
/// worker's attempt is its child.
fn attempt_span(subject: &str, a: &swarm_common::TaskAssignment) -> tracing::Span {
    swarm_runtime::otel_span!(
        "attempt",
        otel.name = format!("task {}", a.task_id),
        otel.kind = "producer",
        messaging.system = swarm_runtime::trace::MESSAGING_SYSTEM,
        messaging.operation.type = "publish",
        messaging.destination.name = subject,
        swarm.task_id = %a.task_id,
        swarm.attempt = i64::from(a.attempt),
        swarm.revision = i64::from(a.revision),
    )
}

/// Makes sure every posted assignment is stored: each is sent again asking
/// for the server's answer (its deduplication id stores it only if the
/// first send was lost), and all answers are awaited. On failure the driver
/// drops the state, and the events behind it come again and send their
/// assignments again.
pub(super) async fn confirm_posted(ctx: &Ctx, posted: &Posted<wire::Posted>) -> anyhow::Result<()> {
    if posted.is_empty() {
        return Ok(());
    }
    let mut acks = Vec::with_capacity(posted.len().min(ACK_WINDOW));
    for p in posted.values() {
        acks.push(p.confirm(&ctx.infra.js).await?);
        if acks.len() >= ACK_WINDOW {
            await_acks(std::mem::take(&mut acks)).await?;
        }
    }
    await_acks(acks).await
}

/// An assignment's subject, envelope (with the dependencies' results at
/// hand) and deduplication id.
fn envelope(
    ctx: &Ctx,
    swarm_id: &str,
    results: &Results,
    assign: Assignment,
) -> (String, Envelope<swarm_common::TaskAssignment>, String) {
    let Assignment {
        pool,
        msg_id,
        assignment,
    } = assign;
    info!(task_id = %assignment.task_id, attempt = assignment.attempt, revision = assignment.revision, %pool, "task assigned");
    let subject = subjects::work(&pool, swarm_id, &assignment.task_id);
    // The batch's own copy: nothing is cloned on the way out.
    let mut body = *assignment;
    results.inline(&mut body);
    body.token = ctx
        .token_key
        .token(swarm_id, &body.task_id, body.attempt, body.revision);
    let env = Envelope::new(
        ctx.agent_id.as_str(),
        pool.as_str(),
        swarm_id,
        body.task_id.clone(),
        body,
    );
    (subject, env, msg_id)
}

/// Waits until every queued assignment is stored.
pub(super) async fn await_acks(acks: Vec<PublishAckFuture>) -> anyhow::Result<()> {
    for ack in acks {
        ack.await.context("assignment not stored")?;
    }
    Ok(())
}

/// Tells the workers that a swarm ended before its tasks did (timed out, a
/// spent budget, cancelled): they stop its running tasks and close the
/// approval requests and questions those wait on. Sent once (deduplicated);
/// the managers' own copy changes nothing, the swarm having ended.
async fn stop_workers(ctx: &Ctx, swarm_id: &str, status: swarm_common::SwarmStatus) {
    let env = Envelope::new(
        ctx.agent_id.as_str(),
        "worker",
        swarm_id,
        swarm_id,
        Control::Cancel {
            reason: swarm_common::swarm_ended(status),
        },
    );
    let msg_id = format!("{swarm_id}.ended");
    if let Err(e) = wire::publish(
        &ctx.infra.js,
        subjects::control(swarm_id),
        &env,
        Some(&msg_id),
    )
    .await
    {
        warn!(%swarm_id, error = %e, "cannot tell the workers that the swarm ended");
    }
}

/// Builds and publishes the final report of an ended swarm (one
/// deduplication id), summarised by the model if there is one, and stops
/// the workers of a swarm that did not complete.
pub(super) async fn publish_report(
    ctx: &Ctx,
    state: &Indexed,
    results: &Results,
) -> anyhow::Result<()> {
    let done: Vec<(&str, u64)> = state
        .tasks
        .iter()
        .filter_map(|t| t.result_seq.map(|seq| (t.definition.task_id.as_str(), seq)))
        .collect();
    // Results at hand are not read again; the rest come from the stream.
    let missing: Vec<u64> = done
        .iter()
        .map(|(_, seq)| *seq)
        .filter(|seq| !results.texts.contains_key(seq))
        .collect();
    let mut read: HashMap<u64, String> = missing
        .iter()
        .copied()
        .zip(wire::read_results(&ctx.a2ap, &missing).await?)
        .map(|(seq, sub)| (seq, sub.result))
        .collect();
    let results: HashMap<String, String> = done
        .iter()
        .filter_map(|(task_id, seq)| {
            let text = read
                .remove(seq)
                .or_else(|| results.texts.get(seq).cloned())?;
            Some((task_id.to_string(), text))
        })
        .collect();
    let mut report: FinalReport =
        crate::report::build(state, &results, ctx.report_budget, Utc::now());
    if let Some(reviewer) = &ctx.reviewer {
        match summarize_with_provider(reviewer.as_ref(), &report.mission, &report.task_results)
            .await
        {
            Ok(s) => {
                // The model writes prose; the reason a mission did not
                // complete stays first, in the manager's own words.
                report.summary = match crate::report::why_not_completed(state) {
                    Some(why) => format!("{why} {}", s.summary),
                    None => s.summary,
                };
                report.insights = s.insights;
                // The graph's changes are facts, kept whatever the model wrote.
                report
                    .insights
                    .extend(crate::report::change_insights(state));
                let m = &mut report.metrics;
                *m.entry("input_tokens".into()).or_insert(0.0) += s.usage.input_tokens as f64;
                *m.entry("output_tokens".into()).or_insert(0.0) += s.usage.output_tokens as f64;
                *m.entry("cost_usd".into()).or_insert(0.0) += s.cost_usd;
            }
            Err(e) => {
                warn!(error = %e.message, "the model could not summarise; the deterministic summary stands")
            }
        }
    }
    let swarm_id = state.swarm_id.as_str();
    let env = Envelope::new(ctx.agent_id.as_str(), "boss", swarm_id, swarm_id, report);
    wire::publish(
        &ctx.infra.js,
        subjects::report(swarm_id),
        &env,
        Some(&format!("{swarm_id}.report")),
    )
    .await?;
    info!(overall_status = ?env.body.overall_status, "final report published");
    if let Some(parent) = &state.parent {
        answer_parent(ctx, state, parent, &env.body).await?;
    }
    if env.body.overall_status != swarm_common::SwarmStatus::Completed {
        stop_workers(ctx, swarm_id, env.body.overall_status).await;
        cancel_children(ctx, state, env.body.overall_status).await?;
    }
    Ok(())
}

/// Submits a child swarm's outcome as its parent task's result
/// ([`swarm_common::hierarchy`]), with the parent assignment's token:
/// the parent's manager judges it like any worker's result. Deduplicated
/// by the child's id, so a report published again answers once.
async fn answer_parent(
    ctx: &Ctx,
    state: &Indexed,
    parent: &swarm_common::hierarchy::ParentTask,
    report: &FinalReport,
) -> anyhow::Result<()> {
    let child_id = state.swarm_id.as_str();
    let (result, error) =
        crate::report::answer_for_parent(report, child_id, parent.max_result_bytes);
    let mut metrics = std::collections::BTreeMap::new();
    for key in ["input_tokens", "output_tokens", "cost_usd"] {
        if let Some(v) = report.metrics.get(key) {
            metrics.insert(key.to_string(), *v);
        }
    }
    let submission = swarm_common::ResultSubmission {
        skills: Default::default(),
        artifacts: Vec::new(),
        task_id: parent.task_id.clone(),
        status: if error.is_none() {
            swarm_common::TaskStatus::Completed
        } else {
            swarm_common::TaskStatus::Failed
        },
        result,
        attempt: parent.attempt,
        revision: parent.revision,
        provider: format!("swarm {child_id}"),
        worker_id: ctx.agent_id.clone(),
        started_at: report.started_at,
        completed_at: report.completed_at,
        steps: Vec::new(),
        metrics,
        error,
        gate_verdicts: Vec::new(),
        token: ctx.token_key.token(
            &parent.swarm_id,
            &parent.task_id,
            parent.attempt,
            parent.revision,
        ),
    };
    let env = Envelope::new(
        ctx.agent_id.as_str(),
        "manager",
        parent.swarm_id.as_str(),
        parent.task_id.as_str(),
        submission,
    );
    wire::publish(
        &ctx.infra.js,
        subjects::result(&parent.swarm_id, &parent.task_id),
        &env,
        Some(&format!("{child_id}.answer")),
    )
    .await
    .context("answering the parent task")?;
    info!(parent = %parent.swarm_id, task = %parent.task_id, "child swarm answered its parent task");
    Ok(())
}

/// Cancels the running child swarms of a swarm that ended before its tasks
/// did; each cancels its own children in turn when it ends.
async fn cancel_children(
    ctx: &Ctx,
    state: &Indexed,
    status: swarm_common::SwarmStatus,
) -> anyhow::Result<()> {
    for task in &state.tasks {
        if task.status != swarm_common::TaskStatus::Cancelled {
            continue;
        }
        let Some(child) = state.child_of(task) else {
            continue;
        };
        let env = Envelope::new(
            ctx.agent_id.as_str(),
            "manager",
            child.as_str(),
            child.as_str(),
            Control::Cancel {
                reason: format!("its parent swarm {} ended {status:?}", state.swarm_id),
            },
        );
        wire::publish(
            &ctx.infra.js,
            subjects::control(&child),
            &env,
            Some(&format!("{child}.parent-ended")),
        )
        .await
        .with_context(|| format!("cancelling child swarm {child}"))?;
        info!(%child, "child swarm cancelled with its parent");
    }
    Ok(())
}

/// Sets aside an event a manager died on: a dead letter with the reason;
/// the swarm's watchers are told when the event was its deployment (there is
/// no swarm to fail). `false` if the dead letter could not be recorded.
pub(super) async fn set_aside(
    ctx: &Ctx,
    swarm_id: &str,
    msg: &jetstream::Message,
    reason: &ErrorBody,
    deployment: bool,
) -> bool {
    if let Err(e) = wire::dead_letter(
        &ctx.infra.js,
        "manager",
        &msg.subject,
        reason.clone(),
        &msg.payload,
        &ctx.agent_id,
    )
    .await
    {
        warn!(error = %e, "cannot record a dead letter; the event will come again");
        return false;
    }
    if deployment {
        let env = Envelope::new(
            ctx.agent_id.as_str(),
            "client",
            swarm_id,
            swarm_id,
            ErrorMessage {
                token: String::new(),
                task_id: None,
                attempt: None,
                error: reason.clone(),
            },
        );
        if let Err(e) = wire::publish(
            &ctx.infra.js,
            subjects::error(swarm_id),
            &env,
            Some(&format!("{swarm_id}.poisoned")),
        )
        .await
        {
            warn!(error = %e, "cannot tell the swarm's watchers that its deployment was set aside");
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(seqs: &[u64]) -> swarm_common::TaskAssignment {
        let persona = swarm_common::WorkerDeploymentPlan {
            name: "w".into(),
            role: String::new(),
            system_prompt: String::new(),
            tools: Vec::new(),
            collaborators: Vec::new(),
            pool: "general".into(),
            a2a_url: None,
            a2a_credential: None,
            skill: None,
        };
        swarm_common::TaskAssignment {
            skills_scope: None,
            tasks: Vec::new(),
            child: None,
            token: String::new(),
            collaborators: Vec::new(),
            task_id: "t".into(),
            title: "t".into(),
            description: "t".into(),
            persona,
            attempt: 0,
            revision: 0,
            feedback: Vec::new(),
            context: seqs
                .iter()
                .map(|&seq| swarm_common::ContextRef {
                    task_id: format!("d{seq}"),
                    title: String::new(),
                    result_seq: seq,
                    result: None,
                })
                .collect(),
            max_steps: 4,
            max_attempts: 3,
            max_result_bytes: 1024,
            priority: 0,
            deadline: Utc::now(),
            gates: Vec::new(),
            budget: Default::default(),
            spent_tokens: 0,
            spent_cost_usd: 0.0,
        }
    }

    #[test]
    fn results_at_hand_ride_along_within_the_budget_and_the_rest_are_left_to_read() {
        let mut results = Results::default();
        results.remember(1, "small");
        results.remember(2, &"x".repeat(INLINE_CONTEXT_BYTES));
        let mut a = assignment(&[1, 2, 3]);
        results.inline(&mut a);
        assert_eq!(a.context[0].result.as_deref(), Some("small"));
        // The second would take the assignment over its budget; the third is not at hand.
        assert_eq!(a.context[1].result, None);
        assert_eq!(a.context[2].result, None);
    }

    #[test]
    fn the_result_cache_keeps_no_more_than_its_bound() {
        let mut results = Results::default();
        let chunk = "y".repeat(RESULT_CACHE_BYTES / 2);
        results.remember(1, &chunk);
        results.remember(2, &chunk);
        results.remember(3, "one byte too many");
        results.remember(1, &chunk);
        assert_eq!(results.bytes, RESULT_CACHE_BYTES);
        assert!(!results.texts.contains_key(&3));
    }
}
