//! The NATS-backed approver: a destructive tool call waits in the
//! `approvals` bucket until a person runs `swarm approve <id>` or
//! `swarm deny <id>`; an unanswered request expires as denied.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use async_trait::async_trait;
use bytes::Bytes;
use chrono::Utc;
use futures::StreamExt;
use swarm_agent::tools::{ApprovalDecision, ApprovalRequest, Approver};
use swarm_common::{
    Codec, Envelope, ProgressUpdate, TaskStatus,
    approval::{ApprovalRecord, ApprovalStatus},
    subjects,
};
use swarm_runtime::wire;
use tracing::{info, warn};

/// Asks people through the `approvals` bucket.
pub struct NatsApprover {
    store: kv::Store,
    js: jetstream::Context,
    worker_id: String,
    wait: Duration,
}

impl NatsApprover {
    /// An approver that waits at most `wait` for a decision.
    pub fn new(
        store: kv::Store,
        js: jetstream::Context,
        worker_id: impl Into<String>,
        wait: Duration,
    ) -> Self {
        Self {
            store,
            js,
            worker_id: worker_id.into(),
            wait,
        }
    }

    /// Tells the swarm's watchers that a call waits for a person.
    async fn announce(&self, record: &ApprovalRecord) {
        let (Some(swarm_id), Some(task_id)) = (&record.swarm_id, &record.task_id) else {
            return;
        };
        let env = Envelope::new(
            self.worker_id.as_str(),
            "client",
            swarm_id.as_str(),
            task_id.as_str(),
            ProgressUpdate {
                task_id: task_id.clone(),
                status: TaskStatus::InputRequired,
                progress_percentage: 50,
                message: format!(
                    "approval needed for {} {}: run `swarm approve {}` or `swarm deny {}` (expires {})",
                    record.tool,
                    record.arguments,
                    record.approval_id,
                    record.approval_id,
                    record.expires_at.to_rfc3339()
                ),
                attempt: 0,
                revision: 0,
                metrics: Default::default(),
            },
        );
        if let Err(e) =
            wire::send(&self.js, subjects::progress(swarm_id, task_id), &env, None).await
        {
            warn!(error = %e, "cannot announce the approval request");
        }
    }
}

fn decision(record: &ApprovalRecord) -> Option<ApprovalDecision> {
    let by = record.decided_by.as_deref().unwrap_or("someone");
    let why = record
        .reason
        .as_deref()
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    match record.status {
        ApprovalStatus::Pending => None,
        ApprovalStatus::Approved => Some(ApprovalDecision::Approved),
        ApprovalStatus::Denied => Some(ApprovalDecision::denied(format!("denied by {by}{why}"))),
        ApprovalStatus::Expired => Some(ApprovalDecision::denied(
            "no one answered the approval request in time",
        )),
    }
}

#[async_trait]
impl Approver for NatsApprover {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision {
        let approval_id = if subjects::is_token(&request.id) {
            request.id.clone()
        } else {
            uuid::Uuid::new_v4().simple().to_string()
        };
        let now = Utc::now();
        let mut record = ApprovalRecord {
            approval_id: approval_id.clone(),
            swarm_id: request.swarm_id.clone(),
            task_id: request.task_id.clone(),
            tool: request.tool.clone(),
            arguments: request.arguments.clone(),
            requested_by: self.worker_id.clone(),
            requested_at: now,
            expires_at: now
                + chrono::Duration::from_std(self.wait)
                    .unwrap_or_else(|_| chrono::Duration::minutes(10)),
            status: ApprovalStatus::Pending,
            decided_by: None,
            reason: None,
        };
        let encode = |r: &ApprovalRecord| Codec::MsgPack.encode(r).map(Bytes::from);
        let Ok(bytes) = encode(&record) else {
            return ApprovalDecision::denied("cannot encode the approval request");
        };
        let mut revision = match self.store.create(&approval_id, bytes).await {
            Ok(r) => r,
            Err(e) => {
                return ApprovalDecision::denied(format!(
                    "cannot record the approval request: {e}"
                ));
            }
        };
        info!(%approval_id, tool = %record.tool, "waiting for approval");
        self.announce(&record).await;
        let mut watch = match self.store.watch_with_history(&approval_id).await {
            Ok(w) => w,
            Err(e) => {
                return ApprovalDecision::denied(format!("cannot wait for the decision: {e}"));
            }
        };
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            match tokio::time::timeout_at(deadline, watch.next()).await {
                Ok(Some(Ok(entry))) => {
                    revision = entry.revision;
                    if let Ok(r) = Codec::MsgPack.decode::<ApprovalRecord>(&entry.value)
                        && let Some(d) = decision(&r)
                    {
                        info!(%approval_id, status = ?r.status, "approval decided");
                        return d;
                    }
                }
                Ok(Some(Err(e))) => warn!(error = %e, "watching the approval failed"),
                Ok(None) => {
                    return ApprovalDecision::denied("the approval watch ended without a decision");
                }
                Err(_) => break,
            }
        }
        // Expire it, unless a person decided in the last instant.
        record.status = ApprovalStatus::Expired;
        if let Ok(bytes) = encode(&record)
            && self
                .store
                .update(&approval_id, bytes, revision)
                .await
                .is_err()
            && let Ok(Some(current)) = self.store.get(&approval_id).await
            && let Ok(r) = Codec::MsgPack.decode::<ApprovalRecord>(&current)
            && let Some(d) = decision(&r)
        {
            return d;
        }
        ApprovalDecision::denied("no one answered the approval request in time")
    }
}
