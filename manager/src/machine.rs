//! The swarm state machine: pure decisions, no I/O.
//!
//! `(state, event) -> (state, commands)`. The driver ([`crate::driver`])
//! decides when events are applied and commands carried out, and the NATS
//! layer ([`crate::service`]) carries them in and out; every rule here is
//! tested without a broker. Each event is idempotent by its content (a result counts only for
//! the task's current attempt and revision, a deployment only once), so a
//! redelivered or concurrently applied event changes nothing twice.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use swarm_common::collaborate::{self, AskRecord, CollaborationRequest, Collaborator};
use swarm_common::condition::{self, Check, DependencyStatus, Test};
use swarm_common::outcome::unrecovered_tool_failure;
use swarm_common::{
    ContextRef, ErrorBody, ErrorCode, GateVerdict, ResultSubmission, SwarmDeployment, SwarmState,
    SwarmStatus, TaskAssignment, TaskState, TaskStatus,
    hierarchy::{ChildSwarm, SUB_MANAGER_POOL},
    validate::{expand_tasks, priorities, validate_plan_at},
};

use crate::index::{Indexed, TaskIndex};
use swarm_common::map::{self, MapProgress, MapState};

/// Something that happened to a swarm.
#[derive(Debug, Clone)]
pub enum Event {
    /// A worker submitted a result; `seq` is its position in the A2AP stream.
    Result {
        /// Stream sequence of the submission.
        seq: u64,
        /// The submission (boxed: far larger than the other events).
        submission: Box<ResultSubmission>,
        /// Verdicts of the checks that need I/O, made before the event is
        /// applied: the task's own gates and the model reviewer, if any.
        review: Vec<GateVerdict>,
        /// The manager's model was asked for tasks to add should this
        /// result fail its task for good, and its [`swarm_common::replan::Replan`]
        /// is in the stream: the failed task's dependents wait for it.
        replan: bool,
    },
    /// The manager's model's tasks for a task that failed for good
    /// ([`swarm_common::replan`]).
    Replan {
        /// The model's answer (boxed: far larger than the other events).
        replan: Box<swarm_common::replan::Replan>,
    },
    /// A worker could not process a task at all.
    TaskError {
        /// The task.
        task_id: String,
        /// The attempt it concerns, when known.
        attempt: Option<u32>,
        /// What went wrong.
        error: ErrorBody,
    },
    /// A worker asked a collaborator persona for help
    /// ([`swarm_common::collaborate`]); its token was checked.
    Ask {
        /// The ask (boxed: its request may be long).
        request: Box<CollaborationRequest>,
    },
    /// Someone cancelled the swarm.
    Cancel {
        /// Why.
        reason: String,
    },
    /// A manager saw the swarm's deadline pass (a no-op before the deadline).
    Expire,
    /// One of the swarm's events could not be applied without a manager
    /// dying on it: it was set aside as a dead letter, and the swarm fails
    /// with the reason rather than wait for it for ever.
    Poisoned {
        /// What happened to which event.
        reason: String,
    },
}

/// Something the NATS layer must do once the new state is stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Publish an assignment to a pool.
    Assign {
        /// The pool.
        pool: String,
        /// JetStream deduplication id: `<swarm>.<task>.a<attempt>.r<revision>`.
        msg_id: String,
        /// The assignment (boxed: it is far larger than the other commands).
        assignment: Box<TaskAssignment>,
    },
    /// Build and publish the one final report.
    Finalize,
    /// Move the scores of learned skills by the verdict on one version of
    /// a task's result ([`swarm_common::skill`]).
    ScoreSkills(SkillScore),
}

/// The verdict on one version of a result, for the skills it used.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillScore {
    /// The skills' keys.
    pub keys: Vec<String>,
    /// Whether the version passed its gates and review.
    pub passed: bool,
    /// The verdict's id ([`swarm_common::skill::verdict_id`]): a skill
    /// counts it once, however often it is applied.
    pub verdict: String,
}

/// What applying an event did.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    /// Whether the state changed (and must be stored before the commands run).
    pub changed: bool,
    /// Side effects to carry out after the state is stored.
    pub commands: Vec<Command>,
    /// The event answers an assignment this state does not record yet: it
    /// was sent alongside a state write that was then lost (its replica
    /// died). It must wait until the events before it are applied again,
    /// not be dropped as stale: the assignment will not go out a second
    /// time (its deduplication id is the same).
    pub ahead: bool,
}

/// Builds the state of a new swarm from its deployment and assigns every
/// ready task. An invalid plan yields a Failed swarm that only has to report.
pub fn deploy(
    swarm_id: &str,
    d: &SwarmDeployment,
    seq: u64,
    now: DateTime<Utc>,
) -> (Indexed, Vec<Command>) {
    let mut state = Indexed::new(SwarmState {
        success_criteria: d.plan.success_criteria.clone(),
        changes: Vec::new(),
        replan: false,
        swarm_id: swarm_id.to_string(),
        mission: d.mission.clone(),
        mission_id: d.mission_id.clone(),
        status: SwarmStatus::Running,
        manager_directive: d.plan.manager_directive.clone(),
        workers: d.plan.workers.clone(),
        planner: d.plan.planner.clone(),
        tasks: Default::default(),
        limits: d.limits.clone(),
        budget: d.budget.clone(),
        accepted_at: d.accepted_at,
        started_at: now,
        deadline: d.deadline,
        completed_at: None,
        cancel_reason: None,
        last_event_seq: seq,
        metrics: Default::default(),
        last_manager: String::new(),
        report_published: false,
        sub_managers: d.plan.sub_managers.clone(),
        parent: d.parent.clone(),
        trace_id: d.trace_id.clone(),
        skills_scope: d.skills_scope.clone(),
        chunks: None,
    });
    if let Some(why) = &d.failure {
        state.status = SwarmStatus::Failed;
        state.completed_at = Some(now);
        state.cancel_reason = Some(why.clone());
        return (state, vec![Command::Finalize]);
    }
    let depth = state.depth();
    let checked = validate_plan_at(&d.plan, &d.limits, depth).and_then(|()| {
        let tasks = expand_tasks(&d.plan).into_owned();
        let prio = priorities(&tasks)?;
        Ok((tasks, prio))
    });
    let (tasks, prio) = match checked {
        Ok(v) => v,
        Err(e) => {
            state.status = SwarmStatus::Failed;
            state.completed_at = Some(now);
            state.cancel_reason = Some(format!("the plan was refused: {}", e.message));
            return (state, vec![Command::Finalize]);
        }
    };
    for (def, priority) in tasks.into_iter().zip(prio) {
        let pool = pool_of(&state, &def.assigned_to);
        state.tasks.push(TaskState::pending(def, pool, priority));
    }
    mark_fallbacks(&mut state);
    let mut commands = Vec::new();
    assign_ready(&mut state, now, &mut commands);
    finish_if_done(&mut state, now, &mut commands);
    (state, commands)
}

/// Applies one event. One that changes nothing answers with what the
/// state still owes ([`outstanding`]): a redelivery may mean it was lost.
pub fn apply(state: &mut Indexed, seq: u64, event: &Event, now: DateTime<Utc>) -> Applied {
    let mut applied = apply_only(state, seq, event, now);
    if !applied.changed && !applied.ahead {
        applied.commands = outstanding(state);
    }
    applied
}

/// [`apply`], but an event that changes nothing answers with nothing: for
/// a caller applying many events, which asks [`outstanding`] once for all
/// of them (it scans the tasks).
pub fn apply_only(state: &mut Indexed, seq: u64, event: &Event, now: DateTime<Utc>) -> Applied {
    if state.status.is_terminal() {
        // Late results and repeated cancels change nothing; the report may
        // still be owed if it was not yet published.
        return Applied::default();
    }
    if is_ahead(state, event) {
        return Applied {
            ahead: true,
            ..Applied::default()
        };
    }
    let mut commands = Vec::new();
    // The task the event is about, and whether it had ended before: a map
    // task counts a child's end once.
    let target = match event {
        Event::Result { submission, .. } => state.position(&submission.task_id),
        Event::TaskError { task_id, .. } => state.position(task_id),
        _ => None,
    };
    let ended_before = target.is_some_and(|c| state.tasks[c].status.is_terminal());
    let changed = match event {
        Event::Result {
            seq: rseq,
            submission,
            review,
            replan,
        } => {
            // Held for the replan only if this result fails the task for
            // good; any other outcome clears the mark.
            let i = state.position(&submission.task_id);
            let hold = *replan && state.replan && replans_left(state);
            if let Some(i) = i.filter(|_| hold)
                && state.tasks[i].attempt == submission.attempt
                && state.tasks[i].revision == submission.revision
                && !state.tasks[i].status.is_terminal()
            {
                state.tasks[i].replanning = true;
            }
            let changed = on_result(state, *rseq, submission, review, now, &mut commands);
            if let Some(i) = i
                && state.tasks[i].replanning
                && state.tasks[i].status != TaskStatus::Failed
            {
                // Completed: the replan is the mission's review, and holds
                // the swarm's end only if this was the last task to end.
                let last = state.tasks.iter().all(|t| t.status.is_terminal());
                state.tasks[i].replanning = last && state.tasks[i].status == TaskStatus::Completed;
                if state.tasks[i].replanning {
                    spend_replan(state);
                }
            }
            changed
        }
        Event::Replan { replan } => on_replan(state, replan, now, &mut commands),
        Event::TaskError {
            task_id,
            attempt,
            error,
        } => on_task_error(state, task_id, *attempt, error, now, &mut commands),
        Event::Ask { request } => on_ask(state, request, now, &mut commands),
        Event::Cancel { reason } => {
            end_early(
                state,
                SwarmStatus::Cancelled,
                format!("cancelled: {reason}"),
                now,
            );
            state.cancel_reason = Some(reason.clone());
            commands.push(Command::Finalize);
            true
        }
        Event::Expire if now >= state.deadline => {
            let why = format!(
                "the swarm's deadline ({}) passed",
                state.deadline.to_rfc3339()
            );
            end_early(state, SwarmStatus::TimedOut, why.clone(), now);
            state.cancel_reason = Some(why);
            commands.push(Command::Finalize);
            true
        }
        Event::Expire => false,
        Event::Poisoned { reason } if !state.status.is_terminal() => {
            end_early(state, SwarmStatus::Failed, reason.clone(), now);
            state.cancel_reason = Some(reason.clone());
            commands.push(Command::Finalize);
            true
        }
        Event::Poisoned { .. } => false,
    };
    if changed
        && !ended_before
        && let Some(c) = target
    {
        child_ended(state, c, now, &mut commands);
    }
    if !changed {
        return Applied::default();
    }
    state.last_event_seq = state.last_event_seq.max(seq);
    if !state.status.is_terminal()
        && let Some(why) = state
            .budget
            .exceeded(tokens_spent(state), cost_spent(state))
    {
        end_early(state, SwarmStatus::Failed, why.clone(), now);
        state.cancel_reason = Some(why);
        commands.retain(|c| matches!(c, Command::Finalize));
        commands.push(Command::Finalize);
    }
    finish_if_done(state, now, &mut commands);
    Applied {
        changed,
        commands,
        ahead: false,
    }
}

/// Whether a worker's event concerns a later attempt or revision of an
/// unfinished task than the state records (see [`Applied::ahead`]).
fn is_ahead(state: &Indexed, event: &Event) -> bool {
    let (task_id, attempt, revision) = match event {
        Event::Result { submission, .. } => (
            &submission.task_id,
            submission.attempt,
            Some(submission.revision),
        ),
        Event::TaskError {
            task_id,
            attempt: Some(attempt),
            ..
        } => (task_id, *attempt, None),
        Event::Ask { request } => (&request.task_id, request.attempt, Some(request.revision)),
        // A replan is sent before the result it answers is applied: after a
        // lost write it may come first, and waits for it.
        Event::Replan { replan } => {
            return state.task(&replan.task_id).is_some_and(|t| {
                !t.status.is_terminal()
                    && (replan.attempt, replan.revision) >= (t.attempt, t.revision)
            });
        }
        _ => return false,
    };
    let Some(task) = state.task(task_id) else {
        // A child of a map task that has not expanded here: the expansion
        // went out with a state write that was then lost.
        return state.tasks.iter().any(|t| {
            t.definition.map.is_some()
                && !t.map.as_ref().is_some_and(|m| m.expanded)
                && task_id
                    .strip_prefix(t.definition.task_id.as_str())
                    .and_then(|r| r.strip_prefix('-'))
                    .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_digit()))
        });
    };
    !task.status.is_terminal()
        && (attempt > task.attempt
            || (attempt == task.attempt && revision.is_some_and(|r| r > task.revision)))
}

/// Ends a running swarm before its tasks are done: every unfinished task is
/// cancelled with `why`; finished results stay in the report.
fn end_early(state: &mut SwarmState, status: SwarmStatus, why: String, now: DateTime<Utc>) {
    // By position, so that only the tasks changed are marked for the write.
    for i in 0..state.tasks.len() {
        if state.tasks[i].status.is_terminal() {
            continue;
        }
        let t = &mut state.tasks[i];
        t.status = TaskStatus::Cancelled;
        t.completed_at = Some(now);
        t.error = Some(why.clone());
    }
    state.status = status;
    state.completed_at = Some(now);
}

/// The side effects a state still owes: assignments of tasks handed out but
/// not finished (deduplicated by their ids when re-sent), and the report of
/// an ended swarm not yet published. Used after a redelivery, when the
/// process that stored the state may have died before acting on it.
pub fn outstanding(state: &Indexed) -> Vec<Command> {
    if state.status.is_terminal() {
        return if state.report_published {
            Vec::new()
        } else {
            vec![Command::Finalize]
        };
    }
    // The tasks before the open ones have ended: only the rest are looked at.
    let tasks: &[TaskState] = &state.tasks;
    tasks[state.open_from().min(tasks.len())..]
        .iter()
        .filter(|t| t.status == TaskStatus::Assigned)
        .map(|t| assignment(state, t))
        .collect()
}

/// The rule-based quality gates every result passes through: nothing the
/// agent did failed (the worker's own rule, checked again here rather than
/// taken on its word), the result is non-empty, and within the size limit.
pub fn review(
    submission: &ResultSubmission,
    task: &TaskState,
    max_result_bytes: usize,
) -> Vec<GateVerdict> {
    let limit = task
        .definition
        .max_result_bytes
        .map_or(max_result_bytes, |l| l.min(max_result_bytes));
    let verdict = |gate: &str, passed: bool, reason: String| GateVerdict {
        gate: gate.to_string(),
        passed,
        reason: if passed { String::new() } else { reason },
        revision: submission.revision,
    };
    let bytes = submission.result.len();
    let failed_step = unrecovered_tool_failure(&submission.steps);
    vec![
        verdict(
            "no_failed_tool",
            failed_step.is_none(),
            failed_step
                .map(|s| {
                    format!(
                        "tool {:?} failed at step {} and the result does not make it good: {}",
                        s.tool.as_deref().unwrap_or(""),
                        s.step,
                        preview(&s.observation)
                    )
                })
                .unwrap_or_default(),
        ),
        verdict(
            "non_empty",
            !submission.result.trim().is_empty(),
            "the result is empty: return the task's actual output".into(),
        ),
        verdict(
            "max_bytes",
            bytes <= limit,
            format!("the result is {bytes} bytes; make it at most {limit} bytes"),
        ),
    ]
}

fn on_result(
    state: &mut Indexed,
    seq: u64,
    sub: &ResultSubmission,
    review: &[GateVerdict],
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) -> bool {
    let max_result = state.limits.max_result_bytes;
    let max_revisions = state.limits.max_revisions;
    let Some(i) = state.position(&sub.task_id) else {
        return false;
    };
    let task = &mut state.tasks[i];
    // Only the current attempt and revision counts: anything else is stale
    // or a duplicate of a result already applied.
    if task.status.is_terminal() || sub.attempt != task.attempt || sub.revision != task.revision {
        return false;
    }
    task.started_at = Some(sub.started_at);
    task.worker_id = Some(sub.worker_id.clone());
    // What the models cost counts whether or not the result is accepted.
    add_usage(state, &sub.metrics);
    let verdict =
        swarm_common::skill::verdict_id(&state.swarm_id, &sub.task_id, sub.attempt, sub.revision);
    let task = &mut state.tasks[i];
    if let Some(d) = sub.metrics.get("deliveries") {
        task.redeliveries += (*d as u32).saturating_sub(1);
    }
    task.skills.merge(&sub.skills);
    let score = |passed: bool, commands: &mut Vec<Command>| {
        if !sub.skills.is_empty() {
            commands.push(Command::ScoreSkills(SkillScore {
                keys: sub.skills.keys(),
                passed,
                verdict: verdict.clone(),
            }));
        }
    };
    if sub.status != TaskStatus::Completed {
        let error = sub.error.clone().unwrap_or_else(|| {
            ErrorBody::new(
                ErrorCode::Internal,
                "the worker reported a failure without a reason",
            )
        });
        // A fault that may pass (a provider's outage) or a cancel says
        // nothing of the skills the version used.
        if !error.retriable && error.code != ErrorCode::Cancelled {
            score(false, commands);
        }
        return fail_or_revise(state, i, &error, now, commands);
    }
    // The worker's own gate checks come first: they are the audit trail of
    // how the model corrected itself before submitting.
    task.gate_verdicts
        .extend(sub.gate_verdicts.iter().cloned().map(|mut v| {
            v.gate = format!("worker:{}", v.gate);
            v
        }));
    let mut verdicts = self::review(sub, task, max_result);
    verdicts.extend(review.iter().cloned().map(|mut v| {
        v.revision = sub.revision;
        v
    }));
    let failures: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.passed)
        .map(|v| v.reason.clone())
        .collect();
    task.gate_verdicts.extend(verdicts);
    score(failures.is_empty(), commands);
    if failures.is_empty() {
        task.status = TaskStatus::Completed;
        task.completed_at = Some(now);
        task.result_seq = Some(seq);
        task.result_bytes = sub.result.len();
        task.result_preview = preview(&sub.result);
        task.provider.clone_from(&sub.provider);
        check_for_dependents(state, i, &sub.result);
        read_lists(state, i, &sub.result);
        completed(state, i, now, commands);
    } else if task.revision < max_revisions {
        task.revision += 1;
        task.status = TaskStatus::Assigned;
        task.feedback.push(failures.join("; "));
        let cmd = assignment(state, &state.tasks[i]);
        commands.push(cmd);
    } else {
        task.status = TaskStatus::Failed;
        task.completed_at = Some(now);
        task.error = Some(format!(
            "rejected by review after {} revision(s): {}",
            task.revision,
            failures.join("; ")
        ));
        failed(state, i, now, commands);
    }
    true
}

/// A failed attempt is treated like a failed gate: a fault that may pass
/// (retriable) gets another attempt, any other failure a revision with its
/// reason as feedback, within the task's limits; then the task fails with
/// the reason and its dependents are cancelled.
fn fail_or_revise(
    state: &mut Indexed,
    i: usize,
    error: &ErrorBody,
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) -> bool {
    let max_attempts = state.limits.max_attempts;
    let max_revisions = state.limits.max_revisions;
    let task = &mut state.tasks[i];
    let revisable = !error.retriable && error.code != ErrorCode::Cancelled;
    if revisable && task.revision < max_revisions {
        task.revision += 1;
        task.status = TaskStatus::Assigned;
        task.feedback.push(format!(
            "The previous version failed ({}): {}. Fix the cause; if the task cannot be done, \
             give up and say why.",
            error.code,
            error.message.trim_end_matches('.')
        ));
        let cmd = assignment(state, &state.tasks[i]);
        commands.push(cmd);
        return true;
    }
    fail_or_retry(state, i, error, max_attempts, now, commands)
}

fn on_task_error(
    state: &mut Indexed,
    task_id: &str,
    attempt: Option<u32>,
    error: &ErrorBody,
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) -> bool {
    let max_attempts = state.limits.max_attempts;
    let Some(i) = state.position(task_id) else {
        return false;
    };
    let task = &state.tasks[i];
    if task.status.is_terminal() || attempt.is_some_and(|a| a != task.attempt) {
        return false;
    }
    fail_or_retry(state, i, error, max_attempts, now, commands)
}

fn fail_or_retry(
    state: &mut Indexed,
    i: usize,
    error: &ErrorBody,
    max_attempts: u32,
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) -> bool {
    let task = &mut state.tasks[i];
    if error.retriable && task.attempt < max_attempts {
        task.attempt += 1;
        task.status = TaskStatus::Assigned;
        let cmd = assignment(state, &state.tasks[i]);
        commands.push(cmd);
    } else {
        task.status = TaskStatus::Failed;
        task.completed_at = Some(now);
        task.error = Some(match (task.attempt, task.revision) {
            (0 | 1, 0) => format!("{}: {}", error.code, error.message),
            (attempts, revisions) => format!(
                "{}: {} (after {attempts} attempt(s) and {revisions} revision(s))",
                error.code, error.message
            ),
        });
        failed(state, i, now, commands);
    }
    true
}

/// A worker's ask for help: recorded in the asking task's state, once per
/// `(attempt, revision, ask)`, while the task runs that attempt and
/// revision and has asked fewer than `max_collaborator_asks` times. An ask
/// of a persona that is not among the asking persona's collaborators, or
/// not a persona of the plan, is recorded as refused, with the reason (the
/// worker reads it as the tool's result); an accepted one adds a task for
/// the collaborator, with the request as its description, and assigns it.
/// Beyond the bound nothing is recorded: the worker reads the bound in the
/// state ([`collaborate::ask_status`]).
fn on_ask(
    state: &mut Indexed,
    r: &CollaborationRequest,
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) -> bool {
    let Some(i) = state.position(&r.task_id) else {
        return false;
    };
    let asking = &state.tasks[i];
    if asking.status.is_terminal() || r.attempt != asking.attempt || r.revision != asking.revision {
        return false;
    }
    let duplicate = asking
        .asks
        .iter()
        .any(|a| a.attempt == r.attempt && a.revision == r.revision && a.ask == r.ask);
    if duplicate || asking.asks.len() >= state.limits.max_collaborator_asks as usize {
        return false;
    }
    let new_id = collaborate::ask_task_id(&r.task_id, asking.asks.len() + 1);
    let persona = &asking.definition.assigned_to;
    let listed = state
        .workers
        .iter()
        .find(|w| w.name == *persona)
        .is_some_and(|w| w.collaborators.contains(&r.collaborator));
    let target = state.workers.iter().find(|w| w.name == r.collaborator);
    let refused = if !listed {
        Some(format!(
            "{:?} is not a collaborator of persona {persona:?}",
            swarm_common::error::excerpt(&r.collaborator, 64)
        ))
    } else if target.is_none() {
        Some(format!(
            "{:?} is not a persona of the plan",
            swarm_common::error::excerpt(&r.collaborator, 64)
        ))
    } else if r.request.trim().is_empty() {
        Some("the request is empty".to_string())
    } else if r.request.len() > state.limits.max_prompt_bytes {
        Some(format!(
            "the request is {} bytes; the limit is {}",
            r.request.len(),
            state.limits.max_prompt_bytes
        ))
    } else if r.task_id.len() > collaborate::MAX_ASKING_ID_BYTES {
        Some(format!(
            "task ids longer than {} bytes cannot ask",
            collaborate::MAX_ASKING_ID_BYTES
        ))
    } else if state.position(&new_id).is_some() {
        Some(format!("the plan already has a task {new_id}"))
    } else if state.tasks.len() >= state.limits.max_tasks {
        Some(format!(
            "the mission's task limit ({}) is reached",
            state.limits.max_tasks
        ))
    } else {
        None
    };
    let pool = pool_of(state, &r.collaborator);
    let accepted = refused.is_none();
    let asking = &mut state.tasks[i];
    asking.asks.push(AskRecord {
        attempt: r.attempt,
        revision: r.revision,
        ask: r.ask,
        collaborator: r.collaborator.clone(),
        task_id: accepted.then(|| new_id.clone()),
        refused,
    });
    if !accepted {
        return true;
    }
    // Everything that shapes the work is the ask's own. No dependencies:
    // the asker runs, and a dependency would mean "after".
    let definition = swarm_common::TaskDefinition {
        estimated_minutes: None,
        on_failure: None,
        task_id: new_id,
        title: format!("{} answers {}", r.collaborator, r.task_id),
        description: r.request.clone(),
        assigned_to: r.collaborator.clone(),
        dependencies: Vec::new(),
        priority: None,
        max_result_bytes: None,
        gates: Vec::new(),
        condition: None,
        map: None,
    };
    let helper = TaskState {
        asked_by: Some(r.task_id.clone()),
        ..TaskState::pending(definition, pool, asking.priority)
    };
    state.tasks.push(helper);
    // A task was added: the lookups are built again on first use.
    state.index = TaskIndex::default();
    let k = state.tasks.len() - 1;
    commands.push(assign_first(state, k, now));
    true
}

/// Cancels every pending task that waits, directly or not, on a task that
/// failed (with no fallback left to run in its place) or was cancelled, and
/// the fallbacks of cancelled tasks.
fn cascade_cancel(state: &mut Indexed, now: DateTime<Utc>) {
    loop {
        let dead: HashSet<String> = (0..state.tasks.len())
            .filter(|&i| matches!(state.outcome(i), TaskStatus::Failed | TaskStatus::Cancelled))
            .map(|i| state.tasks[i].definition.task_id.clone())
            .collect();
        let cancelled: HashSet<String> = state
            .tasks
            .iter()
            .filter(|t| t.status == TaskStatus::Cancelled)
            .map(|t| t.definition.task_id.clone())
            .collect();
        let mut changed = false;
        // By position, so that only the tasks changed are marked for the write.
        for i in 0..state.tasks.len() {
            let t = &state.tasks[i];
            if t.status != TaskStatus::Pending {
                continue;
            }
            let why = if let Some(d) = t.definition.dependencies.iter().find(|d| dead.contains(*d))
            {
                format!("not run: dependency {d} did not complete")
            } else if let Some(g) = t.fallback_for.as_ref().filter(|g| cancelled.contains(*g)) {
                format!("not run: {g}, whose fallback it is, was cancelled")
            } else {
                continue;
            };
            let t = &mut state.tasks[i];
            t.status = TaskStatus::Cancelled;
            t.completed_at = Some(now);
            t.error = Some(why);
            changed = true;
        }
        if !changed {
            break;
        }
    }
}

/// Whether the swarm may still ask the manager's model for tasks.
pub fn replans_left(state: &SwarmState) -> bool {
    let used = state.metrics.get("replans").copied().unwrap_or(0.0);
    used < f64::from(state.limits.max_replans)
}

/// Counts one replan against [`replans_left`].
fn spend_replan(state: &mut SwarmState) {
    *state.metrics.entry("replans".into()).or_insert(0.0) += 1.0;
}

/// Adds what models cost, as an event reports it (`input_tokens`,
/// `output_tokens`, `cost_usd`, and `model_wait_ms`, the time its calls
/// waited for the shared model limits), to the swarm's totals; a value that
/// is not a positive number is ignored.
fn add_usage(state: &mut SwarmState, metrics: &std::collections::BTreeMap<String, f64>) {
    for key in ["input_tokens", "output_tokens", "cost_usd", "model_wait_ms"] {
        if let Some(v) = metrics.get(key).filter(|v| v.is_finite() && **v > 0.0) {
            *state.metrics.entry(key.to_string()).or_insert(0.0) += v;
        }
    }
}

/// The pool a persona's tasks go to: a worker persona's own, the
/// sub-managers' for a sub-manager, else the default pool.
fn pool_of(state: &SwarmState, persona: &str) -> String {
    match state.workers.iter().find(|w| w.name == persona) {
        Some(w) => w.pool.clone(),
        None if state.sub_managers.iter().any(|s| s.name == persona) => {
            SUB_MANAGER_POOL.to_string()
        }
        None => swarm_common::default_pool(),
    }
}

/// Applies the manager's model's tasks for a task that failed for good:
/// they join the graph (checked like a plan's), the one named `replaces`
/// becomes the failed task's fallback, and the change is recorded. With no
/// tasks, or tasks that are refused, the failure takes its course.
fn on_replan(
    state: &mut Indexed,
    replan: &swarm_common::replan::Replan,
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) -> bool {
    let Some(i) = state.position(&replan.task_id) else {
        return false;
    };
    let t = &state.tasks[i];
    if !t.replanning || t.attempt != replan.attempt || t.revision != replan.revision {
        return false;
    }
    state.tasks[i].replanning = false;
    add_usage(state, &replan.metrics);
    let checked = check_added(state, &replan.tasks, replan.replaces.as_deref());
    let review = state.tasks[i].status == TaskStatus::Completed;
    let mut change = swarm_common::replan::GraphChange {
        after: replan.task_id.clone(),
        at: now,
        added: Vec::new(),
        replaces: None,
        reason: replan.reason.clone(),
        model: replan.model.clone(),
        refused: None,
        review,
    };
    match checked {
        Err(e) => change.refused = Some(e.message),
        Ok(()) if replan.tasks.is_empty() => {}
        Ok(()) => {
            let first = state.tasks.len();
            let priority = state.tasks[i].priority;
            for def in &replan.tasks {
                let pool = pool_of(state, &def.assigned_to);
                change.added.push(def.task_id.clone());
                state
                    .tasks
                    .push(TaskState::pending(def.clone(), pool, priority));
            }
            // The new tasks change the graph the index was built on.
            state.index = TaskIndex::default();
            if let Some(r) = replan.replaces.as_ref().filter(|_| !review)
                && let Some(f) = state.position(r)
            {
                state.tasks[i].definition.on_failure = Some(r.clone());
                state.tasks[f].fallback_for = Some(replan.task_id.clone());
                change.replaces = Some(r.clone());
            }
            assign_if_ready(state, (first..state.tasks.len()).collect(), now, commands);
        }
    }
    state.changes.push(change);
    cascade_cancel(state, now);
    true
}

/// Whether `tasks` may join the swarm's graph, `replaces` standing in for a
/// failed task ([`swarm_common::replan::check_added`], with the swarm's
/// tasks and personas).
pub fn check_added(
    state: &SwarmState,
    tasks: &[swarm_common::TaskDefinition],
    replaces: Option<&str>,
) -> Result<(), ErrorBody> {
    let existing: HashSet<&str> = state
        .tasks
        .iter()
        .map(|t| t.definition.task_id.as_str())
        .collect();
    let personas: HashSet<&str> = state
        .workers
        .iter()
        .map(|w| w.name.as_str())
        .chain(state.sub_managers.iter().map(|s| s.name.as_str()))
        .collect();
    swarm_common::replan::check_added(&existing, &personas, tasks, replaces, &state.limits)
}

/// Records each task's fallback in the fallback's state (`fallback_for`).
fn mark_fallbacks(state: &mut Indexed) {
    let pairs: Vec<(usize, String)> = state
        .tasks
        .iter()
        .filter_map(|t| {
            let f = t.definition.on_failure.as_deref()?;
            Some((state.position(f)?, t.definition.task_id.clone()))
        })
        .collect();
    for (f, guard) in pairs {
        state.tasks[f].fallback_for = Some(guard);
    }
}

/// Whether the task at `i` is a fallback whose task has not failed: it is
/// held until then.
fn held(state: &Indexed, i: usize) -> bool {
    state.tasks[i]
        .fallback_for
        .as_deref()
        .and_then(|g| state.task(g))
        .is_some_and(|g| g.status != TaskStatus::Failed)
}

/// The task at `i` completed: its dependents may be ready, its fallback is
/// not needed, and if it is itself a fallback, it stands in for the task it
/// guards, whose dependents may be ready too.
fn completed(state: &mut Indexed, i: usize, now: DateTime<Utc>, commands: &mut Vec<Command>) {
    assign_dependents(state, i, now, commands);
    for f in skip_fallbacks(state, i, now) {
        assign_dependents(state, f, now, commands);
    }
    let mut at = i;
    while let Some(g) = state.tasks[at]
        .fallback_for
        .clone()
        .and_then(|g| state.position(&g))
    {
        if state.tasks[g].status != TaskStatus::Failed {
            break;
        }
        assign_dependents(state, g, now, commands);
        at = g;
    }
}

/// Skips the fallbacks of the task at `i`, which completed or was skipped
/// (and theirs in turn); returns the positions skipped.
fn skip_fallbacks(state: &mut Indexed, i: usize, now: DateTime<Utc>) -> Vec<usize> {
    let mut skipped = Vec::new();
    let mut at = i;
    while let Some(f) = state.tasks[at]
        .definition
        .on_failure
        .clone()
        .and_then(|f| state.position(&f))
    {
        if state.tasks[f].status != TaskStatus::Pending {
            break;
        }
        let why = format!(
            "not needed: {}, whose fallback it is, {}",
            state.tasks[at].definition.task_id,
            if state.tasks[at].status == TaskStatus::Skipped {
                "was skipped"
            } else {
                "completed"
            }
        );
        let t = &mut state.tasks[f];
        t.status = TaskStatus::Skipped;
        t.completed_at = Some(now);
        t.error = Some(why);
        skipped.push(f);
        at = f;
    }
    skipped
}

/// The task at `i` failed for good: its fallback, if it has one, runs in
/// its place (once its own dependencies are done); what can no longer run
/// is cancelled.
fn failed(state: &mut Indexed, i: usize, now: DateTime<Utc>, commands: &mut Vec<Command>) {
    if state.tasks[i].replanning {
        // The model's tasks are on their way ([`Event::Replan`]): what
        // depends on this task waits for them.
        spend_replan(state);
        return;
    }
    if let Some(f) = state.tasks[i]
        .definition
        .on_failure
        .clone()
        .and_then(|f| state.position(&f))
        && state.tasks[f].status == TaskStatus::Pending
    {
        assign_if_ready(state, vec![f], now, commands);
    }
    cascade_cancel(state, now);
}

/// Assigns every pending task whose dependencies all completed, highest
/// priority first: a new swarm's first tasks.
fn assign_ready(state: &mut Indexed, now: DateTime<Utc>, commands: &mut Vec<Command>) {
    let pending: Vec<usize> = (0..state.tasks.len())
        .filter(|&i| state.tasks[i].status == TaskStatus::Pending)
        .collect();
    assign_if_ready(state, pending, now, commands);
}

/// Assigns the dependents of the task at `done` that it was the last one
/// to wait for: only they can have become ready, so a result costs the same
/// however many tasks the swarm has.
fn assign_dependents(
    state: &mut Indexed,
    done: usize,
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) {
    let dependents = state.dependents(done).to_vec();
    let pending = dependents
        .into_iter()
        .filter(|&i| state.tasks[i].status == TaskStatus::Pending)
        .collect();
    assign_if_ready(state, pending, now, commands);
}

/// Assigns those of `candidates` whose dependencies have all ended
/// (completed or skipped), highest priority first; one whose condition does
/// not hold is skipped instead, with the reason, and its own dependents are
/// looked at in turn (a skip never cancels them: a skipped dependency counts
/// as done, with no result for their context).
fn assign_if_ready(
    state: &mut Indexed,
    mut candidates: Vec<usize>,
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) {
    while !candidates.is_empty() {
        let mut ready: Vec<usize> = candidates
            .into_iter()
            .filter(|&i| {
                state.tasks[i].status == TaskStatus::Pending
                    && state.tasks[i].parent.is_none()
                    && !held(state, i)
                    && state.dependencies_done(i)
            })
            .collect();
        ready.sort_by_key(|&i| (std::cmp::Reverse(state.tasks[i].priority), i));
        ready.dedup();
        let mut skipped = Vec::new();
        for i in ready {
            if let Some(why) = unmet_condition(state, i) {
                let t = &mut state.tasks[i];
                t.status = TaskStatus::Skipped;
                t.completed_at = Some(now);
                t.error = Some(why);
                skipped.push(i);
                skipped.extend(skip_fallbacks(state, i, now));
                continue;
            }
            if state.tasks[i].definition.map.is_some() {
                // A map that ends at once (an empty list, or a list it cannot
                // use) lets its dependents be looked at in turn.
                if expand_map(state, i, now, commands) {
                    skipped.push(i);
                }
                continue;
            }
            commands.push(assign_first(state, i, now));
        }
        candidates = skipped
            .into_iter()
            .flat_map(|i| state.dependents(i).to_vec())
            .collect();
    }
}

/// Why the condition of the task at `i` does not hold, if it has one and it
/// does not; decided once its dependencies have all ended.
fn unmet_condition(state: &Indexed, i: usize) -> Option<String> {
    let condition = state.tasks[i].definition.condition.as_ref()?;
    let check = condition.evaluate(&mut |test: &Test| decide_test(state, test));
    (!check.holds).then(|| format!("condition not met: {}", check.reason))
}

/// One test of a condition, on a dependency that has ended: its status, or
/// the outcome of a pointer test kept when its result was accepted.
fn decide_test(state: &Indexed, test: &Test) -> Check {
    let Some(dep) = state.task(&test.task) else {
        return Check {
            holds: false,
            reason: format!("{} is not a task of the swarm", test.task),
        };
    };
    let skipped = dep.status == TaskStatus::Skipped;
    let id = &test.task;
    if let Some(want) = test.status {
        let holds = match want {
            DependencyStatus::Completed => dep.status == TaskStatus::Completed,
            DependencyStatus::Skipped => skipped,
        };
        let was = if skipped { "was skipped" } else { "completed" };
        return Check {
            holds,
            reason: format!("{id} {was}"),
        };
    }
    if skipped {
        return Check {
            holds: false,
            reason: format!("{id} was skipped, so it has no result to test"),
        };
    }
    test.key()
        .and_then(|key| dep.checks.get(&key).cloned())
        .unwrap_or_else(|| Check {
            holds: false,
            reason: format!("the result of {id} was not checked when it was accepted"),
        })
}

/// Decides, on the accepted result of the task at `i`, the pointer tests
/// that its dependents' conditions make on it, and keeps the outcomes in its
/// state: the result text is at hand only now.
fn check_for_dependents(state: &mut Indexed, i: usize, result: &str) {
    let id = state.tasks[i].definition.task_id.clone();
    let tests: Vec<Test> = state
        .dependents(i)
        .iter()
        .filter_map(|&j| state.tasks[j].definition.condition.as_ref())
        .flat_map(|c| c.tests())
        .filter(|t| t.task == id && t.pointer.is_some())
        .cloned()
        .collect();
    if tests.is_empty() {
        return;
    }
    let parsed = condition::parse_result(result);
    for test in tests {
        if let Some(key) = test.key() {
            let check = condition::check_result(&id, &test, parsed.as_ref());
            state.tasks[i].checks.insert(key, check);
        }
    }
}

/// Reads, from the accepted result of the task at `i`, the lists its
/// dependents map over ([`swarm_common::map`]), and keeps each (or why it
/// cannot be used) in the map task's state: the result text is at hand only
/// now. Applied once per accepted result, so a redelivery reads nothing twice.
fn read_lists(state: &mut Indexed, i: usize, result: &str) {
    let id = state.tasks[i].definition.task_id.clone();
    let room = state.limits.max_tasks.saturating_sub(state.tasks.len());
    let maps: Vec<usize> = state
        .dependents(i)
        .iter()
        .copied()
        .filter(|&j| {
            state.tasks[j]
                .definition
                .map
                .as_ref()
                .is_some_and(|m| m.over.task == id)
        })
        .collect();
    for j in maps {
        let Some(spec) = state.tasks[j].definition.map.clone() else {
            continue;
        };
        let read = map::read_items(&spec.over, result, room);
        let (items, error) = match read {
            Ok(items) => (items, None),
            Err(why) => (Vec::new(), Some(why)),
        };
        state.tasks[j].map = Some(MapState {
            items,
            error,
            ..MapState::default()
        });
    }
}

/// Expands the ready map task at `i` into its children, one per item of the
/// list kept when its `over` dependency's result was accepted, and assigns
/// the first of them. Returns whether the map task ended at once: completed
/// on an empty list, or failed on a list it cannot use (not read, or more
/// items than the mission's task limit still allows).
fn expand_map(
    state: &mut Indexed,
    i: usize,
    now: DateTime<Utc>,
    commands: &mut Vec<Command>,
) -> bool {
    let room = state.limits.max_tasks.saturating_sub(state.tasks.len());
    let id = state.tasks[i].definition.task_id.clone();
    let Some(read) = state.tasks[i].map.take() else {
        // The list was never read: its task was skipped (a map over nothing
        // is skipped too, like a condition that does not hold).
        let over = state.tasks[i]
            .definition
            .map
            .as_ref()
            .map(|m| m.over.task.clone())
            .unwrap_or_default();
        let t = &mut state.tasks[i];
        t.status = TaskStatus::Skipped;
        t.completed_at = Some(now);
        t.error = Some(format!("nothing to map over: {over} has no result"));
        return true;
    };
    let error = read.error.clone().or_else(|| {
        (read.items.len() > room).then(|| {
            format!(
                "the list has {} items; the mission's task limit leaves room for {room}",
                read.items.len()
            )
        })
    });
    let t = &mut state.tasks[i];
    t.assigned_at = Some(now);
    if let Some(why) = error {
        t.status = TaskStatus::Failed;
        t.completed_at = Some(now);
        t.error = Some(format!("map: {why}"));
        t.map = Some(MapState {
            expanded: true,
            ..MapState::default()
        });
        cascade_cancel(state, now);
        return true;
    }
    let template = &state.tasks[i];
    let children: Vec<TaskState> = read
        .items
        .iter()
        .enumerate()
        .map(|(k, item)| {
            let definition = swarm_common::TaskDefinition {
                task_id: map::child_id(&id, k),
                title: format!("{} #{k}", template.definition.title),
                description: map::child_description(&template.definition.description, item, k),
                condition: None,
                map: None,
                ..template.definition.clone()
            };
            TaskState {
                parent: Some(id.clone()),
                ..TaskState::pending(definition, template.pool.clone(), template.priority)
            }
        })
        .collect();
    let t = &mut state.tasks[i];
    t.map = Some(MapState {
        items: Vec::new(),
        error: None,
        expanded: true,
        children: children
            .iter()
            .map(|c| c.definition.task_id.clone())
            .collect(),
        progress: Some(MapProgress::default()),
    });
    if children.is_empty() {
        t.status = TaskStatus::Completed;
        t.completed_at = Some(now);
        t.result_preview = "[]".into();
        return true;
    }
    t.status = TaskStatus::InProgress;
    state.tasks.extend(children);
    // Tasks were added: the lookups are built again on first use.
    state.index = TaskIndex::default();
    assign_children(state, i, now, commands);
    false
}

/// Assigns the pending children of the map task at `m`, in item order,
/// while fewer than its concurrency are out.
fn assign_children(state: &mut Indexed, m: usize, now: DateTime<Utc>, commands: &mut Vec<Command>) {
    let cap = state.tasks[m]
        .definition
        .map
        .as_ref()
        .map_or(1, |s| s.concurrency) as usize;
    let Some(mut progress) = map_progress(state, m) else {
        return;
    };
    let len = state.tasks[m].map.as_ref().map_or(0, |s| s.children.len());
    // Children are handed out in order and a failed one ends the map: the
    // ones started and not completed are the ones out.
    let mut out = progress.started.saturating_sub(progress.completed);
    while out < cap && progress.started < len {
        let c = state.tasks[m]
            .map
            .as_ref()
            .and_then(|s| s.children.get(progress.started))
            .and_then(|id| state.position(id));
        progress.started += 1;
        if let Some(c) = c.filter(|&c| state.tasks[c].status == TaskStatus::Pending) {
            commands.push(assign_first(state, c, now));
            out += 1;
        }
    }
    set_map_progress(state, m, progress);
}

/// How far the children of the map task at `m` have got: as kept, or
/// counted from the children for a state stored before it was kept.
fn map_progress(state: &Indexed, m: usize) -> Option<MapProgress> {
    let map = state.tasks[m].map.as_ref()?;
    if let Some(p) = map.progress {
        return Some(p);
    }
    let status = |id: &String| state.task(id).map(|t| t.status);
    Some(MapProgress {
        started: map
            .children
            .iter()
            .position(|id| status(id) == Some(TaskStatus::Pending))
            .unwrap_or(map.children.len()),
        completed: map
            .children
            .iter()
            .filter(|id| status(id) == Some(TaskStatus::Completed))
            .count(),
    })
}

fn set_map_progress(state: &mut Indexed, m: usize, progress: MapProgress) {
    if let Some(map) = state.tasks[m].map.as_mut() {
        map.progress = Some(progress);
    }
}

/// After an event on the task at `c`: if it is a map task's child and has
/// ended, the map task assigns its next child, completes once every child
/// has (its dependents then run), or fails when one failed for good (its
/// other children and its dependents are cancelled).
fn child_ended(state: &mut Indexed, c: usize, now: DateTime<Utc>, commands: &mut Vec<Command>) {
    let child = &state.tasks[c];
    if !child.status.is_terminal() {
        return;
    }
    let Some(m) = child.parent.as_ref().and_then(|p| state.position(p)) else {
        return;
    };
    if state.tasks[m].status.is_terminal() {
        return;
    }
    if child.status != TaskStatus::Completed {
        let why = format!(
            "child {} did not complete: {}",
            child.definition.task_id,
            child.error.as_deref().unwrap_or("no reason given")
        );
        let sibling_why = format!("not needed: {} did not complete", child.definition.task_id);
        let children: Vec<usize> = state.tasks[m]
            .map
            .iter()
            .flat_map(|s| s.children.iter())
            .filter_map(|id| state.position(id))
            .collect();
        for k in children {
            let t = &mut state.tasks[k];
            if !t.status.is_terminal() {
                t.status = TaskStatus::Cancelled;
                t.completed_at = Some(now);
                t.error = Some(sibling_why.clone());
            }
        }
        let t = &mut state.tasks[m];
        t.status = TaskStatus::Failed;
        t.completed_at = Some(now);
        t.error = Some(format!("map: {why}"));
        failed(state, m, now, commands);
        return;
    }
    let kept = state.tasks[m].map.as_ref().and_then(|s| s.progress);
    let Some(progress) = (match kept {
        Some(p) => Some(MapProgress {
            completed: p.completed + 1,
            ..p
        }),
        // Counted from the children, this one among them.
        None => map_progress(state, m),
    }) else {
        return;
    };
    set_map_progress(state, m, progress);
    let len = state.tasks[m].map.as_ref().map_or(0, |s| s.children.len());
    if progress.completed < len {
        return assign_children(state, m, now, commands);
    }
    // Once, at the end: every child is looked at.
    let children: Vec<usize> = state.tasks[m]
        .map
        .iter()
        .flat_map(|s| s.children.iter())
        .filter_map(|id| state.position(id))
        .collect();
    if children
        .iter()
        .all(|&k| state.tasks[k].status == TaskStatus::Completed)
    {
        let previews: Vec<String> = children
            .iter()
            .map(|&k| state.tasks[k].result_preview.clone())
            .collect();
        let bytes = children.iter().map(|&k| state.tasks[k].result_bytes).sum();
        let t = &mut state.tasks[m];
        t.status = TaskStatus::Completed;
        t.completed_at = Some(now);
        t.result_bytes = bytes;
        t.result_preview = preview(&format!("[{}]", previews.join(", ")));
        completed(state, m, now, commands);
    } else {
        // The count went wrong (a state stored before it was kept): count
        // the children again.
        if let Some(map) = state.tasks[m].map.as_mut() {
            map.progress = None;
        }
        assign_children(state, m, now, commands);
    }
}

/// Hands task `i` to its pool for the first time: its first attempt.
fn assign_first(state: &mut Indexed, i: usize, now: DateTime<Utc>) -> Command {
    let t = &mut state.tasks[i];
    t.status = TaskStatus::Assigned;
    t.attempt = 1;
    t.assigned_at = Some(now);
    assignment(state, &state.tasks[i])
}

fn finish_if_done(state: &mut Indexed, now: DateTime<Utc>, commands: &mut Vec<Command>) {
    if state.status.is_terminal() || !state.all_ended() {
        return;
    }
    // Skipped is an outcome, not a failure: every task that ran completed,
    // or failed and had a fallback complete in its place.
    state.status = if (0..state.tasks.len()).all(|i| {
        matches!(
            state.outcome(i),
            TaskStatus::Completed | TaskStatus::Skipped
        )
    }) {
        SwarmStatus::Completed
    } else {
        SwarmStatus::Failed
    };
    state.completed_at = Some(now);
    commands.push(Command::Finalize);
}

fn assignment(state: &Indexed, t: &TaskState) -> Command {
    let persona = state
        .workers
        .iter()
        .find(|w| w.name == t.definition.assigned_to)
        .cloned()
        .unwrap_or_else(|| swarm_common::WorkerDeploymentPlan {
            name: t.definition.assigned_to.clone(),
            role: state
                .sub_managers
                .iter()
                .find(|s| s.name == t.definition.assigned_to)
                .map(|s| s.role.clone())
                .unwrap_or_default(),
            system_prompt: String::new(),
            tools: Vec::new(),
            collaborators: Vec::new(),
            pool: t.pool.clone(),
            a2a_url: None,
            a2a_credential: None,
            skill: None,
        });
    // A map task's result is its children's: they are the context. A child
    // swarm's first tasks get what its parent task was given.
    let inherited = match &state.parent {
        Some(p) if t.definition.dependencies.is_empty() => p.context.clone(),
        _ => Vec::new(),
    };
    // A map's child is given its item, not the whole list it came from
    // (which would ride along in every one of up to 100,000 assignments).
    let over = t
        .parent
        .as_ref()
        .and_then(|m| state.task(m))
        .and_then(|m| m.definition.map.as_ref())
        .map(|m| m.over.task.as_str());
    let context = t
        .definition
        .dependencies
        .iter()
        .filter(|d| Some(d.as_str()) != over)
        .filter_map(|d| state.position(d))
        .map(|d| &state.tasks[state.stand_in(d)])
        .flat_map(|d| match &d.map {
            Some(m) if m.expanded => m.children.iter().filter_map(|c| state.task(c)).collect(),
            _ => vec![d],
        })
        .filter_map(|d| {
            d.result_seq.map(|seq| ContextRef {
                task_id: d.definition.task_id.clone(),
                title: d.definition.title.clone(),
                result_seq: seq,
                result: None,
            })
        })
        .chain(inherited)
        .collect();
    let collaborators = persona
        .collaborators
        .iter()
        .filter_map(|name| state.workers.iter().find(|w| w.name == *name))
        .map(|w| Collaborator {
            name: w.name.clone(),
            role: w.role.clone(),
        })
        .collect();
    let max_result_bytes = t
        .definition
        .max_result_bytes
        .map_or(state.limits.max_result_bytes, |l| {
            l.min(state.limits.max_result_bytes)
        });
    Command::Assign {
        pool: t.pool.clone(),
        msg_id: assignment_msg_id(
            &state.swarm_id,
            &t.definition.task_id,
            t.attempt,
            t.revision,
        ),
        assignment: Box::new(TaskAssignment {
            tasks: vec![swarm_common::TaskDefinition {
                priority: Some(t.priority),
                ..t.definition.seed_view()
            }],
            token: String::new(),
            task_id: t.definition.task_id.clone(),
            title: t.definition.title.clone(),
            description: t.definition.description.clone(),
            persona,
            attempt: t.attempt,
            revision: t.revision,
            feedback: t.feedback.clone(),
            context,
            max_steps: state.limits.max_steps,
            max_attempts: state.limits.max_attempts,
            max_result_bytes,
            priority: t.priority,
            deadline: state.deadline,
            gates: t.definition.gates.clone(),
            budget: state.budget.clone(),
            spent_tokens: tokens_spent(state),
            spent_cost_usd: cost_spent(state),
            child: (t.pool == SUB_MANAGER_POOL).then(|| ChildSwarm {
                sub_manager: t.definition.assigned_to.clone(),
                plan: state
                    .sub_managers
                    .iter()
                    .find(|s| s.name == t.definition.assigned_to)
                    .and_then(|s| s.plan.clone()),
                depth: state.depth() + 1,
            }),
            collaborators,
            skills_scope: state.skills_scope.clone(),
        }),
    }
}

/// Tokens the swarm's models have used so far.
pub fn tokens_spent(state: &SwarmState) -> u64 {
    let m = |k: &str| state.metrics.get(k).copied().unwrap_or(0.0);
    (m("input_tokens") + m("output_tokens")) as u64
}

/// Estimated model cost the swarm has used so far, in US dollars.
pub fn cost_spent(state: &SwarmState) -> f64 {
    state.metrics.get("cost_usd").copied().unwrap_or(0.0)
}

fn preview(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut cut = MAX;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

/// The deduplication id of an assignment: `<swarm>.<task>.a<attempt>.r<revision>`.
/// A result of the same attempt and revision answers it.
pub fn assignment_msg_id(swarm_id: &str, task_id: &str, attempt: u32, revision: u32) -> String {
    format!("{swarm_id}.{task_id}.a{attempt}.r{revision}")
}
