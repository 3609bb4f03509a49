//! `SwarmState`: what the manager stores in the `swarms` bucket for a swarm.

use std::collections::{BTreeMap, BTreeSet};

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

/// Tasks whose changes are tracked in blocks of this many, so that a state
/// write stores the blocks that changed, not the whole swarm.
pub const TASK_BLOCK: usize = 128;

/// A swarm's tasks, in plan order, remembering which blocks of
/// [`TASK_BLOCK`] tasks changed since they were last stored.
///
/// Reading goes through the slice it derefs to; every way of changing a
/// task (`tasks[i].x = ..`, [`Tasks::get_mut`], [`Tasks::iter_mut`],
/// [`Tasks::push`]) marks its block, so a write cannot miss a change. It
/// serializes as the plain list (the stored and shown form is unchanged);
/// one read back has nothing marked, one built from a list has everything
/// marked.
#[derive(Debug, Clone)]
pub struct Tasks {
    items: Vec<TaskState>,
    /// Blocks changed since [`Tasks::mark_stored`], when not `all`.
    changed: BTreeSet<usize>,
    /// Every block counts as changed.
    all: bool,
    /// The first task changed since [`Tasks::take_first_changed`] (or
    /// `usize::MAX`): for a reader that keeps a cursor over the tasks.
    first: usize,
}

impl Default for Tasks {
    fn default() -> Tasks {
        Tasks::stored(Vec::new())
    }
}

impl Tasks {
    /// The task at `i`, marked changed.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut TaskState> {
        if i < self.items.len() {
            self.mark(i);
        }
        self.items.get_mut(i)
    }

    fn mark(&mut self, i: usize) {
        self.changed.insert(i / TASK_BLOCK);
        self.first = self.first.min(i);
    }

    /// Every task, all marked changed.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, TaskState> {
        self.mark_all();
        self.items.iter_mut()
    }

    /// Adds a task at the end, marked changed.
    pub fn push(&mut self, task: TaskState) {
        self.mark(self.items.len());
        self.items.push(task);
    }

    /// Adds tasks at the end, marked changed.
    pub fn extend(&mut self, tasks: impl IntoIterator<Item = TaskState>) {
        for t in tasks {
            self.push(t);
        }
    }

    /// Whether any task in block `b` changed since the tasks were last
    /// stored.
    pub fn block_changed(&self, b: usize) -> bool {
        self.all || self.changed.contains(&b)
    }

    /// Whether any task changed since the tasks were last stored.
    pub fn any_changed(&self) -> bool {
        self.all || !self.changed.is_empty()
    }

    /// Marks every task changed.
    pub fn mark_all(&mut self) {
        self.all = true;
        self.first = 0;
    }

    /// The first task changed since [`Tasks::take_first_changed`] was
    /// last called (`usize::MAX`: none).
    pub fn first_changed(&self) -> usize {
        self.first
    }

    /// The first task changed since the last call (`usize::MAX`: none),
    /// forgetting it: what a cursor over the tasks must look at again.
    pub fn take_first_changed(&mut self) -> usize {
        std::mem::replace(&mut self.first, usize::MAX)
    }

    /// The tasks are stored as they are: nothing is changed any more.
    pub fn mark_stored(&mut self) {
        self.all = false;
        self.changed.clear();
    }

    /// The tasks, as a list.
    pub fn into_vec(self) -> Vec<TaskState> {
        self.items
    }

    /// Tasks read back from storage: nothing marked changed.
    pub fn stored(items: Vec<TaskState>) -> Tasks {
        Tasks {
            items,
            changed: BTreeSet::new(),
            all: false,
            first: usize::MAX,
        }
    }
}

impl PartialEq for Tasks {
    /// Equal tasks, however they were changed.
    fn eq(&self, other: &Tasks) -> bool {
        self.items == other.items
    }
}

impl From<Vec<TaskState>> for Tasks {
    fn from(items: Vec<TaskState>) -> Tasks {
        Tasks {
            items,
            changed: BTreeSet::new(),
            all: true,
            first: 0,
        }
    }
}

impl FromIterator<TaskState> for Tasks {
    fn from_iter<I: IntoIterator<Item = TaskState>>(iter: I) -> Tasks {
        Tasks::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl std::ops::Deref for Tasks {
    type Target = [TaskState];

    fn deref(&self) -> &[TaskState] {
        &self.items
    }
}

impl std::ops::Index<usize> for Tasks {
    type Output = TaskState;

    fn index(&self, i: usize) -> &TaskState {
        &self.items[i]
    }
}

impl std::ops::IndexMut<usize> for Tasks {
    fn index_mut(&mut self, i: usize) -> &mut TaskState {
        self.mark(i);
        &mut self.items[i]
    }
}

impl<'a> IntoIterator for &'a Tasks {
    type Item = &'a TaskState;
    type IntoIter = std::slice::Iter<'a, TaskState>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl IntoIterator for Tasks {
    type Item = TaskState;
    type IntoIter = std::vec::IntoIter<TaskState>;

    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

impl Serialize for Tasks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.items.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Tasks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Tasks, D::Error> {
        Vec::<TaskState>::deserialize(d).map(Tasks::stored)
    }
}

impl JsonSchema for Tasks {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        <Vec<TaskState>>::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <Vec<TaskState>>::json_schema(generator)
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
    pub tasks: Tasks,
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
    /// How the tasks are stored when the swarm is too large for one entry
    /// (`None`: with the rest, in one entry; docs/decisions.md, "Large
    /// swarms in chunks").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<Chunks>,
}

/// Where a large swarm's tasks are stored: in entries of `per_chunk` tasks
/// each beside the state's own entry, which keeps only this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Chunks {
    /// Tasks per chunk (a multiple of [`TASK_BLOCK`]).
    pub per_chunk: u32,
    /// The number of the latest write of the state.
    pub generation: u64,
    /// For each chunk, the write that last stored it: a chunk read back
    /// that says otherwise is not the one this state goes with.
    pub written: Vec<u64>,
}

impl SwarmState {
    /// This state without its tasks: the entry of a state stored in chunks.
    pub fn without_tasks(&self, chunks: Chunks) -> SwarmState {
        // Spelled out, so that a field added to the state is not forgotten.
        let SwarmState {
            swarm_id,
            mission,
            mission_id,
            status,
            manager_directive,
            workers,
            planner,
            tasks: _,
            limits,
            budget,
            accepted_at,
            started_at,
            deadline,
            completed_at,
            cancel_reason,
            last_event_seq,
            metrics,
            last_manager,
            report_published,
            sub_managers,
            parent,
            replan,
            success_criteria,
            changes,
            trace_id,
            skills_scope,
            chunks: _,
        } = self;
        SwarmState {
            swarm_id: swarm_id.clone(),
            mission: mission.clone(),
            mission_id: mission_id.clone(),
            status: *status,
            manager_directive: manager_directive.clone(),
            workers: workers.clone(),
            planner: planner.clone(),
            tasks: Tasks::default(),
            limits: limits.clone(),
            budget: budget.clone(),
            accepted_at: *accepted_at,
            started_at: *started_at,
            deadline: *deadline,
            completed_at: *completed_at,
            cancel_reason: cancel_reason.clone(),
            last_event_seq: *last_event_seq,
            metrics: metrics.clone(),
            last_manager: last_manager.clone(),
            report_published: *report_published,
            sub_managers: sub_managers.clone(),
            parent: parent.clone(),
            replan: *replan,
            success_criteria: success_criteria.clone(),
            changes: changes.clone(),
            trace_id: trace_id.clone(),
            skills_scope: skills_scope.clone(),
            chunks: Some(chunks),
        }
    }

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
