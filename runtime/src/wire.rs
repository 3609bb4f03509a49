//! A2AP on NATS: headers, typed decoding of incoming messages, publishing
//! with deduplication ids, and dead letters.
//!
//! A process writes its messages in one codec ([`set_codec`], from the
//! roles' `--codec` flag; MessagePack unless told) and reads each message in
//! the codec its `Content-Type` names.

use std::sync::atomic::{AtomicU8, Ordering};

use async_nats::HeaderMap;
use async_nats::jetstream::{Context, context::PublishAckFuture, publish::PublishAck};
use bytes::Bytes;
use swarm_common::{Codec, DeadLetter, Envelope, ErrorBody, Payload, headers as h, subjects};

use crate::RuntimeError;

/// The codec this process writes, as [`Codec`]'s index in [`CODECS`]: one
/// setting for the process, made once at start ([`crate::start_role`]),
/// rather than a parameter of every function that publishes.
static WRITE_CODEC: AtomicU8 = AtomicU8::new(0);

const CODECS: [Codec; 3] = [Codec::MsgPack, Codec::Json, Codec::Protobuf];

/// Makes this process write its messages (and dead letters) in `codec`.
pub fn set_codec(codec: Codec) {
    let index = CODECS.iter().position(|c| *c == codec).unwrap_or(0);
    WRITE_CODEC.store(index as u8, Ordering::Relaxed);
}

/// The codec this process writes its messages in.
pub fn codec() -> Codec {
    CODECS
        .get(usize::from(WRITE_CODEC.load(Ordering::Relaxed)))
        .copied()
        .unwrap_or_default()
}

/// Headers for a payload in `codec`, with a JetStream deduplication id and,
/// when traces are on, the current span's trace context ([`crate::trace`]).
pub fn headers(codec: Codec, msg_id: Option<&str>) -> HeaderMap {
    let mut map = HeaderMap::new();
    map.insert(h::CONTENT_TYPE, codec.content_type());
    map.insert(h::PROTOCOL_VERSION, swarm_common::PROTOCOL_VERSION);
    if let Some(id) = msg_id {
        map.insert(h::MSG_ID, id);
    }
    crate::trace::inject(&mut map);
    map
}

/// A header's value as text.
pub fn header<'a>(headers: Option<&'a HeaderMap>, name: &str) -> Option<&'a str> {
    headers.and_then(|m| m.get(name)).map(|v| v.as_str())
}

/// The codec named by a message's `Content-Type` (MessagePack when absent).
pub fn codec_of(headers: Option<&HeaderMap>) -> Result<Codec, ErrorBody> {
    Codec::from_content_type(header(headers, h::CONTENT_TYPE)).map_err(ErrorBody::from)
}

/// Decodes an A2AP message of type `T`, refusing an unsupported protocol
/// version named in the header or in the body.
pub fn decode<T: Payload>(
    headers: Option<&HeaderMap>,
    payload: &[u8],
) -> Result<Envelope<T>, ErrorBody> {
    if let Some(v) = header(headers, h::PROTOCOL_VERSION)
        && !swarm_common::protocol_supported(v)
    {
        return Err(swarm_common::unsupported_protocol(v));
    }
    Envelope::<T>::decode(codec_of(headers)?, payload)
}

/// Whether a publish error is worth retrying.
fn transient(e: &RuntimeError) -> bool {
    matches!(e, RuntimeError::Nats { .. })
}

/// A message as it goes on the wire: in this process's codec ([`codec`]),
/// with its headers.
fn encoded<T: Payload>(
    envelope: &Envelope<T>,
    msg_id: Option<&str>,
) -> Result<(HeaderMap, Bytes), RuntimeError> {
    let codec = codec();
    let payload = Bytes::from(envelope.encode(codec)?);
    Ok((headers(codec, msg_id), payload))
}

/// Sends a message to JetStream and returns the future of its ack, without waiting.
pub async fn send<T: Payload>(
    js: &Context,
    subject: String,
    envelope: &Envelope<T>,
    msg_id: Option<&str>,
) -> Result<PublishAckFuture, RuntimeError> {
    let (hdrs, payload) = encoded(envelope, msg_id)?;
    answered(js, subject, hdrs, payload).await
}

/// A JetStream publish: stored, and the future of the server's answer.
async fn answered(
    js: &Context,
    subject: String,
    hdrs: HeaderMap,
    payload: Bytes,
) -> Result<PublishAckFuture, RuntimeError> {
    let what = || format!("publishing to {subject}");
    js.publish_with_headers(subject.clone(), hdrs, payload)
        .await
        .map_err(|e| RuntimeError::nats(what(), e))
}

/// Sends a message to a stream's subject without asking for an ack: the
/// server stores it and answers nothing, so neither it nor this process
/// spends a message on the answer. For advisory messages (progress), whose
/// loss costs nothing.
pub async fn post<T: Payload>(
    js: &Context,
    subject: String,
    envelope: &Envelope<T>,
) -> Result<(), RuntimeError> {
    let (hdrs, payload) = encoded(envelope, None)?;
    unanswered(js, subject, hdrs, payload).await
}

/// A core publish to a stream's subject: stored, with no answer asked for.
async fn unanswered(
    js: &Context,
    subject: String,
    hdrs: HeaderMap,
    payload: Bytes,
) -> Result<(), RuntimeError> {
    let what = || format!("publishing to {subject}");
    js.client()
        .publish_with_headers(subject.clone(), hdrs, payload)
        .await
        .map_err(|e| RuntimeError::nats(what(), e))
}

/// A message for a stream, with its deduplication id, that is sent first
/// without asking for the server's answer ([`Posted::send`]) and kept until
/// something shows it stored ([`Posted::confirm`]).
///
/// The manager posts an assignment this way: the server's publish-ack of a
/// stored message goes out before the message reaches its consumer, and
/// made a hop's round trip 10-14 % longer in the probe `--example pubacks`
/// (docs/decisions.md, "Assignments posted, confirmed before the write").
/// Whatever relies on the message being stored (a state write that records
/// it) waits for [`Posted::confirm`] instead, or for a reply to the message,
/// which can only come once it is stored.
#[derive(Debug, Clone)]
pub struct Posted {
    subject: String,
    headers: HeaderMap,
    payload: Bytes,
}

impl Posted {
    /// `envelope` encoded for `subject`, with deduplication id `msg_id`;
    /// nothing is sent yet.
    pub fn new<T: Payload>(
        subject: String,
        envelope: &Envelope<T>,
        msg_id: &str,
    ) -> Result<Posted, RuntimeError> {
        let (headers, payload) = encoded(envelope, Some(msg_id))?;
        Ok(Posted {
            subject,
            headers,
            payload,
        })
    }

    /// Sends the message to its stream, asking for no answer.
    pub async fn send(&self, js: &Context) -> Result<(), RuntimeError> {
        unanswered(
            js,
            self.subject.clone(),
            self.headers.clone(),
            self.payload.clone(),
        )
        .await
    }

    /// Sends the same message again, asking for the server's answer, and
    /// returns the future of that answer: the deduplication id stores the
    /// copy only if the first send never landed, so once the answer comes the
    /// message is stored exactly once either way. Must come within the
    /// stream's deduplication window of [`Posted::send`].
    pub async fn confirm(&self, js: &Context) -> Result<PublishAckFuture, RuntimeError> {
        answered(
            js,
            self.subject.clone(),
            self.headers.clone(),
            self.payload.clone(),
        )
        .await
    }
}

/// Hands a worker's `ResultSubmission` to its stream without asking for the
/// server's ack, naming the assignment it answers ([`h::ASSIGNMENT_ACK`]):
/// the manager receives the result only once it is stored, and acks the
/// assignment then ([`ack_assignment`]). One message per task from the
/// worker instead of a publish, the server's answer and an ack. Should the
/// result not be stored, nobody acks the assignment, which comes back to a
/// worker after its `ack_wait`, as if its worker had died.
pub async fn hand_over<T: Payload>(
    js: &Context,
    subject: String,
    envelope: &Envelope<T>,
    msg_id: &str,
    assignment_ack: &str,
) -> Result<(), RuntimeError> {
    let (mut hdrs, payload) = encoded(envelope, Some(msg_id))?;
    hdrs.insert(h::ASSIGNMENT_ACK, assignment_ack);
    unanswered(js, subject, hdrs, payload).await
}

/// The assignment a stored result answers, if its header names one that
/// [`subjects::assignment_ack`] accepts.
pub fn assignment_ack(headers: Option<&HeaderMap>) -> Option<&str> {
    header(headers, h::ASSIGNMENT_ACK).filter(|s| subjects::assignment_ack(s).is_some())
}

/// Acks, for its worker, the assignment a stored result answers
/// (`AckKind::Ack`), or keeps it from coming back while the result is
/// still being reviewed (`AckKind::Progress`).
pub async fn ack_assignment(
    client: &async_nats::Client,
    ack_subject: &str,
    kind: async_nats::jetstream::AckKind,
) {
    if let Err(e) = client.publish(ack_subject.to_owned(), kind.into()).await {
        tracing::warn!(error = %e, "could not ack an answered assignment; it comes back to a worker, which finds its result stored");
    }
}

/// Publishes a message to JetStream and waits until it is stored; retries
/// transient faults (safe: the deduplication id makes a retry land once).
pub async fn publish<T: Payload>(
    js: &Context,
    subject: String,
    envelope: &Envelope<T>,
    msg_id: Option<&str>,
) -> Result<PublishAck, RuntimeError> {
    let (hdrs, payload) = encoded(envelope, msg_id)?;
    crate::retry::retry(
        || {
            let js = js.clone();
            let subject = subject.clone();
            let payload = payload.clone();
            let hdrs = hdrs.clone();
            async move {
                let what = || format!("publishing to {subject}");
                js.publish_with_headers(subject.clone(), hdrs, payload)
                    .await
                    .map_err(|e| RuntimeError::nats(what(), e))?
                    .await
                    .map_err(|e| RuntimeError::nats(what(), e))
            }
        },
        transient,
    )
    .await
}

/// Records an input that can never be processed on `swarm.deadletter.<source>`,
/// under the subject it was published on.
pub async fn dead_letter(
    js: &Context,
    source: &str,
    subject: &str,
    reason: ErrorBody,
    payload: &[u8],
    recorded_by: &str,
) -> Result<(), RuntimeError> {
    // As published (not as a stream stored it): a dead letter names where
    // to send the message again.
    let subject = subjects::published(subject);
    tracing::warn!(source, subject, code = %reason.code, reason = %reason.message, "dead letter");
    let record = DeadLetter::new(&subject, reason, payload, recorded_by);
    let codec = codec();
    let bytes = Bytes::from(codec.encode(&record)?);
    js.publish_with_headers(subjects::deadletter(source), headers(codec, None), bytes)
        .await
        .map_err(|e| RuntimeError::nats("recording a dead letter", e))?
        .await
        .map_err(|e| RuntimeError::nats("recording a dead letter", e))?;
    Ok(())
}

/// Gives up on a JetStream message that can never be processed: records it
/// as a dead letter from `source` and stops its redelivery; if the dead
/// letter cannot be recorded, the message is left for redelivery instead,
/// so nothing is dropped unrecorded.
pub async fn reject(
    js: &Context,
    source: &str,
    msg: &async_nats::jetstream::Message,
    reason: ErrorBody,
    recorded_by: &str,
) {
    use async_nats::jetstream::AckKind;
    match dead_letter(js, source, &msg.subject, reason, &msg.payload, recorded_by).await {
        Ok(()) => {
            let _ = msg.ack_with(AckKind::Term).await;
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot record a dead letter; the message will be redelivered");
            let _ = msg
                .ack_with(AckKind::Nak(Some(std::time::Duration::from_secs(1))))
                .await;
        }
    }
}

/// Where `stream` stores what is published on `subject`: with the swarm's
/// manager partition when the stream has the partition transform
/// ([`swarm_common::subjects::stored`]), as the handle's cached
/// configuration says.
pub fn stored_subject(stream: &async_nats::jetstream::stream::Stream, subject: &str) -> String {
    swarm_common::subjects::stored(
        subject,
        crate::infra::partitions(&stream.cached_info().config),
    )
}

/// The last message of `stream` published on `subject` (as sent; found
/// where the stream stores it), or `None` if there is none. A message
/// stored before the stream had its partitions is found under the subject
/// as sent.
pub async fn last_on(
    stream: &async_nats::jetstream::stream::Stream,
    subject: &str,
) -> Result<Option<async_nats::jetstream::message::StreamMessage>, RuntimeError> {
    use async_nats::jetstream::stream::DirectGetErrorKind;
    let stored = stored_subject(stream, subject);
    let tries = if stored == subject {
        vec![stored]
    } else {
        vec![stored, subject.to_owned()]
    };
    for at in tries {
        match stream.direct_get_last_for_subject(at.as_str()).await {
            Ok(raw) => return Ok(Some(raw)),
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => {}
            Err(e) => {
                return Err(RuntimeError::nats(
                    format!("reading the last message on {subject}"),
                    e,
                ));
            }
        }
    }
    Ok(None)
}

/// The latest `ResultSubmission` published on `subject` (one task's
/// results) and where it is, or `None` if the task has none (or only an
/// unreadable one).
pub async fn last_result(
    stream: &async_nats::jetstream::stream::Stream,
    subject: &str,
) -> Result<Option<(u64, swarm_common::ResultSubmission)>, RuntimeError> {
    Ok(last_on(stream, subject).await?.and_then(|raw| {
        decode::<swarm_common::ResultSubmission>(Some(&raw.headers), &raw.payload)
            .ok()
            .map(|env| (raw.sequence, env.body))
    }))
}

/// Reads the `ResultSubmission`s stored at `seqs` in the A2AP stream, up to
/// 32 at a time (one round trip each, overlapped), in the order given.
pub async fn read_results(
    stream: &async_nats::jetstream::stream::Stream,
    seqs: &[u64],
) -> Result<Vec<swarm_common::ResultSubmission>, RuntimeError> {
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(seqs.iter().copied())
        .map(|seq| async move {
            let raw = stream
                .direct_get(seq)
                .await
                .map_err(|e| RuntimeError::nats(format!("reading the result at {seq}"), e))?;
            decode::<swarm_common::ResultSubmission>(Some(&raw.headers), &raw.payload)
                .map(|env| env.body)
                .map_err(|e| RuntimeError::nats(format!("the result at {seq} is unreadable"), e))
        })
        .buffered(32)
        .try_collect()
        .await
}
