//! A2AP, the agent-to-agent protocol of Swarm: a closed vocabulary with no I/O.
//!
//! Everything two Swarm processes (or a peer in another language) must agree
//! on lives here: the message types ([`messages`]), the envelope that wraps
//! them ([`Envelope`]), the codecs chosen by `Content-Type` ([`codec`]), the
//! subject map ([`subjects`]), the durable state of a swarm ([`state`]), the
//! limits every role enforces ([`limits`]), plan validation ([`validate`]),
//! the mission intake format ([`mission`]), the protobuf form of the
//! messages ([`proto`], `proto/a2ap.proto`), what makes an attempt a
//! success ([`outcome`]) and the JSON Schemas of all of it ([`schema`]);
//! `docs/protocol.md` is the specification built on them. This crate has no
//! tokio and no NATS client: `cargo tree -p swarm-common -i tokio` finds
//! nothing.

pub mod approval;
pub mod card;
pub mod codec;
pub mod collaborate;
pub mod condition;
pub mod error;
pub mod gates;
pub mod hierarchy;
pub mod limits;
pub mod map;
pub mod messages;
pub mod mission;
pub mod outcome;
pub mod proto;
pub mod replan;
pub mod schema;
mod seed;
pub mod skill;
pub mod state;
pub mod subjects;
pub mod timestamp;
pub mod validate;

pub use codec::{Codec, CodecError};
pub use collaborate::CollaborationRequest;
pub use error::{ErrorBody, ErrorCode};
pub use limits::Limits;
pub use messages::*;
pub use state::{Chunks, SwarmState, TaskState, Tasks};

/// The A2AP protocol version this build speaks and writes into every envelope.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The major protocol version this build reads: a message of any minor
/// version of it is read (a newer minor may add fields, which are ignored;
/// an older one is read as it is), a message of any other major is refused.
pub const PROTOCOL_MAJOR: u64 = 1;

/// Protocol versions this build speaks, newest first: what a handshake
/// offers. It reads every minor version of [`PROTOCOL_MAJOR`].
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["1.0"];

/// The version a message that names none is read as: the seed's classes may
/// send no `protocol_version`, and they speak 1.0.
pub const DEFAULT_PROTOCOL_VERSION: &str = "1.0";

/// [`DEFAULT_PROTOCOL_VERSION`] as an owned string, for serde defaults.
pub fn default_protocol_version() -> String {
    DEFAULT_PROTOCOL_VERSION.to_string()
}

/// A protocol version as `(major, minor)`, if it is `major.minor` in decimal
/// digits (`"1.0"`, `"1.7"`); `None` for anything else (`"1"`, `"v1.0"`, `""`).
pub fn parse_protocol_version(version: &str) -> Option<(u64, u64)> {
    let (major, minor) = version.split_once('.')?;
    let number = |s: &str| {
        (!s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    Some((number(major)?, number(minor)?))
}

/// Whether `version` is one this build can read: any minor version of
/// [`PROTOCOL_MAJOR`].
pub fn protocol_supported(version: &str) -> bool {
    parse_protocol_version(version).is_some_and(|(major, _)| major == PROTOCOL_MAJOR)
}

/// The typed refusal of a message or peer that speaks `version` (a message)
/// or none of ours: [`ErrorCode::UnsupportedProtocol`], naming the versions
/// this build speaks.
pub fn unsupported_protocol(version: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::UnsupportedProtocol,
        format!(
            "protocol version {:?} is not supported; this build speaks {} (any {}.x is read)",
            crate::error::excerpt(version, 32),
            SUPPORTED_PROTOCOL_VERSIONS.join(", "),
            PROTOCOL_MAJOR
        ),
    )
    .with_detail("supported", SUPPORTED_PROTOCOL_VERSIONS.join(","))
}

/// Header names Swarm sets on every NATS message it publishes.
pub mod headers {
    /// The codec of the payload (`application/msgpack`, `application/json`,
    /// `application/protobuf`, `text/plain`).
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

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn versions_parse_as_major_dot_minor() {
        assert_eq!(parse_protocol_version("1.0"), Some((1, 0)));
        assert_eq!(parse_protocol_version("1.7"), Some((1, 7)));
        assert_eq!(parse_protocol_version("99.0"), Some((99, 0)));
        for bad in [
            "", "1", "1.", ".0", "v1.0", "1.0.0", "1.-1", "+1.0", " 1.0", "1.x",
        ] {
            assert_eq!(parse_protocol_version(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn any_minor_of_our_major_is_read_and_any_other_major_is_not() {
        for ok in ["1.0", "1.1", "1.7", "1.999"] {
            assert!(protocol_supported(ok), "{ok}");
        }
        for refused in ["0.9", "2.0", "99.0", "9.9", "1", "one", ""] {
            assert!(!protocol_supported(refused), "{refused}");
        }
        assert!(protocol_supported(PROTOCOL_VERSION));
        assert!(protocol_supported(DEFAULT_PROTOCOL_VERSION));
        assert!(
            SUPPORTED_PROTOCOL_VERSIONS
                .iter()
                .all(|v| protocol_supported(v))
        );
    }

    #[test]
    fn the_refusal_is_typed_and_names_our_versions() {
        let e = unsupported_protocol("99.0");
        assert_eq!(e.code, ErrorCode::UnsupportedProtocol);
        assert!(
            e.message.contains("99.0") && e.message.contains("1.0"),
            "{}",
            e.message
        );
        assert!(unsupported_protocol(&"9".repeat(10_000)).message.len() < 200);
    }
}
