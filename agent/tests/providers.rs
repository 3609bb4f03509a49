//! The OpenAI and Anthropic providers against a scripted local server that
//! speaks their wire formats: tool calls over several steps, gates and
//! reviewer feedback in what the model is sent, retries, bad replies,
//! timeouts and budgets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Reply, Server, anthropic_calls, anthropic_text, openai_calls, openai_text, task, workspace,
};
use swarm_agent::provider::{CompletionRequest, ProviderError};
use swarm_agent::{
    AgentEvent, AnthropicProvider, Budget, GateSpec, OpenAiProvider, Provider, RunOptions,
    run_agent,
};
use swarm_common::{ErrorCode, TaskStatus};

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn openai_worker_calls_tools_over_several_steps_and_gets_each_result() {
    let server = Server::start(vec![
        Reply::ok(openai_calls(
            &[("call_1", "read_file", json!({"path": "notes.txt"}))],
            100,
            10,
        )),
        Reply::ok(openai_calls(
            &[
                ("call_2", "count", json!({"text": "alpha beta gamma"})),
                ("call_3", "calc", json!({"expression": "6*7"})),
            ],
            200,
            20,
        )),
        Reply::ok(openai_text("3 words; 6*7 = 42", 300, 30)),
    ])
    .await;
    let (_dir, tools) = workspace();
    let provider = OpenAiProvider::new(&server.openai("gpt-4o-mini")).unwrap();
    let run = run_agent(
        &provider,
        &tools,
        &task("Read notes.txt, count its words and compute 6*7", &[]),
        &RunOptions::default(),
        None,
    )
    .await;
    assert_eq!(
        run.outcome.status,
        TaskStatus::Completed,
        "{:?}",
        run.outcome.error
    );
    assert_eq!(run.outcome.result, "3 words; 6*7 = 42");
    assert_eq!(run.outcome.provider, "openai:gpt-4o-mini");
    assert_eq!(run.outcome.metrics["input_tokens"], 600.0);
    assert_eq!(run.outcome.metrics["output_tokens"], 60.0);
    // gpt-4o-mini: $0.15 and $0.60 per million.
    let cost = run.outcome.metrics["cost_usd"];
    assert!(
        (cost - (600.0 * 0.15 + 60.0 * 0.60) / 1e6).abs() < 1e-12,
        "{cost}"
    );
    assert_eq!(run.outcome.metrics["tool_calls"], 3.0);

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.headers["authorization"], "Bearer sk-test");
        assert_eq!(r.body["model"], "gpt-4o-mini");
    }
    let first = &requests[0].body;
    assert_eq!(
        first["messages"][0],
        json!({"role": "system", "content": "You test.\n\nYour role: Tests things"})
    );
    assert_eq!(first["messages"][1]["role"], "user");
    let tool_names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["type"], "function");
            assert_eq!(t["function"]["parameters"]["type"], "object");
            t["function"]["name"].as_str().unwrap()
        })
        .collect();
    assert!(tool_names.contains(&"read_file") && tool_names.contains(&"return_result"));

    // The second request carries the first call and its result, exactly.
    let second = messages(&requests[1].body);
    assert_eq!(second.len(), 4);
    assert_eq!(
        second[2],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"notes.txt\"}"}}
        ]})
    );
    assert_eq!(
        second[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "alpha beta gamma\n"})
    );
    // The third carries both results of the second step, in order.
    let third = messages(&requests[2].body);
    assert_eq!(third.len(), 7);
    assert_eq!(third[5]["role"], "tool");
    assert_eq!(third[5]["tool_call_id"], "call_2");
    assert_eq!(
        third[5]["content"],
        "{\"words\":3,\"lines\":1,\"characters\":16,\"bytes\":16}"
    );
    assert_eq!(
        third[6],
        json!({"role": "tool", "tool_call_id": "call_3", "content": "42"})
    );
}

#[tokio::test]
async fn anthropic_worker_calls_tools_over_several_steps_and_gets_each_result() {
    let server = Server::start(vec![
        Reply::ok(anthropic_calls(
            "Reading first.",
            &[("toolu_1", "read_file", json!({"path": "notes.txt"}))],
            50,
            5,
        )),
        Reply::ok(anthropic_calls(
            "",
            &[
                ("toolu_2", "read_file", json!({"path": "../secret"})),
                ("toolu_3", "calc", json!({"expression": "2+2"})),
            ],
            60,
            6,
        )),
        Reply::ok(anthropic_calls(
            "",
            &[(
                "toolu_4",
                "return_result",
                json!({"result": "alpha beta gamma; 4"}),
            )],
            70,
            7,
        )),
    ])
    .await;
    let (_dir, tools) = workspace();
    let provider = AnthropicProvider::new(&server.anthropic("claude-sonnet-4-5")).unwrap();
    let run = run_agent(
        &provider,
        &tools,
        &task("Read notes.txt and add 2+2", &["read_file", "calc"]),
        &RunOptions::default(),
        None,
    )
    .await;
    // The model answered, but the path it was refused stays a failure: the
    // attempt fails with the tool's reason (the manager may ask again).
    assert_eq!(run.outcome.status, TaskStatus::Failed);
    assert_eq!(run.outcome.result, "");
    let error = run.outcome.error.as_ref().unwrap();
    assert!(
        error
            .message
            .starts_with("tool \"read_file\" failed: refused:")
            && error.message.contains("outside the workspace"),
        "{}",
        error.message
    );
    assert_eq!(run.usage.input_tokens, 180);
    assert_eq!(run.usage.output_tokens, 18);
    assert!((run.cost_usd - (180.0 * 3.0 + 18.0 * 15.0) / 1e6).abs() < 1e-12);

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for r in &requests {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.headers["x-api-key"], "sk-ant-test");
        assert_eq!(r.headers["anthropic-version"], "2023-06-01");
        assert_eq!(r.body["model"], "claude-sonnet-4-5");
        assert_eq!(r.body["system"], "You test.\n\nYour role: Tests things");
        assert!(r.body["max_tokens"].as_u64().unwrap() > 0);
    }
    let tools_sent: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["input_schema"]["type"], "object");
            assert!(t["input_schema"].get("$schema").is_none());
            t["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        tools_sent,
        [
            "calc",
            "read_file",
            "report_progress",
            "return_result",
            "give_up"
        ]
    );

    let second = messages(&requests[1].body);
    assert_eq!(second.len(), 3);
    assert_eq!(
        second[1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Reading first."},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "notes.txt"}}
        ]})
    );
    assert_eq!(
        second[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "alpha beta gamma\n"}
        ]})
    );
    let third = messages(&requests[2].body);
    assert_eq!(third.len(), 5);
    let results = third[4]["content"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["tool_use_id"], "toolu_2");
    assert_eq!(results[0]["is_error"], true);
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("outside the workspace")
    );
    assert_eq!(
        results[1],
        json!({"type": "tool_result", "tool_use_id": "toolu_3", "content": "4"})
    );
}

#[tokio::test]
async fn a_failing_gate_sends_its_reason_back_then_passes() {
    let server = Server::start(vec![
        Reply::ok(openai_text("forty-two", 10, 2)),
        Reply::ok(openai_text("42", 12, 1)),
    ])
    .await;
    let (_dir, tools) = workspace();
    let provider = OpenAiProvider::new(&server.openai("gpt-4o")).unwrap();
    let options = RunOptions {
        gates: vec![GateSpec::Regex {
            pattern: r"^\d+$".into(),
            forbid: false,
            description: Some("digits only".into()),
        }],
        revision: 1,
        ..RunOptions::default()
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = run_agent(
        &provider,
        &tools,
        &task("What is 6*7?", &[]),
        &options,
        Some(&tx),
    )
    .await;
    drop(tx);
    assert_eq!(
        run.outcome.status,
        TaskStatus::Completed,
        "{:?}",
        run.outcome.error
    );
    assert_eq!(run.outcome.result, "42");
    assert_eq!(run.gate_verdicts.len(), 2);
    assert!(!run.gate_verdicts[0].passed);
    assert!(run.gate_verdicts[0].reason.contains("digits only"));
    assert!(run.gate_verdicts[1].passed);
    assert!(run.gate_verdicts.iter().all(|v| v.revision == 1));
    assert_eq!(run.outcome.metrics["gate_failures"], 1.0);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let second = messages(&requests[1].body);
    assert_eq!(
        second[2],
        json!({"role": "assistant", "content": "forty-two"})
    );
    assert_eq!(second[3]["role"], "user");
    let feedback = second[3]["content"].as_str().unwrap();
    assert!(feedback.contains(r"regex(^\d+$)"), "{feedback}");
    assert!(
        feedback.contains("does not match the required pattern"),
        "{feedback}"
    );

    let mut gate_events = 0;
    while let Some(e) = rx.recv().await {
        if matches!(e, AgentEvent::Gate(_)) {
            gate_events += 1;
        }
    }
    assert_eq!(gate_events, 2);
}

#[tokio::test]
async fn a_gate_that_keeps_failing_fails_the_task_after_the_corrections() {
    let server = Server::start(vec![
        Reply::ok(anthropic_text("{}", 1, 1)),
        Reply::ok(anthropic_text("{\"n\": \"x\"}", 1, 1)),
    ])
    .await;
    let (_dir, tools) = workspace();
    let provider = AnthropicProvider::new(&server.anthropic("claude-haiku-4-5")).unwrap();
    let options = RunOptions {
        gates: vec![GateSpec::JsonSchema {
            schema: json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}),
        }],
        max_gate_corrections: 1,
        ..RunOptions::default()
    };
    let run = run_agent(&provider, &tools, &task("Give n", &[]), &options, None).await;
    assert_eq!(run.outcome.status, TaskStatus::Failed);
    let error = run.outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::ValidationFailed);
    assert!(
        error.message.contains("after 1 correction"),
        "{}",
        error.message
    );
    assert!(error.message.contains("json_schema"), "{}", error.message);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    // Anthropic: the gate's reason is the last user turn.
    let second = messages(&requests[1].body);
    assert_eq!(second.last().unwrap()["role"], "user");
    assert!(
        second.last().unwrap()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("\"n\" is a required property"),
        "{}",
        second.last().unwrap()
    );
}

#[tokio::test]
async fn reviewer_feedback_and_context_are_in_the_request() {
    let server = Server::start(vec![Reply::ok(anthropic_text("done, in metres", 5, 5))]).await;
    let (_dir, tools) = workspace();
    let provider = AnthropicProvider::new(&server.anthropic("claude-sonnet-4-5")).unwrap();
    let mut t = task("Measure the room", &[]);
    t.feedback = vec!["Use metric units.".into()];
    t.context = vec![swarm_agent::ContextItem {
        task_id: "t0".into(),
        title: "Find the room".into(),
        result: "room 4".into(),
    }];
    let run = run_agent(&provider, &tools, &t, &RunOptions::default(), None).await;
    assert_eq!(run.outcome.status, TaskStatus::Completed);
    let requests = server.requests();
    let user = requests[0].body["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        user.contains("=== REVIEWER FEEDBACK 1 ===\nUse metric units."),
        "{user}"
    );
    assert!(
        user.contains("=== RESULT OF EARLIER TASK t0: Find the room ===\nroom 4"),
        "{user}"
    );
}

fn request() -> CompletionRequest {
    CompletionRequest {
        messages: vec![swarm_agent::provider::ChatMessage::user("hi")],
        tools: vec![],
        max_tokens: None,
    }
}

#[tokio::test]
async fn a_429_with_retry_after_is_honoured_then_succeeds() {
    let server = Server::start(vec![
        Reply::json(
            429,
            vec![("retry-after", "1".into())],
            json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
        ),
        Reply::ok(openai_text("hello", 3, 1)),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("gpt-4o-mini")).unwrap();
    let response = provider.complete(request()).await.unwrap();
    assert_eq!(response.content, "hello");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let waited = requests[1].at - requests[0].at;
    assert!(
        waited >= Duration::from_millis(950),
        "waited only {waited:?}"
    );
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
}

#[tokio::test]
async fn a_retry_after_date_is_honoured_too() {
    let at = chrono::Utc::now() + chrono::Duration::seconds(2);
    let server = Server::start(vec![
        Reply::json(
            503,
            vec![("retry-after", at.format("%a, %d %b %Y %H:%M:%S GMT").to_string())],
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        Reply::ok(anthropic_text("hi", 1, 1)),
    ])
    .await;
    let provider = AnthropicProvider::new(&server.anthropic("claude-sonnet-4-5")).unwrap();
    assert_eq!(provider.complete(request()).await.unwrap().content, "hi");
    let requests = server.requests();
    let waited = requests[1].at - requests[0].at;
    // A whole-second date: at least one second of the two remains.
    assert!(
        waited >= Duration::from_millis(900),
        "waited only {waited:?}"
    );
}

#[tokio::test]
async fn a_500_is_retried_then_succeeds() {
    let server = Server::start(vec![
        Reply::raw(500, "text/plain", "upstream exploded"),
        Reply::raw(502, "text/html", "<html>bad gateway</html>"),
        Reply::ok(openai_text("fine", 1, 1)),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("m")).unwrap();
    assert_eq!(provider.complete(request()).await.unwrap().content, "fine");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn retries_end_with_the_last_error() {
    let server = Server::start(vec![
        Reply::raw(500, "text/plain", "one"),
        Reply::raw(500, "text/plain", "two"),
    ])
    .await;
    let mut config = server.openai("m");
    config.max_retries = 1;
    let provider = OpenAiProvider::new(&config).unwrap();
    let e = provider.complete(request()).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Server(m) if m.contains("500") && m.contains("two")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn refusals_are_not_retried() {
    let server = Server::start(vec![Reply::json(
        401,
        vec![],
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
    )])
    .await;
    let provider = AnthropicProvider::new(&server.anthropic("m")).unwrap();
    let e = provider.complete(request()).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Refused(m) if m.contains("invalid x-api-key")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn malformed_replies_are_clear_errors_not_panics() {
    let server = Server::start(vec![
        Reply::raw(200, "application/json", "{\"choices\": ["),
        Reply::ok(json!({"choices": [{"message": {"role": "assistant"}}], "usage": "lots"})),
        Reply::ok(json!({"id": "x", "object": "chat.completion"})),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("m")).unwrap();
    let e = provider.complete(request()).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::InvalidResponse(m) if m.contains("not JSON")),
        "{e}"
    );
    // A message without content or tool calls is an empty answer; odd usage counts 0.
    let r = provider.complete(request()).await.unwrap();
    assert_eq!((r.content.as_str(), r.usage.input_tokens), ("", 0));
    let e = provider.complete(request()).await.unwrap_err();
    assert!(
        matches!(&e, ProviderError::InvalidResponse(m) if m.contains("choices")),
        "{e}"
    );
    assert_eq!(
        server.requests().len(),
        3,
        "invalid replies are not retried"
    );

    // Through the loop, a bad reply fails the task with the reason.
    let server = Server::start(vec![Reply::ok(json!({"content": "not blocks"}))]).await;
    let provider = AnthropicProvider::new(&server.anthropic("m")).unwrap();
    let (_dir, tools) = workspace();
    let run = run_agent(
        &provider,
        &tools,
        &task("x", &[]),
        &RunOptions::default(),
        None,
    )
    .await;
    assert_eq!(run.outcome.status, TaskStatus::Failed);
    let error = run.outcome.error.unwrap();
    assert!(
        error.message.contains("invalid response"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("`content` is not an array"),
        "{}",
        error.message
    );
    assert!(!error.retriable);
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_in_time() {
    let server = Server::start(vec![Reply::Hang, Reply::Hang]).await;
    let mut config = server.openai("m");
    config.timeout = Duration::from_millis(300);
    config.max_retries = 1;
    let provider = OpenAiProvider::new(&config).unwrap();
    let started = Instant::now();
    let e = provider.complete(request()).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(e, ProviderError::Timeout(Duration::from_millis(300)));
    assert_eq!(server.requests().len(), 2, "a timeout is retried");
    assert!(took >= Duration::from_millis(600), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");

    let server = Server::start(vec![Reply::Hang]).await;
    let mut config = server.anthropic("m");
    config.timeout = Duration::from_millis(200);
    config.max_retries = 0;
    let provider = AnthropicProvider::new(&config).unwrap();
    let (_dir, tools) = workspace();
    let started = Instant::now();
    let run = run_agent(
        &provider,
        &tools,
        &task("x", &[]),
        &RunOptions::default(),
        None,
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(2));
    let error = run.outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::Timeout);
    assert!(
        error.message.contains("timed out after 200ms"),
        "{}",
        error.message
    );
    assert!(error.retriable);
}

#[tokio::test]
async fn a_spent_budget_stops_before_the_next_call() {
    let server = Server::start(vec![
        Reply::ok(openai_calls(
            &[("c1", "echo", json!({"text": "hi"}))],
            80,
            30,
        )),
        Reply::ok(openai_text("never sent", 1, 1)),
    ])
    .await;
    let (_dir, tools) = workspace();
    let provider = OpenAiProvider::new(&server.openai("gpt-4o")).unwrap();
    let options = RunOptions {
        budget: Budget {
            max_tokens: Some(100),
            ..Budget::default()
        },
        ..RunOptions::default()
    };
    let run = run_agent(&provider, &tools, &task("say hi", &[]), &options, None).await;
    assert_eq!(run.outcome.status, TaskStatus::Failed);
    let error = run.outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::LimitExceeded);
    assert!(
        error.message.contains("token budget is spent: 110 of 100"),
        "{}",
        error.message
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(run.outcome.metrics["input_tokens"], 80.0);

    // Spent by earlier tasks of the mission: no call at all.
    let server = Server::start(vec![Reply::ok(openai_text("never", 1, 1))]).await;
    let provider = OpenAiProvider::new(&server.openai("gpt-4o")).unwrap();
    let options = RunOptions {
        budget: Budget {
            max_cost_usd: Some(0.50),
            spent_cost_usd: 0.75,
            ..Budget::default()
        },
        ..RunOptions::default()
    };
    let run = run_agent(&provider, &tools, &task("say hi", &[]), &options, None).await;
    let error = run.outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::LimitExceeded);
    assert!(error.message.contains("cost budget"), "{}", error.message);
    assert!(server.requests().is_empty());
}
