//! The manager's NATS layer: the executor of the per-swarm drivers
//! ([`crate::driver`]), which carries swarm events from JetStream in and
//! the drivers' decisions back out.
//!
//! The A2AP stream stores each swarm's messages under one of N manager
//! partitions (a subject transform on the swarm id), and each partition
//! has a durable consumer whose priority group the server pins to one
//! replica at a time. The replicas share the partitions by rendezvous
//! hashing over the ones they hear on a heartbeat (`partitions`): each
//! pulls only the partitions it owns, so each swarm has one owner, whose
//! cached state stays current from one event to the next; a replica that
//! crashes, stalls or leaves has its partitions moved to the others (the
//! pin lapses or is handed over, and unacked events are redelivered).
//! Within a replica each swarm is an actor (one task, one channel) that
//! hands its queued events to its driver as one batch and carries out what
//! the driver decides, in order: every rule of when a state is read,
//! written and acked, and of which side effects wait for the write, is
//! the driver's, tested by script without a broker
//! (`manager/tests/driver.rs`).
//!
//! The executor is split by job: `partitions` (which partitions this
//! replica owns, and pulling them), `consumer` (the partitions' consumers,
//! routing events to the swarms' actors, reading them), `actor` (one swarm's loop: its
//! driver's inputs in, its effects and requests out), `store` (the swarms'
//! states in the KV bucket), `outbox` (assignments, the report, dead
//! letters), `review` (gates and the model reviewer) and `deadlines` (the
//! sweeper).

mod actor;
mod consumer;
mod deadlines;
mod outbox;
mod partitions;
mod review;
mod store;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
use tracing::{debug, info};

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
    /// How long the server keeps a partition pinned to this replica after
    /// it stops pulling (a crashed replica's partitions move on then).
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
    /// Counts the pins this replica has been given, on any partition: a
    /// cached state from an earlier pin may be behind another replica's
    /// writes.
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
    let partitions = swarm_runtime::infra::partitions(&a2ap.cached_info().config)
        .context("the A2AP stream has no manager partitions (run `swarm setup`)")?;
    let mut consumers = Vec::with_capacity(partitions as usize);
    for p in 0..partitions {
        let consumer: PullConsumer = a2ap
            .create_consumer(consumer::config(&config, p))
            .await
            .with_context(|| format!("creating the consumer of manager partition {p}"))?;
        let info = &consumer.cached_info().config;
        anyhow::ensure!(
            info.filter_subjects == subjects::manager_filters(p),
            "the server dropped the manager consumer's filter_subjects (nats-server >= 2.10 needed)"
        );
        anyhow::ensure!(
            info.priority_policy == PriorityPolicy::PinnedClient,
            "the server dropped the manager consumer's pinned priority group (nats-server >= 2.11 needed)"
        );
        consumers.push(consumer);
    }
    // Pull requests must be renewed well within the pin's lifetime, or the
    // owner loses the pin between two of them.
    let expires = (config.pin_ttl / 4).max(Duration::from_millis(100));
    let (events_tx, mut events) = mpsc::channel(1024);
    let mut holdings = partitions::Holdings::new(a2ap.clone(), consumers, expires, events_tx);
    // This replica among the others: a process id of its own, so that two
    // replicas given the same agent id still count as two.
    let me = format!("{}#{}", config.agent_id, uuid::Uuid::new_v4().simple());
    let mut members = partitions::Members::new(me.clone());
    let mut beats = client
        .subscribe(subjects::MANAGER_HEARTBEAT)
        .await
        .context("listening to the other managers")?;
    let beat = |leaving| {
        serde_json::to_vec(&partitions::Heartbeat {
            id: me.clone(),
            leaving,
        })
        .unwrap_or_default()
    };
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
    info!(agent_id = %config.agent_id, partitions, "manager ready");
    swarm_runtime::health::started();
    let sweeper = tokio::spawn(deadlines::sweep(ctx.clone()));

    let mut actors: HashMap<String, mpsc::UnboundedSender<jetstream::Message>> = HashMap::new();
    let mut running = JoinSet::new();
    let started = Instant::now();
    let mut ticks = tokio::time::interval(partitions::HEARTBEAT_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let rebalance = |members: &mut partitions::Members, holdings: &mut partitions::Holdings| {
        if started.elapsed() >= partitions::SETTLE {
            let want = members.owned(holdings.partitions(), Instant::now());
            holdings.hold(&want);
        }
    };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = ticks.tick() => {
                if let Err(e) = client.publish(subjects::MANAGER_HEARTBEAT, beat(false).into()).await {
                    debug!(error = %e, "could not send the heartbeat");
                }
                rebalance(&mut members, &mut holdings);
            }
            Some(heard) = beats.next() => {
                if let Some(h) = partitions::Heartbeat::read(&heard.payload) {
                    let leaving = h.leaving;
                    members.heard(h, Instant::now());
                    if leaving {
                        rebalance(&mut members, &mut holdings);
                    }
                }
            }
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
            Some((partition, msg)) = events.recv() => {
                let pinned = msg
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(async_nats::header::NATS_PIN_ID))
                    .map(|v| v.as_str());
                if let Some(id) = pinned
                    && holdings.pinned(partition, id)
                {
                    ctx.pin_epoch.fetch_add(1, Ordering::SeqCst);
                }
                consumer::route(&ctx, &mut actors, &mut running, msg, config.max_swarms, false).await
            }
        }
    }
    // Say so first, so the others take the partitions at once; then hand
    // over the pins rather than let them lapse, while this replica finishes
    // what it holds.
    let _ = client
        .publish(subjects::MANAGER_HEARTBEAT, beat(true).into())
        .await;
    let _ = client.flush().await;
    holdings.release_all().await;
    drop(events);
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
