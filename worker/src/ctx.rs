//! What every task of a worker replica shares: its handles on the streams
//! and buckets, its tools and provider, its limits, and the cancel flags and
//! waits its tasks register in.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use swarm_agent::{
    gates::GateOptions,
    provider::Provider,
    tools::{MemoryStore, ToolRegistry, typed},
};
use swarm_common::subjects;
use swarm_runtime::Infra;
use tokio::sync::watch;

use crate::{WorkerConfig, approvals, cancels, journal, memory, tools, waits};

pub(crate) struct Ctx {
    pub(crate) infra: Infra,
    /// The step journal's bucket, shared by every task's journal.
    pub(crate) journal: Arc<jetstream::kv::Store>,
    pub(crate) a2ap: jetstream::stream::Stream,
    pub(crate) agent_id: String,
    /// The NATS user the desk is asked as.
    pub(crate) desk_user: String,
    /// The worker's tools, those with side effects journaled.
    pub(crate) tools: ToolRegistry,
    pub(crate) provider: Arc<dyn Provider>,
    /// The pool's durable consumer, for the redelivery metric.
    pub(crate) consumer: String,
    pub(crate) gate_options: GateOptions,
    pub(crate) ack_wait: Duration,
    pub(crate) task_timeout: Duration,
    /// Per swarm, a flag its running tasks watch; set when the swarm is cancelled.
    cancels: std::sync::Mutex<cancels::Cancels>,
    /// The approver, whose open requests a swarm's end closes.
    pub(crate) approver: Arc<approvals::NatsApprover>,
    /// Per swarm, the tasks whose questions wait for a person here.
    pub(crate) questions: waits::Waits,
    /// The client of remote A2A agents.
    pub(crate) remotes: crate::remote::Remotes,
    /// The skills on this worker's card: its pool's configured ones, then
    /// one per tool.
    pub(crate) skills: Vec<String>,
    /// The skills agents learned, offered to tasks and scored by them.
    pub(crate) learned: swarm_runtime::skills::SkillBook,
}

impl Ctx {
    /// A replica's shared handles: its approver (asking the desk), its tools
    /// (files under `root`, memory in the `memory` bucket, those with side
    /// effects journaled, `mcp` among them) and its provider.
    pub(crate) fn new(
        config: &WorkerConfig,
        infra: &Infra,
        a2ap: jetstream::stream::Stream,
        root: &Path,
        mcp: &[Arc<dyn swarm_agent::tools::Tool>],
    ) -> anyhow::Result<Ctx> {
        let desk_user = swarm_runtime::desk::user_or(config.nats.user.as_deref(), "worker");
        let approver = Arc::new(approvals::NatsApprover::new(
            infra.approvals.clone(),
            infra.js.clone(),
            desk_user.clone(),
            config.agent_id.clone(),
            config.approval_wait,
        ));
        let tools = {
            let memory: Arc<dyn MemoryStore> =
                Arc::new(memory::KvMemory::new(infra.memory.clone()));
            let mut tools = ToolRegistry::with_config(
                root.to_path_buf(),
                &config.tool_args.tools_config(Some(memory)),
            )
            .with_approver(approver.clone());
            tools.register(typed(tools::Sleep));
            for tool in mcp {
                tools.register(tool.clone());
            }
            journal::journaled_tools(&tools)
        };
        let mut skills = config.skills.clone();
        for spec in tools.specs() {
            if !skills.contains(&spec.name) {
                skills.push(spec.name);
            }
        }
        Ok(Ctx {
            skills,
            consumer: subjects::worker_consumer(&config.pool),
            journal: Arc::new(infra.journal.clone()),
            infra: infra.clone(),
            a2ap,
            agent_id: config.agent_id.clone(),
            desk_user,
            tools,
            provider: config
                .provider
                .build_limited(Some(crate::limits::limiter(config, infra)))
                .context("building the provider")?,
            gate_options: config.tool_args.gate_options(root),
            ack_wait: config.ack_wait,
            task_timeout: config.task_timeout,
            cancels: Default::default(),
            approver,
            questions: Default::default(),
            remotes: crate::remote::Remotes::new(config.remote.clone())?,
            learned: swarm_runtime::skills::SkillBook::new(infra.skills.clone()),
        })
    }

    /// The cancel flag of a swarm's tasks.
    pub(crate) fn cancel_flag(&self, swarm_id: &str) -> watch::Receiver<bool> {
        match self.cancels.lock() {
            Ok(mut c) => c.flag(swarm_id),
            Err(_) => watch::channel(false).1,
        }
    }

    /// Stops the swarm's running tasks and refuses its queued ones.
    pub(crate) fn cancel(&self, swarm_id: &str) {
        if let Ok(mut c) = self.cancels.lock() {
            c.cancel(swarm_id);
        }
    }

    /// Forgets a swarm's flag once no task watches it (cancelled flags are kept).
    pub(crate) fn release(&self, swarm_id: &str) {
        if let Ok(mut c) = self.cancels.lock() {
            c.release(swarm_id);
        }
    }
}
