//! `SwarmState`: what the manager stores in the `swarms` bucket for a swarm.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::limits::Limits;
use crate::messages::{GateVerdict, TaskDefinition, TaskStatus, WorkerDeploymentPlan};

/// How a swarm stands; in the final report, how it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SwarmStatus {
    /// Tasks are being worked on.
    Running,
    /// Every task completed.
    Completed,
    /// At least one task failed (its dependents were cancelled).
    Failed,
    /// A person or client cancelled the swarm.
    Cancelled,
    /// The swarm's deadline passed.
    TimedOut,
}

impl SwarmStatus {
    /// Whether the swarm has ended.
    pub fn is_terminal(self) -> bool {
        !matches!(self, SwarmStatus::Running)
    }
}

/// One task of a swarm, as the manager tracks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskState {
    /// The task as planned.
    pub definition: TaskDefinition,
    /// Where it stands.
    pub status: TaskStatus,
    /// The pool its persona runs in.
    pub pool: String,
    /// Higher runs first among ready tasks.
    pub priority: u32,
    /// Tries so far (0 before the first assignment).
    pub attempt: u32,
    /// Revisions asked for so far.
    pub revision: u32,
    /// Why earlier versions were rejected.
    #[serde(default)]
    pub feedback: Vec<String>,
    /// When it was first assigned.
    #[serde(default, with = "crate::timestamp::option")]
    pub assigned_at: Option<DateTime<Utc>>,
    /// When a worker started the latest version.
    #[serde(default, with = "crate::timestamp::option")]
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    #[serde(default, with = "crate::timestamp::option")]
    pub completed_at: Option<DateTime<Utc>>,
    /// Stream sequence of the accepted `ResultSubmission`.
    #[serde(default)]
    pub result_seq: Option<u64>,
    /// Size of the accepted result in bytes.
    #[serde(default)]
    pub result_bytes: usize,
    /// The start of the accepted result, for status displays.
    #[serde(default)]
    pub result_preview: String,
    /// The provider that produced the accepted result.
    #[serde(default)]
    pub provider: String,
    /// Why it failed or was cancelled.
    #[serde(default)]
    pub error: Option<String>,
    /// The worker that produced the latest result.
    #[serde(default)]
    pub worker_id: Option<String>,
    /// Times an assignment of this task was delivered again after a worker
    /// died or stalled on it.
    #[serde(default)]
    pub redeliveries: u32,
    /// Every gate verdict on every version.
    #[serde(default)]
    pub gate_verdicts: Vec<GateVerdict>,
}

/// The durable state of one swarm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SwarmState {
    /// The swarm.
    pub swarm_id: String,
    /// The mission's text.
    pub mission: String,
    /// The caller's mission id, if any.
    #[serde(default)]
    pub mission_id: Option<String>,
    /// Where the swarm stands.
    pub status: SwarmStatus,
    /// The manager's directive.
    pub manager_directive: String,
    /// The personas.
    pub workers: Vec<WorkerDeploymentPlan>,
    /// Who made the plan.
    #[serde(default)]
    pub planner: String,
    /// The tasks, in plan order.
    pub tasks: Vec<TaskState>,
    /// The limits in force.
    pub limits: Limits,
    /// The mission's budget for model use.
    #[serde(default)]
    pub budget: crate::messages::MissionBudget,
    /// When the boss accepted the mission.
    #[serde(with = "crate::timestamp")]
    pub accepted_at: DateTime<Utc>,
    /// When the manager took the deployment.
    #[serde(with = "crate::timestamp")]
    pub started_at: DateTime<Utc>,
    /// When the swarm must be done.
    #[serde(with = "crate::timestamp")]
    pub deadline: DateTime<Utc>,
    /// When it ended.
    #[serde(default, with = "crate::timestamp::option")]
    pub completed_at: Option<DateTime<Utc>>,
    /// Why it was cancelled, if it was.
    #[serde(default)]
    pub cancel_reason: Option<String>,
    /// Highest stream sequence of an event applied to this state; an event at
    /// or below it is a redelivery and changes nothing.
    pub last_event_seq: u64,
    /// Running totals (attempts, revisions, gate failures, ...).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// The manager replica that last changed this state.
    #[serde(default)]
    pub last_manager: String,
    /// Whether the final report has been published (it is published once).
    #[serde(default)]
    pub report_published: bool,
    /// Lookups over `tasks`, built on first use; never stored.
    #[serde(skip)]
    pub index: TaskIndex,
}

/// Lookups over a state's tasks, so that applying one event costs the same
/// in a mission of 10 tasks as in one of 10,000: a task's position by id,
/// the tasks that depend on each, and per task how many of its leading
/// dependencies are known to have completed. Built on first use from the
/// tasks (which are fixed once a swarm is deployed) and never stored; it is
/// not part of the state's value, so two states that differ only here are equal.
#[derive(Debug, Clone, Default)]
pub struct TaskIndex {
    positions: OnceLock<HashMap<String, usize>>,
    dependents: OnceLock<Vec<Vec<usize>>>,
    /// Per task: its first dependencies, up to here, are known completed.
    /// Completion is final, so this only moves forward.
    settled: Vec<usize>,
}

impl PartialEq for TaskIndex {
    fn eq(&self, _: &TaskIndex) -> bool {
        true
    }
}

impl TaskIndex {
    /// Where the task `task_id` sits in `tasks`.
    pub fn position(&self, tasks: &[TaskState], task_id: &str) -> Option<usize> {
        let positions = self.positions.get_or_init(|| {
            tasks
                .iter()
                .enumerate()
                .map(|(i, t)| (t.definition.task_id.clone(), i))
                .collect()
        });
        match positions.get(task_id) {
            Some(&i)
                if tasks
                    .get(i)
                    .is_some_and(|t| t.definition.task_id == task_id) =>
            {
                Some(i)
            }
            // Built before the tasks were all there: look the slow way.
            _ if positions.len() != tasks.len() => {
                tasks.iter().position(|t| t.definition.task_id == task_id)
            }
            _ => None,
        }
    }

    /// The positions of the tasks that depend on the task at `i`.
    pub fn dependents(&self, tasks: &[TaskState], i: usize) -> &[usize] {
        let all = self.dependents.get_or_init(|| {
            let mut all = vec![Vec::new(); tasks.len()];
            for (j, t) in tasks.iter().enumerate() {
                for d in &t.definition.dependencies {
                    if let Some(k) = self.position(tasks, d) {
                        all[k].push(j);
                    }
                }
            }
            all
        });
        all.get(i).map_or(&[], Vec::as_slice)
    }

    /// Whether every dependency of the task at `i` has completed. Each
    /// dependency is looked at until it has completed, then never again.
    pub fn dependencies_done(&mut self, tasks: &[TaskState], i: usize) -> bool {
        if self.settled.len() != tasks.len() {
            self.settled = vec![0; tasks.len()];
        }
        let deps = &tasks[i].definition.dependencies;
        let mut at = self.settled[i];
        while at < deps.len() {
            let done = self
                .position(tasks, &deps[at])
                .is_some_and(|k| tasks[k].status == TaskStatus::Completed);
            if !done {
                break;
            }
            at += 1;
        }
        self.settled[i] = at;
        at == deps.len()
    }
}

impl SwarmState {
    /// The task with this id.
    pub fn task(&self, task_id: &str) -> Option<&TaskState> {
        self.position(task_id).map(|i| &self.tasks[i])
    }

    /// Where the task with this id sits in `tasks`.
    pub fn position(&self, task_id: &str) -> Option<usize> {
        self.index.position(&self.tasks, task_id)
    }

    /// How many tasks are in each status.
    pub fn counts(&self) -> BTreeMap<TaskStatus, usize> {
        let mut m = BTreeMap::new();
        for t in &self.tasks {
            *m.entry(t.status).or_insert(0) += 1;
        }
        m
    }
}
