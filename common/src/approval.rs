//! Where agents wait for people: approvals of destructive tool calls (the
//! record a worker stores in the `approvals` bucket while a call waits, which
//! a person decides with `swarm approve <id>` or `swarm deny <id>`), and
//! questions a task asks (`inputs` bucket, answered with `swarm answer`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where an approval request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub requested_at: DateTime<Utc>,
    /// When an unanswered request counts as denied.
    #[serde(with = "crate::timestamp")]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub asked_at: DateTime<Utc>,
    /// The answer, once given.
    #[serde(default)]
    pub answer: Option<String>,
    /// Who answered.
    #[serde(default)]
    pub answered_by: Option<String>,
    /// When.
    #[serde(default, with = "crate::timestamp::option")]
    pub answered_at: Option<DateTime<Utc>>,
    /// Why the question can no longer be answered (its swarm ended), once
    /// closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
}
