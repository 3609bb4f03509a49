//! The manager's NATS layer: carries swarm events from JetStream into the
//! state machine ([`crate::machine`]) and its commands back out.
//!
//! Manager replicas pull from one durable consumer whose priority group the
//! server pins to one replica at a time: the active manager gets every
//! swarm's events, the others wait on standby and the server moves the pin
//! to one of them when the active one stops pulling (crash, stall or
//! shutdown). So each swarm has one owner, whose cached state stays current
//! from one event to the next. Within a replica each swarm is an actor (one
//! task, one channel) that applies its queued events as one batch. Every
//! state write is still a compare-and-swap on the swarm's key: a replica
//! that lost the pin while it held a batch loses the race, reloads and
//! applies again, and because events are idempotent by content nothing is
//! applied twice. A message is acked only after the state it changed is
//! stored and the side effects it decided are published; a crash in between
//! means redelivery, which re-sends the owed side effects under the same
//! deduplication ids.
//!
//! On the hot paths (a batch of results applied to a state this replica
//! wrote itself since it last got the pin; a new swarm's deployment) the new
//! assignments are published while the state is written, not after: both
//! are durable before any event is acked, and an assignment is deduplicated
//! by its id if a lost race makes another replica decide it again. Errors,
//! control messages and the final report wait for their state write, since
//! what they decide (a retry, a verdict) must come from the stored state.
//!
//! On the first of those paths the state write may also wait a few
//! milliseconds (`DEFER_WRITE`, 30 ms) for the swarm's next events, so a chain of
//! quick tasks writes its state once per many hops (made at the end of the
//! first batch after 25 ms, while the workers run what it assigned, or when
//! the 30 ms are up with no event in between): the events stay unacked,
//! held by the actor, until a stored state includes them, and are nak'd
//! (applied again from their redelivery) if the state holding them is
//! dropped. A worker's answer to an assignment whose state write was lost
//! with its replica is "ahead" of the stored state and waits for it.
//!
//! Workers hand their results over without waiting for the server's answer
//! and leave their assignments unacked; a result reaches the manager only
//! once it is stored, so the manager acks the assignment it names
//! (`wire::assignment_ack`) as soon as its batch is handled.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{
    self, AckKind,
    consumer::{AckPolicy, DeliverPolicy, PriorityPolicy, PullConsumer, pull},
    context::PublishAckFuture,
    kv,
};
use bytes::Bytes;
use chrono::Utc;
use futures::StreamExt;
use swarm_common::{
    Codec, Control, Envelope, ErrorBody, ErrorCode, ErrorMessage, FinalReport, ResultSubmission,
    SwarmDeployment, SwarmState,
    subjects::{self, Subject},
};
use swarm_runtime::{Infra, NatsArgs, wire};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::index::Indexed;
use crate::machine::{self, Command, Event};
use crate::token::TokenKey;
use swarm_agent::gates::{GateChain, GateOptions};
use swarm_agent::provider::Provider;
use swarm_agent::review::{ReviewRequest, review_with_provider, summarize_with_provider};

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
        }
    }
}

struct Ctx {
    ack_wait: Duration,
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
    /// here (see [`check_control`]).
    control_checks: Arc<tokio::sync::Semaphore>,
    /// Control messages found to concern a live swarm, back to the loop.
    reroute: mpsc::UnboundedSender<jetstream::Message>,
}

/// The most deliveries of one event: a bound, never reached in practice.
const MAX_DELIVER: i64 = 1_000;

/// Look-ups of control messages that may run at once.
const CONTROL_CHECKS: usize = 32;

/// Runs a manager replica until `shutdown` resolves, then finishes in-flight
/// events within the drain timeout and drains the connection.
pub async fn run(config: ManagerConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    swarm_runtime::health::starting();
    let client = config.nats.connect(&config.agent_id).await?;
    let infra = Infra::open(&client, config.replicas).await?;
    let a2ap = infra.a2ap().await?;
    let consumer: PullConsumer = a2ap
        .create_consumer(manager_consumer_config(&config))
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
    let (reroute, mut rerouted) = mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx {
        control_checks: Arc::new(tokio::sync::Semaphore::new(CONTROL_CHECKS)),
        reroute,
        ack_wait: config.ack_wait,
        token_key: config.token_key.clone(),
        reviewer: config.reviewer.clone(),
        gate_options: config.gate_options.clone(),
        deadlines: Default::default(),
        pin_epoch: AtomicU64::new(0),
        infra,
        a2ap,
        agent_id: config.agent_id.clone(),
        report_budget: (client.server_info().max_payload / 2).max(64 * 1024),
    });
    info!(agent_id = %config.agent_id, "manager ready");
    swarm_runtime::health::started();
    let sweeper = tokio::spawn(sweep_deadlines(ctx.clone()));

    let mut actors: HashMap<String, mpsc::UnboundedSender<jetstream::Message>> = HashMap::new();
    let mut running = JoinSet::new();
    let mut pin: Option<String> = None;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(msg) = rerouted.recv() => {
                route(&ctx, &mut actors, &mut running, msg, config.max_swarms, true).await
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
                    route(&ctx, &mut actors, &mut running, msg, config.max_swarms, false).await
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
    sweeper.abort();
    drop(actors);
    swarm_runtime::shutdown::drain(&mut running, config.drain_timeout, "swarm events").await;
    client.drain().await.ok();
    Ok(())
}

/// The manager consumer: pinned to one replica at a time.
fn manager_consumer_config(config: &ManagerConfig) -> pull::Config {
    pull::Config {
        durable_name: Some(subjects::MANAGER_CONSUMER.into()),
        description: Some("Manager replicas: deployments, results, errors, control".into()),
        filter_subjects: subjects::manager_filters(),
        ack_policy: AckPolicy::Explicit,
        ack_wait: config.ack_wait,
        deliver_policy: DeliverPolicy::All,
        max_ack_pending: 10_000,
        // A backstop only: events a manager died on end through their
        // marks (`crate::poison`) long before this; an event that waits
        // for the ones before it is handed back every half second.
        max_deliver: MAX_DELIVER,
        priority_policy: PriorityPolicy::PinnedClient,
        priority_groups: vec![subjects::MANAGER_GROUP.into()],
        priority_timeout: config.pin_ttl,
        ..Default::default()
    }
}

/// Hands a message to its swarm's actor, starting one if needed. A control
/// message for a swarm with no actor here is first looked up off the loop
/// (`checked` once it was): one for a swarm that does not exist or has
/// ended changes nothing and takes no actor slot, so a flood of them does
/// not hold up the swarms that are running.
async fn route(
    ctx: &Arc<Ctx>,
    actors: &mut HashMap<String, mpsc::UnboundedSender<jetstream::Message>>,
    running: &mut JoinSet<String>,
    msg: jetstream::Message,
    max_swarms: usize,
    checked: bool,
) {
    // `Subject::parse` takes only ids that are tokens.
    let parsed = Subject::parse(&msg.subject);
    let control = matches!(parsed, Some(Subject::Control { .. }));
    let swarm_id = match parsed {
        Some(s) => s.swarm_id().to_string(),
        _ => {
            let reason = ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("{} is not an A2AP swarm subject", msg.subject),
            );
            reject(ctx, &msg, reason).await;
            return;
        }
    };
    let mut msg = msg;
    if let Some(tx) = actors.get(&swarm_id) {
        match tx.send(msg) {
            Ok(()) => return,
            Err(mpsc::error::SendError(m)) => msg = m,
        }
    }
    if !checked && control {
        tokio::spawn(check_control(ctx.clone(), swarm_id, msg));
        return;
    }
    if running.len() >= max_swarms {
        // At capacity: a new swarm goes back to the stream, for a replica
        // with room (or this one, once an idle swarm's actor has ended).
        debug!(%swarm_id, "at capacity; leaving the swarm to another replica");
        let _ = msg
            .ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
            .await;
        return;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(msg);
    actors.insert(swarm_id.clone(), tx);
    let span = info_span!("swarm", swarm_id = %swarm_id);
    running.spawn(actor(ctx.clone(), swarm_id, rx).instrument(span));
}

/// Records an undecodable or misplaced message as a dead letter and stops its redelivery.
async fn reject(ctx: &Ctx, msg: &jetstream::Message, reason: ErrorBody) {
    wire::reject(&ctx.infra.js, "manager", msg, reason, &ctx.agent_id).await;
}

/// The cached state of one swarm and the KV revision it was read at.
struct Cached {
    state: Indexed,
    /// The revision last stored (the state may be ahead of it: `dirty`).
    revision: u64,
    /// The state holds applied events not yet stored (a deferred write).
    dirty: bool,
    /// Which read this state descends from: a state read again is a new
    /// generation, and what a dirty earlier one held is gone with it.
    generation: u64,
    /// Assignments this state records that were posted without asking for
    /// the server's answer and are not yet known stored: each is confirmed
    /// before a write of the state (or, sooner, by its result). Only a dirty
    /// state has any.
    posted: Posted,
}

/// Assignments posted without an answer ([`wire::Posted`]), by
/// deduplication id ([`machine::assignment_msg_id`]).
type Posted = HashMap<String, wire::Posted>;

/// Numbers the reads of swarm states (see [`Cached::generation`]).
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

impl Cached {
    /// A state as read from (or first written to) the bucket.
    fn read(state: Indexed, revision: u64) -> Cached {
        Cached {
            state,
            revision,
            dirty: false,
            generation: GENERATIONS.fetch_add(1, Ordering::Relaxed),
            posted: Posted::new(),
        }
    }
}

/// Accepted results' texts a swarm's actor keeps, by stream sequence, so an
/// assignment can carry its dependencies' results and the report needs no
/// reads. Bounded: what does not fit is read from the stream instead.
#[derive(Default)]
struct Results {
    texts: HashMap<u64, String>,
    bytes: usize,
}

/// Most bytes of result text one swarm's actor keeps.
const RESULT_CACHE_BYTES: usize = 1 << 20;
/// Most bytes of dependency results carried inside one assignment.
const INLINE_CONTEXT_BYTES: usize = 64 * 1024;

impl Results {
    fn remember(&mut self, seq: u64, text: &str) {
        if self.bytes + text.len() <= RESULT_CACHE_BYTES && !self.texts.contains_key(&seq) {
            self.bytes += text.len();
            self.texts.insert(seq, text.to_owned());
        }
    }

    /// Fills in the context results of `assignment` that are at hand, within
    /// [`INLINE_CONTEXT_BYTES`]; the worker reads the others from the stream.
    fn inline(&self, assignment: &mut swarm_common::TaskAssignment) {
        let mut budget = INLINE_CONTEXT_BYTES;
        for c in &mut assignment.context {
            if let Some(text) = self.texts.get(&c.result_seq)
                && text.len() <= budget
            {
                budget -= text.len();
                c.result = Some(text.clone());
            }
        }
    }
}

/// How long a swarm's actor waits for its next event before it ends.
const ACTOR_IDLE: Duration = Duration::from_secs(2);

/// Most events of one swarm applied with one state write.
const MAX_BATCH: usize = 256;

/// Events applied to a swarm's cached state whose write is deferred, and
/// the generation of the state that holds them.
struct Held {
    msgs: Vec<jetstream::Message>,
    /// The ack subjects of the assignments their results answer, acked
    /// when the events are settled, whichever way: sent with the
    /// assignment that follows, each ack would reach the server in the
    /// same write and be handled before that assignment is delivered.
    assignment_acks: Vec<String>,
    generation: u64,
    since: tokio::time::Instant,
}

/// How long a swarm's state write may wait for the next events of the same
/// swarm, so a chain of quick tasks costs one write per many hops instead of
/// one per hop. Its events stay unacked until the write lands, so this must
/// stay far below the manager's `ack_wait` (0.5 s at the least). 12 ms against
/// 5 ms took a chain of 50 from about seven writes of its whole state to
/// three; 30 ms against 12 takes it to one or two and the chain down about
/// 4 % with the server on one Go thread, where each write's cost in the
/// server weighs more (docs/decisions.md, "Deferred state writes").
const DEFER_WRITE: Duration = Duration::from_millis(30);

/// Most events held for one deferred write.
const MAX_HELD: usize = 1024;

/// A deferred write this old is made at the end of the batch that finds it
/// so, just after the batch's assignments went out, rather than when
/// [`DEFER_WRITE`] is up: the write then runs while the workers do, not in
/// the way of the next result (in a chain, the timer would fire at a
/// random moment of a hop and hold up the result arriving during it).
const WRITE_AFTER_BATCH: Duration = Duration::from_millis(25);

async fn actor(
    ctx: Arc<Ctx>,
    swarm_id: String,
    mut rx: mpsc::UnboundedReceiver<jetstream::Message>,
) -> String {
    let mut cache: Option<Cached> = None;
    let mut results = Results::default();
    let mut held: Option<Held> = None;
    let mut epoch = ctx.pin_epoch.load(Ordering::SeqCst);
    loop {
        // An actor idle for a while ends (after what is still queued), so a
        // replica at capacity frees room for swarms that have events. A
        // deferred write is made when its time is up.
        let wait = held.as_ref().map_or(ACTOR_IDLE, |h| {
            (h.since + DEFER_WRITE).saturating_duration_since(tokio::time::Instant::now())
        });
        let first = match tokio::time::timeout(wait, rx.recv()).await {
            Ok(Some(m)) => m,
            Ok(None) => {
                flush(&ctx, &mut cache, &mut held).await;
                break;
            }
            Err(_) if held.is_some() => {
                flush(&ctx, &mut cache, &mut held).await;
                continue;
            }
            Err(_) => {
                rx.close();
                continue;
            }
        };
        // Whatever queued up while the last batch was being stored goes into
        // this one: a fan-in of many results costs one state write, not many.
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        // A state cached under an earlier pin may be behind the writes of
        // the replica that held the pin in between.
        let now_epoch = ctx.pin_epoch.load(Ordering::SeqCst);
        if now_epoch != epoch {
            epoch = now_epoch;
            cache = None;
        }
        let defer = held.as_ref().map_or(0, |h| h.msgs.len()) + batch.len() <= MAX_HELD;
        // Keep the batch (and the events held for a write) ours while it is
        // handled, however long a review takes.
        let every = (ctx.ack_wait / 2).max(Duration::from_millis(250));
        let outcomes = {
            let work = handle_batch(&ctx, &swarm_id, &mut cache, &mut results, &batch, defer);
            tokio::pin!(work);
            loop {
                tokio::select! {
                    outcomes = &mut work => break outcomes,
                    () = tokio::time::sleep(every) => {
                        for m in batch.iter().chain(held.iter().flat_map(|h| h.msgs.iter())) {
                            let _ = m.ack_with(AckKind::Progress).await;
                        }
                        // And the assignments they answer, which would
                        // otherwise come back to a worker during a long review.
                        let answered = batch
                            .iter()
                            .filter_map(|m| wire::assignment_ack(m.headers.as_ref()))
                            .chain(held.iter().flat_map(|h| h.assignment_acks.iter().map(String::as_str)));
                        for ack in answered {
                            wire::ack_assignment(&ctx.infra.js.client(), ack, AckKind::Progress).await;
                        }
                    }
                }
            }
        };
        settle(&ctx, &cache, &mut held).await;
        let dirty = cache.as_ref().filter(|c| c.dirty).map(|c| c.generation);
        // A result reached us because it is stored: the assignment it
        // answers, which its worker left unacked, is done (whatever the
        // result's own fate). A result that cannot be read acks nothing.
        // Those of held events are acked when the events are settled.
        for (msg, outcome) in batch.iter().zip(&outcomes) {
            if !matches!(outcome, Err(Failure::Reject(_)))
                && let Some(ack) = wire::assignment_ack(msg.headers.as_ref())
                && !(dirty.is_some() && outcome.is_ok())
            {
                wire::ack_assignment(&ctx.infra.js.client(), ack, AckKind::Ack).await;
            }
        }
        for (msg, outcome) in batch.into_iter().zip(outcomes) {
            let ack = match outcome {
                Ok(()) => match dirty {
                    Some(generation) => {
                        let h = held.get_or_insert_with(|| Held {
                            msgs: Vec::new(),
                            assignment_acks: Vec::new(),
                            generation,
                            since: tokio::time::Instant::now(),
                        });
                        if let Some(ack) = wire::assignment_ack(msg.headers.as_ref()) {
                            h.assignment_acks.push(ack.to_owned());
                        }
                        h.msgs.push(msg);
                        Ok(())
                    }
                    None => msg.ack().await,
                },
                Err(Failure::Reject(reason)) => {
                    reject(&ctx, &msg, reason).await;
                    Ok(())
                }
                Err(Failure::Retry(e)) => {
                    warn!(error = format!("{e:#}"), subject = %msg.subject, "event not applied; it will be redelivered");
                    cache = None;
                    msg.ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
                        .await
                }
                Err(Failure::Wait(why)) => {
                    debug!(subject = %msg.subject, "{why}");
                    msg.ack_with(AckKind::Nak(Some(Duration::from_millis(500))))
                        .await
                }
            };
            if let Err(e) = ack {
                warn!(error = %e, "ack failed; the event may be redelivered (it is idempotent)");
            }
        }
        // A retry above dropped the cache: what it held comes again.
        settle(&ctx, &cache, &mut held).await;
        if held
            .as_ref()
            .is_some_and(|h| h.since.elapsed() >= WRITE_AFTER_BATCH)
        {
            flush(&ctx, &mut cache, &mut held).await;
        }
        // A finished swarm whose report is out needs no actor: close the
        // channel, finish what is queued, and let the next event start a new one.
        if cache
            .as_ref()
            .is_some_and(|c| c.state.status.is_terminal() && c.state.report_published)
        {
            rx.close();
        }
    }
    swarm_id
}

/// Makes a deferred state write, then settles the events it holds: acked
/// once stored, redelivered if the write failed or lost its race.
async fn flush(ctx: &Ctx, cache: &mut Option<Cached>, held: &mut Option<Held>) {
    let Some(generation) = held.as_ref().map(|h| h.generation) else {
        return;
    };
    if let Some(c) = cache.as_mut()
        && c.dirty
        && c.generation == generation
    {
        // The state may only say what the stream holds: its posted
        // assignments are known stored before it is written.
        let written = match confirm_posted(ctx, &mut c.posted).await {
            Ok(()) => store(ctx, &mut c.state, c.revision).await,
            Err(e) => Err(e),
        };
        match written {
            Ok(Some(rev)) => {
                c.revision = rev;
                c.dirty = false;
                track_deadline(ctx, &c.state);
            }
            Ok(None) => {
                debug!("lost a deferred state write's compare-and-swap; its events come again");
                *cache = None;
            }
            Err(e) => {
                warn!(
                    error = format!("{e:#}"),
                    "deferred state write failed; its events come again"
                );
                *cache = None;
            }
        }
    }
    settle(ctx, cache, held).await;
}

/// Settles the events held for a deferred write against the cache as it is
/// now: acked once a stored state includes them, still held while the state
/// that holds them waits for its write, and nak'd (applied again from their
/// redelivery) if that state was dropped or read again.
async fn settle(ctx: &Ctx, cache: &Option<Cached>, held: &mut Option<Held>) {
    let Some(h) = held.take() else {
        return;
    };
    match cache.as_ref().filter(|c| c.generation == h.generation) {
        Some(c) if c.dirty => {
            *held = Some(h);
            return;
        }
        Some(_) => ack_all(&h.msgs).await,
        None => nak_all(&h.msgs).await,
    }
    // Their results are stored either way: the assignments are done.
    for ack in &h.assignment_acks {
        wire::ack_assignment(&ctx.infra.js.client(), ack, AckKind::Ack).await;
    }
}

async fn ack_all(msgs: &[jetstream::Message]) {
    for m in msgs {
        if let Err(e) = m.ack().await {
            warn!(error = %e, "ack failed; the event may be redelivered (it is idempotent)");
        }
    }
}

async fn nak_all(msgs: &[jetstream::Message]) {
    for m in msgs {
        let _ = m.ack_with(AckKind::Nak(None)).await;
    }
}

enum Failure {
    /// The message can never be applied.
    Reject(ErrorBody),
    /// A transient fault: try again later.
    Retry(anyhow::Error),
    /// The event must wait for events before it (the cached state is fine).
    Wait(String),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Retry(e)
    }
}

enum Incoming {
    Deploy(SwarmDeployment),
    Event(Event),
    Ignore,
}

/// Looks up the swarm of a control message that has no actor here: a live
/// swarm's goes back to the loop for its actor; one for a swarm that has
/// ended is acked (a cancel or expiry changes nothing there), one for a
/// swarm that was never deployed is terminated. A failed look-up leaves the
/// decision to the actor, as before.
async fn check_control(ctx: Arc<Ctx>, swarm_id: String, msg: jetstream::Message) {
    let Ok(_permit) = ctx.control_checks.clone().acquire_owned().await else {
        return;
    };
    let found = match load(&ctx, &swarm_id).await {
        Ok(Some(c)) => Ok(Some(c.state.status)),
        Ok(None) => recent_deployment(&ctx, &swarm_id)
            .await
            .map(|d| d.map(|_| swarm_common::SwarmStatus::Running)),
        Err(e) => Err(e),
    };
    match found {
        Ok(Some(status)) if status.is_terminal() => {
            debug!(%swarm_id, ?status, "a control message for a swarm that has ended; dropped");
            let _ = msg.ack().await;
        }
        Ok(None) => {
            debug!(%swarm_id, "a control message for a swarm that does not exist; dropped");
            swarm_runtime::metrics::dropped_control();
            let _ = msg.ack_with(AckKind::Term).await;
        }
        Ok(Some(_)) | Err(_) => {
            let _ = ctx.reroute.send(msg);
        }
    }
}

fn decode(swarm_id: &str, msg: &jetstream::Message, key: &TokenKey) -> Result<Incoming, ErrorBody> {
    let headers = msg.headers.as_ref();
    let seq = msg.info().map(|i| i.stream_sequence).unwrap_or(0);
    let check_swarm = |envelope_swarm: &str| {
        if envelope_swarm == swarm_id {
            Ok(())
        } else {
            Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "envelope swarm_id {envelope_swarm:?} does not match the subject's {swarm_id:?}"
                ),
            ))
        }
    };
    match Subject::parse(&msg.subject) {
        Some(Subject::Deploy { .. }) => {
            let env = wire::decode::<SwarmDeployment>(headers, &msg.payload)?;
            check_swarm(&env.swarm_id)?;
            Ok(Incoming::Deploy(env.body))
        }
        Some(Subject::Result { task_id, .. }) => {
            let env = wire::decode::<ResultSubmission>(headers, &msg.payload)?;
            check_swarm(&env.swarm_id)?;
            if env.body.task_id != task_id {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!(
                        "result for task {:?} sent on the subject of task {task_id:?}",
                        env.body.task_id
                    ),
                ));
            }
            let sub = &env.body;
            if !key.verify(&sub.token, swarm_id, task_id, sub.attempt, sub.revision) {
                return Err(forged(task_id, sub.attempt, sub.revision));
            }
            Ok(Incoming::Event(Event::Result {
                seq,
                submission: Box::new(env.body),
                review: Vec::new(),
            }))
        }
        Some(Subject::Error { .. }) => {
            let env = wire::decode::<ErrorMessage>(headers, &msg.payload)?;
            check_swarm(&env.swarm_id)?;
            if let Some(task_id) = &env.body.task_id
                && key.checks()
            {
                // An error names its attempt but not its revision: any
                // revision of that attempt is the holder's.
                let attempt = env.body.attempt.unwrap_or(0);
                let held = (0..=MAX_REVISION_CHECKED)
                    .any(|r| key.verify(&env.body.token, swarm_id, task_id, attempt, r));
                if !held {
                    return Err(forged(task_id, attempt, 0));
                }
            }
            Ok(match env.body.task_id {
                Some(task_id) => Incoming::Event(Event::TaskError {
                    task_id,
                    attempt: env.body.attempt,
                    error: env.body.error,
                }),
                None => Incoming::Ignore,
            })
        }
        Some(Subject::Control { .. }) => {
            let env = wire::decode::<Control>(headers, &msg.payload)?;
            check_swarm(&env.swarm_id)?;
            Ok(match env.body {
                Control::Cancel { reason } => Incoming::Event(Event::Cancel {
                    reason: if reason.is_empty() {
                        format!("cancelled by {}", env.sender_agent)
                    } else {
                        reason
                    },
                }),
                Control::Expire => Incoming::Event(Event::Expire),
            })
        }
        _ => Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!("the manager does not consume {}", msg.subject),
        )),
    }
}

/// The revisions an error's token is checked against (a task is revised
/// at most `max_revisions` times; the limit's ceiling is far below this).
const MAX_REVISION_CHECKED: u32 = 64;

/// The refusal of a message that does not carry its assignment's token.
fn forged(task_id: &str, attempt: u32, revision: u32) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::AuthorizationDenied,
        format!(
            "not from the holder of task {task_id}'s assignment (attempt {attempt}, revision {revision}): wrong or missing token"
        ),
    )
}

fn encode_state(state: &SwarmState) -> anyhow::Result<Bytes> {
    // About 530 bytes a task (see BENCHMARKS.md), so the buffer seldom regrows.
    let hint = 1024 + state.tasks.len() * 640;
    Ok(Bytes::from(Codec::MsgPack.encode_sized(state, hint)?))
}

async fn load(ctx: &Ctx, swarm_id: &str) -> anyhow::Result<Option<Cached>> {
    let entry = ctx
        .infra
        .swarms
        .entry(swarm_id)
        .await
        .context("reading swarm state")?;
    match entry {
        Some(e) if e.operation == kv::Operation::Put => {
            let state: SwarmState = Codec::MsgPack
                .decode(&e.value)
                .context("decoding stored swarm state")?;
            Ok(Some(Cached::read(Indexed::new(state), e.revision)))
        }
        _ => Ok(None),
    }
}

/// Stores `state` if the key is still at `revision` (0: must not exist).
/// `Ok(None)` means another writer got there first.
async fn store(ctx: &Ctx, state: &mut SwarmState, revision: u64) -> anyhow::Result<Option<u64>> {
    if state.last_manager != ctx.agent_id {
        state.last_manager.clone_from(&ctx.agent_id);
    }
    let bytes = encode_state(state)?;
    let swarms = &ctx.infra.swarms;
    if revision == 0 {
        match swarms.create(&state.swarm_id, bytes).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(anyhow::Error::new(e).context("creating swarm state")),
        }
    } else {
        match swarms.update(&state.swarm_id, bytes, revision).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(anyhow::Error::new(e).context("updating swarm state")),
        }
    }
}

/// One decoded event of a batch, with where it sits in the stream.
struct Item {
    index: usize,
    incoming: Incoming,
    seq: u64,
    delivered: i64,
    /// How long ago it was stored in the stream.
    age: Duration,
}

/// Applies a batch of one swarm's events in order with one state write and
/// returns each message's outcome. Redelivered events are marked while they
/// are applied, and one a manager already died on is set aside
/// ([`crate::poison`]).
async fn handle_batch(
    ctx: &Ctx,
    swarm_id: &str,
    cache: &mut Option<Cached>,
    results: &mut Results,
    msgs: &[jetstream::Message],
    defer: bool,
) -> Vec<Result<(), Failure>> {
    let redelivered: Vec<(usize, u64, i64)> = msgs
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            let info = m.info().ok()?;
            (info.delivered > 1).then_some((i, info.stream_sequence, info.delivered))
        })
        .collect();
    let deaths = futures::future::join_all(
        redelivered
            .iter()
            .map(|(_, seq, _)| crate::poison::begin(&ctx.infra.swarms, *seq)),
    )
    .await;
    let mut poisoned = HashMap::new();
    for ((index, seq, delivered), deaths) in redelivered.iter().zip(deaths) {
        match deaths {
            Ok(n) if n >= crate::poison::DEATHS_ALLOWED => {
                let reason = ErrorBody::new(
                    ErrorCode::LimitExceeded,
                    format!(
                        "a manager died applying {} (stream sequence {seq}, delivery {delivered}): it was set aside and not handed to another",
                        msgs[*index].subject
                    ),
                );
                poisoned.insert(*index, reason);
            }
            Ok(_) => {}
            Err(e) => {
                warn!(
                    seq,
                    error = format!("{e:#}"),
                    "cannot mark a redelivered event; applying it unmarked"
                )
            }
        }
    }
    let outcomes = apply_marked(ctx, swarm_id, cache, results, msgs, defer, &poisoned).await;
    futures::future::join_all(
        redelivered
            .iter()
            .map(|(_, seq, _)| crate::poison::end(&ctx.infra.swarms, *seq)),
    )
    .await;
    outcomes
}

/// Sets aside an event a manager died on: a dead letter with the reason;
/// the swarm's watchers are told when the event was its deployment (there is
/// no swarm to fail). `false` if the dead letter could not be recorded.
async fn set_aside(
    ctx: &Ctx,
    swarm_id: &str,
    msg: &jetstream::Message,
    reason: &ErrorBody,
    deployment: bool,
) -> bool {
    if let Err(e) = wire::dead_letter(
        &ctx.infra.js,
        "manager",
        &msg.subject,
        reason.clone(),
        &msg.payload,
        &ctx.agent_id,
    )
    .await
    {
        warn!(error = %e, "cannot record a dead letter; the event will come again");
        return false;
    }
    if deployment {
        let env = Envelope::new(
            ctx.agent_id.as_str(),
            "client",
            swarm_id,
            swarm_id,
            ErrorMessage {
                token: String::new(),
                task_id: None,
                attempt: None,
                error: reason.clone(),
            },
        );
        if let Err(e) = wire::publish(
            &ctx.infra.js,
            subjects::error(swarm_id),
            &env,
            Some(&format!("{swarm_id}.poisoned")),
        )
        .await
        {
            warn!(error = %e, "cannot tell the swarm's watchers that its deployment was set aside");
        }
    }
    true
}

/// [`handle_batch`] once the marks are taken: `poisoned` names the events
/// to set aside instead of applying.
async fn apply_marked(
    ctx: &Ctx,
    swarm_id: &str,
    cache: &mut Option<Cached>,
    results: &mut Results,
    msgs: &[jetstream::Message],
    defer: bool,
    poisoned: &HashMap<usize, ErrorBody>,
) -> Vec<Result<(), Failure>> {
    let mut outcomes: Vec<Option<Result<(), Failure>>> = msgs.iter().map(|_| None).collect();
    let mut items = Vec::new();
    for (index, msg) in msgs.iter().enumerate() {
        if let Some(reason) = poisoned.get(&index) {
            let deployment = matches!(Subject::parse(&msg.subject), Some(Subject::Deploy { .. }));
            if !set_aside(ctx, swarm_id, msg, reason, deployment).await {
                outcomes[index] = Some(Err(Failure::Retry(anyhow::anyhow!(
                    "an event to set aside could not be recorded"
                ))));
                continue;
            }
            if deployment {
                outcomes[index] = Some(Ok(()));
                continue;
            }
            let (seq, delivered) = msg
                .info()
                .map(|i| (i.stream_sequence, i.delivered))
                .unwrap_or((0, 0));
            items.push(Item {
                index,
                incoming: Incoming::Event(Event::Poisoned {
                    reason: reason.message.clone(),
                }),
                seq,
                delivered,
                age: Duration::ZERO,
            });
            continue;
        }
        let incoming = match decode(swarm_id, msg, &ctx.token_key) {
            Ok(Incoming::Ignore) => {
                outcomes[index] = Some(Ok(()));
                continue;
            }
            Ok(i) => i,
            Err(e) => {
                outcomes[index] = Some(Err(Failure::Reject(e)));
                continue;
            }
        };
        let Ok(info) = msg.info() else {
            outcomes[index] = Some(Err(Failure::Retry(anyhow::anyhow!(
                "message without JetStream info"
            ))));
            continue;
        };
        let now_ns = Utc::now()
            .timestamp_nanos_opt()
            .map(i128::from)
            .unwrap_or(0);
        let waited_ms = (now_ns - info.published.unix_timestamp_nanos()).max(0) / 1_000_000;
        if info.delivered > 1 {
            // Another replica took this event and did not finish it (it died or
            // stalled): this is a takeover, and how long it took is worth knowing.
            info!(delivered = info.delivered, seq = info.stream_sequence, waited_ms = waited_ms as i64, subject = %msg.subject, "taking over a redelivered event");
            swarm_runtime::metrics::redelivered(subjects::MANAGER_CONSUMER);
            swarm_runtime::metrics::takeover("event");
        }
        items.push(Item {
            index,
            incoming,
            seq: info.stream_sequence,
            delivered: info.delivered,
            age: Duration::from_millis(u64::try_from(waited_ms).unwrap_or(u64::MAX)),
        });
    }
    if !items.is_empty() {
        review_results(ctx, swarm_id, cache, &mut items).await;
        for item in &items {
            if let Incoming::Event(Event::Result {
                seq, submission, ..
            }) = &item.incoming
                && submission.status == swarm_common::TaskStatus::Completed
            {
                results.remember(*seq, &submission.result);
            }
        }
        let settled = apply_batch(ctx, swarm_id, cache, results, &items, defer).await;
        for (item, outcome) in items.iter().zip(settled) {
            outcomes[item.index] = Some(outcome);
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(Failure::Retry(anyhow::anyhow!("event left unsettled")))))
        .collect()
}

/// Runs the checks that need I/O on each result before it is applied: the
/// task's gates, then the model reviewer (only for a result every other check
/// passed, so no model is paid to read an empty answer). Done once per batch,
/// outside the compare-and-swap loop, so a lost race does not pay twice.
async fn review_results(ctx: &Ctx, swarm_id: &str, cache: &mut Option<Cached>, items: &mut [Item]) {
    let wanted = items
        .iter()
        .any(|i| matches!(i.incoming, Incoming::Event(Event::Result { .. })));
    if !wanted {
        return;
    }
    if cache.is_none() {
        match load(ctx, swarm_id).await {
            Ok(c) => *cache = c,
            Err(_) => return,
        }
    }
    let Some(state) = cache.as_ref().map(|c| &c.state) else {
        return;
    };
    for item in items.iter_mut() {
        let Incoming::Event(Event::Result {
            submission, review, ..
        }) = &mut item.incoming
        else {
            continue;
        };
        let Some(task) = state.task(&submission.task_id) else {
            continue;
        };
        let current = !task.status.is_terminal()
            && task.attempt == submission.attempt
            && task.revision == submission.revision;
        if !current || submission.status != swarm_common::TaskStatus::Completed {
            continue;
        }
        let verdict = |gate: String, passed: bool, reason: String| swarm_common::GateVerdict {
            gate,
            passed,
            reason,
            revision: submission.revision,
        };
        if !task.definition.gates.is_empty() {
            let chain = GateChain::from_specs(&task.definition.gates, &ctx.gate_options);
            for (name, check) in chain.check(&submission.result).await {
                review.push(verdict(name, check.passed, check.reason));
            }
        }
        let rules_pass = machine::review(submission, task, state.limits.max_result_bytes)
            .iter()
            .all(|v| v.passed);
        let Some(reviewer) = &ctx.reviewer else {
            continue;
        };
        if !rules_pass || review.iter().any(|v| !v.passed) {
            continue;
        }
        let request = ReviewRequest {
            directive: state.manager_directive.clone(),
            task_title: task.definition.title.clone(),
            task_description: task.definition.description.clone(),
            result: submission.result.clone(),
            criteria: task.definition.gates.iter().map(|g| g.name()).collect(),
        };
        match review_with_provider(reviewer.as_ref(), &request).await {
            Ok(v) => {
                let m = &mut submission.metrics;
                *m.entry("input_tokens".into()).or_insert(0.0) += v.usage.input_tokens as f64;
                *m.entry("output_tokens".into()).or_insert(0.0) += v.usage.output_tokens as f64;
                *m.entry("cost_usd".into()).or_insert(0.0) += v.cost_usd;
                info!(task_id = %task.definition.task_id, approved = v.approved, "model review");
                review.push(verdict("model_review".into(), v.approved, v.feedback));
            }
            Err(e) => {
                // A reviewer that cannot answer does not block the swarm: the
                // rule-based review stands, and the report says so.
                warn!(task_id = %task.definition.task_id, error = %e.message, "model review failed; the rule-based review stands");
                review.push(verdict(
                    "model_review".into(),
                    true,
                    format!("not reviewed by the model: {}", e.message),
                ));
            }
        }
    }
}

/// The compare-and-swap loop of a batch: a lost race means another replica
/// moved the state; reload and apply the batch again (events are idempotent
/// by content).
async fn apply_batch(
    ctx: &Ctx,
    swarm_id: &str,
    cache: &mut Option<Cached>,
    results: &Results,
    items: &[Item],
    defer: bool,
) -> Vec<Result<(), Failure>> {
    // Results only, applied to a state this replica wrote or read under its
    // current pin: the hot path, whose assignments go out with the write.
    let only_results = items
        .iter()
        .all(|i| matches!(i.incoming, Incoming::Event(Event::Result { .. })));
    let all = |f: &dyn Fn() -> Failure| items.iter().map(|_| Err(f())).collect::<Vec<_>>();
    // A swarm's deployment, delivered for the first time, has no state yet:
    // create it without reading first (a lost race reads), and send its
    // first assignments while it is written. Should the swarm exist after
    // all, they are copies of assignments sent since the mission was
    // accepted, so within the stream's deduplication window if the mission
    // is younger than it: they land once.
    let mut assume_new = cache.is_none()
        && items.first().is_some_and(|i| {
            i.delivered == 1
                && matches!(&i.incoming, Incoming::Deploy(d)
                    if Utc::now() - d.accepted_at < NEW_SWARM_WINDOW)
        });
    'attempt: for _ in 0..16 {
        let fresh = cache.is_none();
        let new_swarm = fresh && std::mem::take(&mut assume_new);
        if fresh && !new_swarm {
            match load(ctx, swarm_id).await {
                Ok(c) => *cache = c,
                Err(e) => return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}"))),
            }
        }
        let now = Utc::now();
        let revision = cache.as_ref().map_or(0, |c| c.revision);
        let was_dirty = cache.as_ref().is_some_and(|c| c.dirty);
        let generation = cache.as_ref().map(|c| c.generation);
        // Applied in place: a failed write drops the cache and reloads, so
        // the state is never copied (a copy per batch is O(tasks)).
        let (mut state, mut posted) = match cache.take() {
            Some(c) => (Some(c.state), c.posted),
            None => (None, Posted::new()),
        };
        let mut changed = false;
        let mut unsure = false;
        let mut commands = Vec::new();
        let mut outcomes: Vec<Result<(), Failure>> = Vec::with_capacity(items.len());
        if state.is_none()
            && let Some(first) = items.first()
            && matches!(first.incoming, Incoming::Event(_))
        {
            // Events before their swarm's state: the deployment's first
            // write may have been lost with the replica that made it, after
            // its assignments went out. Deploy from the stream now (the
            // redelivered deployment then finds the state).
            match recent_deployment(ctx, swarm_id).await {
                Ok(Some((d, seq))) => {
                    let (s, cmds) = machine::deploy(swarm_id, &d, seq, now);
                    info!(tasks = s.tasks.len(), status = ?s.status, "swarm deployed from the stream: an event came before its state");
                    state = Some(s);
                    changed = true;
                    commands.extend(cmds);
                }
                Ok(None) => {}
                Err(e) => return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}"))),
            }
        }
        for item in items {
            match (&mut state, &item.incoming) {
                (None, Incoming::Deploy(d)) => {
                    let (s, cmds) = machine::deploy(swarm_id, d, item.seq, now);
                    info!(tasks = s.tasks.len(), status = ?s.status, "swarm deployed");
                    state = Some(s);
                    changed = true;
                    commands.extend(cmds);
                    outcomes.push(Ok(()));
                }
                (None, Incoming::Event(Event::Poisoned { .. })) => {
                    // Set aside already (a dead letter); no swarm to fail.
                    outcomes.push(Ok(()));
                }
                (None, _) => {
                    // An event for a swarm whose state is not stored (yet): give
                    // the deployment time to land, then record it as a dead letter.
                    outcomes.push(Err(if item.delivered < 5 {
                        Failure::Retry(anyhow::anyhow!("swarm {swarm_id} has no state yet"))
                    } else {
                        Failure::Reject(ErrorBody::new(
                            ErrorCode::NotFound,
                            format!("no swarm {swarm_id} exists"),
                        ))
                    }));
                }
                (Some(s), Incoming::Deploy(_)) => {
                    debug!("deployment seen again; re-sending what the state still owes");
                    commands.extend(machine::outstanding(s));
                    outcomes.push(Ok(()));
                }
                (Some(s), Incoming::Event(event)) => {
                    // A result shows its assignment stored: a worker pulled it.
                    if let Event::Result { submission, .. } = event
                        && !posted.is_empty()
                    {
                        posted.remove(&machine::assignment_msg_id(
                            swarm_id,
                            &submission.task_id,
                            submission.attempt,
                            submission.revision,
                        ));
                    }
                    let applied = machine::apply(s, item.seq, event, now);
                    if applied.ahead {
                        // A cached state may only be behind our own pin's
                        // writes; a stored one waits for the events before it,
                        // but not for ever: one that never catches up answers
                        // an assignment nobody made.
                        unsure = true;
                        let patience = (ctx.ack_wait * 10).max(Duration::from_secs(10));
                        outcomes.push(Err(if item.age > patience {
                            Failure::Reject(ErrorBody::new(
                                ErrorCode::ValidationFailed,
                                format!(
                                    "{} answers an attempt or revision of its task that swarm {swarm_id} never assigned (still ahead of its state after {patience:?})",
                                    event_name(event)
                                ),
                            ))
                        } else {
                            Failure::Wait(format!(
                                "{} is ahead of the stored state; it waits for the events before it",
                                event_name(event)
                            ))
                        }));
                        continue;
                    }
                    changed |= applied.changed;
                    unsure |= !applied.changed;
                    commands.extend(applied.commands);
                    outcomes.push(Ok(()));
                }
                (Some(_), Incoming::Ignore) => outcomes.push(Ok(())),
            }
        }
        if unsure && !fresh && !was_dirty {
            // "Nothing to do" from a cached state may only mean the cache is
            // behind another replica's writes: decide again on a fresh read.
            // (A state with unstored events is ahead of any read.)
            continue 'attempt;
        }
        let (mut assigns, finalize) = split(commands);
        let mut sent = false;
        let keep = |state: Indexed, revision: u64, dirty: bool, posted: Posted| match generation {
            Some(generation) => Cached {
                state,
                revision,
                dirty,
                generation,
                posted,
            },
            None => Cached {
                dirty,
                posted,
                ..Cached::read(state, revision)
            },
        };
        match state {
            Some(next)
                if changed && defer && ((only_results && !fresh) || new_swarm) && !finalize =>
            {
                // The state write waits: the events stay unacked in the actor
                // until a later write stores them (within DEFER_WRITE), and
                // the assignments go out now, posted without waiting for the
                // server's answer: the write confirms them first. A new
                // swarm's first write (a create) waits the same way, its
                // deployment held: should the swarm exist after all, the
                // create fails, the deployment comes again and reads it, and
                // the assignments posted were copies within the stream's
                // deduplication window (see `assume_new`).
                let assigns = std::mem::take(&mut assigns);
                if let Err(e) = post_assignments(ctx, swarm_id, results, assigns, &mut posted).await
                {
                    return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}")));
                }
                sent = true;
                *cache = Some(keep(next, revision, true, posted));
            }
            Some(mut next) if changed => {
                // Assignments posted by earlier batches are recorded in this
                // state too: known stored before it is written.
                if let Err(e) = confirm_posted(ctx, &mut posted).await {
                    return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}")));
                }
                let stored = if (only_results && !fresh) || new_swarm {
                    // The assignments go to the connection first, and it gets
                    // a turn to write them out before the state is encoded.
                    let acks = match queue_assignments(
                        ctx,
                        swarm_id,
                        results,
                        std::mem::take(&mut assigns),
                    )
                    .await
                    {
                        Ok(acks) => acks,
                        Err(e) => return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}"))),
                    };
                    tokio::task::yield_now().await;
                    let (published, stored) =
                        tokio::join!(await_acks(acks), store(ctx, &mut next, revision));
                    if let Err(e) = published {
                        return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}")));
                    }
                    sent = true;
                    stored
                } else {
                    store(ctx, &mut next, revision).await
                };
                match stored {
                    Ok(Some(rev)) => *cache = Some(keep(next, rev, false, Posted::new())),
                    Ok(None) => {
                        debug!("lost a state compare-and-swap; reloading");
                        continue 'attempt;
                    }
                    Err(e) => return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}"))),
                }
            }
            Some(unchanged) => *cache = Some(keep(unchanged, revision, was_dirty, posted)),
            None => {}
        }
        if !sent && let Err(e) = send_assignments(ctx, swarm_id, results, assigns).await {
            return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}")));
        }
        if finalize && let Err(e) = publish_report(ctx, cache, results).await {
            return all(&|| Failure::Retry(anyhow::anyhow!("{e:#}")));
        }
        if let Some(c) = cache.as_ref() {
            track_deadline(ctx, &c.state);
        }
        return outcomes;
    }
    all(&|| Failure::Retry(anyhow::anyhow!("state kept changing under us")))
}

/// How an event is named in logs and dead letters.
fn event_name(event: &Event) -> String {
    match event {
        Event::Result { submission, .. } => format!(
            "the result of task {} (attempt {}, revision {})",
            submission.task_id, submission.attempt, submission.revision
        ),
        Event::TaskError {
            task_id, attempt, ..
        } => match attempt {
            Some(a) => format!("the error of task {task_id} (attempt {a})"),
            None => format!("the error of task {task_id}"),
        },
        Event::Cancel { .. } => "the cancel".into(),
        Event::Expire => "the expiry".into(),
        Event::Poisoned { .. } => "the notice of an event set aside".into(),
    }
}

/// The swarm's deployment as stored in the A2AP stream, with its sequence,
/// if it is there, decodes, and is recent enough that its first assignments
/// may have gone out before a state write that was lost (the window within
/// which new deployments are written alongside their assignments).
async fn recent_deployment(
    ctx: &Ctx,
    swarm_id: &str,
) -> anyhow::Result<Option<(SwarmDeployment, u64)>> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let msg = match ctx
        .a2ap
        .get_last_raw_message_by_subject(&subjects::deploy(swarm_id))
        .await
    {
        Ok(m) => m,
        Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(None),
        Err(e) => return Err(anyhow::Error::new(e).context("reading the swarm's deployment")),
    };
    let Ok(env) = wire::decode::<SwarmDeployment>(Some(&msg.headers), &msg.payload) else {
        return Ok(None);
    };
    let recent = Utc::now() - env.body.accepted_at < NEW_SWARM_WINDOW;
    Ok((env.swarm_id == swarm_id && recent).then_some((env.body, msg.sequence)))
}

/// A deployment accepted this recently is written alongside its first
/// assignments: their copies, should the state exist after all, fall within
/// the stream's one-hour deduplication window.
const NEW_SWARM_WINDOW: chrono::TimeDelta = chrono::TimeDelta::minutes(30);

/// An assignment to publish: pool, deduplication id, body.
type Assignment = (String, String, Box<swarm_common::TaskAssignment>);

/// Splits a batch's commands into its assignments, one each (an assignment
/// owed twice in a batch goes out once), and whether the report is owed.
fn split(commands: Vec<Command>) -> (Vec<Assignment>, bool) {
    let mut seen = std::collections::HashSet::new();
    let mut finalize = false;
    let mut assigns = Vec::with_capacity(commands.len());
    for c in commands {
        match c {
            Command::Assign {
                pool,
                msg_id,
                assignment,
            } => {
                if seen.insert(msg_id.clone()) {
                    assigns.push((pool, msg_id, assignment));
                }
            }
            Command::Finalize => finalize = true,
        }
    }
    (assigns, finalize)
}

/// Publishes assignments, each with its dependencies' results that are at
/// hand: all sent first, then every ack awaited (one round trip, not one per task).
async fn send_assignments(
    ctx: &Ctx,
    swarm_id: &str,
    results: &Results,
    assigns: Vec<Assignment>,
) -> anyhow::Result<()> {
    await_acks(queue_assignments(ctx, swarm_id, results, assigns).await?).await
}

/// Hands assignments to the connection and returns the futures of their acks.
async fn queue_assignments(
    ctx: &Ctx,
    swarm_id: &str,
    results: &Results,
    assigns: Vec<Assignment>,
) -> anyhow::Result<Vec<PublishAckFuture>> {
    let mut acks = Vec::with_capacity(assigns.len());
    for (i, assign) in assigns.into_iter().enumerate() {
        // Let the connection write out what is queued now and then, so the
        // first workers start while the rest of a wide fan-out is encoded.
        if i > 0 && i % 16 == 0 {
            tokio::task::yield_now().await;
        }
        let (subject, env, msg_id) = assignment_envelope(ctx, swarm_id, results, assign);
        acks.push(wire::send(&ctx.infra.js, subject, &env, Some(&msg_id)).await?);
        // The connection lets only so many publishes wait for their acks
        // (5,000 by default) and the next one blocks until one is taken: a
        // wider fan-out waits for its acks a window at a time.
        if acks.len() >= ACK_WINDOW {
            await_acks(std::mem::take(&mut acks)).await?;
        }
    }
    Ok(acks)
}

/// Posts assignments without asking for the server's answers
/// ([`wire::Posted`]) and returns them, to be confirmed before a state
/// that records them is written ([`confirm_posted`]).
async fn post_assignments(
    ctx: &Ctx,
    swarm_id: &str,
    results: &Results,
    assigns: Vec<Assignment>,
    posted: &mut Posted,
) -> anyhow::Result<()> {
    for (i, assign) in assigns.into_iter().enumerate() {
        // As in `queue_assignments`: the first workers start early.
        if i > 0 && i % 16 == 0 {
            tokio::task::yield_now().await;
        }
        let (subject, env, msg_id) = assignment_envelope(ctx, swarm_id, results, assign);
        let message = wire::Posted::new(subject, &env, &msg_id)?;
        message.send(&ctx.infra.js).await?;
        posted.insert(msg_id, message);
    }
    Ok(())
}

/// Makes sure every posted assignment is stored: each is sent again asking
/// for the server's answer (its deduplication id stores it only if the
/// first send was lost), and all answers are awaited. On success nothing is
/// left to confirm; on failure the caller drops the state, and the events
/// behind it come again and send their assignments again.
async fn confirm_posted(ctx: &Ctx, posted: &mut Posted) -> anyhow::Result<()> {
    if posted.is_empty() {
        return Ok(());
    }
    let mut acks = Vec::with_capacity(posted.len().min(ACK_WINDOW));
    for p in posted.values() {
        acks.push(p.confirm(&ctx.infra.js).await?);
        if acks.len() >= ACK_WINDOW {
            await_acks(std::mem::take(&mut acks)).await?;
        }
    }
    await_acks(acks).await?;
    posted.clear();
    Ok(())
}

/// An assignment's subject, envelope (with the dependencies' results at
/// hand) and deduplication id.
fn assignment_envelope(
    ctx: &Ctx,
    swarm_id: &str,
    results: &Results,
    (pool, msg_id, assignment): Assignment,
) -> (String, Envelope<swarm_common::TaskAssignment>, String) {
    info!(task_id = %assignment.task_id, attempt = assignment.attempt, revision = assignment.revision, %pool, "task assigned");
    let subject = subjects::work(&pool, swarm_id, &assignment.task_id);
    // The batch's own copy: nothing is cloned on the way out.
    let mut body = *assignment;
    results.inline(&mut body);
    body.token = ctx
        .token_key
        .token(swarm_id, &body.task_id, body.attempt, body.revision);
    let env = Envelope::new(
        ctx.agent_id.as_str(),
        pool.as_str(),
        swarm_id,
        body.task_id.clone(),
        body,
    );
    (subject, env, msg_id)
}

/// Most assignment acks awaited at once (well below the connection's limit).
const ACK_WINDOW: usize = 1024;

/// Waits until every queued assignment is stored.
async fn await_acks(acks: Vec<PublishAckFuture>) -> anyhow::Result<()> {
    for ack in acks {
        ack.await.context("assignment not stored")?;
    }
    Ok(())
}

/// Tells the workers that a swarm ended before its tasks did (timed out, a
/// spent budget, cancelled): they stop its running tasks and close the
/// approval requests and questions those wait on. Sent once (deduplicated);
/// the managers' own copy changes nothing, the swarm having ended.
async fn stop_workers(ctx: &Ctx, swarm_id: &str, status: swarm_common::SwarmStatus) {
    let env = Envelope::new(
        ctx.agent_id.as_str(),
        "worker",
        swarm_id,
        swarm_id,
        Control::Cancel {
            reason: swarm_common::swarm_ended(status),
        },
    );
    let msg_id = format!("{swarm_id}.ended");
    if let Err(e) = wire::publish(
        &ctx.infra.js,
        subjects::control(swarm_id),
        &env,
        Some(&msg_id),
    )
    .await
    {
        warn!(%swarm_id, error = %e, "cannot tell the workers that the swarm ended");
    }
}

async fn publish_report(
    ctx: &Ctx,
    cache: &mut Option<Cached>,
    results: &Results,
) -> anyhow::Result<()> {
    let Some(c) = cache.as_ref() else {
        return Ok(());
    };
    let state = &c.state;
    let done: Vec<(&str, u64)> = state
        .tasks
        .iter()
        .filter_map(|t| t.result_seq.map(|seq| (t.definition.task_id.as_str(), seq)))
        .collect();
    // Results at hand are not read again; the rest come from the stream.
    let missing: Vec<u64> = done
        .iter()
        .map(|(_, seq)| *seq)
        .filter(|seq| !results.texts.contains_key(seq))
        .collect();
    let mut read: HashMap<u64, String> = missing
        .iter()
        .copied()
        .zip(wire::read_results(&ctx.a2ap, &missing).await?)
        .map(|(seq, sub)| (seq, sub.result))
        .collect();
    let results: HashMap<String, String> = done
        .iter()
        .filter_map(|(task_id, seq)| {
            let text = read
                .remove(seq)
                .or_else(|| results.texts.get(seq).cloned())?;
            Some((task_id.to_string(), text))
        })
        .collect();
    let mut report: FinalReport =
        crate::report::build(state, &results, ctx.report_budget, Utc::now());
    if let Some(reviewer) = &ctx.reviewer {
        match summarize_with_provider(reviewer.as_ref(), &report.mission, &report.task_results)
            .await
        {
            Ok(s) => {
                // The model writes prose; the reason a mission did not
                // complete stays first, in the manager's own words.
                report.summary = match crate::report::why_not_completed(state) {
                    Some(why) => format!("{why} {}", s.summary),
                    None => s.summary,
                };
                report.insights = s.insights;
                let m = &mut report.metrics;
                *m.entry("input_tokens".into()).or_insert(0.0) += s.usage.input_tokens as f64;
                *m.entry("output_tokens".into()).or_insert(0.0) += s.usage.output_tokens as f64;
                *m.entry("cost_usd".into()).or_insert(0.0) += s.cost_usd;
            }
            Err(e) => {
                warn!(error = %e.message, "the model could not summarise; the deterministic summary stands")
            }
        }
    }
    let swarm_id = state.swarm_id.clone();
    let env = Envelope::new(
        ctx.agent_id.as_str(),
        "boss",
        swarm_id.as_str(),
        swarm_id.as_str(),
        report,
    );
    wire::publish(
        &ctx.infra.js,
        subjects::report(&swarm_id),
        &env,
        Some(&format!("{swarm_id}.report")),
    )
    .await?;
    info!(overall_status = ?env.body.overall_status, "final report published");
    if env.body.overall_status != swarm_common::SwarmStatus::Completed {
        stop_workers(ctx, &swarm_id, env.body.overall_status).await;
    }
    // Remember that the report is out, so a later redelivery does not send it again.
    for _ in 0..16 {
        let Some(c) = cache.as_mut() else {
            *cache = load(ctx, &swarm_id).await?;
            continue;
        };
        if c.state.report_published {
            return Ok(());
        }
        // Marked in place (no copy of the state): a failed write drops the
        // cache, a lost race reads the state again.
        c.state.report_published = true;
        let stored = store(ctx, &mut c.state, c.revision).await;
        match stored {
            Ok(Some(rev)) => {
                c.revision = rev;
                c.dirty = false;
                return Ok(());
            }
            Ok(None) => *cache = load(ctx, &swarm_id).await?,
            Err(e) => {
                *cache = None;
                return Err(e);
            }
        }
    }
    error!(
        "could not record that the report was published; a redelivery may send it again (deduplicated)"
    );
    Ok(())
}

/// Remembers a running swarm's deadline for the sweeper; forgets an ended one.
fn track_deadline(ctx: &Ctx, state: &SwarmState) {
    let Ok(mut map) = ctx.deadlines.lock() else {
        return;
    };
    if state.status.is_terminal() {
        map.remove(&state.swarm_id);
    } else {
        map.insert(state.swarm_id.clone(), state.deadline);
    }
}

/// Reads every stored swarm and tracks the running ones: at start, and every
/// ten minutes as a backstop. Between scans a replica learns of swarms from
/// their events; a swarm tracked only by a replica that died reaches the
/// others through that replica's redelivered events, or its workers'
/// results. The scan reads the whole bucket, so it stays rare.
async fn scan_swarms(ctx: &Ctx) -> anyhow::Result<()> {
    let mut keys = ctx.infra.swarms.keys().await.context("listing swarms")?;
    while let Some(key) = keys.next().await {
        let key = key.context("listing swarms")?;
        if crate::poison::is_mark(&key) {
            continue;
        }
        if let Some(c) = load(ctx, &key).await? {
            track_deadline(ctx, &c.state);
        }
    }
    Ok(())
}

/// Ends swarms whose deadline passed: sends each an `Expire` control message
/// (deduplicated across replicas by its id); the replica that applies it
/// publishes the TimedOut report.
async fn sweep_deadlines(ctx: Arc<Ctx>) {
    const SCAN_EVERY: Duration = Duration::from_secs(600);
    let mut last_scan: Option<tokio::time::Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if last_scan.is_none_or(|t| t.elapsed() >= SCAN_EVERY) {
            if let Err(e) = scan_swarms(&ctx).await {
                warn!(
                    error = format!("{e:#}"),
                    "scanning swarms for deadlines failed"
                );
            }
            last_scan = Some(tokio::time::Instant::now());
        }
        let now = Utc::now();
        let expired: Vec<String> = match ctx.deadlines.lock() {
            Ok(map) => map
                .iter()
                .filter(|(_, d)| **d <= now)
                .map(|(id, _)| id.clone())
                .collect(),
            Err(_) => continue,
        };
        for swarm_id in expired {
            let env = Envelope::new(
                ctx.agent_id.as_str(),
                "manager",
                swarm_id.as_str(),
                swarm_id.as_str(),
                Control::Expire,
            );
            let msg_id = format!("{swarm_id}.expire");
            match wire::publish(
                &ctx.infra.js,
                subjects::control(&swarm_id),
                &env,
                Some(&msg_id),
            )
            .await
            {
                Ok(_) => {
                    info!(%swarm_id, "deadline passed; swarm expired");
                    if let Ok(mut map) = ctx.deadlines.lock() {
                        map.remove(&swarm_id);
                    }
                }
                Err(e) => warn!(%swarm_id, error = %e, "cannot send the expiry; will retry"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(seqs: &[u64]) -> swarm_common::TaskAssignment {
        let persona = swarm_common::WorkerDeploymentPlan {
            name: "w".into(),
            role: String::new(),
            system_prompt: String::new(),
            tools: Vec::new(),
            collaborators: Vec::new(),
            pool: "general".into(),
        };
        swarm_common::TaskAssignment {
            token: String::new(),
            task_id: "t".into(),
            title: "t".into(),
            description: "t".into(),
            persona,
            attempt: 0,
            revision: 0,
            feedback: Vec::new(),
            context: seqs
                .iter()
                .map(|&seq| swarm_common::ContextRef {
                    task_id: format!("d{seq}"),
                    title: String::new(),
                    result_seq: seq,
                    result: None,
                })
                .collect(),
            max_steps: 4,
            max_attempts: 3,
            max_result_bytes: 1024,
            priority: 0,
            deadline: Utc::now(),
            gates: Vec::new(),
            budget: Default::default(),
            spent_tokens: 0,
            spent_cost_usd: 0.0,
        }
    }

    #[test]
    fn results_at_hand_ride_along_within_the_budget_and_the_rest_are_left_to_read() {
        let mut results = Results::default();
        results.remember(1, "small");
        results.remember(2, &"x".repeat(INLINE_CONTEXT_BYTES));
        let mut a = assignment(&[1, 2, 3]);
        results.inline(&mut a);
        assert_eq!(a.context[0].result.as_deref(), Some("small"));
        // The second would take the assignment over its budget; the third is not at hand.
        assert_eq!(a.context[1].result, None);
        assert_eq!(a.context[2].result, None);
    }

    #[test]
    fn the_result_cache_keeps_no_more_than_its_bound() {
        let mut results = Results::default();
        let chunk = "y".repeat(RESULT_CACHE_BYTES / 2);
        results.remember(1, &chunk);
        results.remember(2, &chunk);
        results.remember(3, "one byte too many");
        results.remember(1, &chunk);
        assert_eq!(results.bytes, RESULT_CACHE_BYTES);
        assert!(!results.texts.contains_key(&3));
    }
}
