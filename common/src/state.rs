//! `SwarmState`: what the manager stores in the `swarms` bucket for a swarm.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::Limits;
use crate::messages::{GateVerdict, SwarmStatus, TaskDefinition, TaskStatus, WorkerDeploymentPlan};

/// One task of a swarm, as the manager tracks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    #[schemars(schema_with = "crate::timestamp::option::schema")]
    pub assigned_at: Option<DateTime<Utc>>,
    /// When a worker started the latest version.
    #[serde(default, with = "crate::timestamp::option")]
    #[schemars(schema_with = "crate::timestamp::option::schema")]
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    #[serde(default, with = "crate::timestamp::option")]
    #[schemars(schema_with = "crate::timestamp::option::schema")]
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
    /// Why it failed, was cancelled or was skipped.
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
    /// What the accepted result said to the pointer tests of the conditions
    /// of the tasks that depend on it, by [`crate::condition::Test::key`]:
    /// decided when the result was accepted, read when they are.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checks: BTreeMap<String, crate::condition::Check>,
    /// A map task's list and children ([`crate::map`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<crate::map::MapState>,
    /// The map task this task is a child of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The task this one is the fallback of (its `on_failure`): it runs
    /// only if that task fails for good.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_for: Option<String>,
    /// It failed for good and the manager's model is being asked for tasks
    /// to add ([`crate::replan`]): the tasks that depend on it wait.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replanning: bool,
    /// The task whose ask for help this task answers
    /// ([`crate::collaborate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_by: Option<String>,
    /// The asks for help this task made, accepted or refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asks: Vec<crate::collaborate::AskRecord>,
    /// The learned skills its versions were offered and recorded.
    #[serde(default, skip_serializing_if = "crate::messages::SkillsUsed::is_empty")]
    pub skills: crate::messages::SkillsUsed,
}

impl TaskState {
    /// A task of `definition` that has not started, in `pool` at `priority`.
    pub fn pending(definition: TaskDefinition, pool: String, priority: u32) -> TaskState {
        TaskState {
            skills: Default::default(),
            definition,
            status: TaskStatus::Pending,
            pool,
            priority,
            attempt: 0,
            revision: 0,
            feedback: Vec::new(),
            assigned_at: None,
            started_at: None,
            completed_at: None,
            result_seq: None,
            result_bytes: 0,
            result_preview: String::new(),
            provider: String::new(),
            error: None,
            worker_id: None,
            redeliveries: 0,
            gate_verdicts: Vec::new(),
            checks: Default::default(),
            map: None,
            parent: None,
            fallback_for: None,
            replanning: false,
            asked_by: None,
            asks: Vec::new(),
        }
    }
}

/// The durable state of one swarm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub accepted_at: DateTime<Utc>,
    /// When the manager took the deployment.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub started_at: DateTime<Utc>,
    /// When the swarm must be done.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub deadline: DateTime<Utc>,
    /// When it ended.
    #[serde(default, with = "crate::timestamp::option")]
    #[schemars(schema_with = "crate::timestamp::option::schema")]
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
    /// The plan's sub-manager personas ([`crate::hierarchy`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_managers: Vec<crate::hierarchy::SubManagerPlan>,
    /// The parent task this swarm runs for, when it is a child swarm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::hierarchy::ParentTask>,
    /// Whether the manager's model may add tasks when one fails for good
    /// (a manager with a model deployed the swarm; [`crate::replan`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replan: bool,
    /// What the finished mission must show (the plan's success criteria).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub success_criteria: Vec<String>,
    /// The changes replans made to the graph, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<crate::replan::GraphChange>,
    /// The mission's trace (32 lowercase hex digits), from its deployment,
    /// when it was traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The scope of learned skills its tasks are offered and record, from
    /// its deployment (`None`: [`crate::skill::DEFAULT_SCOPE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_scope: Option<String>,
}

impl SwarmState {
    /// The task with this id, looked for in `tasks` one by one. (The manager,
    /// which looks tasks up for every event, keeps an index over them.)
    pub fn task(&self, task_id: &str) -> Option<&TaskState> {
        self.tasks.iter().find(|t| t.definition.task_id == task_id)
    }

    /// How deep this swarm sits: 0 for a mission's own swarm.
    pub fn depth(&self) -> u32 {
        self.parent.as_ref().map_or(0, |p| p.depth)
    }

    /// The child swarm that runs the current version of `task`, if it is
    /// a sub-manager's task that has been assigned.
    pub fn child_of(&self, task: &TaskState) -> Option<String> {
        (task.pool == crate::hierarchy::SUB_MANAGER_POOL && task.attempt > 0).then(|| {
            crate::hierarchy::child_swarm_id(
                &self.swarm_id,
                &task.definition.task_id,
                task.attempt,
                task.revision,
            )
        })
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
