//! The NATS-backed approver: a destructive tool call waits in the
//! `approvals` bucket until a person runs `swarm approve <id>` or
//! `swarm deny <id>`; an unanswered request expires as denied. When the
//! swarm ends first, its open requests are closed as expired with the
//! reason ([`NatsApprover::close`]), so nobody approves a call that can no
//! longer run.
//!
//! The worker only reads the bucket: it records and closes its requests
//! through the boss's desk ([`swarm_runtime::desk`]), which alone writes
//! there, so no worker can approve a call.

use std::time::Duration;

use async_nats::Client;
use async_nats::jetstream::{self, kv};
use async_trait::async_trait;
use chrono::Utc;
use futures::StreamExt;
use swarm_agent::tools::{ApprovalDecision, ApprovalRequest, Approver};
use swarm_common::{
    Codec, Envelope, ProgressUpdate, TaskStatus,
    approval::{ApprovalRecord, ApprovalStatus, DeskReply, DeskRequest},
    subjects,
};
use swarm_runtime::{desk, wire};
use tracing::{info, warn};

use crate::waits::Waits;

/// Asks people through the `approvals` bucket.
pub struct NatsApprover {
    store: kv::Store,
    js: jetstream::Context,
    /// The desk is asked as this NATS user.
    desk_user: String,
    worker_id: String,
    wait: Duration,
    /// The requests this worker waits on, by swarm.
    open: Waits,
}

impl NatsApprover {
    /// An approver that waits at most `wait` for a decision, reading the
    /// `approvals` bucket `store` and asking the desk as `desk_user`.
    pub fn new(
        store: kv::Store,
        js: jetstream::Context,
        desk_user: impl Into<String>,
        worker_id: impl Into<String>,
        wait: Duration,
    ) -> Self {
        Self {
            store,
            js,
            desk_user: desk_user.into(),
            worker_id: worker_id.into(),
            wait,
            open: Waits::default(),
        }
    }

    /// The ids of the requests this worker waits on for `swarm_id`. Taken
    /// before the swarm's tasks are stopped, whose waits then end.
    pub fn open_requests(&self, swarm_id: &str) -> Vec<String> {
        self.open.of(swarm_id)
    }

    /// Closes requests that are still pending as expired with `reason`
    /// (a decision made meanwhile stands). Returns them as they now stand.
    pub async fn close(&self, approval_ids: &[String], reason: &str) -> Vec<ApprovalRecord> {
        if approval_ids.is_empty() {
            return Vec::new();
        }
        let request = DeskRequest::CloseApprovals {
            approval_ids: approval_ids.to_vec(),
            reason: reason.to_owned(),
        };
        match desk::call(&self.client(), &self.desk_user, &request, DESK_PATIENCE).await {
            Ok(DeskReply::Approvals(records)) => {
                for r in &records {
                    info!(approval_id = %r.approval_id, status = ?r.status, reason, "approval request closed");
                }
                records
            }
            Ok(other) => {
                warn!(reply = ?other, "the desk refused to close approval requests");
                Vec::new()
            }
            Err(e) => {
                warn!(error = %e, "cannot close the approval requests");
                Vec::new()
            }
        }
    }

    fn client(&self) -> Client {
        self.js.client()
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

/// How long the worker keeps asking the desk while no boss answers.
const DESK_PATIENCE: Duration = Duration::from_secs(30);

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
            record
                .reason
                .clone()
                .unwrap_or_else(|| "no one answered the approval request in time".to_string()),
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
        let ask = DeskRequest::AskApproval {
            record: record.clone(),
        };
        match desk::call(&self.client(), &self.desk_user, &ask, DESK_PATIENCE).await {
            Ok(DeskReply::Approval(_)) => {}
            Ok(DeskReply::Refused(e)) => {
                return ApprovalDecision::denied(format!(
                    "the approval request was refused: {}",
                    e.message
                ));
            }
            Ok(other) => {
                return ApprovalDecision::denied(format!("the desk answered {other:?}"));
            }
            Err(e) => {
                return ApprovalDecision::denied(format!(
                    "cannot record the approval request: {e}"
                ));
            }
        }
        let _open = record
            .swarm_id
            .as_deref()
            .map(|swarm_id| self.open.enter(swarm_id, &approval_id));
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
        const NO_ONE: &str = "no one answered the approval request in time";
        record.status = ApprovalStatus::Expired;
        if let Some(d) = self
            .close(std::slice::from_ref(&approval_id), NO_ONE)
            .await
            .iter()
            .find_map(decision)
        {
            return d;
        }
        ApprovalDecision::denied(NO_ONE)
    }
}
