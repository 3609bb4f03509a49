//! What the console's pages show, built from what JetStream holds: rows of
//! swarms, a swarm's header and tasks, a task's details, what waits for a
//! person, the agents. Plain data for the templates (which escape it);
//! the SVG drawings come from [`swarm_boss::graph`], which escapes its own.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use swarm_boss::graph::{self, Bar, Node};
use swarm_client::list::Row;
use swarm_common::approval::{ApprovalRecord, InputRecord};
use swarm_common::card::AgentCard;
use swarm_common::{ResultSubmission, SwarmState, SwarmStatus, TaskStatus};

/// Characters of a mission shown in a row of the list.
const MISSION_CHARS: usize = 160;
/// Characters of a progress message shown beside a task.
pub const LATEST_CHARS: usize = 120;

/// A swarm's status as a badge: its code (`TimedOut`), words and class.
pub fn swarm_badge(status: SwarmStatus) -> (&'static str, &'static str, &'static str) {
    match status {
        SwarmStatus::Running => ("Running", "Running", "info"),
        SwarmStatus::Completed => ("Completed", "Completed", "ok"),
        SwarmStatus::Failed => ("Failed", "Failed", "bad"),
        SwarmStatus::Cancelled => ("Cancelled", "Cancelled", "muted"),
        SwarmStatus::TimedOut => ("TimedOut", "Timed out", "bad"),
    }
}

/// A task's latest progress message as its row shows it: at most
/// [`LATEST_CHARS`], on one line; a reply being written by its last words.
pub fn latest(message: &str) -> String {
    swarm_client::client::written_tail(message, LATEST_CHARS)
        .unwrap_or_else(|| shorten(message, LATEST_CHARS))
}

/// `text` trimmed, and cut to `max` characters with `…` when longer.
pub fn shorten(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn text_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// How long ago, in a few characters: `12 s`, `5 min`, `3 h`, `2 d`.
pub fn age(from: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - from).num_seconds().max(0);
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

/// A row of the list of swarms.
#[derive(Debug, Clone, Serialize)]
pub struct RowView {
    pub swarm_id: String,
    pub short_id: String,
    pub status_code: &'static str,
    pub status_label: &'static str,
    pub status_class: &'static str,
    pub done: usize,
    pub total: usize,
    pub failed: usize,
    pub accepted_iso: String,
    pub accepted_text: String,
    pub age: String,
    pub mission: String,
}

impl RowView {
    /// The row of `row`, its age counted to `now`.
    pub fn of(row: &Row, now: DateTime<Utc>) -> RowView {
        let (status_code, status_label, status_class) = swarm_badge(row.status);
        RowView {
            swarm_id: row.swarm_id.clone(),
            short_id: row.swarm_id.chars().take(8).collect(),
            status_code,
            status_label,
            status_class,
            done: row.tasks_done.unwrap_or(0),
            total: row.tasks_total.unwrap_or(0),
            failed: row.tasks_failed.unwrap_or(0),
            accepted_iso: iso(row.accepted_at),
            accepted_text: text_time(row.accepted_at),
            age: age(row.accepted_at, now),
            mission: shorten(&row.mission, MISSION_CHARS),
        }
    }
}

/// A task as a row and a node show it, and as the live updates send it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskLine {
    pub id: String,
    pub title: String,
    pub class: &'static str,
    pub word: &'static str,
    pub attempt: u32,
    pub revision: u32,
    pub worker: String,
    /// The latest progress message (the live stream fills it in).
    pub latest: String,
}

impl TaskLine {
    fn of(t: &swarm_common::TaskState) -> TaskLine {
        TaskLine {
            id: t.definition.task_id.clone(),
            title: t.definition.title.clone(),
            class: graph::status_class(t.status),
            word: graph::status_word(t.status),
            attempt: t.attempt,
            revision: t.revision,
            worker: t.worker_id.clone().unwrap_or_default(),
            latest: String::new(),
        }
    }
}

/// Every task of a state as a line, in plan order.
pub fn task_lines(state: &SwarmState) -> Vec<TaskLine> {
    state.tasks.iter().map(TaskLine::of).collect()
}

/// The structure of a state's graph: the tasks and their dependencies. A
/// new structure (a map's expansion, a replan) redraws the graph.
pub fn structure(state: &SwarmState) -> Vec<(String, Vec<String>)> {
    state
        .tasks
        .iter()
        .map(|t| {
            (
                t.definition.task_id.clone(),
                t.definition.dependencies.clone(),
            )
        })
        .collect()
}

/// The task graph of a state, each node linking to its task's page.
pub fn graph_of(state: &SwarmState) -> String {
    let hrefs: Vec<String> = state
        .tasks
        .iter()
        .map(|t| format!("/swarms/{}/tasks/{}", state.swarm_id, t.definition.task_id))
        .collect();
    let nodes: Vec<Node<'_>> = state
        .tasks
        .iter()
        .zip(hrefs)
        .map(|(t, href)| Node {
            id: &t.definition.task_id,
            title: &t.definition.title,
            status: t.status,
            dependencies: &t.definition.dependencies,
            href: Some(href),
        })
        .collect();
    graph::graph_svg(&nodes)
}

/// A finished attempt's bar, from its result.
pub fn bar_of(result: &ResultSubmission) -> Bar {
    Bar {
        row: result.worker_id.clone(),
        task_id: result.task_id.clone(),
        label: format!("attempt {}, revision {}", result.attempt, result.revision),
        start: result.started_at,
        end: Some(result.completed_at.max(result.started_at)),
        status: result.status,
    }
}

/// The timeline: the finished attempts' bars, and a bar for each task a
/// worker is on now.
pub fn timeline_of(finished: &[Bar], state: Option<&SwarmState>, now: DateTime<Utc>) -> String {
    let mut bars = finished.to_vec();
    if let Some(state) = state {
        for t in &state.tasks {
            if matches!(t.status, TaskStatus::InProgress | TaskStatus::InputRequired)
                && let (Some(start), Some(worker)) = (t.started_at, &t.worker_id)
            {
                bars.push(Bar {
                    row: worker.clone(),
                    task_id: t.definition.task_id.clone(),
                    label: format!("attempt {}, revision {}", t.attempt, t.revision),
                    start,
                    end: None,
                    status: t.status,
                });
            }
        }
    }
    let end = state
        .and_then(|s| s.completed_at)
        .map_or(now, |c| c.min(now));
    graph::timeline_svg(&bars, end)
}

/// A swarm's summary, as the header and the live stream show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwarmLine {
    pub status_code: &'static str,
    pub status_label: &'static str,
    pub status_class: &'static str,
    pub done: usize,
    pub total: usize,
    pub failed: usize,
    pub terminal: bool,
}

impl SwarmLine {
    /// The line of a swarm at `status` with `state` (none before deployment).
    pub fn of(status: SwarmStatus, state: Option<&SwarmState>) -> SwarmLine {
        let (status_code, status_label, status_class) = swarm_badge(status);
        let count = |of: &[TaskStatus]| {
            state.map_or(0, |s| {
                s.tasks.iter().filter(|t| of.contains(&t.status)).count()
            })
        };
        SwarmLine {
            status_code,
            status_label,
            status_class,
            done: count(&[TaskStatus::Completed, TaskStatus::Skipped]),
            total: state.map_or(0, |s| s.tasks.len()),
            failed: count(&[TaskStatus::Failed]),
            terminal: status.is_terminal(),
        }
    }
}

/// The header of a swarm's page.
#[derive(Debug, Serialize)]
pub struct SwarmView {
    pub swarm_id: String,
    pub title: String,
    pub mission: String,
    pub status_label: &'static str,
    pub status_class: &'static str,
    pub done: usize,
    pub total: usize,
    pub failed: usize,
    pub terminal: bool,
    pub accepted_iso: String,
    pub accepted_text: String,
    pub planner: String,
    pub trace_id: String,
    pub tokens: String,
    pub cost: String,
    pub summary: String,
    pub graph_svg: String,
    pub timeline_svg: String,
    pub tasks: Vec<TaskLine>,
}

/// A metric's value in words.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

impl SwarmView {
    /// The page's header for a swarm as JetStream holds it.
    pub fn of(view: &crate::mapping::SwarmView, status: SwarmStatus, now: DateTime<Utc>) -> Self {
        let state = view.state.as_ref();
        let line = SwarmLine::of(status, state);
        let mission = view
            .record
            .as_ref()
            .map(|r| r.request.mission.clone())
            .or_else(|| state.map(|s| s.mission.clone()))
            .unwrap_or_default();
        let accepted = view
            .record
            .as_ref()
            .map(|r| r.accepted_at)
            .or_else(|| state.map(|s| s.accepted_at))
            .unwrap_or(now);
        let metric = |keys: &[&str]| -> Option<f64> {
            let metrics = view
                .report
                .as_ref()
                .map(|r| &r.metrics)
                .or_else(|| state.map(|s| &s.metrics))?;
            let sum: f64 = keys.iter().filter_map(|k| metrics.get(*k)).sum();
            (sum > 0.0).then_some(sum)
        };
        SwarmView {
            swarm_id: view.swarm_id.clone(),
            title: shorten(&mission, 80),
            mission,
            status_label: line.status_label,
            status_class: line.status_class,
            done: line.done,
            total: line.total,
            failed: line.failed,
            terminal: line.terminal,
            accepted_iso: iso(accepted),
            accepted_text: text_time(accepted),
            planner: state.map(|s| s.planner.clone()).unwrap_or_default(),
            trace_id: String::new(),
            tokens: metric(&["input_tokens", "output_tokens"])
                .map(number)
                .unwrap_or_default(),
            cost: metric(&["cost_usd"])
                .map(|c| format!("${c:.4}"))
                .unwrap_or_default(),
            summary: view
                .report
                .as_ref()
                .map(|r| r.summary.clone())
                .unwrap_or_default(),
            graph_svg: state.map(graph_of).unwrap_or_default(),
            timeline_svg: timeline_of(&[], state, now),
            tasks: state.map(task_lines).unwrap_or_default(),
        }
    }
}

/// One step of a task's agent loop.
#[derive(Debug, Serialize)]
pub struct StepView {
    pub step: u32,
    pub tool: String,
    pub arguments: String,
    pub observation: String,
    pub is_error: bool,
}

/// A gate's verdict.
#[derive(Debug, Serialize)]
pub struct VerdictView {
    pub gate: String,
    pub passed: bool,
    pub reason: String,
    pub revision: u32,
}

/// A named number.
#[derive(Debug, Serialize)]
pub struct MetricView {
    pub name: String,
    pub value: String,
}

/// A task's details: its definition, where it stands, and its latest
/// result (output, steps, numbers).
#[derive(Debug, Serialize)]
pub struct TaskView {
    pub id: String,
    pub title: String,
    pub class: &'static str,
    pub word: &'static str,
    pub pool: String,
    pub attempt: u32,
    pub revision: u32,
    pub worker: String,
    pub dependencies: Vec<String>,
    pub description: String,
    pub error: String,
    pub output: String,
    pub steps: Vec<StepView>,
    pub verdicts: Vec<VerdictView>,
    pub feedback: Vec<String>,
    pub metrics: Vec<MetricView>,
}

impl TaskView {
    /// The details of `task`, with its latest result if it was read.
    pub fn of(task: &swarm_common::TaskState, result: Option<&ResultSubmission>) -> TaskView {
        let mut metrics: BTreeMap<String, f64> = BTreeMap::new();
        if let Some(r) = result {
            metrics.extend(r.metrics.iter().map(|(k, v)| (k.clone(), *v)));
        }
        let output = match result {
            Some(r) => r.result.clone(),
            None => task.result_preview.clone(),
        };
        let error = task
            .error
            .clone()
            .or_else(|| result.and_then(|r| r.error.as_ref().map(|e| e.message.clone())))
            .unwrap_or_default();
        TaskView {
            id: task.definition.task_id.clone(),
            title: task.definition.title.clone(),
            class: graph::status_class(task.status),
            word: graph::status_word(task.status),
            pool: task.pool.clone(),
            attempt: task.attempt,
            revision: task.revision,
            worker: task.worker_id.clone().unwrap_or_default(),
            dependencies: task.definition.dependencies.clone(),
            description: task.definition.description.clone(),
            error,
            output,
            steps: result
                .map(|r| {
                    r.steps
                        .iter()
                        .map(|s| StepView {
                            step: s.step,
                            tool: s.tool.clone().unwrap_or_default(),
                            arguments: s.arguments.clone().unwrap_or_default(),
                            observation: s.observation.clone(),
                            is_error: s.is_error,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            verdicts: task
                .gate_verdicts
                .iter()
                .map(|v| VerdictView {
                    gate: v.gate.clone(),
                    passed: v.passed,
                    reason: v.reason.clone(),
                    revision: v.revision,
                })
                .collect(),
            feedback: task.feedback.clone(),
            metrics: metrics
                .into_iter()
                .map(|(name, v)| MetricView {
                    value: if name.ends_with("_usd") {
                        format!("${v:.4}")
                    } else {
                        number(v)
                    },
                    name: name.replace('_', " "),
                })
                .collect(),
        }
    }
}

/// A pending approval, as the page shows it.
#[derive(Debug, Serialize)]
pub struct ApprovalView {
    pub approval_id: String,
    pub swarm_id: String,
    pub short_swarm: String,
    pub task_id: String,
    pub tool: String,
    pub arguments: String,
    pub requested_by: String,
    pub requested_iso: String,
    pub requested_text: String,
    pub expires_iso: String,
    pub expires_text: String,
}

impl ApprovalView {
    /// The view of a pending approval.
    pub fn of(a: &ApprovalRecord) -> ApprovalView {
        let swarm_id = a.swarm_id.clone().unwrap_or_default();
        ApprovalView {
            approval_id: a.approval_id.clone(),
            short_swarm: swarm_id.chars().take(8).collect(),
            swarm_id,
            task_id: a.task_id.clone().unwrap_or_default(),
            tool: a.tool.clone(),
            arguments: serde_json::to_string_pretty(&a.arguments).unwrap_or_default(),
            requested_by: a.requested_by.clone(),
            requested_iso: iso(a.requested_at),
            requested_text: text_time(a.requested_at),
            expires_iso: iso(a.expires_at),
            expires_text: text_time(a.expires_at),
        }
    }
}

/// An open question.
#[derive(Debug, Serialize)]
pub struct QuestionView {
    pub swarm_id: String,
    pub short_swarm: String,
    pub task_id: String,
    pub question: String,
}

impl QuestionView {
    /// The view of an open question.
    pub fn of(q: &InputRecord) -> QuestionView {
        QuestionView {
            swarm_id: q.swarm_id.clone(),
            short_swarm: q.swarm_id.chars().take(8).collect(),
            task_id: q.task_id.clone(),
            question: q.question.clone(),
        }
    }
}

/// What waits for a person.
#[derive(Debug, Default, Serialize)]
pub struct Waiting {
    pub approvals: Vec<ApprovalView>,
    pub questions: Vec<QuestionView>,
}

impl Waiting {
    /// How many things wait.
    pub fn len(&self) -> usize {
        self.approvals.len() + self.questions.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A running replica, from its agent card.
#[derive(Debug, Serialize)]
pub struct AgentView {
    pub role: String,
    pub agent_id: String,
    pub pool: String,
    pub skills: Vec<String>,
    pub tools: Vec<String>,
    pub version: String,
    pub url: String,
    pub since: String,
}

impl AgentView {
    /// The view of a card, its age counted to `now`.
    pub fn of(card: &AgentCard, now: DateTime<Utc>) -> AgentView {
        let mut seen = HashSet::new();
        AgentView {
            role: card.role.clone(),
            agent_id: card.agent_id.clone(),
            pool: card.pool.clone().unwrap_or_default(),
            skills: card
                .skills
                .iter()
                .filter(|s| seen.insert(s.as_str()))
                .cloned()
                .collect(),
            tools: card.tools.clone(),
            version: card.version.clone(),
            url: card.url.clone().unwrap_or_default(),
            since: format!("{} ago", age(card.started_at, now)),
        }
    }
}
