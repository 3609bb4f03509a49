//! One trace per mission: the boss, manager and worker binaries export
//! their spans over OTLP/HTTP to a local receiver (tests/python/
//! otlp_receiver.py, on `opentelemetry-proto`), and one mission's spans,
//! from all three processes, share one trace id, the one the mission's
//! reply, state, final report and HTML page name, linked parent to child
//! across the processes, with a span per model call (GenAI attributes) and
//! per tool call.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use swarm_common::{SwarmStatus, mission::MissionRequest};
use swarm_testkit::{Cluster, Match, MockLlm, Reply, Rule};
use tokio::io::{AsyncBufReadExt, BufReader};

const MODEL: &str = "gpt-4o-mini";
/// What the boss's planning prompt says.
const PLANNER: &str = "You are the planner of a Swarm";
/// The persona prompt of the model's plan, which only the worker's requests carry.
const PERSONA: &str = "You compute.";
const WAIT: Duration = Duration::from_secs(60);

/// The receiver, killed when dropped.
struct Receiver {
    child: tokio::process::Child,
    port: u16,
}

impl Receiver {
    async fn start(path: &std::ffi::OsStr, spans: &Path) -> Receiver {
        let mut child = tokio::process::Command::new("python3")
            .env("PYTHONPATH", path)
            .arg(common::repo().join("tests/python/otlp_receiver.py"))
            .arg(spans)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .expect("the receiver says its port")
        .unwrap();
        let port = line.trim().parse().expect("a port");
        Receiver { child, port }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn spans(file: &Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// The model's plan: one persona with `calc`, a task its model does with
/// the tool, and an explicit `echo` after it.
fn model_plan() -> Value {
    json!({
        "manager_directive": "Compute the product, then say it.",
        "workers": [{"name": "calculator", "role": "arithmetic", "system_prompt": PERSONA,
                     "tools": ["calc", "echo"]}],
        "tasks": [
            {"task_id": "product", "title": "Multiply", "description": "Compute 6*7 with calc",
             "assigned_to": "calculator"},
            {"task_id": "say", "title": "Say it",
             "description": common::tool("echo", json!({"text": "42"})),
             "assigned_to": "calculator", "dependencies": ["product"]}
        ],
        "success_criteria": ["the product is computed"]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_missions_spans_from_every_role_share_one_trace_with_links_across_processes() {
    let Some(path) = common::python_path(
        "the OTLP receiver",
        "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
        "pip install --target .python opentelemetry-proto==1.45.2",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spans.jsonl");
    let receiver = Receiver::start(&path, &file).await;

    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("planner", Match::new().system_contains(PLANNER))
            .reply(Reply::json_text(&model_plan()).usage(50, 40)),
    );
    llm.add(
        Rule::new("worker", Match::new().system_contains(PERSONA))
            .reply(Reply::tool_call("calc", json!({"expression": "6*7"})).usage(100, 10))
            .reply(Reply::text("42").usage(120, 2)),
    );
    let mut builder = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", receiver.port),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("SWARM_BOSS_PROVIDER", "openai")
        .env("SWARM_WORKER_PROVIDER", "openai");
    for (k, v) in llm.openai_env(MODEL) {
        if k != "SWARM_PROVIDER" {
            builder = builder.env(k, v);
        }
    }
    let cluster = builder.start().await.expect("the cluster starts");
    let nc = cluster.client().await;

    let reply = swarm_client::client::submit(
        &nc,
        &MissionRequest::text("What is six times seven? Say it."),
        Duration::from_secs(15),
    )
    .await
    .expect("mission accepted");
    let id = reply.swarm_id.clone();
    let trace_id = reply.trace_id.clone().expect("the reply names the trace");
    assert!(swarm_runtime::trace::is_trace_id(&trace_id), "{trace_id}");

    let report = match swarm_client::client::watch(&nc, &id, WAIT, |_| {}).await {
        Ok(r) => r,
        Err(e) => panic!(
            "{e:#}\n{}\n{}",
            llm.describe_requests(),
            cluster.log_tails()
        ),
    };
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(report.trace_id.as_deref(), Some(trace_id.as_str()));
    assert_eq!(
        common::state(&nc, &id).await.trace_id.as_deref(),
        Some(trace_id.as_str())
    );
    // The page is rendered a moment after the report is published.
    let deadline = tokio::time::Instant::now() + WAIT;
    let page = loop {
        if let Ok(page) = swarm_client::client::report_html(&nc, &id).await {
            break String::from_utf8(page).unwrap();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the page is rendered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(page.contains(&trace_id), "the page shows the trace id");
    let worker_calls = llm.requests_for("worker").len();
    assert_eq!(worker_calls, 2, "{}", llm.describe_requests());

    // A graceful stop exports what each process still holds.
    let logs = cluster.log_tails();
    cluster.stop(Duration::from_secs(10)).await;
    let all = spans(&file);
    let mine: Vec<&Value> = all
        .iter()
        .filter(|s| attr(s, "swarm.id") == id.as_str())
        .collect();
    assert!(!mine.is_empty(), "spans name the swarm\n{logs}");
    for s in &mine {
        assert_eq!(s["trace_id"], trace_id.as_str(), "one trace: {s}");
    }
    let trace: Vec<&Value> = all
        .iter()
        .filter(|s| s["trace_id"] == trace_id.as_str())
        .collect();
    let services: HashSet<&str> = trace.iter().filter_map(|s| s["service"].as_str()).collect();
    for role in ["boss", "manager", "worker"] {
        assert!(
            services.contains(role),
            "{role} spans in the trace: {services:?}"
        );
    }
    let names: Vec<&str> = trace.iter().filter_map(|s| s["name"].as_str()).collect();
    for name in [
        "intake",
        "plan",
        "deploy",
        "task product",
        "task say",
        "report",
    ] {
        assert!(names.contains(&name), "a {name:?} span: {names:?}");
    }

    // From the worker's model call up: the worker's attempt, the manager's,
    // the boss's deployment and intake, each the parent of the one before.
    let by_id: HashMap<&str, &Value> = trace
        .iter()
        .map(|s| (s["span_id"].as_str().unwrap(), *s))
        .collect();
    let chats: Vec<&&Value> = trace
        .iter()
        .filter(|s| s["name"] == format!("chat {MODEL}").as_str())
        .collect();
    let worker_chats: Vec<&&Value> = chats
        .iter()
        .copied()
        .filter(|s| s["service"] == "worker")
        .collect();
    assert_eq!(
        worker_chats.len(),
        worker_calls,
        "a span per model call: {chats:?}"
    );
    assert!(
        chats.iter().any(|s| s["service"] == "boss"),
        "the planner's call is a span too"
    );
    for chat in &chats {
        assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(chat, "gen_ai.provider.name"), "openai");
        assert_eq!(attr(chat, "gen_ai.request.model"), MODEL);
        assert!(
            attr(chat, "gen_ai.usage.input_tokens").as_i64() > Some(0),
            "{chat}"
        );
        assert!(
            attr(chat, "gen_ai.usage.output_tokens").as_i64() > Some(0),
            "{chat}"
        );
    }
    let mut chain = Vec::new();
    let mut at = *worker_chats[0];
    loop {
        chain.push((
            at["service"].as_str().unwrap(),
            at["name"].as_str().unwrap(),
        ));
        let parent = at["parent_span_id"].as_str().unwrap();
        match by_id.get(parent) {
            Some(p) => at = p,
            None => {
                assert_eq!(parent, "", "every parent was exported: {chain:?}");
                break;
            }
        }
    }
    let services_up: Vec<&str> = chain.iter().map(|(s, _)| *s).collect();
    let first = |role: &str| services_up.iter().position(|s| *s == role);
    assert!(
        first("worker") < first("manager") && first("manager") < first("boss"),
        "worker, then manager, then boss up the parents: {chain:?}"
    );
    assert!(chain.contains(&("worker", "task product")), "{chain:?}");
    assert!(chain.contains(&("manager", "task product")), "{chain:?}");
    assert_eq!(chain.last(), Some(&("boss", "intake")), "{chain:?}");

    // A span per tool call, the model's and the explicit one.
    for tool in ["calc", "echo"] {
        let calls: Vec<&&Value> = trace
            .iter()
            .filter(|s| s["name"] == format!("execute_tool {tool}").as_str())
            .collect();
        assert_eq!(calls.len(), 1, "one {tool} call: {names:?}");
        assert_eq!(calls[0]["service"], "worker");
        assert_eq!(attr(calls[0], "gen_ai.tool.name"), tool);
    }
    // The messaging attributes of a processed assignment.
    let task = trace
        .iter()
        .find(|s| s["service"] == "worker" && s["name"] == "task product")
        .unwrap();
    assert_eq!(attr(task, "messaging.system"), "nats");
    assert_eq!(attr(task, "messaging.operation.type"), "process");
    assert_eq!(
        attr(task, "messaging.consumer.group.name"),
        "worker-general"
    );
    assert!(
        attr(task, "messaging.destination.name")
            .as_str()
            .is_some_and(|d| d.starts_with("a2ap.work.general.")),
        "{task}"
    );
    drop(receiver);
}
