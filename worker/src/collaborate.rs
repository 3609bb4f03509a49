//! A task's asks for help from its collaborators
//! ([`swarm_common::collaborate`]): sent to the manager under a
//! deduplication id, then waited on in the swarm's state until the
//! collaborator's task has ended, its result being the answer. Each ask
//! is a journaled step, so a redelivered assignment replays the answer
//! instead of asking again; one that died before the answer sends the same
//! ask again (it lands once) and waits on.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use async_trait::async_trait;
use futures::StreamExt;
use swarm_agent::ToolError;
use swarm_agent::agent_loop::{ASK_COLLABORATOR, Collaborate};
use swarm_common::collaborate::{self, AskStatus, CollaborationRequest};
use swarm_common::{Codec, Envelope, SwarmState, TaskAssignment, subjects};
use swarm_runtime::wire;
use tracing::{info, warn};

use crate::journal;

/// How long to wait before watching the state again after the watch failed.
const REWATCH_AFTER: Duration = Duration::from_millis(500);

/// The asks of one assignment's task.
pub(crate) struct NatsCollaborator {
    js: jetstream::Context,
    swarms: kv::Store,
    a2ap: jetstream::stream::Stream,
    agent_id: String,
    swarm_id: String,
    /// The manager that sent the assignment: the asks' recipient.
    manager: String,
    assignment: TaskAssignment,
}

impl NatsCollaborator {
    /// The asker of `env`'s task.
    pub(crate) fn new(
        js: jetstream::Context,
        swarms: kv::Store,
        a2ap: jetstream::stream::Stream,
        agent_id: &str,
        env: &Envelope<TaskAssignment>,
    ) -> Self {
        NatsCollaborator {
            js,
            swarms,
            a2ap,
            agent_id: agent_id.to_string(),
            swarm_id: env.swarm_id.clone(),
            manager: env.sender_agent.clone(),
            assignment: env.body.clone(),
        }
    }

    /// Sends the ask (again, after a crash: it lands once) and waits for
    /// its outcome. `Err` only when the broker failed.
    async fn ask_and_wait(
        &self,
        ask: u32,
        name: &str,
        request: &str,
    ) -> Result<Result<String, String>, ToolError> {
        let a = &self.assignment;
        let body = CollaborationRequest {
            task_id: a.task_id.clone(),
            attempt: a.attempt,
            revision: a.revision,
            ask,
            collaborator: name.to_string(),
            request: request.to_string(),
            token: a.token.clone(),
        };
        let msg_id = collaborate::ask_msg_id(&self.swarm_id, &body);
        let envelope = Envelope::new(
            self.agent_id.as_str(),
            self.manager.as_str(),
            self.swarm_id.as_str(),
            a.task_id.as_str(),
            body,
        );
        wire::publish(
            &self.js,
            subjects::ask(&self.swarm_id, &a.task_id),
            &envelope,
            Some(&msg_id),
        )
        .await
        .map_err(|e| ToolError::Failed(format!("the ask was not sent: {e}")))?;
        info!(swarm_id = %self.swarm_id, task_id = %a.task_id, ask, collaborator = name, "asked a collaborator; waiting for the answer");
        let status = self.wait(ask).await;
        match status {
            AskStatus::Answered {
                task_id,
                result_seq,
            } => {
                let read = wire::read_results(&self.a2ap, &[result_seq])
                    .await
                    .map_err(|e| {
                        ToolError::Failed(format!("the answer of {task_id} was not read: {e}"))
                    })?;
                let answer = read.into_iter().next().map(|r| r.result);
                Ok(answer.ok_or_else(|| format!("task {task_id} has no result")))
            }
            AskStatus::Unanswered(why) => Ok(Err(why)),
            AskStatus::Waiting => Err(ToolError::Failed("the wait ended unanswered".into())),
        }
    }

    /// Watches the swarm's state until the ask is decided and, if
    /// accepted, its task has ended. A watch that fails is started again:
    /// the assignment stays this worker's meanwhile (its progress acks).
    async fn wait(&self, ask: u32) -> AskStatus {
        let a = &self.assignment;
        loop {
            let mut watch = match self.swarms.watch_with_history(&self.swarm_id).await {
                Ok(w) => w,
                Err(e) => {
                    warn!(error = %e, "cannot watch the swarm's state; trying again");
                    tokio::time::sleep(REWATCH_AFTER).await;
                    continue;
                }
            };
            while let Some(entry) = watch.next().await {
                let Ok(entry) = entry else { break };
                let Ok(mut state) = Codec::MsgPack.decode::<SwarmState>(&entry.value) else {
                    continue;
                };
                if state.chunks.is_some() {
                    // A large swarm's tasks are in chunks beside its entry.
                    match swarm_runtime::states::load(&self.swarms, &self.swarm_id).await {
                        Ok(Some((whole, _))) => state = whole,
                        _ => continue,
                    }
                }
                let status =
                    collaborate::ask_status(&state, &a.task_id, a.attempt, a.revision, ask);
                if status != AskStatus::Waiting {
                    return status;
                }
            }
            tokio::time::sleep(REWATCH_AFTER).await;
        }
    }
}

#[async_trait]
impl Collaborate for NatsCollaborator {
    async fn ask(&self, ask: u32, name: &str, request: &str) -> Result<String, ToolError> {
        let arguments = serde_json::json!({"ask": ask, "name": name, "request": request});
        let asked = async {
            Ok(self
                .ask_and_wait(ask, name, request)
                .await?
                .map_err(ToolError::Failed))
        };
        journal::journaled(ASK_COLLABORATOR, arguments, asked).await
    }
}
