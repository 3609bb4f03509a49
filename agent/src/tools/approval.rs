//! Approvals: every call of a tool annotated `destructive` is put to an
//! [`Approver`] first, and runs only if it says yes.
//!
//! The default is [`DenyAll`], so a destructive tool does nothing until a
//! runtime plugs in an approver that asks a person (the worker's NATS-backed
//! one waits for `swarm approve <id>` or `swarm deny <id>`).
//! [`Expiring`] turns an unanswered request into a denial.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::ToolAnnotations;

/// One tool call waiting for a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Unique per request: what `swarm approve <id>` names.
    pub id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
    /// What kind of effect the tool has.
    pub annotations: ToolAnnotations,
    /// The swarm the call is made for, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swarm_id: Option<String>,
    /// The task the call is made for, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
}

impl ApprovalRequest {
    /// A one-line description for people: the tool and its arguments.
    pub fn summary(&self) -> String {
        format!("{} {}", self.tool, self.arguments)
    }
}

/// What an approver decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run the call.
    Approved,
    /// Do not run it.
    Denied {
        /// Why, for the model and the logs.
        reason: String,
    },
}

impl ApprovalDecision {
    /// A denial with `reason`.
    pub fn denied(reason: impl Into<String>) -> ApprovalDecision {
        ApprovalDecision::Denied {
            reason: reason.into(),
        }
    }
}

/// Decides whether a destructive tool call may run.
#[async_trait]
pub trait Approver: Send + Sync {
    /// Decides on one request; may wait for a person.
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision;
}

/// Denies everything: the default, so nothing destructive runs unasked.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

#[async_trait]
impl Approver for DenyAll {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::denied(format!(
            "no approver is configured, so destructive tool calls ({}) are not allowed",
            request.tool
        ))
    }
}

/// Approves everything: for tests and for trusted, sandboxed deployments.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

#[async_trait]
impl Approver for AllowAll {
    async fn approve(&self, _request: ApprovalRequest) -> ApprovalDecision {
        ApprovalDecision::Approved
    }
}

/// Wraps an approver so a request unanswered after `after` is denied.
#[derive(Debug, Clone)]
pub struct Expiring<A> {
    inner: A,
    after: Duration,
}

impl<A: Approver> Expiring<A> {
    /// `inner`, with requests denied after waiting `after`.
    pub fn new(inner: A, after: Duration) -> Expiring<A> {
        Expiring { inner, after }
    }
}

#[async_trait]
impl<A: Approver> Approver for Expiring<A> {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision {
        match tokio::time::timeout(self.after, self.inner.approve(request)).await {
            Ok(decision) => decision,
            Err(_) => ApprovalDecision::denied(format!(
                "no one answered the approval request within {:?}",
                self.after
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Never;

    #[async_trait]
    impl Approver for Never {
        async fn approve(&self, _request: ApprovalRequest) -> ApprovalDecision {
            std::future::pending().await
        }
    }

    fn request() -> ApprovalRequest {
        ApprovalRequest {
            id: "a1".into(),
            tool: "shell".into(),
            arguments: serde_json::json!({"command": "rm -rf /"}),
            annotations: ToolAnnotations::default(),
            swarm_id: None,
            task_id: Some("t1".into()),
        }
    }

    #[tokio::test]
    async fn unanswered_requests_expire_as_denied() {
        let d = Expiring::new(Never, Duration::from_millis(50))
            .approve(request())
            .await;
        assert!(matches!(d, ApprovalDecision::Denied { reason } if reason.contains("50ms")));
        assert_eq!(
            AllowAll.approve(request()).await,
            ApprovalDecision::Approved
        );
        let d = DenyAll.approve(request()).await;
        assert!(matches!(d, ApprovalDecision::Denied { reason } if reason.contains("shell")));
        assert_eq!(request().summary(), r#"shell {"command":"rm -rf /"}"#);
    }
}
