//! Streams of a task (`SendStreamingMessage`, `SubscribeToTask`): the task
//! as it stands first, then a status update for each progress, result and
//! error the swarm stores, and at its end every artifact and the terminal
//! status, after which the stream closes.
//!
//! A stream reads the swarm's stored messages from just after the stream's
//! last sequence at the time the snapshot was read, so nothing falls between
//! the snapshot and the updates (an update may repeat what the snapshot
//! already showed, never miss something). A subscriber that reconnects gets
//! a fresh snapshot and goes on from there: it misses nothing either.

use futures::{Stream, StreamExt};
use serde_json::{Map, Value, json};
use swarm_client::client::Update;
use tokio::sync::mpsc;

use crate::error::A2aError;
use crate::mapping::{self, Shape};
use crate::swarms::{Caller, Swarms};
use crate::types::{
    StreamResponse, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
};

/// Events a slow reader may fall behind by before the stream waits for it.
const BUFFER: usize = 64;

/// The streams open on this gateway, by caller, within two bounds: each
/// stream holds a consumer on the server and a task here, so a caller
/// cannot open them without end.
#[derive(Debug)]
pub struct StreamSlots {
    per_caller: usize,
    total: usize,
    open: std::sync::Mutex<(usize, std::collections::HashMap<String, usize>)>,
}

/// One open stream's place, given back when the stream ends.
#[derive(Debug)]
pub struct StreamSlot {
    slots: std::sync::Arc<StreamSlots>,
    caller: String,
}

impl StreamSlots {
    /// At most `per_caller` streams for each caller and `total` in all.
    pub fn new(per_caller: usize, total: usize) -> std::sync::Arc<StreamSlots> {
        std::sync::Arc::new(StreamSlots {
            per_caller: per_caller.max(1),
            total: total.max(1),
            open: Default::default(),
        })
    }

    /// A place for one more stream of `caller`, or why there is none.
    pub fn take(self: &std::sync::Arc<Self>, caller: &Caller) -> Result<StreamSlot, A2aError> {
        let name = caller.0.clone().unwrap_or_default();
        let mut open = self
            .open
            .lock()
            .map_err(|_| A2aError::internal(&anyhow::anyhow!("the stream count is poisoned")))?;
        let mine = open.1.get(&name).copied().unwrap_or(0);
        if open.0 >= self.total || mine >= self.per_caller {
            let (limit, whose) = if mine >= self.per_caller {
                (self.per_caller, "this caller")
            } else {
                (self.total, "this gateway")
            };
            return Err(A2aError::new(
                crate::error::ErrorKind::TooManyStreams,
                format!("{whose} has {limit} streams open, the most it may: close one first"),
            ));
        }
        open.0 += 1;
        *open.1.entry(name.clone()).or_default() += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            caller: name,
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if let Ok(mut open) = self.slots.open.lock() {
            open.0 = open.0.saturating_sub(1);
            if let Some(n) = open.1.get_mut(&self.caller) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    open.1.remove(&self.caller);
                }
            }
        }
    }
}

/// Opens the stream of task `id`. A task that has ended is refused when
/// `refuse_ended` (`SubscribeToTask`); otherwise (`SendStreamingMessage`)
/// its stream is the task, its artifacts and its terminal status: a mission
/// can end before its stream opens. `since` is the stream sequence to
/// follow from (`SendStreamingMessage` reads it before it sends, so a fast
/// mission's first updates are not missed); `None` means from now.
pub async fn open(
    swarms: Swarms,
    caller: Caller,
    id: String,
    refuse_ended: bool,
    since: Option<u64>,
) -> Result<impl Stream<Item = StreamResponse> + Send + 'static, A2aError> {
    let slot = swarms.streams.take(&caller)?;
    let after = match since {
        Some(after) => after,
        None => swarms.last_sequence().await?,
    };
    let first = swarms.task(&caller, &id, Shape::FULL).await?;
    if refuse_ended && first.status.state.is_terminal() {
        return Err(A2aError::new(
            crate::error::ErrorKind::UnsupportedOperation,
            format!(
                "task {id} has ended ({:?}); read it with GetTask",
                first.status.state
            ),
        )
        .with("taskId", id));
    }
    let ended = first.status.state.is_terminal();
    let updates = if ended {
        None
    } else {
        Some(swarms.updates(&id, after).await?)
    };
    let (tx, rx) = mpsc::channel(BUFFER);
    let context_id = first.context_id.clone();
    tokio::spawn(async move {
        // Held while the stream runs.
        let _slot = slot;
        if tx.send(StreamResponse::Task(first)).await.is_err() {
            return;
        }
        let Some(updates) = updates else {
            send_ending(&swarms, &caller, &id, &tx).await;
            return;
        };
        let mut updates = std::pin::pin!(updates);
        let mut state = TaskState::Working;
        loop {
            // A reader that went away ends the stream at once, not at the
            // swarm's next update.
            let update = tokio::select! {
                update = updates.next() => update,
                () = tx.closed() => return,
            };
            let Some(update) = update else { return };
            if ends(&update) {
                send_ending(&swarms, &caller, &id, &tx).await;
                return;
            }
            let Some((next, event)) = event_of(&update, &id, &context_id, state) else {
                continue;
            };
            state = next;
            if tx.send(event).await.is_err() {
                // The client went away: stop following.
                return;
            }
        }
    });
    Ok(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (e, rx))
    }))
}

/// Sends the ended task's artifacts and terminal status down `tx`.
async fn send_ending(
    swarms: &Swarms,
    caller: &Caller,
    id: &str,
    tx: &mpsc::Sender<StreamResponse>,
) {
    let events = match ending(swarms, caller, id).await {
        Ok(events) => events,
        Err(e) => {
            tracing::warn!(error = %e, task = %id, "reading the ended task");
            return;
        }
    };
    for event in events {
        if tx.send(event).await.is_err() {
            return;
        }
    }
}

/// Whether an update is the swarm's end: its report, or an error of the
/// whole swarm (a mission that could not be planned).
pub fn ends(update: &Update) -> bool {
    matches!(update, Update::Report(_)) || matches!(update, Update::Error(e) if e.task_id.is_none())
}

/// The status update an update of a running swarm is, and the state it
/// leaves the task in (`state`: the state before it).
pub fn event_of(
    update: &Update,
    task_id: &str,
    context_id: &str,
    state: TaskState,
) -> Option<(TaskState, StreamResponse)> {
    let (next, text, metadata) = describe(update)?;
    let state = next.unwrap_or(match state {
        // A progress after a question means it was answered.
        TaskState::InputRequired => TaskState::Working,
        s => s,
    });
    let event = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        status: TaskStatus {
            state,
            message: Some(mapping::agent_message(
                task_id,
                context_id,
                &format!("update-{}", uuid::Uuid::new_v4().simple()),
                text,
            )),
            timestamp: Some(
                chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            ),
        },
        metadata: Some(metadata),
    });
    Some((state, event))
}

/// The last events of an ended task: its artifacts and terminal status,
/// read back as GetTask shows them. The boss records a failed planning just
/// after publishing its error, so this reads, briefly, until the task
/// shows its end.
pub async fn ending(
    swarms: &Swarms,
    caller: &Caller,
    id: &str,
) -> Result<Vec<StreamResponse>, A2aError> {
    let mut events = Vec::new();
    for _ in 0..50 {
        events = finish(&swarms.view(caller, id).await?);
        let ended = matches!(events.last(), Some(StreamResponse::StatusUpdate(u)) if u.status.state.is_terminal());
        if ended {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Ok(events)
}

/// The state an update moves the task to (`None`: unchanged), what to say,
/// and which swarm task it concerns.
fn describe(update: &Update) -> Option<(Option<TaskState>, String, Map<String, Value>)> {
    let mut meta = Map::new();
    match update {
        Update::Deployed { tasks } => {
            meta.insert("tasks".into(), json!(tasks));
            Some((
                Some(TaskState::Working),
                format!("The swarm is deployed with {} tasks.", tasks.len()),
                meta,
            ))
        }
        Update::Progress(p) => {
            meta.insert("taskId".into(), json!(p.task_id));
            meta.insert("taskStatus".into(), json!(format!("{:?}", p.status)));
            meta.insert("progress".into(), json!(p.progress_percentage));
            meta.insert("attempt".into(), json!(p.attempt));
            let state = if p.status == swarm_common::TaskStatus::InputRequired {
                Some(TaskState::InputRequired)
            } else {
                None
            };
            Some((
                state,
                format!(
                    "Task {} ({:?}, {}%): {}",
                    p.task_id, p.status, p.progress_percentage, p.message
                ),
                meta,
            ))
        }
        Update::Result(r) => {
            meta.insert("taskId".into(), json!(r.task_id));
            meta.insert("resultStatus".into(), json!(format!("{:?}", r.status)));
            Some((
                None,
                format!(
                    "Task {} submitted its result ({:?}); the manager reviews it.",
                    r.task_id, r.status
                ),
                meta,
            ))
        }
        Update::Error(e) => {
            if let Some(t) = &e.task_id {
                meta.insert("taskId".into(), json!(t));
            }
            meta.insert("errorCode".into(), json!(format!("{:?}", e.error.code)));
            Some((
                None,
                format!(
                    "Task {}: {}",
                    e.task_id.as_deref().unwrap_or("?"),
                    e.error.message
                ),
                meta,
            ))
        }
        Update::Report(_) => None,
    }
}

/// The last events of a stream: each artifact, then the final status (or,
/// when the swarm has not quite ended in what JetStream holds, its status
/// as it stands).
fn finish(view: &mapping::SwarmView) -> Vec<StreamResponse> {
    let task = mapping::task_of(view, Shape::FULL);
    let mut out: Vec<StreamResponse> = task
        .artifacts
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|artifact| {
            StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                task_id: task.id.clone(),
                context_id: task.context_id.clone(),
                artifact,
                append: false,
                last_chunk: true,
            })
        })
        .collect();
    out.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: task.status.clone(),
        metadata: task.metadata.clone(),
    }));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn streams_are_bounded_per_caller_and_in_all() {
        let slots = StreamSlots::new(2, 3);
        let (a, b) = (Caller(Some("a".into())), Caller(Some("b".into())));
        let a1 = slots.take(&a).unwrap();
        let _a2 = slots.take(&a).unwrap();
        let e = slots.take(&a).unwrap_err();
        assert_eq!(e.kind, ErrorKind::TooManyStreams);
        assert!(e.message.contains("this caller"), "{}", e.message);
        let _b1 = slots.take(&b).unwrap();
        let e = slots.take(&b).unwrap_err();
        assert!(e.message.contains("this gateway"), "{}", e.message);
        drop(a1);
        let _b2 = slots.take(&b).unwrap();
    }
}
