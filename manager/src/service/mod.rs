//! The manager's NATS layer: the executor of the per-swarm drivers
//! ([`crate::driver`]), which carries swarm events from JetStream in and
//! the drivers' decisions back out.
//!
//! Manager replicas pull from one durable consumer whose priority group the
//! server pins to one replica at a time: the active manager gets every
//! swarm's events, the others wait on standby and the server moves the pin
//! to one of them when the active one stops pulling (crash, stall or
//! shutdown). So each swarm has one owner, whose cached state stays current
//! from one event to the next. Within a replica each swarm is an actor (one
//! task, one channel) that hands its queued events to its driver as one
//! batch and carries out what the driver decides, in order: every rule of
//! when a state is read, written and acked, and of which side effects wait
//! for the write, is the driver's, tested by script without a broker
//! (`manager/tests/driver.rs`).
//!
//! The executor is split by job: `consumer` (the consumer, routing events
//! to the swarms' actors, reading them), `actor` (one swarm's loop: its
//! driver's inputs in, its effects and requests out), `store` (the swarms'
//! states in the KV bucket), `outbox` (assignments, the report, dead
//! letters), `review` (gates and the model reviewer) and `deadlines` (the
//! sweeper).

mod actor;
mod consumer;
mod deadlines;
mod outbox;
mod review;
mod store;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{
    self,
    consumer::{PriorityPolicy, PullConsumer},
};
use async_nats::service::ServiceExt as _;
use chrono::Utc;
use futures::StreamExt;
use swarm_common::subjects;
use swarm_runtime::{Infra, NatsArgs};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::token::TokenKey;
use swarm_agent::gates::GateOptions;
use swarm_agent::provider::Provider;

/// How a manager replica runs.
#[derive(Clone)]
pub struct ManagerConfig {
    /// NATS connection.
    pub nats: NatsArgs,
    /// This replica's agent id.
    pub agent_id: String,
    /// How long to finish in-flight events after shutdown is asked for.
    pub drain_timeout: Duration,
    /// Copies of each stream and bucket (3 in a production cluster).
    pub replicas: usize,
    /// How long the server waits for an ack before redelivering an event.
    pub ack_wait: Duration,
    /// How long the server keeps this replica pinned as the active manager
    /// after it stops pulling (a crashed replica's standby takes over then).
    pub pin_ttl: Duration,
    /// Most swarms this replica works on at once.
    pub max_swarms: usize,
    /// The model that reviews results and summarises reports; `None`: the
    /// rule-based review and the deterministic summary only.
    pub reviewer: Option<Arc<dyn Provider>>,
    /// How the tasks' gates are built here.
    pub gate_options: GateOptions,
    /// The key of assignment tokens; every replica needs the same one.
    pub token_key: TokenKey,
    /// Deaths while applying a redelivered event after which it is set
    /// aside ([`crate::poison`]; at least 1).
    pub deaths_allowed: u32,
}

impl ManagerConfig {
    /// Defaults for a manager at `url`.
    pub fn new(nats: NatsArgs, agent_id: impl Into<String>) -> Self {
        Self {
            nats,
            agent_id: agent_id.into(),
            drain_timeout: Duration::from_secs(10),
            replicas: 1,
            ack_wait: Duration::from_millis(1500),
            pin_ttl: Duration::from_secs(1),
            max_swarms: 1000,
            reviewer: None,
            gate_options: GateOptions::default(),
            token_key: TokenKey::none(),
            deaths_allowed: crate::poison::DEATHS_ALLOWED,
        }
    }
}

/// What the jobs of a replica share.
struct Ctx {
    ack_wait: Duration,
    deaths_allowed: u32,
    token_key: TokenKey,
    reviewer: Option<Arc<dyn Provider>>,
    gate_options: GateOptions,
    /// Deadlines of the running swarms this replica has seen, for the sweeper.
    deadlines: std::sync::Mutex<HashMap<String, chrono::DateTime<Utc>>>,
    /// Counts the pins this replica has been given: a cached state from an
    /// earlier pin may be behind another replica's writes.
    pin_epoch: AtomicU64,
    infra: Infra,
    a2ap: jetstream::stream::Stream,
    agent_id: String,
    report_budget: usize,
    /// Bounds the look-ups of control messages for swarms with no actor
    /// here (see [`consumer::check_control`]).
    control_checks: Arc<tokio::sync::Semaphore>,
    /// Control messages found to concern a live swarm, back to the loop.
    reroute: mpsc::UnboundedSender<jetstream::Message>,
    /// The learned skills, whose scores the verdicts move.
    skills: Arc<swarm_runtime::skills::SkillBook>,
}

/// Look-ups of control messages that may run at once.
const CONTROL_CHECKS: usize = 32;

/// Runs a manager replica until `shutdown` resolves, then finishes in-flight
/// events within the drain timeout and drains the connection.
pub async fn run(config: ManagerConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    swarm_runtime::health::starting();
    let client = config.nats.connect(&config.agent_id).await?;
    let infra = Infra::open(&client, config.replicas).await?;
    swarm_runtime::hello::spawn(&client, "manager", &config.agent_id).await?;
    let a2ap = infra.a2ap().await?;
    let consumer: PullConsumer = a2ap
        .create_consumer(consumer::config(&config))
        .await
        .context("creating the manager consumer")?;
    let mut consumer = consumer;
    let info = consumer
        .info()
        .await
        .context("reading the manager consumer")?;
    anyhow::ensure!(
        info.config.filter_subjects == subjects::manager_filters(),
        "the server dropped the manager consumer's filter_subjects (nats-server >= 2.10 needed)"
    );
    anyhow::ensure!(
        info.config.priority_policy == PriorityPolicy::PinnedClient,
        "the server dropped the manager consumer's pinned priority group (nats-server >= 2.11 needed)"
    );
    // Pull requests must be renewed well within the pin's lifetime, or the
    // active replica loses the pin between two of them.
    let expires = (config.pin_ttl / 4).max(Duration::from_millis(100));
    let pull = || {
        consumer
            .stream()
            .group(subjects::MANAGER_GROUP)
            .expires(expires)
            .heartbeat(expires / 2)
            .messages()
    };
    let mut messages = pull().await.context("pulling manager events")?;
    // The manager's card, in the `agents` bucket and as the metadata of its
    // NATS service (which answers `$SRV.PING`, `INFO` and `STATS`).
    let mut card = swarm_runtime::cards::card("manager", &config.agent_id);
    card.skills = vec!["manage-swarms".into(), "review-results".into()];
    let service = client
        .service_builder()
        .description("Swarm manager: runs the swarms' task graphs and reviews their results")
        .metadata(card.metadata())
        .start("manager", env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("starting the manager service: {e}"))?;
    let card = swarm_runtime::cards::publish(&infra.agents, card).await;
    let (reroute, mut rerouted) = mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx {
        control_checks: Arc::new(tokio::sync::Semaphore::new(CONTROL_CHECKS)),
        reroute,
        ack_wait: config.ack_wait,
        deaths_allowed: config.deaths_allowed.max(1),
        token_key: config.token_key.clone(),
        reviewer: config.reviewer.clone(),
        gate_options: config.gate_options.clone(),
        deadlines: Default::default(),
        pin_epoch: AtomicU64::new(0),
        skills: Arc::new(swarm_runtime::skills::SkillBook::new(infra.skills.clone())),
        infra,
        a2ap,
        agent_id: config.agent_id.clone(),
        report_budget: (client.server_info().max_payload / 2).max(64 * 1024),
    });
    info!(agent_id = %config.agent_id, "manager ready");
    swarm_runtime::health::started();
    let sweeper = tokio::spawn(deadlines::sweep(ctx.clone()));

    let mut actors: HashMap<String, mpsc::UnboundedSender<jetstream::Message>> = HashMap::new();
    let mut running = JoinSet::new();
    let mut pin: Option<String> = None;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(msg) = rerouted.recv() => {
                consumer::route(&ctx, &mut actors, &mut running, msg, config.max_swarms, true).await
            }
            Some(done) = running.join_next(), if !running.is_empty() => {
                if let Ok(swarm_id) = done {
                    let swarm_id: String = swarm_id;
                    if actors.get(&swarm_id).is_some_and(|tx| tx.is_closed()) {
                        actors.remove(&swarm_id);
                    }
                }
            }
            next = messages.next() => match next {
                None => {
                    warn!("the manager's message stream ended");
                    break;
                }
                Some(Err(e)) => {
                    if let Some(fresh) = swarm_runtime::retry::pull_again("manager events", &e, pull()).await {
                        messages = fresh;
                    }
                }
                Some(Ok(msg)) => {
                    let pinned = msg
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(async_nats::header::NATS_PIN_ID))
                        .map(|v| v.as_str());
                    if let Some(id) = pinned
                        && pin.as_deref() != Some(id)
                    {
                        info!(pin = id, "this replica is the active manager");
                        pin = Some(id.to_owned());
                        ctx.pin_epoch.fetch_add(1, Ordering::SeqCst);
                    }
                    consumer::route(&ctx, &mut actors, &mut running, msg, config.max_swarms, false).await
                }
            }
        }
    }
    // Hand the pin over now rather than after it lapses: a standby replica
    // takes the swarms while this one finishes what it holds.
    drop(messages);
    if let Err(e) = ctx
        .a2ap
        .unpin_consumer(subjects::MANAGER_CONSUMER, subjects::MANAGER_GROUP)
        .await
    {
        debug!(error = %e, "could not release the pin; it lapses on its own");
    }
    info!("manager draining");
    swarm_runtime::health::stopping();
    let _ = service.stop().await;
    card.withdraw().await;
    sweeper.abort();
    drop(actors);
    swarm_runtime::shutdown::drain(&mut running, config.drain_timeout, "swarm events").await;
    client.drain().await.ok();
    Ok(())
}
