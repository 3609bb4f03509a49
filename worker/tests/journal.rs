//! The step journal against a real nats-server: a task whose worker died
//! after its first model call resumes at the second; a task that finished
//! replays every step and calls the model no more.

#![allow(clippy::unwrap_used)] // tests report failure by panicking

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use swarm_agent::{
    AgentTask, OfflineProvider,
    provider::{CompletionRequest, CompletionResponse, Provider, ProviderError},
    run_task,
    tools::ToolRegistry,
};
use swarm_common::{TaskStatus, WorkerDeploymentPlan};
use swarm_runtime::Infra;
use swarm_testkit::NatsServer;
use swarm_worker::journal::{Journal, JournaledProvider};

/// The offline provider, counting its calls and failing the `fail_at`-th
/// one as a worker that dies there would.
struct Counting {
    inner: OfflineProvider,
    calls: AtomicU32,
    fail_at: Option<u32>,
}

impl Counting {
    fn new(fail_at: Option<u32>) -> Arc<Counting> {
        Arc::new(Counting {
            inner: OfflineProvider::new(),
            calls: AtomicU32::new(0),
            fail_at,
        })
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Provider for Counting {
    fn name(&self) -> &str {
        "counting-offline"
    }

    async fn complete(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.fail_at == Some(n) {
            return Err(ProviderError::Transport("the worker died here".into()));
        }
        self.inner.complete(request).await
    }
}

fn task() -> AgentTask {
    AgentTask {
        task_id: "t1".into(),
        title: "count".into(),
        description: "Count the words in notes.txt".into(),
        persona: WorkerDeploymentPlan {
            name: "w".into(),
            role: "text analyst".into(),
            system_prompt: "You count.".into(),
            tools: vec![],
            collaborators: vec![],
            pool: "general".into(),
            a2a_url: None,
            a2a_credential: None,
            skill: None,
        },
        context: vec![],
        feedback: vec![],
        max_steps: 8,
        max_result_bytes: 4096,
    }
}

#[tokio::test]
async fn a_redelivered_task_resumes_after_its_last_journaled_step() {
    let server = NatsServer::start().unwrap();
    let client = server.client().await;
    let infra = Infra::ensure(&client, 1).await.unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "one two three").unwrap();
    let tools = ToolRegistry::builtin(ws.path());
    let open = || Journal::open(infra.journal.clone(), "s1", "t1", 1, 0, 0, true);

    // First delivery: the model's first reply (a tool call) is journaled,
    // then the worker dies at the second call.
    let first = Counting::new(Some(2));
    let journal = open().await.unwrap();
    let out = run_task(
        &JournaledProvider::new(first.clone(), journal.clone()),
        &tools,
        &task(),
        None,
    )
    .await;
    assert_eq!(out.status, TaskStatus::Failed);
    assert_eq!(first.calls(), 2);
    assert_eq!((journal.recorded(), journal.replayed()), (1, 0));

    // Redelivery: step one comes from the journal; only the second call is paid for.
    let second = Counting::new(None);
    let journal = open().await.unwrap();
    let out = run_task(
        &JournaledProvider::new(second.clone(), journal.clone()),
        &tools,
        &task(),
        None,
    )
    .await;
    assert_eq!(out.status, TaskStatus::Completed, "{out:?}");
    assert!(out.result.contains('3'), "{}", out.result);
    assert_eq!(second.calls(), 1, "the finished step was not repeated");
    assert_eq!((journal.recorded(), journal.replayed()), (1, 1));

    // A delivery after the task finished replays everything: no model call at all.
    let third = Counting::new(None);
    let journal = open().await.unwrap();
    let again = run_task(
        &JournaledProvider::new(third.clone(), journal.clone()),
        &tools,
        &task(),
        None,
    )
    .await;
    assert_eq!(third.calls(), 0);
    assert_eq!(again.result, out.result);
    assert_eq!(journal.replayed(), 2);

    // Another revision has a journal of its own.
    let fresh = Counting::new(None);
    let journal = Journal::open(infra.journal.clone(), "s1", "t1", 1, 1, 0, true)
        .await
        .unwrap();
    run_task(
        &JournaledProvider::new(fresh.clone(), journal),
        &tools,
        &task(),
        None,
    )
    .await;
    assert_eq!(fresh.calls(), 2);
}

/// A tool with a side effect: counts its calls.
struct Stamp(Arc<AtomicU32>);

#[async_trait]
impl swarm_agent::tools::Tool for Stamp {
    fn spec(&self) -> swarm_agent::tools::ToolSpec {
        swarm_agent::tools::ToolSpec {
            name: "stamp".into(),
            description: "Stamps a document (a side effect).".into(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
            annotations: swarm_agent::tools::ToolAnnotations::default(),
        }
    }

    async fn call(
        &self,
        _arguments: serde_json::Value,
    ) -> Result<String, swarm_agent::tools::ToolError> {
        let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("stamp #{n}"))
    }
}

#[tokio::test]
async fn a_side_effect_tool_runs_once_across_a_redelivery_and_read_only_tools_are_left_alone() {
    let server = NatsServer::start().unwrap();
    let client = server.client().await;
    let infra = Infra::ensure(&client, 1).await.unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let mut plain = ToolRegistry::builtin(".");
    plain.register(Arc::new(Stamp(calls.clone())));
    // Wrapped once, as a worker does at start; each task brings its journal.
    let tools = swarm_worker::journal::journaled_tools(&plain);
    let open = |attempt: u32, load_earlier: bool| {
        Journal::open(
            infra.journal.clone(),
            "s1",
            "t9",
            attempt,
            0,
            0,
            load_earlier,
        )
    };
    let stamp = |journal: Arc<Journal>| {
        swarm_worker::journal::with_journal(journal, tools.call("stamp", serde_json::json!({})))
    };

    let first = open(1, false).await.unwrap();
    assert_eq!(stamp(first.clone()).await.unwrap(), "stamp #1");
    assert_eq!(first.recorded(), 1);
    // The echo tool is read-only and idempotent: never journaled.
    swarm_worker::journal::with_journal(
        first.clone(),
        tools.call("echo", serde_json::json!({"text": "hi"})),
    )
    .await
    .unwrap();
    assert_eq!(first.recorded(), 1);

    // The redelivery replays the stamp from the journal: no second stamp.
    let again = open(1, true).await.unwrap();
    assert_eq!(stamp(again.clone()).await.unwrap(), "stamp #1");
    assert_eq!((again.replayed(), calls.load(Ordering::SeqCst)), (1, 1));

    // Another attempt has a journal of its own and stamps again.
    let other = open(2, true).await.unwrap();
    assert_eq!(stamp(other).await.unwrap(), "stamp #2");
}
