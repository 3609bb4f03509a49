//! The model backends: the [`OpenAiProvider`] and [`AnthropicProvider`]
//! that speak those wire formats over HTTP, the prices of their models, and
//! [`ProviderConfig`], which picks a backend from flags or the environment
//! (or the offline provider of [`crate::offline`], which needs neither), and
//! the [`limit`]s that every caller of one endpoint shares.
//! The [`Provider`] trait they implement, and the conversation it carries,
//! are [`crate::chat`]'s, re-exported here.

pub mod anthropic;
pub mod config;
mod http;
pub mod limit;
pub mod openai;
pub mod pricing;
mod sse;

pub use crate::chat::{
    ChatMessage, CompletionRequest, CompletionResponse, Provider, ProviderError, Role,
    TOOL_ERROR_PREFIX, ToolCall, Usage,
};
pub use anthropic::AnthropicProvider;
pub use config::{ConfigError, ProviderArgs, ProviderConfig, ProviderKind};
pub use http::MAX_RETRY_AFTER;
pub use openai::OpenAiProvider;
pub use pricing::{PriceTable, Pricing};

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

/// The span of one model call, after OpenTelemetry's GenAI semantic
/// conventions (`chat {model}`, a client span). Of the target that only
/// traces enable (`swarm_runtime::trace::TARGET`, written out here, since
/// this crate does without the runtime): without an OTLP endpoint it is
/// never made.
pub(crate) fn chat_span(provider: &'static str, model: &str) -> tracing::Span {
    use tracing::field::Empty;
    tracing::info_span!(
        target: "swarm_otel",
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.system = provider,
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        swarm.cost_usd = Empty,
        error.type = Empty,
    )
}

/// Records on the current model call's span the model that answered, as
/// the reply names it.
pub(crate) fn record_response_model(reply: &serde_json::Value) {
    if let Some(model) = reply.get("model").and_then(serde_json::Value::as_str) {
        tracing::Span::current().record("gen_ai.response.model", model);
    }
}

/// Records a model call's tokens and cost, or its error, on its span.
pub(crate) fn record_outcome(
    span: &tracing::Span,
    result: &Result<CompletionResponse, ProviderError>,
    cost_usd: impl FnOnce(Usage) -> f64,
) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(r) => {
            // As i64: OpenTelemetry has no unsigned integers (a u64 would
            // be exported as text).
            let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            span.record("gen_ai.usage.input_tokens", tokens(r.usage.input_tokens));
            span.record("gen_ai.usage.output_tokens", tokens(r.usage.output_tokens));
            span.record("swarm.cost_usd", cost_usd(r.usage));
            if let Some(reason) = &r.finish_reason {
                span.record("gen_ai.response.finish_reasons", reason.as_str());
            }
        }
        Err(e) => {
            let kind = match e {
                ProviderError::Transport(_) => "transport",
                ProviderError::Timeout(_) => "timeout",
                ProviderError::RateLimited { .. } => "rate_limited",
                ProviderError::Server(_) => "server",
                ProviderError::InvalidResponse(_) => "invalid_response",
                ProviderError::Refused(_) => "refused",
            };
            span.record("otel.status_code", "ERROR");
            span.record("error.type", kind);
            span.record("otel.status_description", e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
