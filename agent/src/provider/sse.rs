//! Streamed replies put back together. Both providers ask for their
//! streaming APIs (server-sent events, read by the `eventsource-stream`
//! crate); an [`Assembler`] turns one reply's events into the reply the
//! non-streamed API would have sent, so reading it, counting its tokens and
//! journaling it stay one path, while the text written so far is there to
//! show as it grows.
//!
//! **Invariant:** a reply is whole only when its stream says so (OpenAI's
//! `[DONE]` or a `finish_reason`, Anthropic's `message_stop`); a stream cut
//! before that is a retriable [`ProviderError::Transport`], so the call is
//! retried as a whole reply and half an answer is never taken for one.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::ProviderError;

/// Which streaming API a reply comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// OpenAI chat completions (`chat.completion.chunk` events).
    OpenAi,
    /// Anthropic Messages (`message_start` ... `message_stop`).
    Anthropic,
}

/// What an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Fed {
    /// The reply's text grew.
    pub grew: bool,
    /// The reply is whole; nothing after this matters.
    pub done: bool,
}

/// An error the stream carried in place of the rest of the reply, with the
/// HTTP status it stands for (an Anthropic `overloaded_error` is a 529 to
/// the shared limits, though the stream began with a 200).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StreamError {
    pub error: ProviderError,
    pub status: Option<u16>,
}

impl From<ProviderError> for StreamError {
    fn from(error: ProviderError) -> Self {
        StreamError {
            error,
            status: None,
        }
    }
}

/// One reply's events, assembled.
#[derive(Debug)]
pub(crate) struct Assembler {
    wire: Wire,
    /// Every text fragment so far, in order.
    text: String,
    done: bool,
    /// OpenAI: the fields of the reply outside `choices` (`id`, `model`, ...).
    head: Map<String, Value>,
    /// OpenAI: the tool calls by their `index`.
    calls: BTreeMap<u64, Call>,
    /// OpenAI: why the model stopped.
    finish_reason: Option<Value>,
    /// OpenAI: the usage chunk.
    usage: Option<Value>,
    /// Anthropic: `message_start`'s message.
    message: Option<Value>,
    /// Anthropic: the content blocks by their `index`.
    blocks: BTreeMap<u64, Block>,
}

#[derive(Debug, Default)]
struct Call {
    id: String,
    name: String,
    arguments: String,
    /// Arguments some local servers send as an object rather than text.
    object: Option<Value>,
}

#[derive(Debug)]
struct Block {
    value: Value,
    /// A `tool_use` block's input as streamed, in pieces of JSON text.
    partial_json: String,
}

const CUT: &str = "the event stream ended before the reply was complete";

impl Assembler {
    pub(crate) fn new(wire: Wire) -> Assembler {
        Assembler {
            wire,
            text: String::new(),
            done: false,
            head: Map::new(),
            calls: BTreeMap::new(),
            finish_reason: None,
            usage: None,
            message: None,
            blocks: BTreeMap::new(),
        }
    }

    /// The text written so far.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Takes one event: its name (`""` when it had none) and its data.
    pub(crate) fn feed(&mut self, event: &str, data: &str) -> Result<Fed, StreamError> {
        match self.wire {
            Wire::OpenAi => self.feed_openai(data),
            Wire::Anthropic => self.feed_anthropic(event, data),
        }
    }

    fn feed_openai(&mut self, data: &str) -> Result<Fed, StreamError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Fed {
                grew: false,
                done: true,
            });
        }
        if data.is_empty() {
            return Ok(Fed::default());
        }
        let chunk = parse(data)?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        for key in ["id", "object", "created", "model", "system_fingerprint"] {
            if let Some(v) = chunk.get(key).filter(|v| !v.is_null()) {
                self.head.entry(key).or_insert_with(|| v.clone());
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage.clone());
        }
        let mut fed = Fed::default();
        let choices = chunk.get("choices").and_then(Value::as_array);
        // Only the first choice is asked for (`n` is never sent).
        let Some(choice) = choices.and_then(|c| {
            c.iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        }) else {
            return Ok(fed);
        };
        if let Some(delta) = choice.get("delta") {
            if let Some(text) = delta.get("content").and_then(Value::as_str)
                && !text.is_empty()
            {
                self.text.push_str(text);
                fed.grew = true;
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    let index = call
                        .get("index")
                        .and_then(Value::as_u64)
                        .unwrap_or(position as u64);
                    let entry = self.calls.entry(index).or_default();
                    if let Some(id) = call.get("id").and_then(Value::as_str) {
                        entry.id = id.to_string();
                    }
                    let function = call.get("function");
                    if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str)
                    {
                        entry.name.push_str(name);
                    }
                    match function.and_then(|f| f.get("arguments")) {
                        Some(Value::String(piece)) => entry.arguments.push_str(piece),
                        Some(other) if !other.is_null() => entry.object = Some(other.clone()),
                        _ => {}
                    }
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = Some(reason.clone());
        }
        Ok(fed)
    }

    fn feed_anthropic(&mut self, event: &str, data: &str) -> Result<Fed, StreamError> {
        if data.trim().is_empty() {
            return Ok(Fed::default());
        }
        let value = parse(data)?;
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event)
            .to_string();
        let index = || value.get("index").and_then(Value::as_u64).unwrap_or(0);
        let mut fed = Fed::default();
        match kind.as_str() {
            "message_start" => {
                let mut message = value
                    .get("message")
                    .filter(|m| m.is_object())
                    .cloned()
                    .ok_or_else(|| invalid("`message_start` has no message"))?;
                message["content"] = json!([]);
                self.message = Some(message);
            }
            "content_block_start" => {
                let block = value
                    .get("content_block")
                    .filter(|b| b.is_object())
                    .cloned()
                    .ok_or_else(|| invalid("`content_block_start` has no content_block"))?;
                if let Some(text) = block.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    self.text.push_str(text);
                    fed.grew = true;
                }
                self.blocks.insert(
                    index(),
                    Block {
                        value: block,
                        partial_json: String::new(),
                    },
                );
            }
            "content_block_delta" => {
                let i = index();
                let block = self.blocks.get_mut(&i).ok_or_else(|| {
                    invalid(&format!(
                        "a delta for content block {i}, which never started"
                    ))
                })?;
                let delta = value.get("delta").unwrap_or(&Value::Null);
                let piece = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or("");
                match delta.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text_delta" => {
                        let text = piece("text");
                        append(&mut block.value, "text", text);
                        self.text.push_str(text);
                        fed.grew = !text.is_empty();
                    }
                    "input_json_delta" => block.partial_json.push_str(piece("partial_json")),
                    "thinking_delta" => append(&mut block.value, "thinking", piece("thinking")),
                    "signature_delta" => append(&mut block.value, "signature", piece("signature")),
                    // Deltas the API may add later carry nothing the loop uses.
                    _ => {}
                }
            }
            "message_delta" => {
                let message = self
                    .message
                    .as_mut()
                    .ok_or_else(|| invalid("`message_delta` before `message_start`"))?;
                if let Some(delta) = value.get("delta").and_then(Value::as_object) {
                    for (k, v) in delta {
                        message[k.as_str()] = v.clone();
                    }
                }
                // Counts here are cumulative: they replace `message_start`'s.
                if let Some(usage) = value.get("usage").and_then(Value::as_object) {
                    if !message["usage"].is_object() {
                        message["usage"] = json!({});
                    }
                    for (k, v) in usage.iter().filter(|(_, v)| !v.is_null()) {
                        message["usage"][k.as_str()] = v.clone();
                    }
                }
            }
            "message_stop" => {
                self.done = true;
                fed.done = true;
            }
            "error" => {
                return Err(stream_error(value.get("error").unwrap_or(&Value::Null)));
            }
            // `ping`, `content_block_stop`, and event types the API may add
            // later ("new event types may be added") change nothing.
            _ => {}
        }
        Ok(fed)
    }

    /// The reply as the non-streamed API sends it; a
    /// [`ProviderError::Transport`] when the stream did not finish it.
    pub(crate) fn finish(self) -> Result<Value, ProviderError> {
        match self.wire {
            Wire::OpenAi => {
                if !self.done && self.finish_reason.is_none() {
                    return Err(ProviderError::Transport(CUT.to_string()));
                }
                let mut message = json!({
                    "role": "assistant",
                    "content": if self.text.is_empty() { Value::Null } else { Value::String(self.text) },
                });
                if !self.calls.is_empty() {
                    let calls: Vec<Value> = self
                        .calls
                        .into_values()
                        .map(|c| {
                            let arguments = c.object.unwrap_or(Value::String(c.arguments));
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": arguments},
                            })
                        })
                        .collect();
                    message["tool_calls"] = Value::Array(calls);
                }
                let mut reply = Value::Object(self.head);
                reply["object"] = json!("chat.completion");
                reply["choices"] = json!([{
                    "index": 0,
                    "message": message,
                    "finish_reason": self.finish_reason,
                }]);
                if let Some(usage) = self.usage {
                    reply["usage"] = usage;
                }
                Ok(reply)
            }
            Wire::Anthropic => {
                if !self.done {
                    return Err(ProviderError::Transport(CUT.to_string()));
                }
                let mut message = self.message.ok_or_else(|| {
                    ProviderError::InvalidResponse(
                        "the event stream has no `message_start`".to_string(),
                    )
                })?;
                let content: Vec<Value> = self
                    .blocks
                    .into_values()
                    .map(|mut b| {
                        if b.value.get("type").and_then(Value::as_str) == Some("tool_use")
                            && !b.partial_json.trim().is_empty()
                        {
                            // Input that is not JSON goes on as text, so the
                            // tool reports the bad arguments to the model.
                            b.value["input"] = serde_json::from_str(&b.partial_json)
                                .unwrap_or(Value::String(b.partial_json));
                        }
                        b.value
                    })
                    .collect();
                message["content"] = Value::Array(content);
                Ok(message)
            }
        }
    }
}

fn append(block: &mut Value, key: &str, piece: &str) {
    if piece.is_empty() {
        return;
    }
    let mut text = block
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    text.push_str(piece);
    block[key] = Value::String(text);
}

fn parse(data: &str) -> Result<Value, StreamError> {
    serde_json::from_str(data).map_err(|e| {
        invalid(&format!(
            "an event of the stream is not JSON ({e}); it starts {:?}",
            crate::text::shorten(data, 200)
        ))
    })
}

fn invalid(what: &str) -> StreamError {
    ProviderError::InvalidResponse(what.to_string()).into()
}

/// The error an `error` event (Anthropic) or an `{"error": ...}` chunk
/// (OpenAI-compatible servers) carries: an overload or a rate limit is
/// retried and told to the shared limits as its status; a request the
/// provider refuses is not retried; anything else is a server error.
fn stream_error(error: &Value) -> StreamError {
    let kind = ["type", "code"]
        .iter()
        .find_map(|k| error.get(*k).and_then(Value::as_str))
        .unwrap_or("");
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .unwrap_or("no message");
    let text = format!(
        "the stream failed: {}{message}",
        if kind.is_empty() {
            String::new()
        } else {
            format!("{kind}: ")
        }
    );
    match kind {
        "overloaded_error" | "overloaded" => StreamError {
            error: ProviderError::Server(text),
            status: Some(529),
        },
        k if k.contains("rate_limit") => StreamError {
            error: ProviderError::RateLimited { retry_after: None },
            status: Some(429),
        },
        "invalid_request_error"
        | "authentication_error"
        | "permission_error"
        | "not_found_error"
        | "request_too_large"
        | "context_length_exceeded"
        | "content_filter" => ProviderError::Refused(text).into(),
        _ => ProviderError::Server(text).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{anthropic, openai};

    fn run(wire: Wire, events: &[(&str, &str)]) -> (Result<Value, StreamError>, String) {
        let mut a = Assembler::new(wire);
        for (event, data) in events {
            if let Err(e) = a.feed(event, data) {
                return (Err(e), a.text().to_string());
            }
        }
        let text = a.text().to_string();
        (a.finish().map_err(StreamError::from), text)
    }

    #[test]
    fn openai_chunks_assemble_into_a_reply() {
        let (reply, text) = run(
            Wire::OpenAi,
            &[
                (
                    "",
                    r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
                ),
                (
                    "",
                    r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
                ),
                (
                    "",
                    r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.txt\"}"}}]}}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
                ),
                (
                    "",
                    r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}"#,
                ),
                ("", "[DONE]"),
            ],
        );
        let reply = reply.unwrap();
        assert_eq!(text, "Hello");
        assert_eq!(reply["model"], "m");
        let parsed = openai::parse_response(&reply).unwrap();
        assert_eq!(parsed.content, "Hello");
        assert_eq!(parsed.tool_calls.len(), 1);
        assert_eq!(parsed.tool_calls[0].id, "call_1");
        assert_eq!(parsed.tool_calls[0].name, "read_file");
        assert_eq!(parsed.tool_calls[0].arguments, json!({"path": "a.txt"}));
        assert_eq!(parsed.usage.input_tokens, 12);
        assert_eq!(parsed.usage.output_tokens, 7);
        assert_eq!(parsed.finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn anthropic_events_assemble_into_a_reply() {
        let (reply, text) = run(
            Wire::Anthropic,
            &[
                (
                    "message_start",
                    r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"usage":{"input_tokens":25,"output_tokens":1}}}"#,
                ),
                (
                    "content_block_start",
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
                ),
                ("ping", r#"{"type":"ping"}"#),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"look."}}"#,
                ),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":0}"#,
                ),
                (
                    "content_block_start",
                    r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}"#,
                ),
                (
                    "content_block_delta",
                    r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":".txt\"}"}}"#,
                ),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":1}"#,
                ),
                (
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":40}}"#,
                ),
                ("message_stop", r#"{"type":"message_stop"}"#),
            ],
        );
        let reply = reply.unwrap();
        assert_eq!(text, "Let me look.");
        let parsed = anthropic::parse_response(&reply).unwrap();
        assert_eq!(parsed.content, "Let me look.");
        assert_eq!(parsed.tool_calls[0].name, "read_file");
        assert_eq!(parsed.tool_calls[0].arguments, json!({"path": "a.txt"}));
        assert_eq!(parsed.usage.input_tokens, 25);
        assert_eq!(parsed.usage.output_tokens, 40);
        assert_eq!(parsed.finish_reason.as_deref(), Some("tool_use"));
    }

    #[test]
    fn a_cut_stream_is_a_retriable_transport_error() {
        let (r, text) = run(
            Wire::OpenAi,
            &[(
                "",
                r#"{"choices":[{"index":0,"delta":{"content":"half"}}]}"#,
            )],
        );
        assert_eq!(text, "half");
        let e = r.unwrap_err().error;
        assert!(
            matches!(e, ProviderError::Transport(_)) && e.retriable(),
            "{e}"
        );
        let (r, _) = run(
            Wire::Anthropic,
            &[(
                "message_start",
                r#"{"type":"message_start","message":{"content":[],"usage":{}}}"#,
            )],
        );
        assert!(matches!(r.unwrap_err().error, ProviderError::Transport(_)));
    }

    #[test]
    fn in_stream_errors_keep_their_kind() {
        let (r, _) = run(
            Wire::Anthropic,
            &[(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )],
        );
        let e = r.unwrap_err();
        assert_eq!(e.status, Some(529));
        assert!(e.error.retriable() && e.error.to_string().contains("Overloaded"));
        let (r, _) = run(
            Wire::OpenAi,
            &[(
                "",
                r#"{"error":{"message":"slow down","type":"rate_limit_exceeded"}}"#,
            )],
        );
        assert_eq!(r.unwrap_err().status, Some(429));
        let (r, _) = run(
            Wire::Anthropic,
            &[(
                "error",
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#,
            )],
        );
        assert!(!r.unwrap_err().error.retriable());
    }

    #[test]
    fn malformed_events_are_invalid_responses() {
        for wire in [Wire::OpenAi, Wire::Anthropic] {
            let (r, _) = run(wire, &[("message_start", "{not json")]);
            assert!(matches!(
                r.unwrap_err().error,
                ProviderError::InvalidResponse(_)
            ));
        }
        let (r, _) = run(
            Wire::Anthropic,
            &[(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}"#,
            )],
        );
        assert!(matches!(
            r.unwrap_err().error,
            ProviderError::InvalidResponse(_)
        ));
    }

    proptest::proptest! {
        #[test]
        fn any_events_assemble_or_fail_typed(
            events in proptest::collection::vec((
                proptest::sample::select(vec!["", "message_start", "content_block_start", "content_block_delta", "message_delta", "message_stop", "error", "ping"]),
                proptest::sample::select(vec![
                    "[DONE]", "{}", "null", "[]", "{bad",
                    r#"{"type":"message_start","message":{"content":[]}}"#,
                    r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n"}}"#,
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
                    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#,
                    r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":null}"#,
                    r#"{"type":"message_stop"}"#,
                    r#"{"choices":[{"delta":{"content":"x","tool_calls":[{"index":9}]},"finish_reason":"stop"}]}"#,
                    r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":{"a":1}}}]}}]}"#,
                    r#"{"choices":"no","usage":7}"#,
                    r#"{"error":"boom"}"#,
                ]),
            ), 0..12),
        ) {
            for wire in [Wire::OpenAi, Wire::Anthropic] {
                let (r, _) = run(wire, &events);
                if let Ok(reply) = r {
                    let parsed = match wire {
                        Wire::OpenAi => openai::parse_response(&reply),
                        Wire::Anthropic => anthropic::parse_response(&reply),
                    };
                    if let Err(e) = parsed {
                        proptest::prop_assert!(matches!(e, ProviderError::InvalidResponse(_)), "{e}");
                    }
                }
            }
        }
    }
}
