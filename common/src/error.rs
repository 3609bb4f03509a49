//! The error envelope: a machine-readable code, a message for people,
//! whether a retry may help, and details.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What went wrong, as a stable snake_case string on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The message names a protocol version this build cannot read.
    UnsupportedProtocol,
    /// The bytes could not be decoded in the declared codec.
    DecodeFailed,
    /// The message decoded but breaks a rule (a missing field, a cycle, ...).
    ValidationFailed,
    /// The message is larger than a configured limit.
    PayloadTooLarge,
    /// The sender may not do this.
    AuthorizationDenied,
    /// A deadline passed.
    Timeout,
    /// A limit other than size was reached (steps, revisions, attempts).
    LimitExceeded,
    /// The thing named does not exist.
    NotFound,
    /// A tool call failed.
    ToolFailed,
    /// The agent could not do the task and said why (a model that gave up,
    /// the offline provider finding no tool for the request).
    GaveUp,
    /// The work was cancelled.
    Cancelled,
    /// A fault inside Swarm or its broker; usually retriable.
    Internal,
}

impl ErrorCode {
    /// The HTTP-like status number used in `Nats-Service-Error-Code`.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::UnsupportedProtocol
            | ErrorCode::DecodeFailed
            | ErrorCode::ValidationFailed => 400,
            ErrorCode::AuthorizationDenied => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Timeout => 408,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::LimitExceeded
            | ErrorCode::ToolFailed
            | ErrorCode::GaveUp
            | ErrorCode::Cancelled => 422,
            ErrorCode::Internal => 500,
        }
    }

    /// The wire name of this code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::UnsupportedProtocol => "unsupported_protocol",
            ErrorCode::DecodeFailed => "decode_failed",
            ErrorCode::ValidationFailed => "validation_failed",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::AuthorizationDenied => "authorization_denied",
            ErrorCode::Timeout => "timeout",
            ErrorCode::LimitExceeded => "limit_exceeded",
            ErrorCode::NotFound => "not_found",
            ErrorCode::ToolFailed => "tool_failed",
            ErrorCode::GaveUp => "gave_up",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error envelope carried in replies and in A2AP `Error` messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error, JsonSchema)]
#[error("{code}: {message}")]
pub struct ErrorBody {
    /// What went wrong.
    pub code: ErrorCode,
    /// A sentence for people.
    pub message: String,
    /// Whether sending the same thing again may succeed.
    pub retriable: bool,
    /// Structured context (field names, limits, offending values).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<String, String>,
}

/// The longest error message, in bytes: a message may quote the input that
/// caused it, and must not echo a large one back whole.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The longest detail value, in bytes.
pub const MAX_DETAIL_BYTES: usize = 256;

/// `text` cut to at most `max` bytes on a character boundary, saying how long
/// it was when cut.
pub fn excerpt(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(32);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes]", &text[..end], text.len())
}

impl ErrorBody {
    /// A non-retriable error with no details; the message is cut to
    /// [`MAX_MESSAGE_BYTES`].
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            code,
            message: if message.len() > MAX_MESSAGE_BYTES {
                excerpt(&message, MAX_MESSAGE_BYTES)
            } else {
                message
            },
            retriable: matches!(code, ErrorCode::Internal | ErrorCode::Timeout),
            details: BTreeMap::new(),
        }
    }

    /// Adds one detail, its value cut to [`MAX_DETAIL_BYTES`].
    pub fn with_detail(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.details
            .insert(key.into(), excerpt(&value.to_string(), MAX_DETAIL_BYTES));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_input_is_echoed_as_a_short_excerpt() {
        let huge = "x".repeat(200_000);
        let e = ErrorBody::new(ErrorCode::ValidationFailed, format!("bad value {huge}"))
            .with_detail("value", &huge);
        assert!(e.message.len() <= MAX_MESSAGE_BYTES, "{}", e.message.len());
        assert!(
            e.message.ends_with("[200010 bytes]"),
            "{}",
            &e.message[900..]
        );
        assert!(e.details["value"].len() <= MAX_DETAIL_BYTES);
        let short = ErrorBody::new(ErrorCode::NotFound, "no swarm é");
        assert_eq!(short.message, "no swarm é");
        assert!(excerpt("ééé", 4).len() <= 4 + 20);
    }
}
