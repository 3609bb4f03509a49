//! The [`Provider`] trait: one chat-completion call with tools, shaped so
//! OpenAI chat completions and Anthropic Messages fit behind it; the
//! [`OfflineProvider`] that needs neither; the [`OpenAiProvider`] and
//! [`AnthropicProvider`] that speak those wire formats over HTTP; and
//! [`ProviderConfig`], which picks one from flags or the environment.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::tools::ToolSpec;

pub mod anthropic;
pub mod config;
mod http;
mod offline;
pub mod openai;
pub mod pricing;

pub use anthropic::AnthropicProvider;
pub use config::{ConfigError, ProviderArgs, ProviderConfig, ProviderKind};
pub use http::MAX_RETRY_AFTER;
pub use offline::OfflineProvider;
pub use openai::OpenAiProvider;
pub use pricing::{PriceTable, Pricing};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions: the persona.
    System,
    /// The task, context and feedback.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A model's request to run a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Ties the call to its result message.
    pub id: String,
    /// The tool.
    pub name: String,
    /// Its arguments, a JSON object.
    pub arguments: serde_json::Value,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// Tool calls an assistant message asks for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    fn new(role: Role, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new(Role::User, content)
    }

    /// An assistant message with no tool calls.
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::new(Role::Assistant, content)
    }

    /// An assistant message that asks for tool calls.
    pub fn assistant_with_calls(
        content: impl Into<String>,
        tool_calls: Vec<ToolCall>,
    ) -> ChatMessage {
        ChatMessage {
            tool_calls,
            ..ChatMessage::new(Role::Assistant, content)
        }
    }

    /// The result of the tool call `id`.
    pub fn tool_result(id: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            tool_call_id: Some(id.into()),
            ..ChatMessage::new(Role::Tool, content)
        }
    }
}

/// What a tool result starts with when the call failed, so a model (or the
/// offline provider) can tell an error from an output.
pub const TOOL_ERROR_PREFIX: &str = "ERROR: ";

/// One completion call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// A cap on the reply's length, in tokens.
    pub max_tokens: Option<u32>,
}

/// Tokens a call consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// A provider's reply: text, tool calls, or both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionResponse {
    /// The text; the final answer when there are no tool calls.
    pub content: String,
    /// Tools to run before the next call.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens this call consumed.
    pub usage: Usage,
    /// Why the model stopped, as the provider says it (`stop`, `tool_calls`,
    /// `end_turn`, `max_tokens`, ...), when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// Why a completion call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The request did not reach the provider, or its reply did not come back.
    #[error("transport error: {0}")]
    Transport(String),
    /// The provider did not answer in time.
    #[error("the provider timed out after {0:?}")]
    Timeout(Duration),
    /// The provider asks us to slow down.
    #[error("rate limited by the provider{}", retry_after.map(|d| format!("; retry after {d:?}")).unwrap_or_default())]
    RateLimited {
        /// How long the provider asked us to wait (`Retry-After`).
        retry_after: Option<Duration>,
    },
    /// The provider failed on its side (an HTTP 5xx, an overload).
    #[error("provider error: {0}")]
    Server(String),
    /// The reply could not be understood.
    #[error("invalid response from the provider: {0}")]
    InvalidResponse(String),
    /// The provider refused the request (bad request, authentication, policy);
    /// sending it again will not help.
    #[error("the provider refused the request: {0}")]
    Refused(String),
}

impl ProviderError {
    /// Whether the same request may succeed later.
    pub fn retriable(&self) -> bool {
        matches!(
            self,
            ProviderError::Transport(_)
                | ProviderError::Timeout(_)
                | ProviderError::RateLimited { .. }
                | ProviderError::Server(_)
        )
    }

    /// How long to wait before retrying, when the provider said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::RateLimited { retry_after } => *retry_after,
            _ => None,
        }
    }
}

/// A backend that answers a conversation with text or tool calls.
#[async_trait]
pub trait Provider: Send + Sync {
    /// A short name for results and logs (`offline`, a model name).
    fn name(&self) -> &str;
    /// Answers one request.
    async fn complete(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError>;
    /// The estimated cost of `usage` in US dollars; 0 when unknown (the
    /// offline provider, a model without a price).
    fn cost_usd(&self, usage: Usage) -> f64 {
        let _ = usage;
        0.0
    }
    /// Whether the same conversation always gets the same reply, at no
    /// cost (the offline provider). Such replies are not worth keeping in
    /// a worker's step journal: asking again is as cheap as a replay.
    fn deterministic(&self) -> bool {
        false
    }
}

/// `value[key]`, or an [`ProviderError::InvalidResponse`] naming what is missing where.
pub(crate) fn field<'a>(
    value: &'a serde_json::Value,
    key: &str,
    context: &str,
) -> Result<&'a serde_json::Value, ProviderError> {
    value
        .get(key)
        .filter(|v| !v.is_null())
        .ok_or_else(|| ProviderError::InvalidResponse(format!("{context} has no `{key}`")))
}

/// A tool's schema as sent to a model: without the `$schema` marker, which
/// some OpenAI-compatible servers refuse.
pub(crate) fn offered_schema(schema: &serde_json::Value) -> serde_json::Value {
    let mut schema = schema.clone();
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retriable_errors_are_the_transient_ones() {
        assert!(ProviderError::Transport("reset".into()).retriable());
        assert!(ProviderError::Server("502".into()).retriable());
        let limited = ProviderError::RateLimited {
            retry_after: Some(Duration::from_secs(2)),
        };
        assert!(limited.retriable());
        assert_eq!(limited.retry_after(), Some(Duration::from_secs(2)));
        assert!(limited.to_string().contains("retry after 2s"));
        assert!(!ProviderError::Refused("401".into()).retriable());
        assert!(!ProviderError::InvalidResponse("not json".into()).retriable());
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let key = prop::sample::select(vec![
            "choices",
            "message",
            "content",
            "tool_calls",
            "function",
            "name",
            "arguments",
            "id",
            "type",
            "text",
            "tool_use",
            "input",
            "usage",
            "prompt_tokens",
            "input_tokens",
            "finish_reason",
            "stop_reason",
            "x",
        ]);
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            prop::sample::select(vec!["", "text", "tool_use", "{\"a\":1}", "{bad"])
                .prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map(key.clone(), inner, 0..5).prop_map(|m| {
                    serde_json::Value::Object(
                        m.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    )
                }),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn any_reply_parses_or_is_an_invalid_response(value in json_value()) {
            for result in [openai::parse_response(&value), anthropic::parse_response(&value)] {
                if let Err(e) = result {
                    proptest::prop_assert!(matches!(e, ProviderError::InvalidResponse(_)), "{e}");
                }
            }
        }
    }

    #[test]
    fn messages_serialize_compactly() {
        let m = ChatMessage::tool_result("c1", "42");
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"role": "tool", "content": "42", "tool_call_id": "c1"})
        );
        assert_eq!(ChatMessage::user("hi").tool_calls, vec![]);
    }
}
