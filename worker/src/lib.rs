//! The Swarm worker: a generic executor in a pool. Replicas of a pool share
//! one durable pull consumer; each assignment carries the persona to play.
//! For each one the worker resolves its dependencies' results, runs the
//! agent loop (think, act with tools, observe) with its provider, streams
//! `ProgressUpdate`s, and hands its `ResultSubmission` to the stream. The
//! assignment is acked once the result is stored: by the manager, which
//! receives the result only then (the worker does not wait for the server's
//! answer), or, should the assignment come back first, by the worker that
//! finds its result stored and does not run the task again.
//!
//! [`decide`] makes the decisions, with no I/O: what a delivery comes to
//! (run, give up, ack as answered), how a task starts, when its progress is
//! worth an update, what its run submits, what an answer or a cancel means.
//! Around it: `consumer` (the pull loop and each delivery's acks), `task`
//! (running one task), `outbox` (progress, results and errors sent),
//! `questions` (a task's questions for a person), `collaborate` (its asks
//! for help from other personas), `control` (cancels), [`remote`] (a
//! persona's tasks done by an outside A2A agent), [`mcp`] (tools from MCP
//! servers), [`limits`] (the model limits every worker shares).

pub mod approvals;
pub mod cancels;
mod collaborate;
mod config;
mod consumer;
mod control;
mod ctx;
pub mod decide;
pub mod journal;
pub mod limits;
pub mod mcp;
pub mod memory;
mod outbox;
mod questions;
pub mod remote;
mod task;
pub mod tools;
pub mod waits;

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use async_nats::service::ServiceExt as _;
use swarm_common::subjects;
use swarm_runtime::Infra;
use tracing::info;

pub use config::{WorkerConfig, default_workspace};
pub use remote::RemoteConfig;

/// Runs a worker replica until `shutdown` resolves.
pub async fn run(config: WorkerConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    anyhow::ensure!(
        subjects::is_token(&config.pool),
        "pool {:?} must be letters, digits, '-' or '_'",
        config.pool
    );
    std::fs::create_dir_all(&config.workspace_root)
        .with_context(|| format!("creating the workspace {}", config.workspace_root.display()))?;
    let root = std::fs::canonicalize(&config.workspace_root)
        .with_context(|| format!("workspace root {}", config.workspace_root.display()))?;
    swarm_runtime::health::starting();
    let client = config.nats.connect(&config.agent_id).await?;
    let infra = Infra::open(&client, config.replicas).await?;
    swarm_runtime::hello::spawn(&client, "worker", &config.agent_id).await?;
    let a2ap = infra.a2ap().await?;
    // Before the consumer opens: a task may need these tools at once.
    let mcp = mcp::McpServers::start(&config.mcp, &root).await?;
    let concurrency = config.concurrency.max(1);
    let assignments = consumer::open(&infra, &config, concurrency).await?;
    let ctx = Arc::new(ctx::Ctx::new(&config, &infra, a2ap, &root, &mcp.tools)?);
    let control = client
        .subscribe(subjects::control("*"))
        .await
        .context("subscribing to control messages")?;
    let control_watch = tokio::spawn(control::watch(ctx.clone(), control));
    // The pool's card: its configured skills, then one per tool.
    let mut card = swarm_runtime::cards::card("worker", &config.agent_id);
    card.pool = Some(config.pool.clone());
    card.tools = ctx.tools.specs().into_iter().map(|s| s.name).collect();
    card.skills = ctx.skills.clone();
    let service = client
        .service_builder()
        .description("Swarm worker: runs the tasks of its pool")
        .metadata(card.metadata())
        .start("worker", env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("starting the worker service: {e}"))?;
    let card = swarm_runtime::cards::publish(&infra.agents, card).await;
    info!(agent_id = %config.agent_id, pool = %config.pool, workspace = %root.display(), provider = ctx.provider.name(), "worker ready");
    swarm_runtime::health::started();

    let mut running = consumer::serve(ctx, assignments, concurrency, shutdown).await;
    info!("worker draining");
    swarm_runtime::health::stopping();
    let _ = service.stop().await;
    card.withdraw().await;
    control_watch.abort();
    swarm_runtime::shutdown::drain(&mut running, config.drain_timeout, "tasks").await;
    client.drain().await.ok();
    drop(mcp);
    Ok(())
}
