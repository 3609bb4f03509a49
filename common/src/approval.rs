//! Where agents wait for people: approvals of destructive tool calls (the
//! record kept in the `approvals` bucket while a call waits, which a person
//! decides with `swarm approve <id>` or `swarm deny <id>`), and questions a
//! task asks (`inputs` bucket, answered with `swarm answer`).
//!
//! Only the boss writes those buckets. Workers and people send it
//! [`DeskRequest`]s on `swarm.desk.<user>.<action>`, a subject the
//! production config lets each NATS user publish under its own name only,
//! so the boss knows who asks and checks that they may (a worker asks and
//! closes, a person decides and answers) before it writes.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where an approval request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ApprovalStatus {
    /// Waiting for a person.
    Pending,
    /// The call may run.
    Approved,
    /// The call must not run.
    Denied,
    /// No one answered in time: treated as denied.
    Expired,
}

/// One tool call waiting for, or given, a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalRecord {
    /// What `swarm approve <id>` names.
    pub approval_id: String,
    /// The swarm the call is for.
    #[serde(default)]
    pub swarm_id: Option<String>,
    /// The task the call is for.
    #[serde(default)]
    pub task_id: Option<String>,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
    /// The worker asking.
    pub requested_by: String,
    /// When it asked.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub requested_at: DateTime<Utc>,
    /// When an unanswered request counts as denied.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub expires_at: DateTime<Utc>,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// Who decided.
    #[serde(default)]
    pub decided_by: Option<String>,
    /// Why, if a reason was given.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A question an agent asked a person, and the answer once given
/// (`swarm answer <swarm> <task> "<text>"`), in the `inputs` bucket under
/// `<swarm>.<task>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InputRecord {
    /// The swarm.
    pub swarm_id: String,
    /// The task that waits.
    pub task_id: String,
    /// What the agent asked.
    pub question: String,
    /// The worker asking.
    pub asked_by: String,
    /// When it asked.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub asked_at: DateTime<Utc>,
    /// The answer, once given.
    #[serde(default)]
    pub answer: Option<String>,
    /// Who answered.
    #[serde(default)]
    pub answered_by: Option<String>,
    /// When.
    #[serde(default, with = "crate::timestamp::option")]
    #[schemars(schema_with = "crate::timestamp::option::schema")]
    pub answered_at: Option<DateTime<Utc>>,
    /// Why the question can no longer be answered (its swarm ended), once
    /// closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
}

/// What workers and people ask of the boss's desk: one variant per action,
/// sent as JSON to [`crate::subjects::desk`]`(<user>, <action>)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum DeskRequest {
    /// A worker: record this pending approval request.
    AskApproval {
        /// The request, `Pending`.
        record: ApprovalRecord,
    },
    /// A worker: close these requests if still pending (expired, with the
    /// reason): its wait ran out or the swarm ended.
    CloseApprovals {
        /// The requests.
        approval_ids: Vec<String>,
        /// Why.
        reason: String,
    },
    /// A person: approve or deny a pending request.
    Decide {
        /// The request.
        approval_id: String,
        /// Whether the call may run.
        approve: bool,
        /// Who decides (a name for the record; the NATS user is added).
        by: String,
        /// Why, if given.
        #[serde(default)]
        reason: Option<String>,
    },
    /// A worker: record the question a task asks.
    AskQuestion {
        /// The question, unanswered.
        record: InputRecord,
    },
    /// A worker: close a question still unanswered, with the reason.
    CloseQuestion {
        /// The swarm.
        swarm_id: String,
        /// The task.
        task_id: String,
        /// Why.
        reason: String,
    },
    /// A person: answer a task's question.
    Answer {
        /// The swarm.
        swarm_id: String,
        /// The task.
        task_id: String,
        /// The answer.
        text: String,
        /// Who answers (a name for the record; the NATS user is added).
        by: String,
    },
    /// A person: remove a learned skill ([`crate::skill`]) from KV `skills`.
    RemoveSkill {
        /// Its key (`<scope>.<slug>`, as `swarm skills` lists it).
        key: String,
        /// Who removes it (a name for the log; the NATS user is added).
        #[serde(default)]
        by: String,
    },
}

/// Who may ask for an action of the desk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeskRole {
    /// A worker: asks and closes.
    Worker,
    /// A person (the `client` user by default): decides and answers.
    Approver,
}

impl DeskRequest {
    /// The action's name: the last token of its subject.
    pub fn action(&self) -> &'static str {
        match self {
            DeskRequest::AskApproval { .. } => "ask_approval",
            DeskRequest::CloseApprovals { .. } => "close_approvals",
            DeskRequest::Decide { .. } => "decide",
            DeskRequest::AskQuestion { .. } => "ask_question",
            DeskRequest::CloseQuestion { .. } => "close_question",
            DeskRequest::Answer { .. } => "answer",
            DeskRequest::RemoveSkill { .. } => "remove_skill",
        }
    }

    /// Who may ask for it.
    pub fn role(&self) -> DeskRole {
        match self {
            DeskRequest::Decide { .. }
            | DeskRequest::Answer { .. }
            | DeskRequest::RemoveSkill { .. } => DeskRole::Approver,
            _ => DeskRole::Worker,
        }
    }
}

/// The desk's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeskReply {
    /// The approval request as it now stands.
    Approval(ApprovalRecord),
    /// The requests asked about, as they now stand (decided ones included:
    /// a decision made before the close stands).
    Approvals(Vec<ApprovalRecord>),
    /// The question as it now stands.
    Question(InputRecord),
    /// The skill as it stood when it was removed.
    Skill(crate::skill::LearnedSkill),
    /// Refused, and why.
    Refused(crate::ErrorBody),
}
