//! The final report: built from the swarm's state and its accepted results,
//! with a deterministic summary and insights (no model needed).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use swarm_common::{
    ErrorBody, ErrorCode, FinalReport, SwarmState, SwarmStatus, TaskOutcome, TaskStatus,
};

/// Swarms with more tasks than this report the children of their map
/// tasks through the map task alone (its result is theirs, in item order),
/// but for the children that failed: so the report of a mission of 100,000
/// tasks stays one message. The state keeps every child.
pub const LIST_EVERY_CHILD_UP_TO: usize = 1_000;

/// Builds the report. `results` maps task ids to their accepted result text;
/// when the reported tasks' total exceeds `budget_bytes`, each is shortened
/// to a fair share and marked truncated (the full text stays in the stream
/// at `result_seq`).
pub fn build(
    state: &SwarmState,
    results: &HashMap<String, String>,
    budget_bytes: usize,
    now: DateTime<Utc>,
) -> FinalReport {
    let fold = state.tasks.len() > LIST_EVERY_CHILD_UP_TO;
    let reported: Vec<(&swarm_common::TaskState, String)> = state
        .tasks
        .iter()
        .filter(|t| !fold || t.parent.is_none() || t.status == TaskStatus::Failed)
        .map(|t| {
            let full = match &t.map {
                Some(m) if m.expanded && t.status == TaskStatus::Completed => {
                    map_result(&m.children, results)
                }
                _ => results
                    .get(&t.definition.task_id)
                    .cloned()
                    .unwrap_or_default(),
            };
            (t, full)
        })
        .collect();
    let total: usize = reported.iter().map(|(_, r)| r.len()).sum();
    let share = if total > budget_bytes && !reported.is_empty() {
        Some(budget_bytes / reported.len())
    } else {
        None
    };
    let task_results: Vec<TaskOutcome> = reported
        .into_iter()
        .map(|(t, full)| {
            let (result, result_truncated) = match share {
                Some(n) if full.len() > n => (truncate(&full, n), true),
                _ => (full, false),
            };
            TaskOutcome {
                skills: t.skills.clone(),
                task_id: t.definition.task_id.clone(),
                title: t.definition.title.clone(),
                description: t.definition.description.clone(),
                assigned_to: t.definition.assigned_to.clone(),
                dependencies: t.definition.dependencies.clone(),
                status: t.status,
                result,
                result_truncated,
                result_seq: t.result_seq,
                attempts: t.attempt,
                revisions: t.revision,
                assigned_at: t.assigned_at,
                started_at: t.started_at,
                completed_at: t.completed_at,
                error: t.error.clone(),
                gate_verdicts: t.gate_verdicts.clone(),
                provider: t.provider.clone(),
                child_swarm: state.child_of(t),
                asked_by: t.asked_by.clone(),
            }
        })
        .collect();
    let completed_at = state.completed_at.unwrap_or(now);
    let mut skills = swarm_common::SkillsUsed::default();
    for t in &state.tasks {
        skills.merge(&t.skills);
    }
    FinalReport {
        skills,
        trace_id: state.trace_id.clone(),
        overall_status: state.status,
        mission: state.mission.clone(),
        summary: summary(state, completed_at),
        insights: insights(state),
        metrics: metrics(state, completed_at),
        task_results,
        started_at: state.accepted_at,
        completed_at,
    }
}

/// A completed map task's result: the JSON array of its children's results
/// in item order, each as JSON when it is JSON and as a string otherwise.
fn map_result(children: &[String], results: &HashMap<String, String>) -> String {
    let items: Vec<serde_json::Value> = children
        .iter()
        .map(|c| {
            let r = results.get(c).map_or("", String::as_str);
            serde_json::from_str(r.trim()).unwrap_or_else(|_| serde_json::Value::String(r.into()))
        })
        .collect();
    serde_json::Value::Array(items).to_string()
}

fn count(state: &SwarmState, s: TaskStatus) -> usize {
    state.tasks.iter().filter(|t| t.status == s).count()
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / 1000.0
}

/// Why a mission did not complete, in one sentence that names the first
/// task that failed (the earliest to end Failed; its dependents' cancels
/// follow from it) or the swarm's own reason; `None` for a completed one.
/// A model-written summary keeps it at its front too.
pub fn why_not_completed(state: &SwarmState) -> Option<String> {
    let first_failed = state
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.status == TaskStatus::Failed)
        .min_by_key(|(i, t)| (t.completed_at, *i))
        .map(|(_, t)| t);
    let task = |t: &swarm_common::TaskState| {
        format!(
            "task {} ({}) failed: {}",
            t.definition.task_id,
            t.definition.title,
            t.error.as_deref().unwrap_or("no reason recorded")
        )
    };
    let unfinished = || {
        state
            .tasks
            .iter()
            .filter(|t| !t.status.is_terminal() || t.status == TaskStatus::Cancelled)
            .map(|t| t.definition.task_id.as_str())
            .collect::<Vec<_>>()
    };
    match state.status {
        SwarmStatus::Completed | SwarmStatus::Running => None,
        SwarmStatus::Failed => Some(match (first_failed, &state.cancel_reason) {
            (Some(t), _) => format!("The mission failed: {}.", task(t)),
            (None, Some(why)) => format!("The mission failed: {why}."),
            (None, None) => "The mission failed.".to_string(),
        }),
        SwarmStatus::Cancelled => Some(format!(
            "The mission was cancelled: {}.",
            state.cancel_reason.as_deref().unwrap_or("no reason given")
        )),
        SwarmStatus::TimedOut => {
            let left = unfinished();
            Some(match first_failed {
                Some(t) => format!(
                    "The mission ran out of time with {} task(s) not done; before that, {}.",
                    left.len(),
                    task(t)
                ),
                None => format!(
                    "The mission ran out of time with {} task(s) not done: {}.",
                    left.len(),
                    left.join(", ")
                ),
            })
        }
    }
}

fn summary(state: &SwarmState, completed_at: DateTime<Utc>) -> String {
    let n = state.tasks.len();
    let verdict = match why_not_completed(state) {
        Some(why) => why,
        None if state.status == SwarmStatus::Running => "The mission is still running.".into(),
        None => "The mission completed.".to_string(),
    };
    format!(
        "{verdict} {} of {n} task(s) completed, {} failed, {} cancelled{}, in {:.2} s. Plan by {}; summary by the manager's rule-based reviewer (offline, no model).",
        count(state, TaskStatus::Completed),
        count(state, TaskStatus::Failed),
        count(state, TaskStatus::Cancelled),
        match count(state, TaskStatus::Skipped) {
            0 => String::new(),
            k => format!(", {k} skipped (condition not met)"),
        },
        seconds(state.accepted_at, completed_at),
        if state.planner.is_empty() {
            "unknown planner"
        } else {
            &state.planner
        },
    )
}

/// What each replan did to the graph, one line each: facts the report
/// keeps even when a model writes the rest of its insights.
pub fn change_insights(state: &SwarmState) -> Vec<String> {
    let mut out = Vec::new();
    for c in &state.changes {
        let who = if c.review {
            format!(
                "reviewing the finished mission (its last task {}), the manager's model ({})",
                c.after, c.model
            )
        } else {
            format!(
                "after {} failed, the manager's model ({})",
                c.after, c.model
            )
        };
        out.push(match (&c.refused, c.added.is_empty()) {
            (Some(why), _) => format!("{who} gave tasks that were refused: {why}"),
            (None, true) => format!("{who} added no tasks: {}", c.reason),
            (None, false) => format!(
                "{who} added {}{}: {}",
                c.added.join(", "),
                c.replaces
                    .as_ref()
                    .map(|r| format!(" ({r} in its place)"))
                    .unwrap_or_default(),
                c.reason
            ),
        });
    }
    out
}

fn insights(state: &SwarmState) -> Vec<String> {
    let mut out = Vec::new();
    for t in &state.tasks {
        let id = &t.definition.task_id;
        if t.revision > 0 {
            let why = t.feedback.last().map(String::as_str).unwrap_or("");
            out.push(format!(
                "{id} needed {} revision(s) after review: {why}",
                t.revision
            ));
        }
        if t.attempt > 1 {
            out.push(format!("{id} took {} attempts", t.attempt));
        }
        if t.status == TaskStatus::Failed {
            let fallback = t
                .definition
                .on_failure
                .as_deref()
                .and_then(|f| state.task(f))
                .map(|f| match f.status {
                    TaskStatus::Completed => {
                        format!(
                            "; its fallback {} completed in its place",
                            f.definition.task_id
                        )
                    }
                    s => format!("; its fallback {} ended {s:?}", f.definition.task_id),
                })
                .unwrap_or_default();
            out.push(format!(
                "{id} failed: {}{fallback}",
                t.error.as_deref().unwrap_or("no reason recorded")
            ));
        }
        if t.status == TaskStatus::Skipped {
            out.push(format!(
                "{id} was skipped: {}",
                t.error.as_deref().unwrap_or("no reason recorded")
            ));
        }
    }
    out.extend(change_insights(state));
    let cancelled: Vec<&str> = state
        .tasks
        .iter()
        .filter(|t| t.status == TaskStatus::Cancelled)
        .map(|t| t.definition.task_id.as_str())
        .collect();
    if !cancelled.is_empty() {
        out.push(format!("not run: {}", cancelled.join(", ")));
    }
    if let Some(slowest) = state
        .tasks
        .iter()
        .filter_map(|t| Some((t, (t.completed_at? - t.assigned_at?).num_milliseconds())))
        .max_by_key(|(_, ms)| *ms)
    {
        out.push(format!(
            "longest task: {} ({:.2} s from assignment to acceptance)",
            slowest.0.definition.task_id,
            slowest.1 as f64 / 1000.0
        ));
    }
    out
}

fn metrics(state: &SwarmState, completed_at: DateTime<Utc>) -> BTreeMap<String, f64> {
    let mut m = state.metrics.clone();
    let f = |n: usize| n as f64;
    m.insert("tasks_total".into(), f(state.tasks.len()));
    m.insert(
        "tasks_completed".into(),
        f(count(state, TaskStatus::Completed)),
    );
    m.insert("tasks_failed".into(), f(count(state, TaskStatus::Failed)));
    m.insert(
        "tasks_cancelled".into(),
        f(count(state, TaskStatus::Cancelled)),
    );
    m.insert("tasks_skipped".into(), f(count(state, TaskStatus::Skipped)));
    m.insert(
        "attempts_total".into(),
        state.tasks.iter().map(|t| t.attempt as f64).sum(),
    );
    m.insert(
        "revisions_total".into(),
        state.tasks.iter().map(|t| t.revision as f64).sum(),
    );
    m.insert(
        "gate_failures".into(),
        f(state
            .tasks
            .iter()
            .flat_map(|t| &t.gate_verdicts)
            .filter(|v| !v.passed)
            .count()),
    );
    m.insert(
        "result_bytes_total".into(),
        f(state.tasks.iter().map(|t| t.result_bytes).sum()),
    );
    m.insert(
        "duration_seconds".into(),
        seconds(state.accepted_at, completed_at),
    );
    m
}

/// A child swarm's answer to its parent task ([`swarm_common::hierarchy`]):
/// its summary, then each completed task's result under its title, cut to
/// `limit` bytes; and, for a child that did not complete, the error the
/// parent task fails (or is revised) with.
pub fn answer_for_parent(
    report: &FinalReport,
    child_id: &str,
    limit: usize,
) -> (String, Option<ErrorBody>) {
    let mut text = report.summary.trim().to_string();
    for t in report
        .task_results
        .iter()
        .filter(|t| t.status == TaskStatus::Completed && !t.result.trim().is_empty())
    {
        text.push_str(&format!(
            "\n\n## {} ({})\n{}",
            t.title,
            t.task_id,
            t.result.trim()
        ));
    }
    let text = truncate(&text, limit);
    let error = match report.overall_status {
        SwarmStatus::Completed => None,
        status => {
            let code = match status {
                SwarmStatus::TimedOut => ErrorCode::Timeout,
                SwarmStatus::Cancelled => ErrorCode::Cancelled,
                _ => ErrorCode::GaveUp,
            };
            Some(
                ErrorBody::new(
                    code,
                    swarm_common::error::excerpt(
                        &format!(
                            "child swarm {child_id} ended {status:?}: {}",
                            report.summary.trim()
                        ),
                        swarm_common::error::MAX_MESSAGE_BYTES,
                    ),
                )
                .with_detail("child_swarm", child_id),
            )
        }
    };
    (text, error)
}

fn truncate(s: &str, max: usize) -> String {
    let mut cut = max.min(s.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s[..cut].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(status: SwarmStatus) -> FinalReport {
        let outcome = |id: &str, status: TaskStatus, result: &str| TaskOutcome {
            skills: Default::default(),
            asked_by: None,
            task_id: id.into(),
            title: format!("title {id}"),
            description: String::new(),
            assigned_to: "w".into(),
            dependencies: vec![],
            status,
            result: result.into(),
            result_truncated: false,
            result_seq: None,
            attempts: 1,
            revisions: 0,
            assigned_at: None,
            started_at: None,
            completed_at: None,
            error: None,
            gate_verdicts: vec![],
            provider: String::new(),
            child_swarm: None,
        };
        FinalReport {
            skills: Default::default(),
            trace_id: None,
            overall_status: status,
            mission: "m".into(),
            summary: "Two of three tasks completed.".into(),
            insights: vec![],
            task_results: vec![
                outcome("a", TaskStatus::Completed, "alpha"),
                outcome("b", TaskStatus::Failed, ""),
                outcome("c", TaskStatus::Completed, "gamma"),
            ],
            metrics: Default::default(),
            started_at: Utc::now(),
            completed_at: Utc::now(),
        }
    }

    #[test]
    fn a_completed_childs_answer_is_its_summary_and_results_within_the_limit() {
        let (text, error) = answer_for_parent(&report(SwarmStatus::Completed), "c1", 10_000);
        assert_eq!(
            text,
            "Two of three tasks completed.\n\n## title a (a)\nalpha\n\n## title c (c)\ngamma"
        );
        assert!(error.is_none());
        let (cut, _) = answer_for_parent(&report(SwarmStatus::Completed), "c1", 12);
        assert_eq!(cut, "Two of three");
    }

    #[test]
    fn a_child_that_did_not_complete_answers_with_an_error_naming_it() {
        let (_, error) = answer_for_parent(&report(SwarmStatus::Failed), "c1", 10_000);
        let error = error.unwrap();
        assert_eq!(error.code, ErrorCode::GaveUp);
        assert!(error.message.starts_with("child swarm c1 ended Failed"));
        assert_eq!(error.details["child_swarm"], "c1");
        let (_, error) = answer_for_parent(&report(SwarmStatus::TimedOut), "c1", 10_000);
        assert_eq!(error.unwrap().code, ErrorCode::Timeout);
        let (_, error) = answer_for_parent(&report(SwarmStatus::Cancelled), "c1", 10_000);
        assert_eq!(error.unwrap().code, ErrorCode::Cancelled);
    }
}
