//! The step journal: every reply of a model (not of the deterministic offline
//! provider, which answers a replay as cheaply), and every result of a tool
//! that is not read-only and idempotent, is stored in the `journal` bucket under
//! (swarm, task, attempt, revision, step) before the agent loop goes on. A
//! redelivered task replays the finished steps from the journal instead of
//! paying for the same model calls, or repeating the same side effects, again.
//!
//! Replay is by position: the agent loop is deterministic given the same
//! replies and tool results, so the n-th call of a rerun is the n-th call of
//! the first run. A call that does not match its entry (another tool, other
//! arguments) ends the replay and the loop goes on live.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_nats::jetstream::kv;
use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use swarm_agent::provider::{CompletionRequest, CompletionResponse, Provider, ProviderError};
use swarm_agent::tools::{Tool, ToolContext, ToolError, ToolRegistry, ToolSpec};
use swarm_common::Codec;
use tokio::sync::Mutex;
use tracing::{debug, warn};

/// One journaled step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Entry {
    /// A provider's reply.
    Reply(CompletionResponse),
    /// A tool's result (`Err` holds the error's text).
    Tool {
        /// The tool.
        name: String,
        /// Its arguments.
        arguments: serde_json::Value,
        /// What it returned.
        output: Result<String, String>,
    },
}

/// The journal of one attempt and revision of one task.
pub struct Journal {
    kv: Arc<kv::Store>,
    prefix: String,
    /// Entries of an earlier run not yet replayed, and the next step number.
    state: Mutex<(std::collections::VecDeque<Entry>, u64)>,
    replayed: AtomicU64,
    recorded: AtomicU64,
}

impl Journal {
    /// Opens the journal of `(swarm, task, attempt, revision)` and of the
    /// `round`-th answer to the task's questions (0 before any). With
    /// `load_earlier`, what an earlier delivery recorded is read for replay;
    /// a first delivery has nothing there and skips the round trip. The
    /// bucket's handle is shared (a `kv::Store` clone copies its stream's
    /// whole info).
    pub async fn open(
        kv: impl Into<Arc<kv::Store>>,
        swarm_id: &str,
        task_id: &str,
        attempt: u32,
        revision: u32,
        round: u32,
        load_earlier: bool,
    ) -> anyhow::Result<Arc<Journal>> {
        let kv = kv.into();
        let prefix = format!("{swarm_id}.{task_id}.a{attempt}.r{revision}.i{round}");
        let mut earlier = std::collections::VecDeque::new();
        if load_earlier {
            while let Some(bytes) = kv.get(format!("{prefix}.s{}", earlier.len() + 1)).await? {
                earlier.push_back(Codec::MsgPack.decode::<Entry>(&bytes)?);
            }
        }
        Ok(Arc::new(Journal {
            kv,
            prefix,
            state: Mutex::new((earlier, 0)),
            replayed: AtomicU64::new(0),
            recorded: AtomicU64::new(0),
        }))
    }

    /// Steps replayed from an earlier run.
    pub fn replayed(&self) -> u64 {
        self.replayed.load(Ordering::Relaxed)
    }

    /// Steps recorded by this run.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }

    /// The next entry if it satisfies `matches`; otherwise the replay ends.
    async fn replay(&self, matches: impl Fn(&Entry) -> bool) -> Option<Entry> {
        let mut state = self.state.lock().await;
        let (earlier, step) = &mut *state;
        let entry = earlier.pop_front()?;
        if matches(&entry) {
            *step += 1;
            self.replayed.fetch_add(1, Ordering::Relaxed);
            Some(entry)
        } else {
            warn!(prefix = %self.prefix, step = *step + 1, "journal diverges from this run; going on live");
            earlier.clear();
            None
        }
    }

    /// Stores a step before the loop acts on it.
    async fn record(&self, entry: &Entry) -> anyhow::Result<()> {
        let mut state = self.state.lock().await;
        state.0.clear();
        state.1 += 1;
        let key = format!("{}.s{}", self.prefix, state.1);
        let bytes = Bytes::from(Codec::MsgPack.encode(entry)?);
        self.kv.put(&key, bytes).await?;
        self.recorded.fetch_add(1, Ordering::Relaxed);
        debug!(%key, "journaled step");
        Ok(())
    }
}

/// A provider whose replies are journaled and replayed.
pub struct JournaledProvider {
    inner: Arc<dyn Provider>,
    journal: Arc<Journal>,
}

impl JournaledProvider {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Provider>, journal: Arc<Journal>) -> Self {
        Self { inner, journal }
    }
}

#[async_trait]
impl Provider for JournaledProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn cost_usd(&self, usage: swarm_agent::provider::Usage) -> f64 {
        self.inner.cost_usd(usage)
    }

    fn deterministic(&self) -> bool {
        self.inner.deterministic()
    }

    async fn complete(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        if let Some(Entry::Reply(reply)) =
            self.journal.replay(|e| matches!(e, Entry::Reply(_))).await
        {
            return Ok(reply);
        }
        let reply = self.inner.complete(request).await?;
        self.journal
            .record(&Entry::Reply(reply.clone()))
            .await
            .map_err(|e| ProviderError::Transport(format!("cannot journal the reply: {e:#}")))?;
        Ok(reply)
    }
}

tokio::task_local! {
    /// The journal of the task whose agent loop runs in this scope.
    static JOURNAL: Arc<Journal>;
}

/// Runs `f` (a task's agent loop) with `journal` as the journal its
/// journaled tools record to and replay from.
pub async fn with_journal<F: std::future::Future>(journal: Arc<Journal>, f: F) -> F::Output {
    JOURNAL.scope(journal, f).await
}

/// Runs `call`, a step named `name` with `arguments`, through the journal
/// of the task whose scope this is ([`with_journal`]): replayed if an
/// earlier run recorded it, else run and its outcome recorded before it is
/// returned. `call` answers `Ok` with the step's outcome (its text, or the
/// error it ended with), which is recorded; or `Err` when it could not run
/// at all (the broker failed), which is not, so a redelivery runs it again.
/// Outside a task's scope the call is made as it is.
pub(crate) async fn journaled<F>(
    name: &str,
    arguments: serde_json::Value,
    call: F,
) -> Result<String, ToolError>
where
    F: std::future::Future<Output = Result<Result<String, ToolError>, ToolError>>,
{
    let Ok(journal) = JOURNAL.try_with(Arc::clone) else {
        return call.await?;
    };
    let same = |e: &Entry| matches!(e, Entry::Tool { name: n, arguments: a, .. } if n == name && *a == arguments);
    if let Some(Entry::Tool { output, .. }) = journal.replay(same).await {
        return output.map_err(ToolError::Failed);
    }
    let output = call.await?;
    let entry = Entry::Tool {
        name: name.to_string(),
        arguments,
        output: match &output {
            Ok(text) => Ok(text.clone()),
            Err(e) => Err(e.to_string()),
        },
    };
    journal
        .record(&entry)
        .await
        .map_err(|e| ToolError::Failed(format!("cannot journal the step: {e:#}")))?;
    output
}

/// A tool with side effects whose results are journaled and replayed, in
/// the journal of the task it is called for ([`with_journal`]).
struct JournaledTool {
    name: String,
    inner: Arc<dyn Tool>,
}

#[async_trait]
impl Tool for JournaledTool {
    fn spec(&self) -> ToolSpec {
        self.inner.spec()
    }

    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        self.call_in(&ToolContext::default(), arguments).await
    }

    async fn call_in(
        &self,
        ctx: &ToolContext,
        arguments: serde_json::Value,
    ) -> Result<String, ToolError> {
        let call = self.inner.call_in(ctx, arguments.clone());
        journaled(&self.name, arguments, async { Ok(call.await) }).await
    }
}

/// `registry` with every tool that is not both read-only and idempotent
/// (repeating a read is harmless; repeating a write is not) wrapped so that
/// its results are journaled in the calling task's journal. Built once per
/// worker: a spec is not free, and neither is a registry per task.
pub fn journaled_tools(registry: &ToolRegistry) -> ToolRegistry {
    let mut journaled = registry.clone();
    for spec in registry.specs() {
        if spec.annotations.read_only && spec.annotations.idempotent {
            continue;
        }
        if let Some(tool) = registry.get(&spec.name) {
            journaled.register(Arc::new(JournaledTool {
                name: spec.name,
                inner: tool,
            }));
        }
    }
    journaled
}
