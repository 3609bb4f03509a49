//! Collaborators: a worker asks another persona of its plan for help.
//!
//! A persona's `collaborators` name the personas it may ask. Its agent loop
//! offers the synthetic tool `ask_collaborator {name, request}`; the worker
//! sends the n-th ask of an attempt and revision as a
//! [`CollaborationRequest`] on `a2ap.<swarm>.ask.<task>` (deduplication id
//! [`ask_msg_id`]), echoing its assignment's token. The manager checks it
//! and records it in the asking task's state ([`AskRecord`]): accepted, it
//! adds a task [`ask_task_id`] for the collaborator (its `asked_by` the
//! asking task) and assigns it; refused (not a collaborator, not a persona
//! of the plan), it records why. The asking worker watches the swarm's
//! state until the ask is decided and, if accepted, its task has ended
//! ([`ask_status`]): the collaborator's result, or why there is none, is
//! the tool's result, journaled like a side-effecting tool's so a
//! redelivered assignment replays it instead of asking again.
//!
//! Each task records at most `Limits::max_collaborator_asks` asks over all
//! its attempts; the manager records none beyond, so an ask the state does
//! not record once the bound is reached never will be, and the worker
//! reads that as a refusal.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::messages::{MessageType, Payload, TaskStatus};
use crate::state::SwarmState;

/// Longest task id that can ask: room for `-ask<k>` within a 128-byte token
/// (`k` has at most ten digits).
pub const MAX_ASKING_ID_BYTES: usize = 114;

/// A worker's ask for help from a collaborator, sent on
/// `a2ap.<swarm>.ask.<task>` (the asking task).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CollaborationRequest {
    /// The asking task.
    pub task_id: String,
    /// Its attempt.
    pub attempt: u32,
    /// Its revision.
    pub revision: u32,
    /// Which ask of this attempt and revision this is, from 1: counted by
    /// the agent loop, so a replay of the same run asks with the same number.
    pub ask: u32,
    /// The persona asked.
    pub collaborator: String,
    /// What is asked: the collaborator task's description.
    pub request: String,
    /// The asking assignment's token ([`crate::TaskAssignment::token`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
}

impl Payload for CollaborationRequest {
    const MESSAGE_TYPE: MessageType = MessageType::CollaborationRequest;
}

/// A persona a task may ask, as its assignment names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Collaborator {
    /// The persona's name.
    pub name: String,
    /// What it specialises in.
    #[serde(default)]
    pub role: String,
}

/// One ask a task made, in its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AskRecord {
    /// The attempt that asked.
    pub attempt: u32,
    /// Its revision.
    pub revision: u32,
    /// Which ask of that attempt and revision.
    pub ask: u32,
    /// The persona asked.
    pub collaborator: String,
    /// The task added for the collaborator, when the ask was accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Why the ask was refused, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// The id of the task added for the `k`-th ask (from 1) of task `asking`.
pub fn ask_task_id(asking: &str, k: usize) -> String {
    format!("{asking}-ask{k}")
}

/// The deduplication id of an ask: `<swarm>.<task>.a<attempt>.r<revision>.ask<n>`.
pub fn ask_msg_id(swarm_id: &str, r: &CollaborationRequest) -> String {
    format!(
        "{swarm_id}.{}.a{}.r{}.ask{}",
        r.task_id, r.attempt, r.revision, r.ask
    )
}

/// Where an ask stands, as the asking worker reads it from the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskStatus {
    /// Not decided yet, or its task has not ended.
    Waiting,
    /// The collaborator's task completed: its result is at this stream
    /// sequence of the A2AP stream.
    Answered {
        /// The collaborator task.
        task_id: String,
        /// Where its result is.
        result_seq: u64,
    },
    /// No answer will come, and why: refused, or the collaborator's task
    /// did not complete, or the asking task or its swarm moved on.
    Unanswered(String),
}

/// Where the `ask`-th ask of `(task_id, attempt, revision)` stands in
/// `state`.
pub fn ask_status(
    state: &SwarmState,
    task_id: &str,
    attempt: u32,
    revision: u32,
    ask: u32,
) -> AskStatus {
    let Some(asking) = state.task(task_id) else {
        return AskStatus::Waiting;
    };
    let record = asking
        .asks
        .iter()
        .find(|r| r.attempt == attempt && r.revision == revision && r.ask == ask);
    let Some(record) = record else {
        if state.status.is_terminal() {
            return AskStatus::Unanswered(format!("the swarm ended ({:?})", state.status));
        }
        if asking.asks.len() >= state.limits.max_collaborator_asks as usize {
            return AskStatus::Unanswered(format!(
                "refused: task {task_id} has asked its collaborators {} times, the mission's limit",
                state.limits.max_collaborator_asks
            ));
        }
        if asking.status.is_terminal()
            || asking.attempt > attempt
            || (asking.attempt == attempt && asking.revision > revision)
        {
            return AskStatus::Unanswered(format!(
                "task {task_id} moved on (now {:?}, attempt {}, revision {})",
                asking.status, asking.attempt, asking.revision
            ));
        }
        return AskStatus::Waiting;
    };
    if let Some(why) = &record.refused {
        return AskStatus::Unanswered(format!("refused: {why}"));
    }
    let Some(helper) = record.task_id.as_deref().and_then(|id| state.task(id)) else {
        return AskStatus::Waiting;
    };
    let id = &helper.definition.task_id;
    match (helper.status, helper.result_seq) {
        (TaskStatus::Completed, Some(seq)) => AskStatus::Answered {
            task_id: id.clone(),
            result_seq: seq,
        },
        (status, _) if status.is_terminal() => AskStatus::Unanswered(format!(
            "{} did not answer: task {id} ended {status:?}: {}",
            record.collaborator,
            helper.error.as_deref().unwrap_or("no reason given")
        )),
        _ => AskStatus::Waiting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{SwarmStatus, TaskDefinition};
    use crate::state::TaskState;

    fn def(id: &str) -> TaskDefinition {
        serde_json::from_value(serde_json::json!({
            "task_id": id, "title": id, "description": id, "assigned_to": "w"
        }))
        .unwrap()
    }

    fn state(tasks: Vec<TaskState>) -> SwarmState {
        let now = chrono::Utc::now();
        SwarmState {
            skills_scope: None,
            chunks: None,
            trace_id: None,
            success_criteria: Vec::new(),
            changes: Vec::new(),
            replan: false,
            parent: None,
            sub_managers: Vec::new(),
            swarm_id: "s".into(),
            mission: String::new(),
            mission_id: None,
            status: SwarmStatus::Running,
            manager_directive: String::new(),
            workers: Vec::new(),
            planner: String::new(),
            tasks: tasks.into(),
            limits: Default::default(),
            budget: Default::default(),
            accepted_at: now,
            started_at: now,
            deadline: now,
            completed_at: None,
            cancel_reason: None,
            last_event_seq: 0,
            metrics: Default::default(),
            last_manager: String::new(),
            report_published: false,
        }
    }

    fn asking(asks: Vec<AskRecord>) -> TaskState {
        let mut t = TaskState::pending(def("a"), "general".into(), 0);
        t.status = TaskStatus::InProgress;
        t.attempt = 1;
        t.asks = asks;
        t
    }

    fn record(task: Option<&str>, refused: Option<&str>) -> AskRecord {
        AskRecord {
            attempt: 1,
            revision: 0,
            ask: 1,
            collaborator: "b".into(),
            task_id: task.map(str::to_string),
            refused: refused.map(str::to_string),
        }
    }

    #[test]
    fn an_ask_waits_until_decided_and_its_task_has_ended() {
        let s = state(vec![asking(vec![])]);
        assert_eq!(ask_status(&s, "a", 1, 0, 1), AskStatus::Waiting);
        let mut helper = TaskState::pending(def("a-ask1"), "general".into(), 0);
        helper.status = TaskStatus::Assigned;
        let mut s = state(vec![asking(vec![record(Some("a-ask1"), None)]), helper]);
        assert_eq!(ask_status(&s, "a", 1, 0, 1), AskStatus::Waiting);
        s.tasks[1].status = TaskStatus::Completed;
        s.tasks[1].result_seq = Some(9);
        assert_eq!(
            ask_status(&s, "a", 1, 0, 1),
            AskStatus::Answered {
                task_id: "a-ask1".into(),
                result_seq: 9
            }
        );
        s.tasks[1].status = TaskStatus::Failed;
        s.tasks[1].error = Some("tool_failed: no".into());
        let AskStatus::Unanswered(why) = ask_status(&s, "a", 1, 0, 1) else {
            panic!()
        };
        assert!(
            why.contains("tool_failed: no") && why.contains("Failed"),
            "{why}"
        );
    }

    #[test]
    fn a_refusal_the_bound_and_a_task_that_moved_on_are_answers_too() {
        let s = state(vec![asking(vec![record(None, Some("not a collaborator"))])]);
        assert!(
            matches!(ask_status(&s, "a", 1, 0, 1), AskStatus::Unanswered(w) if w.contains("not a collaborator"))
        );
        let full: Vec<AskRecord> = (1..=4)
            .map(|n| AskRecord {
                ask: n,
                ..record(None, Some("x"))
            })
            .collect();
        let s = state(vec![asking(full)]);
        assert!(
            matches!(ask_status(&s, "a", 1, 0, 5), AskStatus::Unanswered(w) if w.contains("limit"))
        );
        let mut s = state(vec![asking(vec![])]);
        s.tasks[0].revision = 1;
        assert!(
            matches!(ask_status(&s, "a", 1, 0, 1), AskStatus::Unanswered(w) if w.contains("moved on"))
        );
        s.status = SwarmStatus::Cancelled;
        assert!(
            matches!(ask_status(&s, "a", 1, 1, 1), AskStatus::Unanswered(w) if w.contains("ended"))
        );
    }

    #[test]
    fn ids_are_tokens() {
        assert!(crate::subjects::is_token(&ask_task_id(
            &"x".repeat(MAX_ASKING_ID_BYTES),
            99
        )));
        let r = CollaborationRequest {
            task_id: "a".into(),
            attempt: 2,
            revision: 1,
            ask: 3,
            collaborator: "b".into(),
            request: String::new(),
            token: String::new(),
        };
        assert_eq!(ask_msg_id("s", &r), "s.a.a2.r1.ask3");
    }
}
