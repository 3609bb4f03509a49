//! One swarm's actor: the executor of its driver ([`crate::driver`]).
//!
//! The actor takes the swarm's queued events as one batch, hands them to
//! the driver, and carries out what the driver returns, in order: its
//! effects (acks, naks, dead letters, the assignments' acks), then its
//! request, whose answer is the driver's next input. It keeps what the
//! driver must not hold: the NATS messages themselves (the driver names
//! them by [`EventId`]), the encoded copies of posted assignments, and the
//! results' texts that ride along in assignments and the report. While a
//! request runs, however long a model's review takes, it keeps the events
//! in hand and the assignments they answer from coming back (progress
//! acks). It ends when idle for [`ACTOR_IDLE`], or when the driver says the
//! swarm needs no actor any more.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, AckKind};
use chrono::Utc;
use swarm_runtime::trace;
use swarm_runtime::{states, wire};
use tokio::sync::mpsc;
use tracing::{Instrument as _, debug, warn};

use super::outbox::{self, Results};
use super::{Ctx, consumer, deadlines, review, store};
use crate::driver::{
    Arrival, Assignment, Decoded, Driver, DriverConfig, Effect, EventId, Incoming, Input, Now,
    Posted, REDELIVERY_DELAY, Request,
};
use crate::index::Indexed;
use crate::machine::Event;

/// How long a swarm's actor waits for its next event before it ends.
const ACTOR_IDLE: Duration = Duration::from_secs(2);

/// Most events of one swarm applied with one state write.
const MAX_BATCH: usize = 256;

/// A swarm's actor: its driver and what the driver names.
struct Swarm {
    swarm_id: String,
    driver: Driver<wire::Posted>,
    /// The events handed to the driver and not yet settled.
    inbox: HashMap<EventId, jetstream::Message>,
    results: Results,
    next_id: EventId,
    /// The span context of the last batch, for the work no event carries
    /// (a deferred write's assignments), so that it stays in the trace.
    cause: Option<trace::Cause>,
}

/// Runs a swarm's actor until it ends; returns the swarm's id.
pub(super) async fn run(
    ctx: Arc<Ctx>,
    swarm_id: String,
    mut rx: mpsc::UnboundedReceiver<jetstream::Message>,
) -> String {
    let epoch = ctx.pin_epoch.load(Ordering::SeqCst);
    let mut config = DriverConfig::new(ctx.agent_id.as_str(), ctx.ack_wait);
    config.replan = ctx.reviewer.is_some();
    config.deaths_allowed = ctx.deaths_allowed;
    let mut swarm = Swarm {
        driver: Driver::new(swarm_id.as_str(), epoch, config),
        swarm_id,
        inbox: HashMap::new(),
        results: Results::default(),
        next_id: 0,
        cause: None,
    };
    loop {
        // An actor idle for a while ends (after what is still queued), so a
        // replica at capacity frees room for swarms that have events. A
        // deferred write is made when its time is up.
        let wait = swarm.driver.wake_at().map_or(ACTOR_IDLE, |at| {
            at.saturating_duration_since(std::time::Instant::now())
        });
        let first = match tokio::time::timeout(wait, rx.recv()).await {
            Ok(Some(m)) => m,
            Ok(None) => {
                let span = swarm.flush_span();
                swarm
                    .drive(&ctx, &mut rx, Input::Flush)
                    .instrument(span)
                    .await;
                break;
            }
            Err(_) if swarm.driver.wake_at().is_some() => {
                let span = swarm.flush_span();
                swarm
                    .drive(&ctx, &mut rx, Input::Flush)
                    .instrument(span)
                    .await;
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
        let span = swarm.batch_span(&batch);
        let events = batch.into_iter().map(|m| swarm.admit(m)).collect();
        let epoch = ctx.pin_epoch.load(Ordering::SeqCst);
        swarm.keep_if_current(&ctx, epoch).await;
        swarm
            .drive(&ctx, &mut rx, Input::Batch { epoch, events })
            .instrument(span)
            .await;
    }
    swarm.swarm_id
}

fn now() -> Now {
    Now {
        wall: Utc::now(),
        tick: std::time::Instant::now(),
    }
}

fn failure(e: anyhow::Error) -> String {
    format!("{e:#}")
}

impl Swarm {
    /// The span of one batch: a child of the first event's sender that
    /// carries a trace, linked to the others' (docs/decisions.md, "One
    /// trace per mission"); for a batch with none (an expiry, a cancel by
    /// hand), the swarm's last batch's or its mission's trace.
    fn batch_span(&mut self, batch: &[jetstream::Message]) -> tracing::Span {
        if !trace::enabled() {
            return tracing::Span::none();
        }
        let (span, followed) = trace::process_batch(
            "apply events",
            swarm_common::subjects::MANAGER_CONSUMER,
            batch
                .iter()
                .map(|m| (m.subject.as_str(), m.headers.as_ref())),
        );
        if !followed && let Some(cause) = self.fallback_cause() {
            cause.parent(&span);
        }
        span.record("swarm.id", self.swarm_id.as_str());
        self.cause = trace::Cause::of(&span);
        span
    }

    /// The span of a deferred write, made when its time is up.
    fn flush_span(&self) -> tracing::Span {
        let span = swarm_runtime::otel_span!(
            "flush",
            otel.name = "write state",
            swarm.id = %self.swarm_id,
        );
        if let Some(cause) = self.fallback_cause() {
            cause.parent(&span);
        }
        span
    }

    /// Where spans no event caused belong.
    fn fallback_cause(&self) -> Option<trace::Cause> {
        self.cause.clone().or_else(|| {
            let id = self.driver.state()?.trace_id.as_deref()?;
            trace::Cause::in_trace(id)
        })
    }

    /// If the driver would read its cached state again for this batch (a
    /// pin was given since, or it is large: [`Driver::cache_to_check`]) and
    /// the stored entry is still at the cached revision (one small read),
    /// no other replica wrote it meanwhile and the cache stays.
    async fn keep_if_current(&mut self, ctx: &Ctx, epoch: u64) {
        let Some(revision) = self.driver.cache_to_check(epoch) else {
            return;
        };
        if let Ok(Some(entry)) = ctx.infra.swarms.entry(&self.swarm_id).await
            && entry.revision == revision
        {
            self.driver.still_current(epoch);
        }
    }

    /// Takes an event in: the driver knows it by its id from now on.
    fn admit(&mut self, msg: jetstream::Message) -> Arrival {
        let id = self.next_id;
        self.next_id += 1;
        let (seq, delivered) = msg
            .info()
            .map(|i| (i.stream_sequence, i.delivered))
            .unwrap_or((0, 0));
        let arrival = Arrival {
            id,
            seq,
            delivered,
            subject: msg.subject.to_string(),
            assignment_ack: wire::assignment_ack(msg.headers.as_ref()).map(str::to_owned),
        };
        self.inbox.insert(id, msg);
        arrival
    }

    /// Feeds `input` to the driver and carries out what it decides, until
    /// it asks for nothing more.
    async fn drive(
        &mut self,
        ctx: &Ctx,
        rx: &mut mpsc::UnboundedReceiver<jetstream::Message>,
        input: Input<wire::Posted>,
    ) {
        let Swarm {
            swarm_id,
            driver,
            inbox,
            results,
            ..
        } = self;
        // Keep the events in hand (and those held for a write) ours while
        // they are handled, however long a review takes.
        let every = (ctx.ack_wait / 2).max(Duration::from_millis(250));
        let tick = tokio::time::sleep(every);
        tokio::pin!(tick);
        let mut ready = driver.step(now(), input);
        loop {
            for effect in ready.effects {
                carry_out(ctx, swarm_id, inbox, rx, effect).await;
            }
            let Some(request) = ready.request else {
                return;
            };
            let answer = {
                let work = execute(ctx, swarm_id, driver, inbox, results, request);
                tokio::pin!(work);
                loop {
                    tokio::select! {
                        answer = &mut work => break answer,
                        () = &mut tick => {
                            progress(ctx, inbox).await;
                            tick.as_mut().reset(tokio::time::Instant::now() + every);
                        }
                    }
                }
            };
            ready = driver.step(now(), answer);
        }
    }
}

/// Tells the server that the events in hand, and the assignments they
/// answer (which would otherwise come back to a worker during a long
/// review), are still being worked on.
async fn progress(ctx: &Ctx, inbox: &HashMap<EventId, jetstream::Message>) {
    for m in inbox.values() {
        let _ = m.ack_with(AckKind::Progress).await;
    }
    let client = ctx.infra.js.client();
    for ack in inbox
        .values()
        .filter_map(|m| wire::assignment_ack(m.headers.as_ref()))
    {
        wire::ack_assignment(&client, ack, AckKind::Progress).await;
    }
}

/// Carries out one effect.
async fn carry_out(
    ctx: &Ctx,
    swarm_id: &str,
    inbox: &mut HashMap<EventId, jetstream::Message>,
    rx: &mut mpsc::UnboundedReceiver<jetstream::Message>,
    effect: Effect,
) {
    let settled = match effect {
        Effect::Unmark(seqs) => {
            futures::future::join_all(
                seqs.iter()
                    .map(|seq| crate::poison::end(&ctx.infra.swarms, *seq)),
            )
            .await;
            return;
        }
        Effect::AckAssignment(ack) => {
            wire::ack_assignment(&ctx.infra.js.client(), &ack, AckKind::Ack).await;
            return;
        }
        Effect::Deadline(deadline) => {
            deadlines::track(ctx, swarm_id, deadline);
            return;
        }
        Effect::ScoreSkills(scores) => {
            // Off the swarm's path: a score is a few compare-and-swaps, and
            // the swarm's events need not wait for them.
            let book = ctx.skills.clone();
            tokio::spawn(async move {
                for s in scores {
                    book.score(&s.keys, s.passed, &s.verdict).await;
                }
            });
            return;
        }
        Effect::Retire => {
            // Finish what is queued, and let the next event start a new actor.
            rx.close();
            return;
        }
        Effect::Ack(id) => {
            let Some(msg) = inbox.remove(&id) else { return };
            msg.ack().await
        }
        Effect::Redeliver(id) => {
            if let Some(msg) = inbox.remove(&id) {
                let _ = msg.ack_with(AckKind::Nak(None)).await;
            }
            return;
        }
        Effect::Retry { id, error } => {
            let Some(msg) = inbox.remove(&id) else { return };
            warn!(error, subject = %msg.subject, "event not applied; it will be redelivered");
            msg.ack_with(AckKind::Nak(Some(REDELIVERY_DELAY))).await
        }
        Effect::Wait { id, why } => {
            let Some(msg) = inbox.remove(&id) else { return };
            debug!(subject = %msg.subject, "{why}");
            msg.ack_with(AckKind::Nak(Some(REDELIVERY_DELAY))).await
        }
        Effect::Reject { id, reason } => {
            if let Some(msg) = inbox.remove(&id) {
                consumer::reject(ctx, &msg, reason).await;
            }
            return;
        }
    };
    if let Err(e) = settled {
        warn!(error = %e, "ack failed; the event may be redelivered (it is idempotent)");
    }
}

/// Carries out one request and returns its answer.
async fn execute(
    ctx: &Ctx,
    swarm_id: &str,
    driver: &mut Driver<wire::Posted>,
    inbox: &HashMap<EventId, jetstream::Message>,
    results: &mut Results,
    request: Request<wire::Posted>,
) -> Input<wire::Posted> {
    match request {
        Request::Mark(seqs) => {
            let marks = futures::future::join_all(
                seqs.iter()
                    .map(|seq| crate::poison::begin(&ctx.infra.swarms, *seq)),
            )
            .await;
            Input::Marked(marks.into_iter().map(|m| m.map_err(failure)).collect())
        }
        Request::SetAside(events) => {
            let mut recorded = Vec::with_capacity(events.len());
            for e in events {
                recorded.push(match inbox.get(&e.id) {
                    Some(msg) => {
                        outbox::set_aside(ctx, swarm_id, msg, &e.reason, e.deployment).await
                    }
                    None => false,
                });
            }
            Input::SetAside(recorded)
        }
        Request::Decode(ids) => Input::Decoded(
            ids.iter()
                .map(|id| {
                    let Some(msg) = inbox.get(id) else {
                        return Decoded::Unreadable("the event is not at hand".into());
                    };
                    let decoded = consumer::decode(swarm_id, msg, &ctx.token_key);
                    if let Decoded::Event {
                        incoming:
                            Incoming::Event(Event::Result {
                                seq, submission, ..
                            }),
                        ..
                    } = &decoded
                        && submission.status == swarm_common::TaskStatus::Completed
                    {
                        results.remember(*seq, &submission.result);
                    }
                    decoded
                })
                .collect(),
        ),
        Request::Read => Input::Read(store::load(ctx, swarm_id).await.map_err(failure)),
        Request::ReadDeployment => {
            Input::Deployment(store::deployment(ctx, swarm_id).await.map_err(failure))
        }
        Request::Review => {
            if let Some((state, submissions)) = driver.to_review() {
                review::review(ctx, state, submissions).await;
            }
            Input::Reviewed
        }
        Request::Post(assigns) => Input::Posted(
            outbox::post(ctx, swarm_id, results, assigns)
                .await
                .map_err(failure),
        ),
        Request::Write {
            revision,
            confirm,
            alongside,
        } => {
            let written = write(
                ctx,
                swarm_id,
                driver.state(),
                results,
                revision,
                &confirm,
                alongside,
            )
            .await;
            // What was stored is the driver's state as it is: it is marked
            // stored before the driver hears of the write.
            Input::Written(match written {
                Ok(Some(w)) => {
                    let revision = w.revision;
                    if let Some(state) = driver.state_mut() {
                        w.settle(state);
                    }
                    Ok(Some(revision))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(failure(e)),
            })
        }
        Request::Send(assigns) => Input::Sent(
            outbox::send(ctx, swarm_id, results, assigns)
                .await
                .map_err(failure),
        ),
        Request::Report => Input::Reported(match driver.state() {
            Some(state) => outbox::publish_report(ctx, state, results)
                .instrument(swarm_runtime::otel_span!(
                    "report",
                    otel.name = "report",
                    otel.kind = "producer",
                    swarm.id = %swarm_id,
                    swarm.status = ?state.status,
                ))
                .await
                .map_err(failure),
            None => Ok(()),
        }),
    }
}

/// Writes the state by compare-and-swap, once its posted assignments are
/// known stored; with `alongside`, publishes those assignments while the
/// state is written. `Ok(None)`: another writer got there first.
async fn write(
    ctx: &Ctx,
    swarm_id: &str,
    state: Option<&Indexed>,
    results: &Results,
    revision: u64,
    confirm: &Posted<wire::Posted>,
    alongside: Option<Vec<Assignment>>,
) -> anyhow::Result<Option<states::Written>> {
    let state = state.context("no state to write")?;
    outbox::confirm_posted(ctx, confirm).await?;
    let Some(assigns) = alongside else {
        return store::store(ctx, state, revision).await;
    };
    // The assignments go to the connection first, and it gets a turn to
    // write them out before the state is encoded.
    let acks = outbox::queue(ctx, swarm_id, results, assigns).await?;
    tokio::task::yield_now().await;
    let (published, stored) =
        tokio::join!(outbox::await_acks(acks), store::store(ctx, state, revision));
    published?;
    stored
}
