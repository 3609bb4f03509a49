//! Replanning: the manager's model adds tasks to a running graph when a task
//! fails for good.
//!
//! With a model configured, a manager that is about to apply a result that
//! fails its task for good (and the task has no fallback of its own), or
//! one that completes the last task of a swarm whose plan has success
//! criteria (the model judges whether the mission needs more), asks the
//! model for more tasks, and publishes the answer as a [`Replan`] on
//! `a2ap.<swarm>.replan.<task>` (deduplication id [`replan_msg_id`]) before
//! it applies the result, which then holds the failed task's dependents
//! (`TaskState::replanning`). The `Replan`, applied in its turn, adds the
//! tasks ([`check_added`]), makes the one it names `replaces` the failed
//! task's fallback, and records the change in the swarm's state
//! ([`GraphChange`]) and so in its report. A model that gives nothing usable
//! still sends a `Replan`, with no tasks and its reason: the failure then
//! takes its course. Every change is a message in the swarm's stream, so it
//! can be audited and replayed, and applying one is idempotent by content.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{ErrorBody, ErrorCode};
use crate::gates::excerpt;
use crate::limits::Limits;
use crate::messages::{MessageType, Payload, TaskDefinition};
use crate::subjects::is_token;

/// The manager's model's answer to a task that failed for good, sent on
/// `a2ap.<swarm>.replan.<task>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Replan {
    /// The task that failed.
    pub task_id: String,
    /// The attempt that failed.
    pub attempt: u32,
    /// The revision that failed.
    pub revision: u32,
    /// Tasks to add to the graph (none: the failure takes its course).
    #[serde(default)]
    pub tasks: Vec<TaskDefinition>,
    /// The added task that runs in the failed one's place: the tasks that
    /// depend on the failed task take its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// Why, in the model's words (or why the model gave nothing).
    pub reason: String,
    /// The model that answered.
    pub model: String,
    /// What the model's answer cost: `input_tokens`, `output_tokens`,
    /// `cost_usd`.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Proof that a manager sent it ([`replan_token_task`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
}

impl Payload for Replan {
    const MESSAGE_TYPE: MessageType = MessageType::Replan;
}

/// One change a replan made to a running graph, kept in the swarm's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GraphChange {
    /// The task whose failure prompted it.
    pub after: String,
    /// When it was applied.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub at: DateTime<Utc>,
    /// The tasks added.
    #[serde(default)]
    pub added: Vec<String>,
    /// The added task that runs in the failed one's place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// The model's reason.
    pub reason: String,
    /// The model.
    pub model: String,
    /// Why the model's tasks were not added, when they were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// It came from the review of a mission whose tasks had all completed
    /// (`after` is the last of them), not from a failure.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub review: bool,
}

/// The deduplication id of the replan of one failed version of a task.
pub fn replan_msg_id(swarm_id: &str, task_id: &str, attempt: u32, revision: u32) -> String {
    format!("{swarm_id}.{task_id}.a{attempt}.r{revision}.replan")
}

/// What a replan's token is made for, in place of a task id: no task id
/// contains `:`, so no assignment's token (which a worker holds) is a
/// replan's.
pub fn replan_token_task(task_id: &str) -> String {
    format!("replan:{task_id}")
}

/// Checks tasks a replan adds to a graph whose tasks are `existing` and
/// whose personas are `personas`: each id a token not taken, a persona of
/// the plan, dependencies among the graph's tasks or the added ones (without
/// a cycle among the added), a description within the limits, gates within
/// their bounds; no condition or map (a model's graph change stays simple);
/// `replaces`, if given, one of the added tasks; and no more tasks in all
/// than `max_tasks`.
pub fn check_added(
    existing: &HashSet<&str>,
    personas: &HashSet<&str>,
    added: &[TaskDefinition],
    replaces: Option<&str>,
    limits: &Limits,
) -> Result<(), ErrorBody> {
    let refuse = |m: String| ErrorBody::new(ErrorCode::ValidationFailed, m);
    if existing.len() + added.len() > limits.max_tasks {
        return Err(ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "{} tasks added to {} would exceed the limit of {}",
                added.len(),
                existing.len(),
                limits.max_tasks
            ),
        ));
    }
    let mut ids: HashSet<&str> = HashSet::new();
    for t in added {
        let id = t.task_id.as_str();
        if !is_token(id) {
            return Err(refuse(format!(
                "task id {:?} must be 1 to 128 letters, digits, '-' or '_'",
                excerpt(id, 60)
            )));
        }
        if existing.contains(id) || !ids.insert(id) {
            return Err(refuse(format!("task id {id:?} is taken")));
        }
        if !personas.contains(t.assigned_to.as_str()) {
            return Err(refuse(format!(
                "task {id:?} is assigned to {:?}, which is not a persona of the plan",
                excerpt(&t.assigned_to, 60)
            )));
        }
        if t.description.trim().is_empty() || t.description.len() > limits.max_prompt_bytes {
            return Err(refuse(format!(
                "task {id:?}'s description must be 1 to {} bytes",
                limits.max_prompt_bytes
            )));
        }
        if t.title.len() > limits.task.max_title_bytes {
            return Err(refuse(format!("task {id:?}'s title is too long")));
        }
        if t.condition.is_some() || t.map.is_some() || t.on_failure.is_some() {
            return Err(refuse(format!(
                "task {id:?} has a condition, a map or a fallback, which added tasks may not"
            )));
        }
        crate::gates::check_gates(&t.gates, limits).map_err(|e| ErrorBody {
            message: format!("task {id:?}: {}", e.message),
            ..e
        })?;
    }
    for t in added {
        if let Some(d) = t
            .dependencies
            .iter()
            .find(|d| !existing.contains(d.as_str()) && !ids.contains(d.as_str()))
        {
            return Err(refuse(format!(
                "task {:?} depends on {:?}, which is not a task of the swarm",
                t.task_id,
                excerpt(d, 60)
            )));
        }
    }
    // Only added tasks can wait on added tasks, so a cycle lies among them.
    let among: Vec<TaskDefinition> = added
        .iter()
        .map(|t| TaskDefinition {
            dependencies: t
                .dependencies
                .iter()
                .filter(|d| ids.contains(d.as_str()))
                .cloned()
                .collect(),
            ..t.clone()
        })
        .collect();
    crate::validate::topological_order(&among)?;
    if let Some(r) = replaces
        && !ids.contains(r)
    {
        return Err(refuse(format!(
            "replaces names {:?}, which is not one of the added tasks",
            excerpt(r, 60)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, deps: &[&str]) -> TaskDefinition {
        serde_json::from_value(serde_json::json!({
            "task_id": id, "title": id, "description": format!("do {id}"),
            "assigned_to": "w", "dependencies": deps,
        }))
        .unwrap()
    }

    fn check(added: &[TaskDefinition], replaces: Option<&str>) -> Result<(), ErrorBody> {
        let existing = HashSet::from(["a", "b"]);
        let personas = HashSet::from(["w"]);
        check_added(&existing, &personas, added, replaces, &Limits::default())
    }

    #[test]
    fn added_tasks_may_depend_on_the_graph_and_on_each_other() {
        assert!(check(&[task("x", &["a"]), task("y", &["x", "b"])], Some("y")).is_ok());
    }

    #[test]
    fn added_tasks_are_refused_with_the_reason() {
        for (added, replaces, why) in [
            (vec![task("a", &[])], None, "taken"),
            (vec![task("x", &["zz"])], None, "not a task of the swarm"),
            (vec![task("x", &["y"]), task("y", &["x"])], None, "cycle"),
            (vec![task("x", &[])], Some("a"), "not one of the added"),
            (
                vec![TaskDefinition {
                    assigned_to: "ghost".into(),
                    ..task("x", &[])
                }],
                None,
                "not a persona",
            ),
        ] {
            let e = check(&added, replaces).unwrap_err();
            assert!(e.message.contains(why), "{why}: {}", e.message);
        }
        let limits = Limits {
            max_tasks: 2,
            ..Limits::default()
        };
        let e = check_added(
            &HashSet::from(["a", "b"]),
            &HashSet::from(["w"]),
            &[task("x", &[])],
            None,
            &limits,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
    }
}
