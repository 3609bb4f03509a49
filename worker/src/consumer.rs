//! The pool's durable pull consumer and what becomes of each delivery: pull
//! no more than can start, read the assignment, ask [`crate::decide`] what
//! the delivery comes to, keep it ours with in-progress acks while its task
//! runs ([`crate::task`]), and leave it as decided (acked, handed back,
//! terminated, or to the manager, who acks it with the result).

use std::future::Future;
use std::sync::Arc;

use anyhow::Context as _;
use async_nats::jetstream::{
    self, AckKind,
    consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull},
};
use futures::StreamExt;
use swarm_common::{Envelope, ErrorBody, TaskAssignment, subjects};
use swarm_runtime::{Infra, wire};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{Instrument, field::Empty, info, info_span, warn};

use crate::WorkerConfig;
use crate::ctx::Ctx;
use crate::decide::{self, Delivery, Finish, RETRY_AFTER};
use crate::{outbox, task};

/// The pool's durable consumer, shared by its replicas, and its deliveries
/// to this one: pulled no more than `concurrency` at once, so nothing waits
/// in a local buffer while its ack timer runs.
pub(crate) async fn open(
    infra: &Infra,
    config: &WorkerConfig,
    concurrency: usize,
) -> anyhow::Result<(PullConsumer, pull::Stream)> {
    let consumer: PullConsumer = infra
        .work()
        .await?
        .create_consumer(pull::Config {
            durable_name: Some(subjects::worker_consumer(&config.pool)),
            description: Some(format!("Workers of pool {}", config.pool)),
            filter_subject: subjects::work_filter(&config.pool),
            ack_policy: AckPolicy::Explicit,
            ack_wait: config.ack_wait,
            deliver_policy: DeliverPolicy::All,
            // A backstop: a worker gives an assignment up (an `Error` to the
            // manager) once it was delivered more than its `max_attempts`.
            max_deliver: 100,
            ..Default::default()
        })
        .await
        .context("creating the pool's consumer")?;
    let messages = consumer
        .stream()
        .max_messages_per_batch(concurrency)
        .messages()
        .await
        .context("pulling assignments")?;
    Ok((consumer, messages))
}

/// Runs the assignments of `messages` (pulled from `consumer`), up to
/// `concurrency` at once, until `shutdown` resolves; returns the tasks still
/// running.
pub(crate) async fn serve(
    ctx: Arc<Ctx>,
    (consumer, mut messages): (PullConsumer, pull::Stream),
    concurrency: usize,
    shutdown: impl Future<Output = ()>,
) -> JoinSet<()> {
    let permits = Arc::new(Semaphore::new(concurrency));
    let mut running = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let msg = tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = running.join_next(), if !running.is_empty() => { drop(permit); continue; }
            next = messages.next() => match next {
                None => break,
                Some(Err(e)) => {
                    let fresh = consumer.stream().max_messages_per_batch(concurrency).messages();
                    if let Some(fresh) = swarm_runtime::retry::pull_again("assignments", &e, fresh).await {
                        messages = fresh;
                    }
                    continue;
                }
                Some(Ok(m)) => m,
            },
        };
        let ctx = ctx.clone();
        // One span for the logs and the trace: as a trace's, it continues
        // the manager's attempt span the assignment names (a redelivery
        // too), with the messaging attributes (when traces are on).
        let span = info_span!(
            "task",
            subject = %msg.subject,
            otel.name = Empty,
            otel.kind = Empty,
            messaging.system = Empty,
            messaging.operation.type = Empty,
            messaging.destination.name = Empty,
            messaging.consumer.group.name = Empty,
            swarm.id = Empty,
            swarm.task_id = Empty,
            swarm.attempt = Empty,
            swarm.revision = Empty,
            swarm.delivered = Empty,
            swarm.status = Empty,
        );
        if swarm_runtime::trace::enabled() {
            // The span's name is set before it starts: the task's, from the
            // subject (the envelope is read inside the span).
            let name = match subjects::Subject::parse(&msg.subject) {
                Some(subjects::Subject::Work { task_id, .. }) => format!("task {task_id}"),
                _ => "task".to_owned(),
            };
            swarm_runtime::trace::processing(
                &span,
                &name,
                "consumer",
                &msg.subject,
                &ctx.consumer,
                msg.headers.as_ref(),
            );
        }
        running.spawn(
            async move {
                // Boxed: a task's future holds the whole agent loop (tens of
                // KiB), and the spawn would move it through every layer.
                Box::pin(handle(&ctx, msg)).await;
                drop(permit);
            }
            .instrument(span),
        );
        while running.try_join_next().is_some() {}
    }
    running
}

/// One delivery, from its reading to its ack.
async fn handle(ctx: &Ctx, msg: jetstream::Message) {
    // Every delivery of a pull consumer names its ack subject; without one
    // nothing could be acked, rejected or handed over.
    let Some(ack_subject) = msg.reply.clone() else {
        warn!(subject = %msg.subject, "a delivery without an ack subject; ignored");
        return;
    };
    let env = match decide::read(&msg.subject, || {
        wire::decode::<TaskAssignment>(msg.headers.as_ref(), &msg.payload)
    }) {
        Ok(env) => env,
        Err(unreadable) => {
            reject(ctx, &msg, unreadable).await;
            return;
        }
    };
    let delivered = msg.info().map(|i| i.delivered).unwrap_or(1);
    let mut answered = false;
    if decide::redelivered(delivered) {
        swarm_runtime::metrics::redelivered(&ctx.consumer);
        swarm_runtime::metrics::takeover("task");
        answered = stored_answer(ctx, &env).await;
    }
    match decide::delivery(&env.body, delivered, answered) {
        Delivery::Answered => {
            if let Err(e) = msg.ack().await {
                warn!(error = %e, "ack not sent; the assignment comes back and its result is found again");
            }
            return;
        }
        Delivery::GiveUp(error) => {
            give_up(ctx, &msg, &env, error).await;
            return;
        }
        Delivery::Work => {}
    }
    // Keep the assignment ours while the agent works, however long a step takes.
    let outcome = {
        let every = ctx.ack_wait / 3;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let work = task::work(ctx, &env, delivered, &ack_subject);
        tokio::pin!(work);
        loop {
            tokio::select! {
                // The work first: a tool call is often done in its first
                // poll, and then no timer is armed for it at all (arming one
                // wakes the runtime's driver, a system call and an extra
                // turn of the event loop).
                biased;
                outcome = &mut work => break outcome,
                _ = ticks.tick() => {
                    let _ = msg.ack_with(AckKind::Progress).await;
                }
            }
        }
    };
    match outcome {
        Ok(Finish::AckedByManager) => {}
        Ok(Finish::AckHere) => {
            if let Err(e) = msg.ack().await {
                warn!(error = %e, "ack not sent; a redelivery replays the task from its journal, and its result lands once");
            }
        }
        Err(e) => {
            warn!(
                error = format!("{e:#}"),
                "task not finished; it will be redelivered"
            );
            retry(&msg).await;
        }
    }
}

/// Hands a delivery back, to come again after [`RETRY_AFTER`].
async fn retry(msg: &jetstream::Message) {
    let _ = msg.ack_with(AckKind::Nak(Some(RETRY_AFTER))).await;
}

/// Whether a redelivered assignment is already answered: its worker handed
/// over a result (stored, or this attempt was superseded by a newer one)
/// and nobody acked the assignment since, because no manager was running
/// within its `ack_wait` or the ack was lost. Its work is not done again.
async fn stored_answer(ctx: &Ctx, env: &Envelope<TaskAssignment>) -> bool {
    let a = &env.body;
    match wire::last_result(&ctx.a2ap, &subjects::result(&env.swarm_id, &a.task_id)).await {
        Ok(Some((seq, r))) if decide::answers(r.attempt, r.revision, a) => {
            info!(swarm_id = %env.swarm_id, task_id = %a.task_id, seq, attempt = r.attempt, revision = r.revision, "assignment came back answered: its result is stored; not run again");
            true
        }
        Ok(_) => false,
        Err(e) => {
            // Not knowing costs a second run at most, whose result lands once.
            warn!(error = %e, "could not look for a stored result; running the task");
            false
        }
    }
}

/// Fails a task for good: tells the manager with an `Error` and stops redelivery.
async fn give_up(
    ctx: &Ctx,
    msg: &jetstream::Message,
    env: &Envelope<TaskAssignment>,
    error: ErrorBody,
) {
    let a = &env.body;
    warn!(swarm_id = %env.swarm_id, task_id = %a.task_id, reason = %error.message, "giving up on task");
    let sent = outbox::tell_manager(
        ctx,
        &env.sender_agent,
        &env.swarm_id,
        &a.task_id,
        decide::give_up(a, error),
        Some(&decide::give_up_id(&env.swarm_id, a)),
    )
    .await;
    match sent {
        Ok(()) => {
            let _ = msg.ack_with(AckKind::Term).await;
        }
        Err(e) => {
            warn!(error = %e, "cannot report the failure; will retry");
            retry(msg).await;
        }
    }
}

/// An assignment that can never run: tell the manager (so the task fails
/// rather than waits) and keep a dead letter with the reason.
async fn reject(ctx: &Ctx, msg: &jetstream::Message, unreadable: decide::Unreadable) {
    let decide::Unreadable { task, error } = unreadable;
    if let Some((swarm_id, task_id)) = task {
        let rejection = decide::rejection(&task_id, error.clone());
        if let Err(e) =
            outbox::tell_manager(ctx, "manager", &swarm_id, &task_id, rejection, None).await
        {
            warn!(error = %e, "cannot report the bad assignment; will retry");
            retry(msg).await;
            return;
        }
    }
    wire::reject(&ctx.infra.js, "worker", msg, error, &ctx.agent_id).await;
}
