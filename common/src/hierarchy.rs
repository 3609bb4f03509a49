//! Sub-managers: a task of one swarm that runs as a whole swarm of its own.
//!
//! A plan may name sub-manager personas beside its workers
//! ([`SubManagerPlan`]). A task assigned to one is handed, like any task, as
//! a `TaskAssignment`, to the reserved pool [`SUB_MANAGER_POOL`], which the
//! boss consumes: it records the task as a child mission (with the
//! sub-manager's own plan, or planned by the boss's planner from the task's
//! description) whose swarm carries a [`ParentTask`]. The child's manager,
//! when the child ends, submits the child's outcome as the parent task's
//! result, through the parent's gates and review like any worker's result.
//! A parent that ends early cancels its running children, and they theirs.
//!
//! A child's id is derived from its parent's id, the task, its attempt and
//! its revision ([`child_swarm_id`]), so every replica and every redelivery
//! names the same child, and each new version of the task a new one.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::messages::SwarmDeploymentPlan;

/// The pool a sub-manager task's assignment goes to. No worker pool may
/// take this name ([`crate::validate::validate_plan`]).
pub const SUB_MANAGER_POOL: &str = "sub-managers";

/// A sub-manager persona of a plan: the tasks assigned to it run as child
/// swarms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubManagerPlan {
    /// Unique among the plan's personas, workers and sub-managers alike;
    /// tasks are `assigned_to` it.
    pub name: String,
    /// What this sub-manager is responsible for.
    #[serde(default)]
    pub role: String,
    /// The child swarm's team and tasks. Absent: the boss plans each task
    /// given to this sub-manager, with the task's description as the child's
    /// mission, as it plans a mission sent without a plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Box<SwarmDeploymentPlan>>,
}

/// What an assignment to [`SUB_MANAGER_POOL`] carries beside the task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChildSwarm {
    /// The sub-manager's name.
    pub sub_manager: String,
    /// Its plan, if the parent's plan gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<Box<SwarmDeploymentPlan>>,
    /// How deep the child sits: 1 for a child of a mission's own swarm.
    pub depth: u32,
}

/// The task of a parent swarm a child swarm runs for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ParentTask {
    /// The parent swarm.
    pub swarm_id: String,
    /// The parent's task.
    pub task_id: String,
    /// The attempt of the task the child answers.
    pub attempt: u32,
    /// The revision of the task the child answers.
    pub revision: u32,
    /// How deep the child sits: 1 for a child of a mission's own swarm.
    pub depth: u32,
    /// The largest result the parent task takes, in bytes: the child's
    /// answer is cut to fit.
    pub max_result_bytes: usize,
    /// The results the parent task was given (its dependencies'), by their
    /// place in the stream: the child's first tasks get them as context.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<crate::messages::ContextRef>,
}

impl ParentTask {
    /// The id of the child swarm that runs this version of the task.
    pub fn child_id(&self) -> String {
        child_swarm_id(&self.swarm_id, &self.task_id, self.attempt, self.revision)
    }
}

/// The id of the child swarm that runs attempt `attempt`, revision
/// `revision` of `task_id` of `swarm_id`: a name-based UUID in a namespace
/// of its own, so no mission id a client chooses can take it.
pub fn child_swarm_id(swarm_id: &str, task_id: &str, attempt: u32, revision: u32) -> String {
    const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x0c3d_51a2_94e7_4b1f_8d26_7f0a_b95e_c418);
    let name = format!("{swarm_id}/{task_id}/a{attempt}/r{revision}");
    uuid::Uuid::new_v5(&NAMESPACE, name.as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_id_is_the_same_for_the_same_version_and_new_for_each_other() {
        let a = child_swarm_id("s", "t", 1, 0);
        assert_eq!(a, child_swarm_id("s", "t", 1, 0));
        assert_ne!(a, child_swarm_id("s", "t", 1, 1));
        assert_ne!(a, child_swarm_id("s", "t", 2, 0));
        assert_ne!(a, child_swarm_id("s", "u", 1, 0));
        assert_ne!(a, crate::mission::swarm_id_for(Some("s/t/a1/r0")));
        assert!(crate::subjects::is_token(&a));
    }
}
