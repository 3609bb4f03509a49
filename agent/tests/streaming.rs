//! Streamed replies from both providers against the test kit's model
//! server speaking each API's server-sent events: the text told as it is
//! written, tool calls and token counts put back together, a stream cut
//! short or failed in the middle retried as a whole reply, and streaming
//! turned off.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use support::{Reply, Server};
use swarm_agent::provider::limit::{self, CallScope};
use swarm_agent::provider::{ChatMessage, CompletionRequest, ProviderError};
use swarm_agent::{AnthropicProvider, OpenAiProvider, Provider};

fn request() -> CompletionRequest {
    CompletionRequest {
        messages: vec![ChatMessage::user("write")],
        tools: vec![],
        max_tokens: None,
    }
}

/// Runs `call` in a scope that keeps every text it is told.
async fn watched<T>(call: impl std::future::Future<Output = T>) -> (T, Vec<String>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let scope = CallScope::new("s1", None).with_text(Arc::new(move |text: &str| {
        keep.lock().unwrap().push(text.to_string());
    }));
    let out = limit::scoped(scope, call).await;
    let seen = seen.lock().unwrap().clone();
    (out, seen)
}

const ANSWER: &str = "The report has three parts: the findings, the risks and the plan.";

#[tokio::test]
async fn openai_streams_text_as_it_is_written_and_counts_its_tokens() {
    // Events 60 ms apart: each growth is told (they are told at most every
    // 50 ms).
    let server = Server::start(vec![
        Reply::text(ANSWER)
            .usage(31, 17)
            .trickled(Duration::from_millis(60)),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("gpt-4o-mini")).unwrap();
    let (reply, seen) = watched(provider.complete(request())).await;
    let reply = reply.unwrap();
    assert_eq!(reply.content, ANSWER);
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (31, 17)
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("stop"));
    let body = &server.requests()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    // Told several times, each a longer start of the answer.
    assert!(seen.len() >= 5, "told {} times: {seen:?}", seen.len());
    assert!(
        seen.windows(2)
            .all(|w| w[1].starts_with(w[0].as_str()) && w[1].len() > w[0].len())
    );
    assert_eq!(seen.last().unwrap(), ANSWER);
}

#[tokio::test]
async fn anthropic_streams_text_and_tool_calls() {
    let server = Server::start(vec![
        Reply::ToolCalls {
            text: "Let me read the notes first.".into(),
            calls: vec![swarm_testkit::MockToolCall {
                id: Some("toolu_9".into()),
                name: "read_file".into(),
                arguments: json!({"path": "notes.txt", "note": "ünïcode ✓"}),
            }],
            usage: (40, 12),
        },
        Reply::text(ANSWER),
    ])
    .await;
    let provider = AnthropicProvider::new(&server.anthropic("claude-sonnet-4-5")).unwrap();
    let (reply, seen) = watched(provider.complete(request())).await;
    let reply = reply.unwrap();
    assert_eq!(reply.content, "Let me read the notes first.");
    assert_eq!(reply.tool_calls.len(), 1);
    assert_eq!(reply.tool_calls[0].id, "toolu_9");
    assert_eq!(reply.tool_calls[0].name, "read_file");
    assert_eq!(
        reply.tool_calls[0].arguments,
        json!({"path": "notes.txt", "note": "ünïcode ✓"})
    );
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (40, 12)
    );
    assert_eq!(reply.finish_reason.as_deref(), Some("tool_use"));
    assert_eq!(seen.last().unwrap(), "Let me read the notes first.");
    assert_eq!(server.requests()[0].body["stream"], true);
    let (reply, _) = watched(provider.complete(request())).await;
    assert_eq!(reply.unwrap().content, ANSWER);
}

#[tokio::test]
async fn a_stream_cut_short_is_retried_as_a_whole_reply() {
    let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"The report has\"}}]}\n\n";
    let server = Server::start(vec![
        Reply::raw(200, "text/event-stream", cut),
        Reply::text(ANSWER),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("m")).unwrap();
    let (reply, seen) = watched(provider.complete(request())).await;
    // The half answer was shown, then the whole one came by a retry; the
    // half was never taken for the reply.
    assert_eq!(reply.unwrap().content, ANSWER);
    assert_eq!(server.requests().len(), 2);
    assert_eq!(seen.first().unwrap(), "The report has");
    assert_eq!(seen.last().unwrap(), ANSWER);
}

#[tokio::test]
async fn an_overload_in_the_middle_of_a_stream_is_retried() {
    let overloaded = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Par\"}}\n\n",
        "event: error\n",
        "data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    let server = Server::start(vec![
        Reply::raw(200, "text/event-stream", overloaded),
        Reply::text("Paris."),
    ])
    .await;
    let provider = AnthropicProvider::new(&server.anthropic("claude-sonnet-4-5")).unwrap();
    let (reply, _) = watched(provider.complete(request())).await;
    assert_eq!(reply.unwrap().content, "Paris.");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_refusal_in_a_stream_is_not_retried_and_garbage_is_an_invalid_response() {
    let refused = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long\"}}\n\n";
    let server = Server::start(vec![
        Reply::raw(200, "text/event-stream", refused),
        Reply::raw(200, "text/event-stream", "data: {not json\n\n"),
    ])
    .await;
    let provider = AnthropicProvider::new(&server.anthropic("claude-sonnet-4-5")).unwrap();
    let e = provider.complete(request()).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Refused(m) if m.contains("prompt is too long")),
        "{e}"
    );
    let openai = OpenAiProvider::new(&server.openai("m")).unwrap();
    let e = openai.complete(request()).await.unwrap_err();
    assert!(matches!(e, ProviderError::InvalidResponse(_)), "{e}");
    assert_eq!(server.requests().len(), 2, "neither was retried");
}

#[tokio::test]
async fn a_stream_that_never_ends_times_out_in_time() {
    let server = Server::start(vec![Reply::text(ANSWER).trickled(Duration::from_secs(10))]).await;
    let config = swarm_agent::provider::ProviderConfig {
        timeout: Duration::from_millis(500),
        max_retries: 0,
        ..server.openai("m")
    };
    let provider = OpenAiProvider::new(&config).unwrap();
    let started = std::time::Instant::now();
    let e = provider.complete(request()).await.unwrap_err();
    assert!(matches!(e, ProviderError::Timeout(_)), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn streaming_turned_off_asks_for_and_reads_whole_replies() {
    let server = Server::start(vec![Reply::text(ANSWER), Reply::text(ANSWER)]).await;
    for config in [
        swarm_agent::provider::ProviderConfig {
            stream: false,
            ..server.openai("m")
        },
        swarm_agent::provider::ProviderConfig {
            stream: false,
            ..server.anthropic("claude-sonnet-4-5")
        },
    ] {
        let provider = config.build().unwrap();
        let (reply, seen) = watched(provider.complete(request())).await;
        assert_eq!(reply.unwrap().content, ANSWER);
        assert!(seen.is_empty(), "a whole reply is not told in pieces");
    }
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.body.get("stream").is_none())
    );
}
