//! The desk: the only writer of the `approvals` and `inputs` buckets, and
//! the one remover of learned skills.
//!
//! Workers record the approval requests and questions their tasks wait on,
//! and close them; people approve, deny and answer, and remove a skill. Each sends a
//! [`DeskRequest`] on `swarm.desk.<user>.<action>`; the production config
//! lets a NATS user publish only under its own name, so the subject says who
//! asks. The desk refuses an action the user's role may not take (only
//! [`Desk::approvers`] decide and answer; only [`Desk::workers`] ask and
//! close), a request whose swarm has ended (closing it instead), and a
//! second decision; every change is a compare-and-swap.

// A refusal is the desk's answer, built once per request and sent as is:
// its size does not matter off a hot path.
#![allow(clippy::result_large_err)]

use async_nats::jetstream::kv;
use bytes::Bytes;
use chrono::Utc;
use swarm_common::{
    Codec, ErrorBody, ErrorCode, SwarmState, SwarmStatus,
    approval::{ApprovalRecord, ApprovalStatus, DeskReply, DeskRequest, DeskRole, InputRecord},
    mission::{MissionRecord, MissionStatus},
    subjects,
};
use swarm_runtime::Infra;
use tracing::{info, warn};

/// The largest desk request read, in bytes: a tool call's arguments and a
/// question fit many times over.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;

/// How often a compare-and-swap that lost a race is tried again.
const CAS_TRIES: usize = 8;

/// Serves desk requests for one boss replica.
pub struct Desk {
    /// The buckets.
    pub infra: Infra,
    /// NATS users who may decide and answer (`client` by default).
    pub approvers: Vec<String>,
    /// NATS users who may ask and close (`worker` by default).
    pub workers: Vec<String>,
}

fn refused(code: ErrorCode, message: impl Into<String>) -> DeskReply {
    DeskReply::Refused(ErrorBody::new(code, message))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Bytes, DeskReply> {
    Codec::MsgPack.encode(value).map(Bytes::from).map_err(|e| {
        refused(
            ErrorCode::Internal,
            format!("cannot encode the record: {e}"),
        )
    })
}

/// "alice (client)", or just the user when the name adds nothing.
fn signed(by: &str, user: &str) -> String {
    let by = by.trim();
    if by.is_empty() || by == user {
        user.to_owned()
    } else {
        format!("{} ({user})", swarm_common::error::excerpt(by, 64))
    }
}

impl Desk {
    /// Answers one request message (one with no reply subject is dropped).
    pub async fn respond(&self, client: &async_nats::Client, request: async_nats::Message) {
        let Some(reply) = request.reply else { return };
        let span = swarm_runtime::trace::process(
            "desk",
            "server",
            &request.subject,
            swarm_common::subjects::MISSIONS_QUEUE,
            request.headers.as_ref(),
        );
        let answer =
            tracing::Instrument::instrument(self.handle(&request.subject, &request.payload), span)
                .await;
        match serde_json::to_vec(&answer) {
            Ok(body) => {
                if let Err(e) = client.publish(reply, body.into()).await {
                    warn!(error = %e, "cannot answer a desk request");
                }
            }
            Err(e) => warn!(error = %e, "cannot encode a desk reply"),
        }
    }

    /// Serves desk requests on `client` until the subscription ends: the
    /// boss does this beside its other loops; tests run a desk alone.
    pub async fn serve(
        self: std::sync::Arc<Self>,
        client: async_nats::Client,
    ) -> anyhow::Result<()> {
        use futures::StreamExt as _;
        let mut requests = client
            .queue_subscribe(subjects::DESK_FILTER, subjects::MISSIONS_QUEUE.into())
            .await?;
        while let Some(request) = requests.next().await {
            let (desk, client) = (self.clone(), client.clone());
            tokio::spawn(async move { desk.respond(&client, request).await });
        }
        Ok(())
    }

    /// Answers one request: `subject` is `swarm.desk.<user>.<action>`.
    pub async fn handle(&self, subject: &str, payload: &[u8]) -> DeskReply {
        let mut tokens = subject.split('.').skip(2);
        let (Some(user), Some(action), None) = (tokens.next(), tokens.next(), tokens.next()) else {
            return refused(ErrorCode::ValidationFailed, "not a desk subject");
        };
        if payload.len() > MAX_REQUEST_BYTES {
            return refused(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the request has {} bytes; at most {MAX_REQUEST_BYTES}",
                    payload.len()
                ),
            );
        }
        let request: DeskRequest = match serde_json::from_slice(payload) {
            Ok(r) => r,
            Err(e) => {
                return refused(ErrorCode::DecodeFailed, format!("not a desk request: {e}"));
            }
        };
        if request.action() != action {
            return refused(
                ErrorCode::ValidationFailed,
                format!("a {} request sent as {action}", request.action()),
            );
        }
        let allowed = match request.role() {
            DeskRole::Approver => &self.approvers,
            DeskRole::Worker => &self.workers,
        };
        if !allowed.iter().any(|u| u == user) {
            warn!(user, action, "desk request refused: not the user's role");
            return refused(
                ErrorCode::AuthorizationDenied,
                format!("{user} may not {}", action.replace('_', " ")),
            );
        }
        let reply = match request {
            DeskRequest::AskApproval { record } => self.ask_approval(record).await,
            DeskRequest::CloseApprovals {
                approval_ids,
                reason,
            } => self.close_approvals(&approval_ids, user, &reason).await,
            DeskRequest::Decide {
                approval_id,
                approve,
                by,
                reason,
            } => {
                self.decide(&approval_id, approve, &signed(&by, user), reason)
                    .await
            }
            DeskRequest::AskQuestion { record } => self.ask_question(record).await,
            DeskRequest::CloseQuestion {
                swarm_id,
                task_id,
                reason,
            } => self.close_question(&swarm_id, &task_id, &reason).await,
            DeskRequest::Answer {
                swarm_id,
                task_id,
                text,
                by,
            } => {
                self.answer(&swarm_id, &task_id, &text, &signed(&by, user))
                    .await
            }
            DeskRequest::RemoveSkill { key, by } => {
                self.remove_skill(&key, &signed(&by, user)).await
            }
        };
        reply.unwrap_or_else(|refusal| refusal)
    }

    /// Removes the learned skill at `key` (a person's curation: workers can
    /// record, but no client may write the bucket).
    async fn remove_skill(&self, key: &str, by: &str) -> Result<DeskReply, DeskReply> {
        let parts: Vec<&str> = key.split('.').collect();
        if parts.len() != 2 || !parts.iter().all(|p| swarm_common::subjects::is_token(p)) {
            return Err(refused(
                ErrorCode::ValidationFailed,
                "a skill's key is <scope>.<name>, as `swarm skills` lists it",
            ));
        }
        let book = swarm_runtime::skills::SkillBook::new(self.infra.skills.clone());
        match book.remove(key).await {
            Ok(Some(skill)) => {
                info!(key, by, "learned skill removed");
                Ok(DeskReply::Skill(skill))
            }
            Ok(None) => Err(refused(
                ErrorCode::NotFound,
                format!("no learned skill {key}"),
            )),
            Err(e) => Err(refused(
                ErrorCode::Internal,
                format!("the skill could not be removed: {e}"),
            )),
        }
    }

    /// The status of a swarm, from its state or else its mission record.
    async fn status(&self, swarm_id: &str) -> Result<Option<SwarmStatus>, DeskReply> {
        let read = |e: &dyn std::fmt::Display| {
            refused(
                ErrorCode::Internal,
                format!("cannot read swarm {swarm_id}: {e}"),
            )
        };
        if let Some(bytes) = self
            .infra
            .swarms
            .get(swarm_id)
            .await
            .map_err(|e| read(&e))?
            && let Ok(state) = Codec::MsgPack.decode::<SwarmState>(&bytes)
        {
            return Ok(Some(state.status));
        }
        let Some(bytes) = self
            .infra
            .missions
            .get(swarm_id)
            .await
            .map_err(|e| read(&e))?
        else {
            return Ok(None);
        };
        let record: MissionRecord = Codec::MsgPack.decode(&bytes).map_err(|e| read(&e))?;
        Ok(Some(match record.status {
            MissionStatus::Accepted | MissionStatus::Deployed => SwarmStatus::Running,
            MissionStatus::Reported => record.overall_status.unwrap_or(SwarmStatus::Running),
            MissionStatus::Failed => SwarmStatus::Failed,
        }))
    }

    /// How the swarm ended, if it has.
    async fn ended(&self, swarm_id: Option<&str>) -> Result<Option<SwarmStatus>, DeskReply> {
        let Some(swarm_id) = swarm_id else {
            return Ok(None);
        };
        Ok(self.status(swarm_id).await?.filter(|s| s.is_terminal()))
    }

    async fn ask_approval(&self, record: ApprovalRecord) -> Result<DeskReply, DeskReply> {
        let ids_ok = subjects::is_token(&record.approval_id)
            && record.swarm_id.as_deref().is_none_or(subjects::is_token)
            && record.task_id.as_deref().is_none_or(subjects::is_token);
        if !ids_ok || record.status != ApprovalStatus::Pending {
            return Err(refused(
                ErrorCode::ValidationFailed,
                "an approval request needs token ids and the Pending status",
            ));
        }
        if let Some(status) = self.ended(record.swarm_id.as_deref()).await? {
            return Err(refused(
                ErrorCode::Cancelled,
                swarm_common::swarm_ended(status),
            ));
        }
        let store = &self.infra.approvals;
        match store.create(&record.approval_id, encode(&record)?).await {
            Ok(_) => {
                info!(approval_id = %record.approval_id, tool = %record.tool, "approval requested");
                Ok(DeskReply::Approval(record))
            }
            // A worker that asks again after a lost reply gets its request.
            Err(e) => match read::<ApprovalRecord>(store, &record.approval_id).await? {
                Some((same, _)) if same.requested_by == record.requested_by => {
                    Ok(DeskReply::Approval(same))
                }
                _ => Err(refused(
                    ErrorCode::ValidationFailed,
                    format!("approval {} exists already: {e}", record.approval_id),
                )),
            },
        }
    }

    async fn close_approvals(
        &self,
        approval_ids: &[String],
        user: &str,
        reason: &str,
    ) -> Result<DeskReply, DeskReply> {
        let mut out = Vec::new();
        for id in approval_ids.iter().filter(|id| subjects::is_token(id)) {
            let closed = change(&self.infra.approvals, id, |r: &mut ApprovalRecord| {
                if r.status != ApprovalStatus::Pending {
                    return false;
                }
                r.status = ApprovalStatus::Expired;
                r.decided_by = Some(user.to_owned());
                r.reason = Some(reason.to_owned());
                true
            })
            .await?;
            out.extend(closed);
        }
        Ok(DeskReply::Approvals(out))
    }

    async fn decide(
        &self,
        approval_id: &str,
        approve: bool,
        by: &str,
        reason: Option<String>,
    ) -> Result<DeskReply, DeskReply> {
        if !subjects::is_token(approval_id) {
            return Err(refused(
                ErrorCode::ValidationFailed,
                format!(
                    "{:?} is not an approval id",
                    swarm_common::error::excerpt(approval_id, 64)
                ),
            ));
        }
        let store = &self.infra.approvals;
        let Some((record, _)) = read::<ApprovalRecord>(store, approval_id).await? else {
            return Err(refused(
                ErrorCode::NotFound,
                format!("no approval request {approval_id}"),
            ));
        };
        if record.status != ApprovalStatus::Pending {
            return Err(refused(
                ErrorCode::ValidationFailed,
                format!("approval {approval_id} is already {:?}", record.status),
            ));
        }
        if let Some(status) = self.ended(record.swarm_id.as_deref()).await? {
            let why = swarm_common::swarm_ended(status);
            // Settle it, so nobody is asked again; the answer is the same.
            let _ = change(store, approval_id, |r: &mut ApprovalRecord| {
                let pending = r.status == ApprovalStatus::Pending;
                if pending {
                    r.status = ApprovalStatus::Expired;
                    r.reason = Some(why.clone());
                }
                pending
            })
            .await;
            return Err(refused(
                ErrorCode::Cancelled,
                format!(
                    "approval {approval_id} cannot be decided: swarm {} has ended ({status:?})",
                    record.swarm_id.as_deref().unwrap_or_default()
                ),
            ));
        }
        let reason = reason.map(|r| swarm_common::error::excerpt(&r, 1024));
        let mut decided = None;
        let changed = change(store, approval_id, |r: &mut ApprovalRecord| {
            if r.status != ApprovalStatus::Pending {
                decided = Some(r.status);
                return false;
            }
            r.status = if approve {
                ApprovalStatus::Approved
            } else {
                ApprovalStatus::Denied
            };
            r.decided_by = Some(by.to_owned());
            r.reason = reason.clone();
            true
        })
        .await?;
        match changed {
            Some(r) if decided.is_none() => {
                info!(%approval_id, status = ?r.status, by, "approval decided");
                Ok(DeskReply::Approval(r))
            }
            _ => Err(refused(
                ErrorCode::ValidationFailed,
                format!(
                    "approval {approval_id} changed meanwhile ({:?}); look again",
                    decided.unwrap_or(ApprovalStatus::Pending)
                ),
            )),
        }
    }

    async fn ask_question(&self, record: InputRecord) -> Result<DeskReply, DeskReply> {
        if !subjects::is_token(&record.swarm_id) || !subjects::is_token(&record.task_id) {
            return Err(refused(
                ErrorCode::ValidationFailed,
                "a question needs token swarm and task ids",
            ));
        }
        if record.answer.is_some() || record.closed.is_some() {
            return Err(refused(
                ErrorCode::ValidationFailed,
                "a question is asked unanswered and open",
            ));
        }
        if let Some(status) = self.ended(Some(&record.swarm_id)).await? {
            return Err(refused(
                ErrorCode::Cancelled,
                swarm_common::swarm_ended(status),
            ));
        }
        let key = format!("{}.{}", record.swarm_id, record.task_id);
        // A task asks again in a later round: the new question replaces it.
        self.infra
            .inputs
            .put(&key, encode(&record)?)
            .await
            .map_err(|e| {
                refused(
                    ErrorCode::Internal,
                    format!("cannot store the question: {e}"),
                )
            })?;
        info!(swarm_id = %record.swarm_id, task_id = %record.task_id, "question asked");
        Ok(DeskReply::Question(record))
    }

    async fn close_question(
        &self,
        swarm_id: &str,
        task_id: &str,
        reason: &str,
    ) -> Result<DeskReply, DeskReply> {
        let key = question_key(swarm_id, task_id)?;
        match change(&self.infra.inputs, &key, |r: &mut InputRecord| {
            if r.answer.is_some() || r.closed.is_some() {
                return false;
            }
            r.closed = Some(reason.to_owned());
            true
        })
        .await?
        {
            Some(r) => Ok(DeskReply::Question(r)),
            None => Err(refused(
                ErrorCode::NotFound,
                format!("task {task_id} of swarm {swarm_id} asked nothing"),
            )),
        }
    }

    async fn answer(
        &self,
        swarm_id: &str,
        task_id: &str,
        text: &str,
        by: &str,
    ) -> Result<DeskReply, DeskReply> {
        let key = question_key(swarm_id, task_id)?;
        let Some((record, _)) = read::<InputRecord>(&self.infra.inputs, &key).await? else {
            return Err(refused(
                ErrorCode::NotFound,
                format!("task {task_id} of swarm {swarm_id} asked nothing"),
            ));
        };
        if let Some(why) = &record.closed {
            return Err(refused(
                ErrorCode::ValidationFailed,
                format!("the question of task {task_id} is closed: {why}"),
            ));
        }
        if record.answer.is_some() {
            return Err(refused(
                ErrorCode::ValidationFailed,
                format!("task {task_id} was answered already: {:?}", record.question),
            ));
        }
        if let Some(status) = self.ended(Some(swarm_id)).await? {
            let why = swarm_common::swarm_ended(status);
            let _ = change(&self.infra.inputs, &key, |r: &mut InputRecord| {
                let open = r.answer.is_none() && r.closed.is_none();
                if open {
                    r.closed = Some(why.clone());
                }
                open
            })
            .await;
            return Err(refused(
                ErrorCode::Cancelled,
                format!(
                    "task {task_id} cannot be answered: swarm {swarm_id} has ended ({status:?})"
                ),
            ));
        }
        let mut settled = false;
        let changed = change(&self.infra.inputs, &key, |r: &mut InputRecord| {
            if r.answer.is_some() || r.closed.is_some() {
                settled = true;
                return false;
            }
            r.answer = Some(text.to_owned());
            r.answered_by = Some(by.to_owned());
            r.answered_at = Some(Utc::now());
            true
        })
        .await?;
        match changed {
            Some(r) if !settled => {
                info!(%swarm_id, %task_id, by, "question answered");
                Ok(DeskReply::Question(r))
            }
            _ => Err(refused(
                ErrorCode::ValidationFailed,
                "the question changed meanwhile; look again",
            )),
        }
    }
}

fn question_key(swarm_id: &str, task_id: &str) -> Result<String, DeskReply> {
    if subjects::is_token(swarm_id) && subjects::is_token(task_id) {
        Ok(format!("{swarm_id}.{task_id}"))
    } else {
        Err(refused(
            ErrorCode::ValidationFailed,
            "not a swarm and task id",
        ))
    }
}

/// The record under `key` and its revision.
async fn read<T: serde::de::DeserializeOwned>(
    store: &kv::Store,
    key: &str,
) -> Result<Option<(T, u64)>, DeskReply> {
    let entry = store
        .entry(key)
        .await
        .map_err(|e| refused(ErrorCode::Internal, format!("cannot read {key}: {e}")))?;
    let Some(entry) = entry.filter(|e| e.operation == kv::Operation::Put) else {
        return Ok(None);
    };
    let record = Codec::MsgPack
        .decode(&entry.value)
        .map_err(|e| refused(ErrorCode::Internal, format!("cannot decode {key}: {e}")))?;
    Ok(Some((record, entry.revision)))
}

/// Applies `edit` to the record under `key` by compare-and-swap, trying
/// again when another write came first. `edit` says whether it changed
/// anything; the record as it then stands is returned (`None`: no record).
async fn change<T: serde::Serialize + serde::de::DeserializeOwned>(
    store: &kv::Store,
    key: &str,
    mut edit: impl FnMut(&mut T) -> bool,
) -> Result<Option<T>, DeskReply> {
    for _ in 0..CAS_TRIES {
        let Some((mut record, revision)) = read::<T>(store, key).await? else {
            return Ok(None);
        };
        if !edit(&mut record) {
            return Ok(Some(record));
        }
        if store.update(key, encode(&record)?, revision).await.is_ok() {
            return Ok(Some(record));
        }
    }
    Err(refused(
        ErrorCode::Internal,
        format!("{key} kept changing; try again"),
    ))
}

/// The users of each desk role, from a comma-separated list.
pub fn users(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|u| subjects::is_token(u))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_signed_with_the_nats_user() {
        assert_eq!(signed("alice", "client"), "alice (client)");
        assert_eq!(signed("client", "client"), "client");
        assert_eq!(signed("  ", "client"), "client");
    }

    #[test]
    fn role_lists_keep_token_names_only() {
        assert_eq!(users("client, ops ,a.b,,*"), vec!["client", "ops"]);
    }
}
