//! A scripted HTTP server for provider tests: it answers each request with
//! the next reply of its script and records every request it receives.

#![allow(dead_code)] // Each test binary uses part of this module.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use swarm_agent::provider::ProviderConfig;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A status, extra headers and a JSON body.
    Json(u16, Vec<(&'static str, String)>, Value),
    /// A status and a raw body.
    Raw(u16, &'static str, String),
    /// Never answers.
    Hang,
}

impl Reply {
    /// 200 with `body`.
    pub fn ok(body: Value) -> Reply {
        Reply::Json(200, vec![], body)
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
    pub at: Instant,
}

#[derive(Default)]
struct State {
    script: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

/// The server; it stops when dropped.
pub struct Server {
    pub url: String,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// Starts a server on 127.0.0.1 that plays `script` in order.
    pub async fn start(script: Vec<Reply>) -> Server {
        let state = Arc::new(State {
            script: Mutex::new(script.into()),
            requests: Mutex::new(Vec::new()),
        });
        let shared = state.clone();
        let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = shared.clone();
            async move { answer(state, uri, headers, body).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Server { url, state, task }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }

    /// An OpenAI configuration pointing at this server.
    pub fn openai(&self, model: &str) -> ProviderConfig {
        ProviderConfig {
            base_url: Some(format!("{}/v1", self.url)),
            api_key: Some("sk-test".into()),
            timeout: Duration::from_secs(5),
            max_retries: 3,
            retry_min_delay: Duration::from_millis(10),
            ..ProviderConfig::openai(model)
        }
    }

    /// An Anthropic configuration pointing at this server.
    pub fn anthropic(&self, model: &str) -> ProviderConfig {
        ProviderConfig {
            base_url: Some(self.url.clone()),
            api_key: Some("sk-ant-test".into()),
            timeout: Duration::from_secs(5),
            max_retries: 3,
            retry_min_delay: Duration::from_millis(10),
            ..ProviderConfig::anthropic(model)
        }
    }
}

async fn answer(state: Arc<State>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let recorded = Recorded {
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: Instant::now(),
    };
    state.requests.lock().unwrap().push(recorded);
    let next = state.script.lock().unwrap().pop_front();
    match next {
        Some(Reply::Json(status, extra, body)) => {
            let mut response = (
                StatusCode::from_u16(status).unwrap(),
                [("content-type", "application/json")],
                body.to_string(),
            )
                .into_response();
            for (k, v) in extra {
                response.headers_mut().insert(k, v.parse().unwrap());
            }
            response
        }
        Some(Reply::Raw(status, content_type, body)) => (
            StatusCode::from_u16(status).unwrap(),
            [("content-type", content_type)],
            body,
        )
            .into_response(),
        Some(Reply::Hang) => std::future::pending().await,
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the test script has no more replies",
        )
            .into_response(),
    }
}

/// An OpenAI chat-completions reply that calls tools.
pub fn openai_calls(calls: &[(&str, &str, Value)], prompt: u64, completion: u64) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls",
                     "message": {"role": "assistant", "content": null, "tool_calls": calls}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    })
}

/// An OpenAI chat-completions reply with a final text.
pub fn openai_text(text: &str, prompt: u64, completion: u64) -> Value {
    json!({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    })
}

/// An Anthropic Messages reply that uses tools.
pub fn anthropic_calls(
    text: &str,
    calls: &[(&str, &str, Value)],
    input: u64,
    output: u64,
) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for (id, name, args) in calls {
        content.push(json!({"type": "tool_use", "id": id, "name": name, "input": args}));
    }
    json!({
        "id": "msg_test", "type": "message", "role": "assistant", "model": "m",
        "content": content, "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output}
    })
}

/// An Anthropic Messages reply with a final text.
pub fn anthropic_text(text: &str, input: u64, output: u64) -> Value {
    json!({
        "id": "msg_test", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output}
    })
}

/// A task for `persona_tools` (all tools when empty).
pub fn task(description: &str, persona_tools: &[&str]) -> swarm_agent::AgentTask {
    swarm_agent::AgentTask {
        task_id: "t1".into(),
        title: "A task".into(),
        description: description.into(),
        persona: swarm_common::WorkerDeploymentPlan {
            name: "tester".into(),
            role: "Tests things".into(),
            system_prompt: "You test.".into(),
            tools: persona_tools.iter().map(|t| t.to_string()).collect(),
            collaborators: vec![],
            pool: "general".into(),
        },
        context: vec![],
        feedback: vec![],
        max_steps: 8,
        max_result_bytes: 64 * 1024,
    }
}

/// A workspace with `notes.txt` and the registry over it.
pub fn workspace() -> (tempfile::TempDir, swarm_agent::ToolRegistry) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha beta gamma\n").unwrap();
    let tools = swarm_agent::ToolRegistry::builtin(dir.path());
    (dir, tools)
}
