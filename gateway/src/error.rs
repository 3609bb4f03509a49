//! The errors the gateway answers with, and how each binding spells them:
//! a JSON-RPC error object (code, message, `data` with a
//! `google.rpc.ErrorInfo`) or, for HTTP+JSON, a `google.rpc.Status` body
//! under the HTTP status of the spec's section 5.4.

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

/// The protocol versions the gateway serves (`A2A-Version`).
pub const SUPPORTED_VERSIONS: &[&str] = &["1.0"];

/// The `domain` of every `ErrorInfo` the gateway sends.
const DOMAIN: &str = "a2a-protocol.org";

/// An A2A error: its kind and what to tell the client.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct A2aError {
    /// Which error of the spec.
    pub kind: ErrorKind,
    /// A sentence for people.
    pub message: String,
    /// Context for machines (`taskId`, `supportedVersions`, ...), sent as
    /// the `ErrorInfo`'s metadata (string values, as it requires).
    pub metadata: Map<String, Value>,
}

/// The errors of the spec (sections 3.3.2, 5.4 and 9.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The body is not JSON.
    JsonParse,
    /// Not a valid JSON-RPC request object.
    InvalidRequest,
    /// No such method (or path).
    MethodNotFound,
    /// The parameters are invalid.
    InvalidParams,
    /// Something broke on this side (NATS unreachable, ...).
    Internal,
    /// No such task.
    TaskNotFound,
    /// The task has ended and cannot be cancelled.
    TaskNotCancelable,
    /// Push notifications are not served.
    PushNotificationNotSupported,
    /// The operation is not served.
    UnsupportedOperation,
    /// A part's content type is not taken.
    ContentTypeNotSupported,
    /// The `A2A-Version` asked for is not served.
    VersionNotSupported,
    /// No extended card is served.
    ExtendedAgentCardNotConfigured,
    /// The caller presented no valid credentials (HTTP 401; JSON-RPC has
    /// no code of its own for it and uses the server-error range).
    Unauthenticated,
    /// The caller (or the gateway) has as many streams open as it may
    /// (HTTP 429; a server-error code in JSON-RPC, as above).
    TooManyStreams,
}

impl ErrorKind {
    /// The JSON-RPC error code.
    pub fn code(self) -> i64 {
        match self {
            ErrorKind::JsonParse => -32700,
            ErrorKind::InvalidRequest => -32600,
            ErrorKind::MethodNotFound => -32601,
            ErrorKind::InvalidParams => -32602,
            ErrorKind::Internal => -32603,
            ErrorKind::TaskNotFound => -32001,
            ErrorKind::TaskNotCancelable => -32002,
            ErrorKind::PushNotificationNotSupported => -32003,
            ErrorKind::UnsupportedOperation => -32004,
            ErrorKind::ContentTypeNotSupported => -32005,
            ErrorKind::ExtendedAgentCardNotConfigured => -32007,
            ErrorKind::VersionNotSupported => -32009,
            ErrorKind::Unauthenticated => -32010,
            ErrorKind::TooManyStreams => -32011,
        }
    }

    /// The HTTP status of the HTTP+JSON binding.
    pub fn http_status(self) -> StatusCode {
        match self {
            ErrorKind::TaskNotFound | ErrorKind::MethodNotFound => StatusCode::NOT_FOUND,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
            ErrorKind::TooManyStreams => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The `google.rpc` status name that goes with the HTTP status.
    fn rpc_status(self) -> &'static str {
        match self {
            ErrorKind::TaskNotFound | ErrorKind::MethodNotFound => "NOT_FOUND",
            ErrorKind::Internal => "INTERNAL",
            ErrorKind::Unauthenticated => "UNAUTHENTICATED",
            ErrorKind::TooManyStreams => "RESOURCE_EXHAUSTED",
            ErrorKind::JsonParse
            | ErrorKind::InvalidRequest
            | ErrorKind::InvalidParams
            | ErrorKind::ContentTypeNotSupported => "INVALID_ARGUMENT",
            _ => "FAILED_PRECONDITION",
        }
    }

    /// The `ErrorInfo` reason: the error's name in UPPER_SNAKE_CASE.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::JsonParse => "JSON_PARSE",
            ErrorKind::InvalidRequest => "INVALID_REQUEST",
            ErrorKind::MethodNotFound => "METHOD_NOT_FOUND",
            ErrorKind::InvalidParams => "INVALID_PARAMS",
            ErrorKind::Internal => "INTERNAL_ERROR",
            ErrorKind::TaskNotFound => "TASK_NOT_FOUND",
            ErrorKind::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            ErrorKind::PushNotificationNotSupported => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ErrorKind::UnsupportedOperation => "UNSUPPORTED_OPERATION",
            ErrorKind::ContentTypeNotSupported => "CONTENT_TYPE_NOT_SUPPORTED",
            ErrorKind::VersionNotSupported => "VERSION_NOT_SUPPORTED",
            ErrorKind::ExtendedAgentCardNotConfigured => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ErrorKind::Unauthenticated => "UNAUTHENTICATED",
            ErrorKind::TooManyStreams => "TOO_MANY_STREAMS",
        }
    }
}

impl A2aError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> A2aError {
        A2aError {
            kind,
            message: message.into(),
            metadata: Map::new(),
        }
    }

    /// With `key: value` in the metadata.
    pub fn with(mut self, key: &str, value: impl Into<String>) -> A2aError {
        self.metadata
            .insert(key.to_owned(), Value::String(value.into()));
        self
    }

    /// No task `id`.
    pub fn task_not_found(id: &str) -> A2aError {
        A2aError::new(ErrorKind::TaskNotFound, format!("no task {id}")).with("taskId", id)
    }

    /// The parameters are wrong, saying how.
    pub fn invalid_params(message: impl Into<String>) -> A2aError {
        A2aError::new(ErrorKind::InvalidParams, message)
    }

    /// A fault of the gateway or of what it stands on.
    pub fn internal(error: &anyhow::Error) -> A2aError {
        A2aError::new(ErrorKind::Internal, format!("{error:#}"))
    }

    /// The requested protocol version (`None`: no header, which means 0.3)
    /// is not served.
    pub fn version_not_supported(asked: Option<&str>) -> A2aError {
        let asked = asked.unwrap_or("");
        let shown = if asked.is_empty() {
            "0.3 (no A2A-Version header)".to_owned()
        } else {
            asked.to_owned()
        };
        A2aError::new(
            ErrorKind::VersionNotSupported,
            format!(
                "A2A protocol version {shown} is not supported; this agent serves {} \
                 (send the header `A2A-Version: 1.0`)",
                SUPPORTED_VERSIONS.join(", ")
            ),
        )
        .with("requestedVersion", asked)
        .with("supportedVersions", SUPPORTED_VERSIONS.join(","))
    }

    /// The `google.rpc.ErrorInfo` detail.
    fn error_info(&self) -> Value {
        json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.kind.reason(),
            "domain": DOMAIN,
            "metadata": self.metadata,
        })
    }

    /// The JSON-RPC error object.
    pub fn to_jsonrpc(&self) -> Value {
        json!({
            "code": self.kind.code(),
            "message": self.message,
            "data": [self.error_info()],
        })
    }

    /// The HTTP+JSON body (`google.rpc.Status`).
    pub fn to_rest(&self) -> Value {
        json!({
            "error": {
                "code": self.kind.http_status().as_u16(),
                "status": self.kind.rpc_status(),
                "message": self.message,
                "details": [self.error_info()],
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_statuses_are_those_of_the_spec() {
        let table = [
            (ErrorKind::TaskNotFound, -32001, 404, "TASK_NOT_FOUND"),
            (
                ErrorKind::TaskNotCancelable,
                -32002,
                400,
                "TASK_NOT_CANCELABLE",
            ),
            (
                ErrorKind::PushNotificationNotSupported,
                -32003,
                400,
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
            ),
            (
                ErrorKind::UnsupportedOperation,
                -32004,
                400,
                "UNSUPPORTED_OPERATION",
            ),
            (
                ErrorKind::ContentTypeNotSupported,
                -32005,
                400,
                "CONTENT_TYPE_NOT_SUPPORTED",
            ),
            (
                ErrorKind::VersionNotSupported,
                -32009,
                400,
                "VERSION_NOT_SUPPORTED",
            ),
            (
                ErrorKind::ExtendedAgentCardNotConfigured,
                -32007,
                400,
                "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            ),
            (ErrorKind::JsonParse, -32700, 400, "JSON_PARSE"),
            (ErrorKind::InvalidRequest, -32600, 400, "INVALID_REQUEST"),
            (ErrorKind::MethodNotFound, -32601, 404, "METHOD_NOT_FOUND"),
            (ErrorKind::InvalidParams, -32602, 400, "INVALID_PARAMS"),
            (ErrorKind::Internal, -32603, 500, "INTERNAL_ERROR"),
        ];
        for (kind, code, status, reason) in table {
            assert_eq!(kind.code(), code, "{kind:?}");
            assert_eq!(kind.http_status().as_u16(), status, "{kind:?}");
            assert_eq!(kind.reason(), reason, "{kind:?}");
        }
    }

    #[test]
    fn both_bindings_carry_the_reason_and_metadata() {
        let e = A2aError::task_not_found("s-1");
        let rpc = e.to_jsonrpc();
        assert_eq!(rpc["code"], -32001);
        assert_eq!(rpc["data"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(rpc["data"][0]["metadata"]["taskId"], "s-1");
        let rest = e.to_rest();
        assert_eq!(rest["error"]["code"], 404);
        assert_eq!(rest["error"]["status"], "NOT_FOUND");
        assert_eq!(
            rest["error"]["details"][0]["@type"],
            "type.googleapis.com/google.rpc.ErrorInfo"
        );
        let v = A2aError::version_not_supported(None);
        assert!(v.message.contains("0.3"), "{}", v.message);
        assert_eq!(v.metadata["supportedVersions"], "1.0");
    }
}
