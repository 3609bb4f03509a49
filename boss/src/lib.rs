//! The Swarm boss: serves `boss.missions`, records each accepted mission
//! before answering, plans a team for it (explicit plan or the offline
//! planner), deploys it to the managers, and renders each `FinalReport` into
//! a self-contained HTML report.
//!
//! Three loops share one connection: [`intake`] (a NATS service in a queue
//! group across boss replicas), [`planning`] and [`reports`] (durable
//! consumers shared by the replicas, so any boss finishes what another began).

pub mod intake;
pub mod planning;
pub mod records;
pub mod report;
pub mod reports;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::service::ServiceExt;
use futures::StreamExt;
use swarm_common::{Limits, subjects};
use swarm_runtime::{Infra, NatsArgs, retry::pull_again};
use tokio::task::JoinSet;
use tracing::{info, warn};

/// The name the boss registers its NATS service under (`nats micro ls` shows it).
pub const SERVICE_NAME: &str = "boss";

/// How a boss replica runs.
#[derive(Clone)]
pub struct BossConfig {
    /// NATS connection.
    pub nats: NatsArgs,
    /// This replica's agent id.
    pub agent_id: String,
    /// Where HTML reports are written.
    pub reports_dir: PathBuf,
    /// Limits missions are accepted with.
    pub limits: Limits,
    /// How long to finish in-flight work after shutdown is asked for.
    pub drain_timeout: Duration,
    /// Copies of each stream and bucket.
    pub replicas: usize,
    /// The model that plans missions; `None`: the offline planner.
    pub planner: Option<Arc<dyn swarm_agent::provider::Provider>>,
    /// The tools the workers offer, which plans may name.
    pub tool_names: Vec<String>,
}

impl BossConfig {
    /// Defaults for a boss.
    pub fn new(nats: NatsArgs, agent_id: impl Into<String>) -> Self {
        Self {
            nats,
            agent_id: agent_id.into(),
            reports_dir: PathBuf::from("reports"),
            limits: Limits::default(),
            drain_timeout: Duration::from_secs(10),
            replicas: 1,
            planner: None,
            tool_names: worker_tool_names(&swarm_agent::tools::ToolArgs::default()),
        }
    }
}

/// The tools a worker configured with `tool_args` offers: the built-ins,
/// the optional ones switched on, `memory` and `sleep`.
pub fn worker_tool_names(tool_args: &swarm_agent::tools::ToolArgs) -> Vec<String> {
    let memory: Arc<dyn swarm_agent::tools::MemoryStore> =
        Arc::new(swarm_agent::tools::InMemoryStore::new());
    let mut names =
        swarm_agent::tools::ToolRegistry::with_config(".", &tool_args.tools_config(Some(memory)))
            .names();
    names.push("sleep".into());
    names.sort();
    names.dedup();
    names
}

async fn durable(
    infra: &Infra,
    stream: &str,
    name: &str,
    filter: &str,
    ack_wait: Duration,
) -> anyhow::Result<PullConsumer> {
    let stream = infra
        .js
        .get_stream(stream)
        .await
        .with_context(|| format!("opening stream {stream}"))?;
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(name.into()),
            filter_subject: filter.into(),
            ack_policy: AckPolicy::Explicit,
            ack_wait,
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating consumer {name}"))?;
    Ok(consumer)
}

/// Runs a boss replica until `shutdown` resolves.
pub async fn run(config: BossConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    swarm_runtime::health::starting();
    let client = config.nats.connect(&config.agent_id).await?;
    let infra = Infra::ensure(&client, config.replicas).await?;
    // Reports get a connection of their own: storing a rendered page and
    // updating its record must not queue ahead of the next mission's intake
    // (the server reads one connection's messages in order).
    let report_client = config
        .nats
        .connect(&format!("{}-reports", config.agent_id))
        .await?;
    let report_infra = Infra::ensure(&report_client, config.replicas).await?;

    let planner_consumer = durable(
        &infra,
        subjects::MISSIONS_STREAM,
        subjects::PLANNER_CONSUMER,
        subjects::MISSIONS_STREAM_SUBJECTS,
        Duration::from_secs(60),
    )
    .await?;
    let reports_consumer = durable(
        &report_infra,
        subjects::A2AP_STREAM,
        subjects::REPORTS_CONSUMER,
        subjects::REPORT_FILTER,
        Duration::from_secs(60),
    )
    .await?;

    let intake = Arc::new(intake::Intake {
        infra: infra.clone(),
        limits: config.limits.clone(),
        agent_id: config.agent_id.clone(),
    });
    let planner = Arc::new(planning::Planner {
        infra: infra.clone(),
        limits: config.limits.clone(),
        agent_id: config.agent_id.clone(),
        tool_names: config.tool_names.clone(),
        provider: config.planner.clone(),
    });
    let reporter = Arc::new(reports::Reporter {
        infra: report_infra,
        reports_dir: config.reports_dir.clone(),
        agent_id: config.agent_id.clone(),
    });

    let service = client
        .service_builder()
        .description("Swarm mission intake: submit a mission, get a swarm id")
        .queue_group(subjects::MISSIONS_QUEUE)
        .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("starting the boss service: {e}"))?;
    let mut endpoint = service
        .endpoint(subjects::MISSIONS)
        .await
        .map_err(|e| anyhow::anyhow!("serving {}: {e}", subjects::MISSIONS))?;
    let mut planned = planner_consumer
        .messages()
        .await
        .context("pulling missions")?;
    let mut reported = reports_consumer
        .messages()
        .await
        .context("pulling reports")?;
    info!(agent_id = %config.agent_id, reports_dir = %config.reports_dir.display(), "boss ready");
    swarm_runtime::health::started();

    let mut inflight = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = inflight.join_next(), if !inflight.is_empty() => {}
            Some(request) = endpoint.next() => {
                let intake = intake.clone();
                inflight.spawn(async move { intake.handle(request).await });
            }
            Some(next) = planned.next() => match next {
                Ok(msg) => {
                    let planner = planner.clone();
                    inflight.spawn(async move { planner.handle(msg).await });
                }
                Err(e) => {
                    if let Some(fresh) = pull_again("missions", &e, planner_consumer.messages()).await {
                        planned = fresh;
                    }
                }
            },
            Some(next) = reported.next() => match next {
                Ok(msg) => {
                    let reporter = reporter.clone();
                    inflight.spawn(async move { reporter.handle(msg).await });
                }
                Err(e) => {
                    if let Some(fresh) = pull_again("reports", &e, reports_consumer.messages()).await {
                        reported = fresh;
                    }
                }
            },
        }
    }
    info!("boss draining");
    swarm_runtime::health::stopping();
    let _ = endpoint.stop().await;
    let _ = service.stop().await;
    if tokio::time::timeout(config.drain_timeout, async {
        while inflight.join_next().await.is_some() {}
    })
    .await
    .is_err()
    {
        warn!("drain deadline passed with work in flight; it will be redelivered");
    }
    client.drain().await.ok();
    report_client.drain().await.ok();
    Ok(())
}
