//! An A2A client over the NATS binding (`docs/a2a-nats.md`): the gateway's
//! JSON-RPC methods as NATS request/reply on `a2a.rpc`, for a program that
//! is on NATS already and would rather not open HTTP to reach a swarm.
//! Results are the A2A data model as JSON (ProtoJSON, as the gateway
//! writes it).

use std::time::Duration;

use anyhow::Context as _;
use async_nats::HeaderMap;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use swarm_common::subjects;

/// The binding's headers (see the gateway's `nats` module).
const STREAM_SEQ: &str = "A2A-Stream-Seq";
const STREAM_END: &str = "A2A-Stream-End";
const HEARTBEAT: &str = "A2A-Stream-Heartbeat";
/// How long a stream may be silent (three heartbeats) before it counts as lost.
const STREAM_SILENCE: Duration = Duration::from_secs(45);

/// An A2A error the agent answered with: its JSON-RPC code and message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("A2A error {code}: {message}")]
pub struct A2aRpcError {
    /// The JSON-RPC code (`-32001` TaskNotFound, ...).
    pub code: i64,
    /// What the agent said.
    pub message: String,
    /// The error's `data`, as sent.
    pub data: Value,
}

/// A caller of the swarm's A2A agent over NATS.
#[derive(Debug, Clone)]
pub struct NatsA2a {
    client: async_nats::Client,
    subject: String,
    token: Option<String>,
    timeout: Duration,
}

impl NatsA2a {
    /// A caller on `client`, with the gateway's token (`None` when the
    /// gateway takes anonymous callers).
    pub fn new(client: async_nats::Client, token: Option<String>) -> NatsA2a {
        NatsA2a {
            client,
            subject: subjects::A2A_RPC.to_owned(),
            token,
            timeout: Duration::from_secs(60),
        }
    }

    /// How long a unary call waits for its answer (default 60 s; a
    /// blocking `SendMessage` waits for its task).
    pub fn with_timeout(mut self, timeout: Duration) -> NatsA2a {
        self.timeout = timeout;
        self
    }

    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("A2A-Version", "1.0");
        h.insert("Content-Type", "application/json");
        if let Some(t) = &self.token {
            h.insert("Authorization", format!("Bearer {t}").as_str());
        }
        h
    }

    fn body(method: &str, params: Value) -> Bytes {
        Bytes::from(
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string(),
        )
    }

    /// A unary method: its result, an [`A2aRpcError`] (as the error's
    /// source), or no gateway answering.
    pub async fn call(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let request = self.client.request_with_headers(
            self.subject.clone(),
            self.headers(),
            Self::body(method, params),
        );
        let reply = tokio::time::timeout(self.timeout, request)
            .await
            .with_context(|| format!("{method}: no answer within {:?}", self.timeout))?
            .with_context(|| format!("{method}: no A2A gateway answers on {}", self.subject))?;
        answer_of(&reply.payload).with_context(|| method.to_owned())
    }

    /// A streaming method (`SendStreamingMessage`, `SubscribeToTask`): its
    /// events (`StreamResponse`s) in order, ending after the last; an error
    /// item ends it too. A stream that goes silent, or loses an event (a
    /// gap in the numbering), ends with an error: subscribe again to go on
    /// from the task as it then stands.
    pub async fn stream(
        &self,
        method: &str,
        params: Value,
    ) -> anyhow::Result<BoxStream<'static, anyhow::Result<Value>>> {
        let inbox = self.client.new_inbox();
        let replies = self
            .client
            .subscribe(inbox.clone())
            .await
            .context("subscribing to the stream's inbox")?;
        self.client
            .publish_with_reply_and_headers(
                self.subject.clone(),
                inbox,
                self.headers(),
                Self::body(method, params),
            )
            .await
            .context("sending the stream's request")?;
        let method = method.to_owned();
        Ok(futures::stream::unfold(
            (replies, 0u64, false),
            move |(mut replies, mut seen, done)| {
                let method = method.clone();
                async move {
                    if done {
                        return None;
                    }
                    loop {
                        let next = tokio::time::timeout(STREAM_SILENCE, replies.next()).await;
                        let message = match next {
                            Err(_) => {
                                let e = anyhow::anyhow!(
                                    "{method}: the stream was silent for {STREAM_SILENCE:?}"
                                );
                                return Some((Err(e), (replies, seen, true)));
                            }
                            Ok(None) => return None,
                            Ok(Some(m)) => m,
                        };
                        let header = |name: &str| {
                            message
                                .headers
                                .as_ref()
                                .and_then(|h| h.get(name))
                                .map(|v| v.as_str().to_owned())
                        };
                        if header(HEARTBEAT).is_some() {
                            continue;
                        }
                        if let Some(total) = header(STREAM_END) {
                            if total.parse::<u64>().ok() != Some(seen) {
                                let e = anyhow::anyhow!(
                                    "{method}: {seen} of {total} events arrived; subscribe again"
                                );
                                return Some((Err(e), (replies, seen, true)));
                            }
                            return None;
                        }
                        if let Some(n) = header(STREAM_SEQ).and_then(|s| s.parse::<u64>().ok())
                            && n != seen + 1
                        {
                            let e = anyhow::anyhow!(
                                "{method}: event {} was lost; subscribe again",
                                seen + 1
                            );
                            return Some((Err(e), (replies, seen, true)));
                        }
                        seen += 1;
                        let item = answer_of(&message.payload).with_context(|| method.clone());
                        let end = item.is_err();
                        return Some((item, (replies, seen, end)));
                    }
                }
            },
        )
        .boxed())
    }

    /// `SendMessage` of a text: the task it starts (at once, not waiting
    /// for it to end).
    pub async fn send_text(&self, message_id: &str, text: &str) -> anyhow::Result<Value> {
        let result = self
            .call(
                "SendMessage",
                json!({
                    "message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]},
                    "configuration": {"returnImmediately": true}
                }),
            )
            .await?;
        result
            .get("task")
            .cloned()
            .context("SendMessage answered no task")
    }

    /// `GetTask`.
    pub async fn get_task(&self, id: &str) -> anyhow::Result<Value> {
        self.call("GetTask", json!({"id": id})).await
    }

    /// `CancelTask`.
    pub async fn cancel_task(&self, id: &str) -> anyhow::Result<Value> {
        self.call("CancelTask", json!({"id": id})).await
    }

    /// `ListTasks` with `params` (`{}` for the newest page).
    pub async fn list_tasks(&self, params: Value) -> anyhow::Result<Value> {
        self.call("ListTasks", params).await
    }

    /// `SubscribeToTask`: the task, then its updates to its end.
    pub async fn subscribe(
        &self,
        id: &str,
    ) -> anyhow::Result<BoxStream<'static, anyhow::Result<Value>>> {
        self.stream("SubscribeToTask", json!({"id": id})).await
    }
}

/// The `result` of a JSON-RPC response, or its error.
fn answer_of(payload: &[u8]) -> anyhow::Result<Value> {
    let response: Value =
        serde_json::from_slice(payload).context("the answer is not a JSON-RPC response")?;
    if let Some(e) = response.get("error") {
        return Err(A2aRpcError {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            data: e.get("data").cloned().unwrap_or(Value::Null),
        }
        .into());
    }
    response
        .get("result")
        .cloned()
        .context("the answer has neither a result nor an error")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn answers_are_results_or_typed_errors() {
        assert_eq!(
            answer_of(br#"{"jsonrpc":"2.0","id":1,"result":{"id":"t"}}"#).unwrap(),
            json!({"id": "t"})
        );
        let e = answer_of(
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"task x not found"}}"#,
        )
        .unwrap_err();
        let rpc = e.downcast_ref::<A2aRpcError>().unwrap();
        assert_eq!(rpc.code, -32001);
        assert!(answer_of(b"not json").is_err());
        assert!(answer_of(br#"{"jsonrpc":"2.0","id":1}"#).is_err());
    }
}
