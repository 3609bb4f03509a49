//! The OpenAI chat-completions provider, for any endpoint that speaks that
//! wire format: OpenAI, vLLM, Ollama, the llama.cpp server, LM Studio.
//!
//! `POST {base_url}/chat/completions` with `model`, `messages` (tool calls as
//! `tool_calls` on assistant messages, results as `tool` messages) and
//! `tools`; the reply's first choice carries `message.content`,
//! `message.tool_calls` and `finish_reason`, and `usage` its token counts.

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::http::JsonClient;
use super::pricing::PriceTable;
use super::{
    ChatMessage, CompletionRequest, CompletionResponse, Provider, ProviderConfig, ProviderError,
    Role, ToolCall, Usage, field, offered_schema,
};

/// Where the OpenAI API is when no base URL is configured.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// A provider for OpenAI-compatible chat-completions endpoints.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    http: JsonClient,
    url: String,
    headers: HeaderMap,
    model: String,
    name: String,
    prices: PriceTable,
    max_tokens: Option<u32>,
    /// Whether replies are asked for as event streams.
    stream: bool,
    /// OpenAI itself wants `max_completion_tokens` (its reasoning models
    /// refuse `max_tokens`); compatible servers know only `max_tokens`.
    max_tokens_key: &'static str,
}

impl OpenAiProvider {
    /// A provider from `config` (its `kind` is not looked at). The API key
    /// is optional: local servers often need none.
    pub fn new(config: &ProviderConfig) -> Result<OpenAiProvider, ProviderError> {
        let base = config
            .base_url
            .as_deref()
            .unwrap_or(OPENAI_DEFAULT_BASE_URL)
            .trim_end_matches('/');
        let mut headers = HeaderMap::new();
        if let Some(key) = config.api_key.as_deref().filter(|k| !k.is_empty()) {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ProviderError::Refused("the OpenAI API key is not a valid header value".into())
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(OpenAiProvider {
            http: JsonClient::new(
                super::sse::Wire::OpenAi,
                config.timeout,
                config.max_retries,
                config.retry_min_delay,
            )?,
            url: format!("{base}/chat/completions"),
            headers,
            model: config.model.clone(),
            name: format!("openai:{}", config.model),
            prices: config.prices(),
            max_tokens: config.max_tokens,
            stream: config.stream,
            max_tokens_key: if config.base_url.is_none() {
                "max_completion_tokens"
            } else {
                "max_tokens"
            },
        })
    }

    /// This provider with every HTTP attempt going through `limiter`'s
    /// shared limits of its endpoint (its URL and model).
    pub fn with_limiter(
        mut self,
        limiter: std::sync::Arc<dyn super::limit::CallLimiter>,
    ) -> OpenAiProvider {
        let endpoint = super::limit::Endpoint::new(self.url.clone(), self.model.clone());
        self.http = self.http.limited(limiter, endpoint);
        self
    }

    /// The request body for `request`.
    pub fn body(&self, request: &CompletionRequest) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(message).collect();
        let mut body = json!({ "model": self.model, "messages": messages });
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": offered_schema(&t.parameters),
                        }
                    })
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        if let Some(max) = request.max_tokens.or(self.max_tokens) {
            body[self.max_tokens_key] = json!(max);
        }
        if self.stream {
            body["stream"] = json!(true);
            // Without this the stream carries no token counts.
            body["stream_options"] = json!({"include_usage": true});
        }
        body
    }
}

fn message(m: &ChatMessage) -> Value {
    match m.role {
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User => json!({"role": "user", "content": m.content}),
        Role::Assistant if m.tool_calls.is_empty() => {
            json!({"role": "assistant", "content": m.content})
        }
        Role::Assistant => {
            let calls: Vec<Value> = m
                .tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments.to_string()},
                    })
                })
                .collect();
            let content = if m.content.is_empty() {
                Value::Null
            } else {
                Value::String(m.content.clone())
            };
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
    }
}

/// Reads a chat-completions reply.
pub fn parse_response(reply: &Value) -> Result<CompletionResponse, ProviderError> {
    let choice = reply
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| {
            ProviderError::InvalidResponse("the reply has no `choices[0]`".to_string())
        })?;
    let msg = field(choice, "message", "choices[0]")?;
    let content = match msg.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(ProviderError::InvalidResponse(format!(
                "`choices[0].message.content` is not text: {other}"
            )));
        }
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg.get("tool_calls").filter(|c| !c.is_null()) {
        let calls = calls.as_array().ok_or_else(|| {
            ProviderError::InvalidResponse("`message.tool_calls` is not an array".to_string())
        })?;
        for (i, call) in calls.iter().enumerate() {
            let where_ = format!("tool_calls[{i}]");
            let function = field(call, "function", &where_)?;
            let name = field(function, "name", &where_)?
                .as_str()
                .ok_or_else(|| {
                    ProviderError::InvalidResponse(format!("`{where_}.function.name` is not text"))
                })?
                .to_string();
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map_or_else(|| format!("call_{i}"), str::to_string);
            tool_calls.push(ToolCall {
                id,
                name,
                arguments: arguments(function.get("arguments")),
            });
        }
    }
    let usage = reply.get("usage").filter(|u| !u.is_null());
    let count = |key: &str| {
        usage
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(CompletionResponse {
        content,
        tool_calls,
        usage: Usage {
            input_tokens: count("prompt_tokens"),
            output_tokens: count("completion_tokens"),
        },
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// A call's arguments: OpenAI sends a JSON string, some local servers an
/// object. Text that is not JSON is passed on as a string, so the tool
/// reports the bad arguments to the model instead of the task failing.
fn arguments(raw: Option<&Value>) -> Value {
    match raw {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
    }
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn complete(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        let span = super::chat_span("openai", &self.model);
        let result = async {
            let reply = self
                .http
                .post(&self.url, &self.headers, &self.body(&request))
                .await?;
            super::record_response_model(&reply);
            parse_response(&reply)
        }
        .instrument(span.clone())
        .await;
        super::record_outcome(&span, &result, |usage| self.cost_usd(usage));
        result
    }

    fn cost_usd(&self, usage: Usage) -> f64 {
        self.prices.cost_usd(&self.model, usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_with_tool_calls_and_usage() {
        let reply = json!({
            "id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "calc", "arguments": "{\"expression\":\"1+1\"}"}},
                    {"type": "function", "function": {"name": "echo", "arguments": {"text": "x"}}},
                    {"id": "call_c", "type": "function", "function": {"name": "echo", "arguments": "{oops"}}
                ]}}],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        });
        let r = parse_response(&reply).unwrap();
        assert_eq!(r.content, "");
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 3
            }
        );
        assert_eq!(r.tool_calls[0].arguments, json!({"expression": "1+1"}));
        assert_eq!(r.tool_calls[1].id, "call_1");
        assert_eq!(r.tool_calls[1].arguments, json!({"text": "x"}));
        assert_eq!(r.tool_calls[2].arguments, json!("{oops"));
    }

    #[test]
    fn the_reply_cap_uses_the_name_the_endpoint_knows() {
        let request = CompletionRequest {
            max_tokens: Some(100),
            ..CompletionRequest::default()
        };
        let mut config = ProviderConfig::openai("gpt-4o");
        config.api_key = Some("k".into());
        let body = OpenAiProvider::new(&config).unwrap().body(&request);
        assert_eq!(body["max_completion_tokens"], 100);
        assert!(body.get("max_tokens").is_none() && body.get("tools").is_none());
        config.base_url = Some("http://127.0.0.1:8000/v1".into());
        let body = OpenAiProvider::new(&config).unwrap().body(&request);
        assert_eq!(body["max_tokens"], 100);
    }

    #[test]
    fn missing_fields_are_invalid_responses() {
        for bad in [
            json!({}),
            json!({"choices": []}),
            json!({"choices": [{"finish_reason": "stop"}]}),
            json!({"choices": [{"message": {"content": 5}}]}),
            json!({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}),
        ] {
            let e = parse_response(&bad).unwrap_err();
            assert!(matches!(e, ProviderError::InvalidResponse(_)), "{bad}: {e}");
        }
    }
}
