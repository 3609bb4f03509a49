//! What comes in: the managers' consumer, the routing of its events to the
//! swarms' actors, and the reading of an event into the driver's terms.
//!
//! Everything here looks at one message at a time and keeps no state of a
//! swarm: which state an event is applied to, and when it is acked, is the
//! driver's to decide ([`crate::driver`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{
    self, AckKind,
    consumer::{AckPolicy, DeliverPolicy, PriorityPolicy, pull},
};
use chrono::Utc;
use swarm_common::{
    CollaborationRequest, Control, ErrorBody, ErrorCode, ErrorMessage, ResultSubmission,
    SwarmDeployment,
    subjects::{self, Subject},
};
use swarm_runtime::wire;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{Instrument, debug, info, info_span};

use super::{Ctx, ManagerConfig, actor, store};
use crate::driver::{self, Decoded, Incoming};
use crate::machine::Event;
use crate::token::TokenKey;

/// The most deliveries of one event: a bound, never reached in practice.
const MAX_DELIVER: i64 = 1_000;

/// The consumer of manager partition `partition`: pinned to one replica at
/// a time, its owner.
pub(super) fn config(config: &ManagerConfig, partition: u32) -> pull::Config {
    pull::Config {
        durable_name: Some(subjects::manager_consumer(partition)),
        description: Some(format!(
            "Manager partition {partition}: deployments, results, errors, control, asks, replans"
        )),
        filter_subjects: subjects::manager_filters(partition),
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
pub(super) async fn route(
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
    // The actor's span, when exported, belongs to the trace of the event
    // that started it (its batches have parents of their own).
    let span = info_span!("swarm", swarm_id = %swarm_id);
    swarm_runtime::trace::follow(&span, msg.headers.as_ref());
    let (tx, rx) = mpsc::unbounded_channel();
    let _ = tx.send(msg);
    actors.insert(swarm_id.clone(), tx);
    running.spawn(actor::run(ctx.clone(), swarm_id, rx).instrument(span));
}

/// Records an undecodable or misplaced message as a dead letter and stops its redelivery.
pub(super) async fn reject(ctx: &Ctx, msg: &jetstream::Message, reason: ErrorBody) {
    wire::reject(&ctx.infra.js, "manager", msg, reason, &ctx.agent_id).await;
}

/// Looks up the swarm of a control message that has no actor here: a live
/// swarm's goes back to the loop for its actor; one for a swarm that has
/// ended is acked (a cancel or expiry changes nothing there), one for a
/// swarm that was never deployed is terminated. A failed look-up leaves the
/// decision to the actor, as before.
pub(super) async fn check_control(ctx: Arc<Ctx>, swarm_id: String, msg: jetstream::Message) {
    let Ok(_permit) = ctx.control_checks.clone().acquire_owned().await else {
        return;
    };
    let found = match store::load(&ctx, &swarm_id).await {
        Ok(Some((state, _))) => Ok(Some(state.status)),
        Ok(None) => store::deployment(&ctx, &swarm_id).await.map(|d| {
            d.filter(|(d, _)| driver::recent(d, Utc::now()))
                .map(|_| swarm_common::SwarmStatus::Running)
        }),
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

/// Reads one of `swarm_id`'s events for its driver: what it is, checked
/// against its subject and its assignment's token, and how long ago it was
/// stored.
pub(super) fn decode(swarm_id: &str, msg: &jetstream::Message, key: &TokenKey) -> Decoded {
    let incoming = match incoming(swarm_id, msg, key) {
        Ok(Some(i)) => i,
        Ok(None) => return Decoded::Ignore,
        Err(e) => return Decoded::Invalid(e),
    };
    let Ok(info) = msg.info() else {
        return Decoded::Unreadable("message without JetStream info".into());
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
    Decoded::Event {
        incoming,
        age: Duration::from_millis(u64::try_from(waited_ms).unwrap_or(u64::MAX)),
    }
}

/// What an event is (`None`: nothing to apply).
fn incoming(
    swarm_id: &str,
    msg: &jetstream::Message,
    key: &TokenKey,
) -> Result<Option<Incoming>, ErrorBody> {
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
            Ok(Some(Incoming::Deploy(Box::new(env.body))))
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
            Ok(Some(Incoming::Event(Event::Result {
                seq,
                submission: Box::new(env.body),
                review: Vec::new(),
                replan: false,
            })))
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
            Ok(env.body.task_id.map(|task_id| {
                Incoming::Event(Event::TaskError {
                    task_id,
                    attempt: env.body.attempt,
                    error: env.body.error,
                })
            }))
        }
        Some(Subject::Ask { task_id, .. }) => {
            let env = wire::decode::<CollaborationRequest>(headers, &msg.payload)?;
            check_swarm(&env.swarm_id)?;
            let r = &env.body;
            if r.task_id != task_id {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!(
                        "ask of task {:?} sent on the subject of task {task_id:?}",
                        r.task_id
                    ),
                ));
            }
            // Only the holder of the asking assignment may ask: an ask
            // adds work to the swarm.
            if !key.verify(&r.token, swarm_id, task_id, r.attempt, r.revision) {
                return Err(forged(task_id, r.attempt, r.revision));
            }
            Ok(Some(Incoming::Event(Event::Ask {
                request: Box::new(env.body),
            })))
        }
        Some(Subject::Replan { task_id, .. }) => {
            let env = wire::decode::<swarm_common::replan::Replan>(headers, &msg.payload)?;
            check_swarm(&env.swarm_id)?;
            let r = &env.body;
            if r.task_id != task_id {
                return Err(ErrorBody::new(
                    ErrorCode::ValidationFailed,
                    format!(
                        "replan of task {:?} sent on the subject of task {task_id:?}",
                        r.task_id
                    ),
                ));
            }
            // Only a manager may add tasks: the token is one no
            // assignment carries.
            let purpose = swarm_common::replan::replan_token_task(task_id);
            if !key.verify(&r.token, swarm_id, &purpose, r.attempt, r.revision) {
                return Err(forged(task_id, r.attempt, r.revision));
            }
            Ok(Some(Incoming::Event(Event::Replan {
                replan: Box::new(env.body),
            })))
        }
        Some(Subject::Control { .. }) => {
            let env = wire::decode::<Control>(headers, &msg.payload)?;
            check_swarm(&env.swarm_id)?;
            Ok(Some(Incoming::Event(match env.body {
                Control::Cancel { reason } => Event::Cancel {
                    reason: if reason.is_empty() {
                        format!("cancelled by {}", env.sender_agent)
                    } else {
                        reason
                    },
                },
                Control::Expire => Event::Expire,
            })))
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
