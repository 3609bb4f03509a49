//! The A2A NATS binding (`docs/a2a-nats.md`): the JSON-RPC methods of the
//! HTTP binding as NATS request/reply on [`RPC_SUBJECT`], served by every
//! gateway replica in the queue group [`QUEUE`].
//!
//! A request's body is a JSON-RPC 2.0 request, its service parameters
//! (`A2A-Version`, `Authorization`, `X-API-Key`, ...) NATS headers. A unary
//! method's reply is one message, the JSON-RPC response. A streaming
//! method's replies are several messages to the request's reply subject:
//! each event a JSON-RPC response carrying a `StreamResponse`, numbered in
//! [`STREAM_SEQ`] from 1; an empty [`HEARTBEAT`] message every
//! [`HEARTBEAT_EVERY`] while nothing happens; and a last empty message with
//! [`STREAM_END`] (the number of events sent). An error is a JSON-RPC error
//! response with [`STATUS`] set to the HTTP binding's status for it.

use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap as NatsHeaders;
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;
use tracing::warn;

use crate::error::A2aError;
use crate::http::{Gateway, RpcAnswer, admit, parse_rpc, rpc_dispatch, to_json};

/// The binding's identifier in the card's `protocolBinding`.
pub const BINDING: &str = "urn:swarm:a2a:nats:v1";
/// Where requests are sent.
pub const RPC_SUBJECT: &str = swarm_common::subjects::A2A_RPC;
/// The queue group the gateway replicas share on [`RPC_SUBJECT`].
pub const QUEUE: &str = "gateway";
/// Header: the number of a stream's event, from 1.
pub const STREAM_SEQ: &str = "A2A-Stream-Seq";
/// Header of a stream's last (empty) message: how many events it sent.
pub const STREAM_END: &str = "A2A-Stream-End";
/// Header of an empty message that says a quiet stream is still open.
pub const HEARTBEAT: &str = "A2A-Stream-Heartbeat";
/// Header of an error response: the HTTP binding's status for the error.
pub const STATUS: &str = "A2A-Status";
/// How often a quiet stream says it is open; a client that hears nothing
/// for three times as long may take the stream as lost and subscribe again.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(15);
/// Requests carried out at once by one replica.
const CONCURRENCY: usize = 256;

/// A NATS message's headers as HTTP headers (those that are valid as such).
fn http_headers(headers: Option<&NatsHeaders>) -> HeaderMap {
    let mut out = HeaderMap::new();
    let Some(headers) = headers else { return out };
    for (name, values) in headers.iter() {
        let Ok(name) = HeaderName::from_bytes(name.to_string().as_bytes()) else {
            continue;
        };
        for v in values {
            if let Ok(v) = HeaderValue::from_str(v.as_str()) {
                out.append(name.clone(), v);
            }
        }
    }
    out
}

/// Serves the binding until `stop` turns true.
pub async fn serve(
    gateway: Arc<Gateway>,
    client: async_nats::Client,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut requests = client
        .queue_subscribe(RPC_SUBJECT, QUEUE.into())
        .await
        .map_err(|e| anyhow::anyhow!("serving {RPC_SUBJECT}: {e}"))?;
    let slots = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    loop {
        let message = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            m = requests.next() => match m {
                Some(m) => m,
                None => break,
            },
        };
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let (g, client) = (gateway.clone(), client.clone());
        tokio::spawn(async move {
            answer(&g, &client, message).await;
            drop(slot);
        });
    }
    let _ = requests.unsubscribe().await;
    Ok(())
}

fn header(name: &str, value: &str) -> NatsHeaders {
    let mut h = NatsHeaders::new();
    h.insert(name, value);
    h.insert("Content-Type", "application/json");
    h
}

async fn publish(client: &async_nats::Client, to: &str, headers: NatsHeaders, body: Value) {
    let body = Bytes::from(body.to_string());
    if let Err(e) = client
        .publish_with_headers(to.to_owned(), headers, body)
        .await
    {
        warn!(error = %e, "A2A over NATS: answering");
    }
}

async fn error_reply(client: &async_nats::Client, to: &str, id: &Value, e: &A2aError) {
    let status = e.kind.http_status().as_u16().to_string();
    let body = json!({"jsonrpc": "2.0", "id": id, "error": e.to_jsonrpc()});
    publish(client, to, header(STATUS, &status), body).await;
}

/// Answers one request on its reply subject (a request without one gets
/// nothing: there is no one to tell).
async fn answer(g: &Gateway, client: &async_nats::Client, message: async_nats::Message) {
    let Some(reply) = message.reply.as_deref() else {
        return;
    };
    let (id, method, params) = match parse_rpc(&message.payload) {
        Ok(parsed) => parsed,
        Err((id, e)) => return error_reply(client, reply, &id, &e).await,
    };
    let headers = http_headers(message.headers.as_ref());
    let caller = match admit(g, &headers) {
        Ok(c) => c,
        Err(e) => return error_reply(client, reply, &id, &e).await,
    };
    match rpc_dispatch(g, &caller, &method, params).await {
        Ok(RpcAnswer::Value(result)) => {
            let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
            let mut h = NatsHeaders::new();
            h.insert("Content-Type", "application/json");
            publish(client, reply, h, body).await;
        }
        Ok(RpcAnswer::Stream(mut events)) => {
            let mut sent = 0u64;
            let mut quiet = tokio::time::interval(HEARTBEAT_EVERY);
            quiet.tick().await;
            loop {
                tokio::select! {
                    event = events.next() => match event {
                        Some(event) => {
                            sent += 1;
                            let body = json!({"jsonrpc": "2.0", "id": id, "result": to_json(&event)});
                            publish(client, reply, header(STREAM_SEQ, &sent.to_string()), body).await;
                            quiet.reset();
                        }
                        None => break,
                    },
                    _ = quiet.tick() => {
                        let _ = client
                            .publish_with_headers(reply.to_owned(), header(HEARTBEAT, "1"), Bytes::new())
                            .await;
                    }
                }
            }
            let _ = client
                .publish_with_headers(
                    reply.to_owned(),
                    header(STREAM_END, &sent.to_string()),
                    Bytes::new(),
                )
                .await;
        }
        Err(e) => error_reply(client, reply, &id, &e).await,
    }
}
