//! Reading what Swarm stored, whatever its codec, as JSON for people: a
//! message of a stream by its sequence, or a value of a bucket by its key
//! (`swarm inspect`).
//!
//! The codec is the one the stored `Content-Type` header names (MessagePack
//! when there is none, as on the wire); the type is the one the message
//! names (`message_type`) or the one its stream or bucket holds. A value
//! that does not decode as its type is still shown, decoded without it,
//! with the reason: the thing to debug is often exactly such a value.

use anyhow::{Context as _, bail};
use async_nats::{Client, HeaderMap, jetstream};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use swarm_common::approval::{ApprovalRecord, InputRecord};
use swarm_common::messages::Header;
use swarm_common::mission::MissionRecord;
use swarm_common::{
    Codec, Control, DeadLetter, Envelope, ErrorMessage, FinalReport, MessageType, Payload,
    ProgressUpdate, ResultSubmission, SwarmDeployment, SwarmState, TaskAssignment, codec,
    headers as h, subjects,
};

use crate::exit::{Exit, fail};

/// A stored message or value, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspected {
    /// Where it was read: the stream and sequence, or the bucket and key,
    /// with the subject and the revision.
    pub source: String,
    /// The `Content-Type` it was decoded by: the stored header's media
    /// type, or the codec its stream or bucket uses when it has none.
    pub content_type: String,
    /// What it is: the message type, the stored type, `text`, or `value`
    /// (decoded by its codec alone).
    pub kind: String,
    /// The value as JSON.
    pub value: Value,
    /// Why it was not decoded as its type, when it was not.
    pub problem: Option<String>,
}

/// Message `seq` of `stream` (`A2AP`, `WORK`, `MISSIONS`, `DEADLETTER`, a
/// bucket's `KV_<bucket>`, or any other).
pub async fn message(client: &Client, stream: &str, seq: u64) -> anyhow::Result<Inspected> {
    if !is_name(stream) {
        bail!("{stream:?} is not a stream name");
    }
    let js = jetstream::new(client.clone());
    let handle = js
        .get_stream(stream)
        .await
        .with_context(|| format!("opening the stream {stream}"))?;
    let msg = handle.get_raw_message(seq).await.map_err(|e| {
        fail(
            Exit::Error,
            format!("no message {seq} in the stream {stream}: {e}"),
        )
    })?;
    let content_type = content_type(&msg.headers);
    let decoded = decode_message(stream, &msg.subject, content_type.as_deref(), &msg.payload)
        .with_context(|| format!("message {seq} of {stream}"))?;
    Ok(decoded.into_inspected(format!("{stream} #{seq} {}", msg.subject)))
}

/// The value of `key` in `bucket` (the latest revision).
pub async fn kv(client: &Client, bucket: &str, key: &str) -> anyhow::Result<Inspected> {
    if !is_name(bucket) {
        bail!("{bucket:?} is not a bucket name");
    }
    if !is_key(key) {
        bail!("{key:?} is not a key");
    }
    let js = jetstream::new(client.clone());
    let stream = format!("KV_{bucket}");
    let handle = js
        .get_stream(&stream)
        .await
        .with_context(|| format!("opening the bucket {bucket}"))?;
    let subject = format!("$KV.{bucket}.{key}");
    let msg = handle
        .get_last_raw_message_by_subject(&subject)
        .await
        .map_err(|e| {
            fail(
                Exit::Error,
                format!("no key {key} in the bucket {bucket}: {e}"),
            )
        })?;
    if let Some(op) = msg.headers.get("KV-Operation") {
        return Err(fail(
            Exit::Error,
            format!(
                "the key {key} of the bucket {bucket} was removed ({}) at revision {}",
                op.as_str(),
                msg.sequence
            ),
        ));
    }
    let content_type = content_type(&msg.headers);
    let decoded = decode_value(bucket, content_type.as_deref(), &msg.payload)
        .with_context(|| format!("the key {key} of {bucket}"))?;
    Ok(decoded.into_inspected(format!("{bucket}/{key} revision {}", msg.sequence)))
}

/// A swarm's state in the `swarms` bucket.
pub async fn state(client: &Client, swarm_id: &str) -> anyhow::Result<Inspected> {
    if !subjects::is_token(swarm_id) {
        bail!("{swarm_id:?} is not a swarm id");
    }
    kv(client, subjects::SWARMS_BUCKET, swarm_id).await
}

/// A decoded message or value, before it is said where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// See [`Inspected::content_type`].
    pub content_type: String,
    /// See [`Inspected::kind`].
    pub kind: String,
    /// See [`Inspected::value`].
    pub value: Value,
    /// See [`Inspected::problem`].
    pub problem: Option<String>,
}

impl Decoded {
    fn new(kind: &str, value: Value, problem: Option<String>) -> Decoded {
        Decoded {
            content_type: String::new(),
            kind: kind.to_string(),
            value,
            problem,
        }
    }

    fn in_form(self, form: Form) -> Decoded {
        Decoded {
            content_type: form.content_type().to_string(),
            ..self
        }
    }

    fn into_inspected(self, source: String) -> Inspected {
        Inspected {
            source,
            content_type: self.content_type,
            kind: self.kind,
            value: self.value,
            problem: self.problem,
        }
    }
}

fn content_type(headers: &HeaderMap) -> Option<String> {
    headers.get(h::CONTENT_TYPE).map(|v| v.as_str().to_string())
}

/// How a payload is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Text,
    Coded(Codec),
}

impl Form {
    fn content_type(self) -> &'static str {
        match self {
            Form::Text => codec::TEXT,
            Form::Coded(c) => c.content_type(),
        }
    }
}

fn form(content_type: Option<&str>, default: Form) -> anyhow::Result<Form> {
    match content_type {
        None => Ok(default),
        Some(ct) if codec::essence(ct) == codec::TEXT => Ok(Form::Text),
        Some(ct) => Ok(Form::Coded(Codec::from_content_type(Some(ct))?)),
    }
}

/// A message of `stream` stored on `subject`: an A2AP message by the type
/// it names, a mission record, a dead letter, a bucket's value by its
/// bucket, anything else by its codec alone.
pub fn decode_message(
    stream: &str,
    subject: &str,
    content_type: Option<&str>,
    payload: &[u8],
) -> anyhow::Result<Decoded> {
    if let Some(bucket) = stream.strip_prefix("KV_") {
        return decode_value(bucket, content_type, payload);
    }
    let form = form(content_type, Form::Coded(Codec::MsgPack))?;
    let decoded = match (form, stream) {
        (Form::Text, _) => generic(form, payload, None),
        (Form::Coded(codec), subjects::A2AP_STREAM | subjects::WORK_STREAM) => a2ap(codec, payload),
        (Form::Coded(codec), subjects::MISSIONS_STREAM) => {
            typed::<MissionRecord>(codec, payload, "MissionRecord")
        }
        (Form::Coded(codec), subjects::DEADLETTER_STREAM) => {
            typed::<DeadLetter>(codec, payload, "DeadLetter")
        }
        // A stream of someone else's: A2AP if it says so.
        (Form::Coded(codec), _) if subject.starts_with("a2ap.") => a2ap(codec, payload),
        _ => generic(form, payload, None),
    };
    decoded.map(|d| d.in_form(form))
}

/// A value of `bucket`: by the type the bucket holds (`memory` holds text,
/// `journal` a worker's step record, decoded by its codec alone).
pub fn decode_value(
    bucket: &str,
    content_type: Option<&str>,
    payload: &[u8],
) -> anyhow::Result<Decoded> {
    let default = if bucket == subjects::MEMORY_BUCKET {
        Form::Text
    } else {
        Form::Coded(Codec::MsgPack)
    };
    let form = form(content_type, default)?;
    let decoded = match (form, bucket) {
        (Form::Coded(codec), subjects::SWARMS_BUCKET) => {
            typed::<SwarmState>(codec, payload, "SwarmState")
        }
        (Form::Coded(codec), subjects::MISSIONS_BUCKET) => {
            typed::<MissionRecord>(codec, payload, "MissionRecord")
        }
        (Form::Coded(codec), subjects::APPROVALS_BUCKET) => {
            typed::<ApprovalRecord>(codec, payload, "ApprovalRecord")
        }
        (Form::Coded(codec), subjects::INPUTS_BUCKET) => {
            typed::<InputRecord>(codec, payload, "InputRecord")
        }
        _ => generic(form, payload, None),
    };
    decoded.map(|d| d.in_form(form))
}

/// An A2AP message by the type its envelope names.
fn a2ap(codec: Codec, payload: &[u8]) -> anyhow::Result<Decoded> {
    let head = match codec.decode::<Header>(payload) {
        Ok(head) => head,
        Err(e) => {
            return generic(
                Form::Coded(codec),
                payload,
                Some(format!("not an A2AP message: {e}")),
            );
        }
    };
    fn envelope<T: Payload>(codec: Codec, payload: &[u8]) -> anyhow::Result<Decoded> {
        let kind = format!("{:?}", T::MESSAGE_TYPE);
        match Envelope::<T>::decode(codec, payload) {
            Ok(env) => Ok(Decoded::new(&kind, serde_json::to_value(&env)?, None)),
            Err(e) => generic(
                Form::Coded(codec),
                payload,
                Some(format!("does not decode as a {kind}: {}", e.message)),
            )
            .map(|d| Decoded { kind, ..d }),
        }
    }
    match head.message_type {
        MessageType::SwarmDeployment => envelope::<SwarmDeployment>(codec, payload),
        MessageType::TaskAssignment => envelope::<TaskAssignment>(codec, payload),
        MessageType::ProgressUpdate => envelope::<ProgressUpdate>(codec, payload),
        MessageType::ResultSubmission => envelope::<ResultSubmission>(codec, payload),
        MessageType::FinalReport => envelope::<FinalReport>(codec, payload),
        MessageType::Error => envelope::<ErrorMessage>(codec, payload),
        MessageType::Control => envelope::<Control>(codec, payload),
        MessageType::CollaborationRequest => {
            envelope::<swarm_common::CollaborationRequest>(codec, payload)
        }
        MessageType::Replan => envelope::<swarm_common::replan::Replan>(codec, payload),
    }
}

/// A value of type `T`, named `kind`.
fn typed<T: DeserializeOwned + Serialize>(
    codec: Codec,
    payload: &[u8],
    kind: &str,
) -> anyhow::Result<Decoded> {
    match codec.decode::<T>(payload) {
        Ok(v) => Ok(Decoded::new(kind, serde_json::to_value(&v)?, None)),
        Err(e) => generic(
            Form::Coded(codec),
            payload,
            Some(format!("does not decode as a {kind}: {e}")),
        )
        .map(|d| Decoded {
            kind: kind.to_string(),
            ..d
        }),
    }
}

/// A payload decoded by its form alone: text as a JSON string, a codec's
/// bytes as the JSON value they hold.
fn generic(form: Form, payload: &[u8], problem: Option<String>) -> anyhow::Result<Decoded> {
    let (kind, value) = match form {
        Form::Text => (
            "text",
            Value::String(String::from_utf8_lossy(payload).into_owned()),
        ),
        Form::Coded(codec) => (
            "value",
            codec
                .decode::<Value>(payload)
                .with_context(|| match &problem {
                    Some(p) => format!("{p}; nor does it decode as {}", codec.content_type()),
                    None => format!("it does not decode as {}", codec.content_type()),
                })?,
        ),
    };
    Ok(Decoded::new(kind, value, problem))
}

/// A stream or bucket name: letters, digits, `-` and `_`.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A KV key: the characters JetStream allows in one (`-/_=.` besides
/// letters and digits), not starting or ending with a dot.
fn is_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 1024
        && !s.starts_with('.')
        && !s.ends_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_common::{ErrorBody, ErrorCode};

    fn error_message(version: &str) -> Envelope<ErrorMessage> {
        let mut env = Envelope::new(
            "worker-1",
            "manager",
            "s1",
            "t1",
            ErrorMessage {
                task_id: Some("t1".into()),
                attempt: Some(1),
                error: ErrorBody::new(ErrorCode::Timeout, "too slow"),
                token: String::new(),
            },
        );
        env.protocol_version = version.into();
        env
    }

    #[test]
    fn a_message_is_decoded_by_its_content_type_and_the_type_it_names() {
        let env = error_message("1.0");
        for codec in [Codec::MsgPack, Codec::Json, Codec::Protobuf] {
            let bytes = env.encode(codec).unwrap();
            for ct in [Some(codec.content_type()), None] {
                if ct.is_none() && codec != Codec::MsgPack {
                    continue;
                }
                let d = decode_message("A2AP", "a2ap.s1.error", ct, &bytes).unwrap();
                assert_eq!(d.kind, "Error");
                assert_eq!(d.problem, None);
                assert_eq!(d.value, serde_json::to_value(&env).unwrap());
            }
        }
    }

    #[test]
    fn what_does_not_decode_as_its_type_is_shown_with_the_reason() {
        let bytes = error_message("9.0").encode(Codec::MsgPack).unwrap();
        let d = decode_message("A2AP", "a2ap.s1.error", None, &bytes).unwrap();
        assert_eq!(d.kind, "Error");
        assert_eq!(d.value["protocol_version"], "9.0");
        assert!(d.problem.unwrap().contains("9.0"));
        // Not a message at all: an error that says so.
        let e = decode_message("A2AP", "a2ap.s1.error", None, b"\xc1").unwrap_err();
        assert!(format!("{e:#}").contains("application/msgpack"), "{e:#}");
        // An unknown content type is named.
        let e = decode_message("A2AP", "a2ap.s1.error", Some("image/png"), &bytes).unwrap_err();
        assert!(format!("{e:#}").contains("image/png"), "{e:#}");
    }

    #[test]
    fn bucket_values_are_decoded_by_their_bucket() {
        let d = decode_value("memory", None, b"the answer is 42").unwrap();
        assert_eq!(
            (d.kind.as_str(), d.value),
            ("text", Value::from("the answer is 42"))
        );
        let journal = Codec::MsgPack
            .encode(&serde_json::json!({"Tool": {"name": "count", "output": {"Ok": "3"}}}))
            .unwrap();
        let d = decode_value("journal", None, &journal).unwrap();
        assert_eq!(d.kind, "value");
        assert_eq!(d.value["Tool"]["name"], "count");
        let not_state = Codec::MsgPack.encode(&serde_json::json!({"x": 1})).unwrap();
        let d = decode_value("swarms", None, &not_state).unwrap();
        assert_eq!(d.kind, "SwarmState");
        assert!(d.problem.unwrap().contains("SwarmState"));
        // Through the bucket's stream, the same.
        let d = decode_message("KV_memory", "$KV.memory.s.k", None, b"note").unwrap();
        assert_eq!(d.value, Value::from("note"));
    }

    #[test]
    fn names_and_keys_are_checked() {
        assert!(is_name("KV_swarms") && is_name("A2AP"));
        assert!(!is_name("A2AP.>") && !is_name(""));
        assert!(is_key("s1.t1.a1.r0.i0.s1") && is_key("shared.notes/x=1"));
        assert!(!is_key("s1.*") && !is_key("s1.>") && !is_key(".x") && !is_key("a b"));
    }
}
