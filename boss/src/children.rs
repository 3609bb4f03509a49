//! Child swarms: the boss is the "worker" of the sub-manager pool.
//!
//! A task assigned to a sub-manager ([`swarm_common::hierarchy`]) reaches
//! the WORK stream like any task, for the pool [`SUB_MANAGER_POOL`]. The
//! boss replicas share its durable consumer: each assignment becomes a
//! child mission, recorded in the `missions` bucket under the child's
//! derived id with the parent task beside it, and handed to the planners on
//! the missions stream, like a mission sent without a mission id would be.
//! The planner deploys the sub-manager's own plan, or plans the task's
//! description as it plans any mission. The assignment is acked once the
//! child is recorded; from then on the child's manager owes the parent its
//! answer, and the parent's manager acks the assignment again when the
//! answer is settled (a second ack changes nothing).
//!
//! Every step is idempotent: the child's id and its record's key are the
//! same for every delivery of one assignment, and the missions stream
//! deduplicates the hand-over by that id.

use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use bytes::Bytes;
use chrono::Utc;
use swarm_common::{
    Codec, ErrorBody, ErrorCode, Limits, SwarmStatus, TaskAssignment,
    hierarchy::{ParentTask, SUB_MANAGER_POOL},
    mission::{MissionRecord, MissionRequest, MissionStatus},
    subjects,
};
use swarm_runtime::{Infra, wire};
use tracing::{Instrument as _, info, warn};

/// What the sub-manager pool's consumer needs.
pub struct Children {
    /// Streams and buckets.
    pub infra: Infra,
    /// Limits child missions are held to.
    pub limits: Limits,
    /// This boss's agent id.
    pub agent_id: String,
}

/// The durable consumer name of the sub-manager pool.
pub fn consumer_name() -> String {
    subjects::worker_consumer(SUB_MANAGER_POOL)
}

impl Children {
    /// Turns one assignment into a child mission and acks it once the child
    /// is recorded and handed to the planners.
    pub async fn handle(&self, msg: jetstream::Message) {
        // The child swarm's mission continues the parent's trace.
        let span = swarm_runtime::trace::process(
            "start child swarm",
            "consumer",
            &msg.subject,
            &consumer_name(),
            msg.headers.as_ref(),
        );
        self.start_child(msg).instrument(span).await
    }

    async fn start_child(&self, msg: jetstream::Message) {
        let env = match wire::decode::<TaskAssignment>(msg.headers.as_ref(), &msg.payload) {
            Ok(env) => env,
            Err(e) => {
                wire::reject(&self.infra.js, "boss", &msg, e, &self.agent_id).await;
                return;
            }
        };
        let parent_id = env.swarm_id.clone();
        let task_id = env.body.task_id.clone();
        match self.start(&parent_id, env.body).await {
            Ok(Started::Child(child)) => {
                info!(parent = %parent_id, task = %task_id, %child, "child swarm handed to the planners");
                let _ = msg.ack().await;
            }
            Ok(Started::ParentEnded) => {
                info!(parent = %parent_id, task = %task_id, "parent swarm ended; no child started");
                let _ = msg.ack().await;
            }
            Err(Refused(e)) => {
                warn!(parent = %parent_id, task = %task_id, reason = %e.message, "sub-manager assignment refused");
                wire::reject(&self.infra.js, "boss", &msg, e, &self.agent_id).await;
            }
            Err(Failed(e)) => {
                warn!(parent = %parent_id, task = %task_id, error = format!("{e:#}"), "cannot start the child swarm; it will be retried");
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                    .await;
            }
        }
    }

    async fn start(&self, parent_id: &str, a: TaskAssignment) -> Result<Started, StartError> {
        let Some(child) = a.child.clone() else {
            return Err(Refused(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "task {} came to the sub-manager pool without a child swarm",
                    a.task_id
                ),
            )));
        };
        if self.parent_ended(parent_id).await {
            return Ok(Started::ParentEnded);
        }
        let parent = ParentTask {
            swarm_id: parent_id.to_string(),
            task_id: a.task_id.clone(),
            attempt: a.attempt,
            revision: a.revision,
            depth: child.depth,
            max_result_bytes: a.max_result_bytes,
            // Texts stay in the stream: the state that keeps this is
            // written on every change of the child.
            context: a
                .context
                .iter()
                .cloned()
                .map(|mut c| {
                    c.result = None;
                    c
                })
                .collect(),
        };
        let child_id = parent.child_id();
        let now = Utc::now();
        let left = (a.deadline - now)
            .num_seconds()
            .clamp(1, i64::from(u32::MAX));
        let budget = &a.budget;
        let request = MissionRequest {
            mission: mission_text(&a),
            mission_id: None,
            max_execution_minutes: None,
            max_execution_seconds: Some(left as u32),
            max_tokens: budget.max_tokens.map(|m| m.saturating_sub(a.spent_tokens)),
            max_cost_usd: budget.max_cost_usd.map(|m| (m - a.spent_cost_usd).max(0.0)),
            plan: child.plan.map(|p| *p),
            protocol_version: None,
            // A child swarm learns in its parent's scope.
            skills_scope: a.skills_scope.clone(),
        };
        let record = MissionRecord {
            swarm_id: child_id.clone(),
            request,
            status: MissionStatus::Accepted,
            accepted_at: now,
            updated_at: now,
            plan: None,
            overall_status: None,
            report_object: None,
            report_file: None,
            error: None,
            parent: Some(parent),
        };
        let bytes = Bytes::from(
            Codec::MsgPack
                .encode(&record)
                .map_err(|e| Refused(ErrorBody::from(e)))?,
        );
        // The record first, if it is not there: a redelivery goes on from
        // the stored one, whose hand-over the stream deduplicates.
        let (record, bytes) = match self.infra.missions.create(&child_id, bytes.clone()).await {
            Ok(_) => (record, bytes),
            Err(e) if e.kind() == jetstream::kv::CreateErrorKind::AlreadyExists => {
                match crate::records::load(&self.infra.missions, &child_id)
                    .await
                    .map_err(Failed)?
                {
                    Some((stored, _)) if stored.status != MissionStatus::Accepted => {
                        return Ok(Started::Child(child_id));
                    }
                    Some((stored, _)) => {
                        let bytes = Bytes::from(
                            Codec::MsgPack
                                .encode(&stored)
                                .map_err(|e| Refused(ErrorBody::from(e)))?,
                        );
                        (stored, bytes)
                    }
                    None => (record, bytes),
                }
            }
            Err(e) => return Err(Failed(anyhow::anyhow!("recording the child mission: {e}"))),
        };
        let js = self.infra.js.clone();
        let subject = subjects::mission_record(&record.swarm_id);
        let headers = wire::headers(Codec::MsgPack, Some(&record.swarm_id));
        js.publish_with_headers(subject, headers, bytes)
            .await
            .map_err(|e| Failed(anyhow::anyhow!("handing the child mission over: {e}")))?
            .await
            .map_err(|e| Failed(anyhow::anyhow!("handing the child mission over: {e}")))?;
        Ok(Started::Child(child_id))
    }

    /// Whether the parent swarm has already ended (its state says so): a
    /// child started now would answer no one.
    async fn parent_ended(&self, parent_id: &str) -> bool {
        let Ok(Some(bytes)) = self.infra.swarms.get(parent_id).await else {
            return false;
        };
        Codec::MsgPack
            .decode::<swarm_common::SwarmState>(&bytes)
            .is_ok_and(|s| s.status != SwarmStatus::Running)
    }
}

/// What became of an assignment.
enum Started {
    /// The child swarm with this id is recorded and handed over.
    Child(String),
    /// The parent swarm has ended: nothing to start.
    ParentEnded,
}

/// Why an assignment did not start a child.
enum StartError {
    /// It never will: a dead letter.
    Refused(ErrorBody),
    /// Not now: handed back.
    Failed(anyhow::Error),
}
use StartError::{Failed, Refused};

/// The child's mission: the task, and why earlier versions were turned
/// down, which a revision must address.
fn mission_text(a: &TaskAssignment) -> String {
    let mut text = a.description.trim().to_string();
    if !a.feedback.is_empty() {
        text.push_str("\n\nEarlier versions were turned down:");
        for f in &a.feedback {
            text.push_str("\n- ");
            text.push_str(f.trim());
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mission_carries_the_feedback_of_earlier_versions() {
        let mut a: TaskAssignment = serde_json::from_value(serde_json::json!({
            "task_id": "t", "title": "T", "description": "Survey the field.",
            "persona": {"name": "lead"}, "attempt": 1, "revision": 1,
            "max_steps": 8, "max_attempts": 3, "max_result_bytes": 1000,
            "priority": 0, "deadline": "2026-12-02T20:00:00Z"
        }))
        .unwrap();
        assert_eq!(mission_text(&a), "Survey the field.");
        a.feedback = vec!["too short".into()];
        assert_eq!(
            mission_text(&a),
            "Survey the field.\n\nEarlier versions were turned down:\n- too short"
        );
    }
}
