//! The error envelope: a machine-readable code, a message for people,
//! whether a retry may help, and details.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What went wrong, as a stable snake_case string on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
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

impl ErrorBody {
    /// A non-retriable error with no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retriable: matches!(code, ErrorCode::Internal | ErrorCode::Timeout),
            details: BTreeMap::new(),
        }
    }

    /// Adds one detail.
    pub fn with_detail(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.details.insert(key.into(), value.to_string());
        self
    }
}
