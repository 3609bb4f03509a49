//! A conversation with a model, as every backend sees it: the messages
//! ([`ChatMessage`]) and tool calls of one completion call
//! ([`CompletionRequest`], [`CompletionResponse`]), what it cost
//! ([`Usage`]), how it failed ([`ProviderError`]), and the [`Provider`]
//! trait that answers it. The HTTP backends ([`crate::provider`]) and the
//! offline provider ([`crate::offline`]) implement the trait; the agent loop,
//! the planner and the reviewer call it.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::tools::ToolSpec;

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
