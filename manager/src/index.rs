//! The manager's scheduling index over a swarm's tasks ([`TaskIndex`]), and
//! a swarm's state held together with it ([`Indexed`]): the state the rules
//! of [`crate::machine`] work on and the manager keeps between events.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use swarm_common::{SwarmState, TaskState, TaskStatus};

/// Lookups over a state's tasks, so that applying one event costs the same
/// in a mission of 10 tasks as in one of 10,000: a task's position by id,
/// the tasks that depend on each, and per task how many of its leading
/// dependencies are known to have completed (or been skipped). Built on
/// first use from the tasks (which are fixed once a swarm is deployed) and
/// never stored; it is not part of the state's value, so two [`Indexed`]
/// states that differ only here are equal.
#[derive(Debug, Clone, Default)]
pub struct TaskIndex {
    positions: OnceLock<HashMap<String, usize>>,
    dependents: OnceLock<Vec<Vec<usize>>>,
    /// Per task: its first dependencies, up to here, are known completed
    /// or skipped. Both are final, so this only moves forward.
    settled: Vec<usize>,
    /// The tasks before this one have ended (and wait for no replan), as
    /// last looked; moved back by a change to any of them
    /// ([`swarm_common::Tasks::take_first_changed`]).
    open_from: usize,
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

    /// How the task at `i` stands once its fallbacks (`on_failure`) are
    /// counted: a failed task whose fallback completed counts as
    /// `Completed`, one whose fallback is yet to end as `Pending`, one whose
    /// fallbacks all failed as `Failed`; any other task as its own status.
    pub fn outcome(&self, tasks: &[TaskState], i: usize) -> TaskStatus {
        let mut k = i;
        // A chain visits each task once at most (validation refuses cycles).
        for _ in 0..=tasks.len() {
            let t = &tasks[k];
            if t.status == TaskStatus::Failed && t.replanning {
                // The manager's model may yet add a task in its place.
                return TaskStatus::Pending;
            }
            if t.status != TaskStatus::Failed {
                return match t.status {
                    _ if k == i => t.status,
                    TaskStatus::Completed | TaskStatus::Cancelled => t.status,
                    _ => TaskStatus::Pending,
                };
            }
            match t.definition.on_failure.as_deref() {
                Some(f) => match self.position(tasks, f) {
                    Some(next) => k = next,
                    None => return TaskStatus::Failed,
                },
                None => return TaskStatus::Failed,
            }
        }
        TaskStatus::Failed
    }

    /// The task whose result stands for the task at `i`: itself, or the
    /// fallback that completed in its place.
    pub fn stand_in(&self, tasks: &[TaskState], i: usize) -> usize {
        let mut k = i;
        for _ in 0..=tasks.len() {
            if tasks[k].status != TaskStatus::Failed {
                return k;
            }
            match tasks[k]
                .definition
                .on_failure
                .as_deref()
                .and_then(|f| self.position(tasks, f))
            {
                Some(next) => k = next,
                None => return k,
            }
        }
        k
    }

    /// Whether every dependency of the task at `i` has completed or been
    /// skipped (a failed one, if its fallback completed). Each dependency is looked at until it has, then never again.
    pub fn dependencies_done(&mut self, tasks: &[TaskState], i: usize) -> bool {
        if self.settled.len() != tasks.len() {
            self.settled = vec![0; tasks.len()];
        }
        let deps = &tasks[i].definition.dependencies;
        let mut at = self.settled[i];
        while at < deps.len() {
            let done = self.position(tasks, &deps[at]).is_some_and(|k| {
                matches!(
                    self.outcome(tasks, k),
                    TaskStatus::Completed | TaskStatus::Skipped
                )
            });
            if !done {
                break;
            }
            at += 1;
        }
        self.settled[i] = at;
        at == deps.len()
    }
}

/// A swarm's state and the [`TaskIndex`] over its tasks. The state is what
/// the `swarms` bucket stores (the index never is: a state read back builds
/// its own on first use). It derefs to the [`SwarmState`], so the rules read
/// `state.tasks` and `state.limits` as on the state itself; task lookups go
/// through the index.
#[derive(Debug, Clone, PartialEq)]
pub struct Indexed {
    /// The state.
    pub state: SwarmState,
    /// Lookups over `state.tasks`.
    pub index: TaskIndex,
}

impl Indexed {
    /// `state` with an index yet to be built.
    pub fn new(state: SwarmState) -> Indexed {
        Indexed {
            state,
            index: TaskIndex::default(),
        }
    }

    /// Where the task `task_id` sits in `tasks`.
    pub fn position(&self, task_id: &str) -> Option<usize> {
        self.index.position(&self.state.tasks, task_id)
    }

    /// The task with this id.
    pub fn task(&self, task_id: &str) -> Option<&TaskState> {
        self.position(task_id).map(|i| &self.state.tasks[i])
    }

    /// The positions of the tasks that depend on the task at `i`.
    pub fn dependents(&self, i: usize) -> &[usize] {
        self.index.dependents(&self.state.tasks, i)
    }

    /// How the task at `i` stands once its fallbacks are counted
    /// ([`TaskIndex::outcome`]).
    pub fn outcome(&self, i: usize) -> TaskStatus {
        self.index.outcome(&self.state.tasks, i)
    }

    /// The task whose result stands for the task at `i` ([`TaskIndex::stand_in`]).
    pub fn stand_in(&self, i: usize) -> usize {
        self.index.stand_in(&self.state.tasks, i)
    }

    /// Where the tasks that have not ended may start: every task before
    /// it has ended, as last looked ([`Indexed::all_ended`]) and unchanged
    /// since.
    pub fn open_from(&self) -> usize {
        self.index.open_from.min(self.state.tasks.first_changed())
    }

    /// Whether every task has ended and waits for no replan. Looks from
    /// where it last stopped, or the first task changed since if earlier:
    /// so a swarm whose tasks end in about plan order costs the same per
    /// event however many tasks it has.
    pub fn all_ended(&mut self) -> bool {
        let changed = self.state.tasks.take_first_changed();
        let tasks = &self.state.tasks;
        let mut k = self.index.open_from.min(changed);
        while k < tasks.len() && tasks[k].status.is_terminal() && !tasks[k].replanning {
            k += 1;
        }
        self.index.open_from = k;
        k == tasks.len()
    }

    /// Whether every dependency of the task at `i` has completed or been skipped.
    pub fn dependencies_done(&mut self, i: usize) -> bool {
        self.index.dependencies_done(&self.state.tasks, i)
    }
}

impl From<SwarmState> for Indexed {
    fn from(state: SwarmState) -> Indexed {
        Indexed::new(state)
    }
}

impl Deref for Indexed {
    type Target = SwarmState;

    fn deref(&self) -> &SwarmState {
        &self.state
    }
}

impl DerefMut for Indexed {
    fn deref_mut(&mut self) -> &mut SwarmState {
        &mut self.state
    }
}
