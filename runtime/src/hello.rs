//! The handshake: every role replica answers `swarm.hello.<role>` with the
//! protocol versions and codecs it speaks, its role and its id, as JSON.
//!
//! A request may be empty, or JSON `{"protocol_versions": [...]}` naming the
//! versions the peer speaks: when none of them shares this build's major
//! version, the answer is a typed refusal, `{"error": {"code":
//! "unsupported_protocol", ...}}`. Every replica answers (a plain
//! subscription, no queue group): a requester takes the first answer, or
//! gathers them all.

use bytes::Bytes;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use swarm_common::{Codec, ErrorBody, ErrorCode, subjects};
use tracing::warn;

use crate::RuntimeError;

/// What a replica says of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The protocol versions it speaks, newest first (it reads every minor
    /// version of their major).
    pub protocol_versions: Vec<String>,
    /// The content types it reads and writes.
    pub codecs: Vec<String>,
    /// `boss`, `manager` or `worker`.
    pub role: String,
    /// The replica's agent id.
    pub id: String,
}

impl Hello {
    /// This build's handshake for `role` and `id`.
    pub fn new(role: &str, id: &str) -> Hello {
        Hello {
            protocol_versions: versions(),
            codecs: codecs(),
            role: role.to_string(),
            id: id.to_string(),
        }
    }
}

/// The protocol versions this build speaks, as text.
pub fn versions() -> Vec<String> {
    swarm_common::SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .map(|v| v.to_string())
        .collect()
}

/// The codecs this build speaks, as content types.
pub fn codecs() -> Vec<String> {
    [Codec::MsgPack, Codec::Json, Codec::Protobuf]
        .iter()
        .map(|c| c.content_type().to_string())
        .collect()
}

/// A handshake request: the versions the peer offers, if it says.
#[derive(Debug, Default, Deserialize)]
struct Offer {
    #[serde(default)]
    protocol_versions: Option<Vec<String>>,
}

/// A refused handshake.
#[derive(Debug, Serialize, Deserialize)]
pub struct Refusal {
    /// Why.
    pub error: ErrorBody,
}

/// The answer (JSON) of replica `id` of `role` to a handshake request.
pub fn answer(role: &str, id: &str, request: &[u8]) -> Vec<u8> {
    let reply = match judge(request) {
        Ok(()) => serde_json::to_vec(&Hello::new(role, id)),
        Err(error) => serde_json::to_vec(&Refusal { error }),
    };
    reply.unwrap_or_default()
}

fn judge(request: &[u8]) -> Result<(), ErrorBody> {
    if request.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let offer: Offer = serde_json::from_slice(request).map_err(|e| {
        ErrorBody::new(
            ErrorCode::DecodeFailed,
            format!("a handshake request is empty or {{\"protocol_versions\": [...]}}: {e}"),
        )
    })?;
    match offer.protocol_versions {
        Some(offered) if !offered.iter().any(|v| swarm_common::protocol_supported(v)) => {
            Err(swarm_common::unsupported_protocol(&offered.join(",")))
        }
        _ => Ok(()),
    }
}

/// Answers `swarm.hello.<role>` as replica `id` until the connection closes.
pub async fn spawn(client: &async_nats::Client, role: &str, id: &str) -> Result<(), RuntimeError> {
    let subject = subjects::hello(role);
    let mut requests = client
        .subscribe(subject.clone())
        .await
        .map_err(|e| RuntimeError::setup(format!("serving {subject}"), e))?;
    let client = client.clone();
    let (role, id) = (role.to_string(), id.to_string());
    tokio::spawn(async move {
        while let Some(m) = requests.next().await {
            let Some(reply) = m.reply else { continue };
            let body = Bytes::from(answer(&role, &id, &m.payload));
            if let Err(e) = client.publish(reply, body).await {
                warn!(error = %e, "cannot answer a handshake");
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_empty_request_or_a_common_major_gets_the_hello() {
        for request in [
            &b""[..],
            b"  ",
            br#"{}"#,
            br#"{"protocol_versions": ["2.0", "1.3"]}"#,
        ] {
            let hello: Hello = serde_json::from_slice(&answer("manager", "manager-1", request))
                .unwrap_or_else(|e| panic!("{request:?}: {e}"));
            assert_eq!(hello, Hello::new("manager", "manager-1"));
            assert_eq!(hello.protocol_versions, ["1.0"]);
            assert_eq!(
                hello.codecs,
                [
                    "application/msgpack",
                    "application/json",
                    "application/protobuf"
                ]
            );
        }
    }

    #[test]
    fn no_common_major_or_a_bad_request_gets_a_typed_refusal() {
        let no: Refusal =
            serde_json::from_slice(&answer("boss", "b", br#"{"protocol_versions": ["99.0"]}"#))
                .unwrap();
        assert_eq!(no.error.code, ErrorCode::UnsupportedProtocol);
        assert!(no.error.message.contains("99.0"), "{}", no.error.message);
        let empty: Refusal =
            serde_json::from_slice(&answer("boss", "b", br#"{"protocol_versions": []}"#)).unwrap();
        assert_eq!(empty.error.code, ErrorCode::UnsupportedProtocol);
        let bad: Refusal = serde_json::from_slice(&answer("boss", "b", b"{nope")).unwrap();
        assert_eq!(bad.error.code, ErrorCode::DecodeFailed);
        let raw: serde_json::Value =
            serde_json::from_slice(&answer("boss", "b", br#"{"protocol_versions": ["2.0"]}"#))
                .unwrap();
        assert_eq!(raw["error"]["code"], "unsupported_protocol");
    }
}
