//! A2AP, the agent-to-agent protocol of Swarm: a closed vocabulary with no I/O.
//!
//! Everything two Swarm processes (or a peer in another language) must agree
//! on lives here: the message types ([`messages`]), the envelope that wraps
//! them ([`Envelope`]), the codecs chosen by `Content-Type` ([`codec`]), the
//! subject map ([`subjects`]), the durable state of a swarm ([`state`]), the
//! limits every role enforces ([`limits`]), plan validation ([`validate`]),
//! the mission intake format ([`mission`]), what makes an attempt a
//! success ([`outcome`]) and the JSON Schemas of all of it ([`schema`]);
//! `docs/protocol.md` is the specification built on them. This crate has no
//! tokio and no NATS client: `cargo tree -p swarm-common -i tokio` finds
//! nothing.

pub mod approval;
pub mod codec;
pub mod condition;
pub mod error;
pub mod gates;
pub mod limits;
pub mod map;
pub mod messages;
pub mod mission;
pub mod outcome;
pub mod schema;
mod seed;
pub mod state;
pub mod subjects;
pub mod timestamp;
pub mod validate;

pub use codec::{Codec, CodecError};
pub use error::{ErrorBody, ErrorCode};
pub use limits::Limits;
pub use messages::*;
pub use state::{SwarmState, TaskState};

/// The A2AP protocol version this build speaks and writes into every envelope.
pub const PROTOCOL_VERSION: &str = "1.0";

/// Protocol versions this build can read. A message that names another one is
/// refused with [`ErrorCode::UnsupportedProtocol`], never silently misread.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["1.0"];

/// Whether `version` is one this build can read.
pub fn protocol_supported(version: &str) -> bool {
    SUPPORTED_PROTOCOL_VERSIONS.contains(&version)
}

/// Header names Swarm sets on every NATS message it publishes.
pub mod headers {
    /// The codec of the payload (`application/msgpack`, `application/json`, `text/plain`).
    pub const CONTENT_TYPE: &str = "Content-Type";
    /// The A2AP protocol version of the payload.
    pub const PROTOCOL_VERSION: &str = "A2ap-Version";
    /// JetStream's deduplication id.
    pub const MSG_ID: &str = "Nats-Msg-Id";
    /// On a `ResultSubmission`: the ack subject of the assignment it answers.
    /// A worker stores its result without waiting for the server's answer and
    /// leaves the assignment unacked; the manager, which receives the result
    /// only once it is stored, acks the assignment for it.
    pub const ASSIGNMENT_ACK: &str = "Swarm-Assignment-Ack";
    /// W3C trace context, so one mission is one trace across processes.
    pub const TRACEPARENT: &str = "traceparent";
    /// NATS service framework error description.
    pub const SERVICE_ERROR: &str = "Nats-Service-Error";
    /// NATS service framework error code (an HTTP-like status number).
    pub const SERVICE_ERROR_CODE: &str = "Nats-Service-Error-Code";

    /// The longest header value Swarm writes from text it did not choose.
    pub const MAX_VALUE_BYTES: usize = 256;

    /// `text` as a header value: control characters (CR and LF above all,
    /// which would end the header) become spaces, and it is cut to
    /// [`MAX_VALUE_BYTES`]. Error texts may quote their input, which may
    /// hold anything.
    pub fn value(text: &str) -> String {
        let clean: String = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        crate::error::excerpt(&clean, MAX_VALUE_BYTES)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn header_values_have_no_line_breaks_and_stay_short() {
            let v = super::value("key \"a\r\nInjected: yes\" is unknown");
            assert_eq!(v, "key \"a  Injected: yes\" is unknown");
            assert!(super::value(&"y".repeat(10_000)).len() <= super::MAX_VALUE_BYTES);
        }
    }
}
