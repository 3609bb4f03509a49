//! Asking the boss's desk: the one way workers record approval requests
//! and questions, and people decide and answer them (see
//! [`swarm_common::approval`]). Only the boss writes the `approvals` and
//! `inputs` buckets; everyone else sends it a request naming their NATS
//! user in the subject, which the production config checks.

use std::time::Duration;

use async_nats::Client;
use swarm_common::approval::{DeskReply, DeskRequest};
use swarm_common::subjects;
use tokio::time::Instant;

use crate::RuntimeError;

/// The user name a role puts in desk subjects: its NATS user when it has
/// one (the production config allows only that), else `fallback`.
pub fn user_or(nats_user: Option<&str>, fallback: &str) -> String {
    nats_user
        .filter(|u| subjects::is_token(u))
        .unwrap_or(fallback)
        .to_owned()
}

/// Sends `request` to the desk as `user` and returns its reply. While no
/// boss answers (one restarting, say), asks again with backoff until
/// `patience` has passed.
pub async fn call(
    client: &Client,
    user: &str,
    request: &DeskRequest,
    patience: Duration,
) -> Result<DeskReply, RuntimeError> {
    let subject = subjects::desk(user, request.action());
    let body = serde_json::to_vec(request)
        .map_err(|e| RuntimeError::nats("encoding the desk request", e))?;
    let deadline = Instant::now() + patience;
    let mut pause = Duration::from_millis(100);
    loop {
        // The request continues the asking task's trace, when there is one.
        let mut headers = async_nats::HeaderMap::new();
        crate::trace::inject(&mut headers);
        let sent = if headers.is_empty() {
            client.request(subject.clone(), body.clone().into()).await
        } else {
            client
                .request_with_headers(subject.clone(), headers, body.clone().into())
                .await
        };
        let last = match sent {
            Ok(reply) => {
                return serde_json::from_slice(&reply.payload)
                    .map_err(|e| RuntimeError::nats("reading the desk's reply", e));
            }
            Err(e) => e,
        };
        if Instant::now() + pause >= deadline {
            return Err(RuntimeError::nats(
                format!("no boss answered on {subject} (is a boss running?)"),
                last,
            ));
        }
        tracing::warn!(error = %last, %subject, "the desk did not answer; asking again");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}
