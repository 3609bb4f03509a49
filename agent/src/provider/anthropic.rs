//! The Anthropic Messages API provider.
//!
//! `POST {base_url}/v1/messages` with headers `x-api-key` and
//! `anthropic-version`; the body has `system`, `messages` whose content is a
//! list of blocks (`text`, `tool_use` from the assistant, `tool_result` from
//! the user) and `tools` with `input_schema`. The reply's `content` blocks,
//! `stop_reason` and `usage.input_tokens`/`output_tokens` come back.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::http::JsonClient;
use super::pricing::PriceTable;
use super::{
    CompletionRequest, CompletionResponse, Provider, ProviderConfig, ProviderError, Role,
    TOOL_ERROR_PREFIX, ToolCall, Usage, field, offered_schema,
};

/// Where the Anthropic API is when no base URL is configured.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The API version sent in `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// `max_tokens` is required by the Messages API; this is sent when neither
/// the request nor the configuration gives one.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u32 = 4096;

/// A provider for the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    http: JsonClient,
    url: String,
    headers: HeaderMap,
    model: String,
    name: String,
    prices: PriceTable,
    max_tokens: Option<u32>,
    /// Whether replies are asked for as event streams.
    stream: bool,
}

impl AnthropicProvider {
    /// A provider from `config` (its `kind` is not looked at). It needs an
    /// API key.
    pub fn new(config: &ProviderConfig) -> Result<AnthropicProvider, ProviderError> {
        let base = config
            .base_url
            .as_deref()
            .unwrap_or(ANTHROPIC_DEFAULT_BASE_URL)
            .trim_end_matches('/');
        let key = config
            .api_key
            .as_deref()
            .filter(|k| !k.is_empty())
            .ok_or_else(|| ProviderError::Refused("no Anthropic API key".to_string()))?;
        let mut key = HeaderValue::from_str(key).map_err(|_| {
            ProviderError::Refused("the Anthropic API key is not a valid header value".into())
        })?;
        key.set_sensitive(true);
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("x-api-key"), key);
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        Ok(AnthropicProvider {
            http: JsonClient::new(
                super::sse::Wire::Anthropic,
                config.timeout,
                config.max_retries,
                config.retry_min_delay,
            )?,
            url: format!("{base}/v1/messages"),
            headers,
            model: config.model.clone(),
            name: format!("anthropic:{}", config.model),
            prices: config.prices(),
            max_tokens: config.max_tokens,
            stream: config.stream,
        })
    }

    /// This provider with every HTTP attempt going through `limiter`'s
    /// shared limits of its endpoint (its URL and model).
    pub fn with_limiter(
        mut self,
        limiter: std::sync::Arc<dyn super::limit::CallLimiter>,
    ) -> AnthropicProvider {
        let endpoint = super::limit::Endpoint::new(self.url.clone(), self.model.clone());
        self.http = self.http.limited(limiter, endpoint);
        self
    }

    /// The request body for `request`. System messages become `system`;
    /// consecutive messages of one side are merged into one message of
    /// several blocks, as the API wants user and assistant turns to alternate.
    pub fn body(&self, request: &CompletionRequest) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::System)
            .map(|m| m.content.as_str())
            .collect();
        let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
        for m in &request.messages {
            let (role, blocks) = match m.role {
                Role::System => continue,
                Role::User => ("user", vec![json!({"type": "text", "text": m.content})]),
                Role::Assistant => {
                    let mut blocks = Vec::new();
                    if !m.content.is_empty() {
                        blocks.push(json!({"type": "text", "text": m.content}));
                    }
                    for c in &m.tool_calls {
                        blocks.push(json!({
                            "type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments,
                        }));
                    }
                    if blocks.is_empty() {
                        blocks.push(json!({"type": "text", "text": ""}));
                    }
                    ("assistant", blocks)
                }
                Role::Tool => {
                    let mut block = json!({
                        "type": "tool_result",
                        "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                        "content": m.content,
                    });
                    if m.content.starts_with(TOOL_ERROR_PREFIX) {
                        block["is_error"] = json!(true);
                    }
                    ("user", vec![block])
                }
            };
            match messages.last_mut() {
                Some((last, content)) if *last == role => content.extend(blocks),
                _ => messages.push((role, blocks)),
            }
        }
        let messages: Vec<Value> = messages
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        let max_tokens = request
            .max_tokens
            .or(self.max_tokens)
            .unwrap_or(ANTHROPIC_DEFAULT_MAX_TOKENS);
        let mut body = json!({
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": messages,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "input_schema": offered_schema(&t.parameters),
                    })
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        if self.stream {
            body["stream"] = json!(true);
        }
        body
    }
}

/// Reads a Messages API reply.
pub fn parse_response(reply: &Value) -> Result<CompletionResponse, ProviderError> {
    let blocks = field(reply, "content", "the reply")?
        .as_array()
        .ok_or_else(|| ProviderError::InvalidResponse("`content` is not an array".to_string()))?;
    let mut texts = Vec::new();
    let mut tool_calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let where_ = format!("content[{i}]");
        let kind = field(block, "type", &where_)?.as_str().unwrap_or_default();
        match kind {
            "text" => texts.push(
                field(block, "text", &where_)?
                    .as_str()
                    .ok_or_else(|| {
                        ProviderError::InvalidResponse(format!("`{where_}.text` is not text"))
                    })?
                    .to_string(),
            ),
            "tool_use" => {
                let text = |key: &str| -> Result<String, ProviderError> {
                    field(block, key, &where_)?
                        .as_str()
                        .map(str::to_string)
                        .ok_or_else(|| {
                            ProviderError::InvalidResponse(format!("`{where_}.{key}` is not text"))
                        })
                };
                tool_calls.push(ToolCall {
                    id: text("id")?,
                    name: text("name")?,
                    arguments: block.get("input").cloned().unwrap_or_else(|| json!({})),
                });
            }
            // Thinking and other blocks carry nothing the loop uses.
            _ => {}
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
        content: texts.join(""),
        tool_calls,
        usage: Usage {
            input_tokens: count("input_tokens")
                + count("cache_creation_input_tokens")
                + count("cache_read_input_tokens"),
            output_tokens: count("output_tokens"),
        },
        finish_reason: reply
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn complete(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        let span = super::chat_span("anthropic", &self.model);
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
    use crate::provider::ChatMessage;

    #[test]
    fn replies_parse_with_tool_use_and_usage() {
        let reply = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "text", "text": "Let me count."},
                {"type": "tool_use", "id": "toolu_1", "name": "count", "input": {"text": "a b"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 20, "output_tokens": 7}
        });
        let r = parse_response(&reply).unwrap();
        assert_eq!(r.content, "Let me count.");
        assert_eq!(r.tool_calls[0].id, "toolu_1");
        assert_eq!(r.tool_calls[0].arguments, json!({"text": "a b"}));
        assert_eq!(r.finish_reason.as_deref(), Some("tool_use"));
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 20,
                output_tokens: 7
            }
        );
        for bad in [
            json!({}),
            json!({"content": "hi"}),
            json!({"content": [{"text": "x"}]}),
            json!({"content": [{"type": "tool_use", "name": "x"}]}),
        ] {
            let e = parse_response(&bad).unwrap_err();
            assert!(matches!(e, ProviderError::InvalidResponse(_)), "{bad}: {e}");
        }
    }

    #[test]
    fn tool_results_merge_into_one_user_turn() {
        let config = ProviderConfig {
            api_key: Some("k".into()),
            ..ProviderConfig::anthropic("claude-x")
        };
        let p = AnthropicProvider::new(&config).unwrap();
        let request = CompletionRequest {
            messages: vec![
                ChatMessage::system("be brief"),
                ChatMessage::user("task"),
                ChatMessage::assistant_with_calls(
                    "",
                    vec![
                        ToolCall {
                            id: "a".into(),
                            name: "x".into(),
                            arguments: json!({}),
                        },
                        ToolCall {
                            id: "b".into(),
                            name: "y".into(),
                            arguments: json!({}),
                        },
                    ],
                ),
                ChatMessage::tool_result("a", "1"),
                ChatMessage::tool_result("b", "ERROR: failed: no"),
                ChatMessage::user("the gate failed"),
            ],
            tools: vec![],
            max_tokens: None,
        };
        let body = p.body(&request);
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 4096);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][1]["type"], "tool_use");
        assert_eq!(
            messages[2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": "b", "content": "ERROR: failed: no", "is_error": true},
                {"type": "text", "text": "the gate failed"},
            ])
        );
    }
}
