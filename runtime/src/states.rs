//! Swarm states in the `swarms` bucket, small or large (docs/decisions.md,
//! "Large swarms in chunks").
//!
//! A swarm of up to [`INLINE_TASKS`] tasks is one entry under its id,
//! written whole. A larger one keeps its tasks in chunks of
//! [`swarm_common::Chunks::per_chunk`] tasks under `<id>.tasks.<k>`, and its
//! entry keeps the rest and a note of which write last stored each chunk. A
//! write stores the chunks whose tasks changed and then the entry, as one
//! atomic batch whose last message carries the compare-and-swap on the
//! entry: a lost race or a crash stores none of it. So a change costs what
//! changed, not the whole swarm, and a reader puts the pieces together and
//! checks each chunk against the entry's note (a chunk from a later write,
//! or from a replica behind the others, is read again).

use anyhow::{Context as _, bail};
use async_nats::jetstream::{self, context::PublishErrorKind, kv};
use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};
use serde::{Deserialize, Serialize};
use swarm_common::state::TASK_BLOCK;
use swarm_common::{Chunks, Codec, SwarmState, TaskState, Tasks};

/// Largest swarm kept in one entry: its every write stores it whole (one
/// message, the cheapest write for the swarms most missions make).
pub const INLINE_TASKS: usize = 256;

/// Most messages in one atomic batch (the server's limit).
const MAX_BATCH: usize = 1000;

/// Chunks read at once when a large state is read back.
const READ_AHEAD: usize = 64;

/// Times a reader starts over when the pieces it read do not fit together.
const READ_TRIES: usize = 8;

/// A state's bytes hint: about 530 bytes a task (see BENCHMARKS.md), so
/// the buffer seldom regrows.
fn hint(tasks: usize) -> usize {
    1024 + tasks * 640
}

/// The key of chunk `k` of a swarm's tasks.
pub fn chunk_key(swarm_id: &str, k: usize) -> String {
    format!("{swarm_id}.tasks.{k}")
}

/// Whether a key of the `swarms` bucket is a swarm's own entry (not one of
/// its chunks).
pub fn is_state_key(key: &str) -> bool {
    !key.contains('.')
}

/// Tasks per chunk for a swarm of `tasks` tasks, or `None` to keep it in
/// one entry: [`TASK_BLOCK`], or as many blocks as keep every chunk and the
/// entry within one batch.
pub fn per_chunk(tasks: usize) -> Option<usize> {
    (tasks > INLINE_TASKS).then(|| tasks.div_ceil((MAX_BATCH - 1) * TASK_BLOCK) * TASK_BLOCK)
}

/// One chunk as stored.
#[derive(Serialize)]
struct ChunkOut<'a> {
    generation: u64,
    first: usize,
    tasks: &'a [TaskState],
}

/// One chunk as read back.
#[derive(Deserialize)]
struct ChunkIn {
    generation: u64,
    first: usize,
    tasks: Vec<TaskState>,
}

/// A state stored: its entry's new revision, and where its tasks are now.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The entry's revision.
    pub revision: u64,
    /// The state's [`SwarmState::chunks`] as just stored.
    pub chunks: Option<Chunks>,
}

impl Written {
    /// Records in `state` (the state just stored) that it is stored.
    pub fn settle(self, state: &mut SwarmState) {
        state.chunks = self.chunks;
        state.tasks.mark_stored();
    }
}

/// Stores `state` if its entry is still at `revision` (0: must not exist):
/// whole when small, its changed chunks and its entry otherwise (a first
/// write, or one after the chunks were resized, stores every chunk).
/// `Ok(None)` means another writer got there first.
pub async fn store(
    js: &jetstream::Context,
    bucket: &kv::Store,
    state: &SwarmState,
    revision: u64,
) -> anyhow::Result<Option<Written>> {
    let Some(per) = per_chunk(state.tasks.len()) else {
        let bytes = Bytes::from(Codec::MsgPack.encode_sized(state, hint(state.tasks.len()))?);
        return Ok(put(bucket, &state.swarm_id, bytes, revision)
            .await?
            .map(|revision| Written {
                revision,
                chunks: None,
            }));
    };
    let count = state.tasks.len().div_ceil(per);
    let before = state
        .chunks
        .as_ref()
        .filter(|c| revision != 0 && c.per_chunk as usize == per);
    let generation = state.chunks.as_ref().map_or(0, |c| c.generation) + 1;
    let mut written = before.map_or_else(Vec::new, |c| c.written.clone());
    written.resize(count, 0);
    let blocks = per / TASK_BLOCK;
    let changed: Vec<usize> = (0..count)
        .filter(|&k| {
            before.is_none()
                || written[k] == 0
                || (k * blocks..(k + 1) * blocks).any(|b| state.tasks.block_changed(b))
        })
        .collect();
    for &k in &changed {
        written[k] = generation;
    }
    let chunks = Chunks {
        per_chunk: per as u32,
        generation,
        written,
    };
    let head = state.without_tasks(chunks.clone());
    let head = Bytes::from(Codec::MsgPack.encode_sized(&head, hint(0))?);
    // Each chunk is encoded as it is sent, and the task yields between
    // two: a first write of 100,000 tasks (tens of MiB) must not hold up
    // the replica's other work (its pulls keep its partitions' pins).
    let all: &[TaskState] = &state.tasks;
    let encoded = changed.iter().map(|&k| {
        let first = k * per;
        let tasks = &all[first..(first + per).min(all.len())];
        let bytes = Codec::MsgPack.encode_sized(
            &ChunkOut {
                generation,
                first,
                tasks,
            },
            hint(tasks.len()),
        );
        (chunk_key(&state.swarm_id, k), bytes)
    });
    Ok(batch(js, bucket, &state.swarm_id, encoded, head, revision)
        .await?
        .map(|revision| Written {
            revision,
            chunks: Some(chunks),
        }))
}

/// A compare-and-swap of one entry.
async fn put(
    bucket: &kv::Store,
    key: &str,
    bytes: Bytes,
    revision: u64,
) -> anyhow::Result<Option<u64>> {
    if revision == 0 {
        match bucket.create(key, bytes).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(anyhow::Error::new(e).context("creating swarm state")),
        }
    } else {
        match bucket.update(key, bytes, revision).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(anyhow::Error::new(e).context("updating swarm state")),
        }
    }
}

/// The subject `key` is stored under (no JetStream domain: Swarm uses
/// none).
fn subject(bucket: &kv::Store, key: &str) -> String {
    format!(
        "{}{key}",
        bucket.put_prefix.as_ref().unwrap_or(&bucket.prefix)
    )
}

/// Stores `chunks` and then `head` under `swarm_id` as one atomic batch,
/// if the entry is still at `revision`.
async fn batch(
    js: &jetstream::Context,
    bucket: &kv::Store,
    swarm_id: &str,
    chunks: impl Iterator<Item = (String, Result<Vec<u8>, swarm_common::CodecError>)>,
    head: Bytes,
    revision: u64,
) -> anyhow::Result<Option<u64>> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let client = js.client();
    let mut total = 1;
    for (key, bytes) in chunks {
        let bytes = bytes.context("encoding a chunk of the swarm's tasks")?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Batch-Id", id.as_str());
        headers.insert("Nats-Batch-Sequence", total.to_string().as_str());
        client
            .publish_with_headers(subject(bucket, &key), headers, bytes.into())
            .await
            .context("sending a chunk of the swarm's state")?;
        total += 1;
        tokio::task::yield_now().await;
    }
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Batch-Id", id.as_str());
    headers.insert("Nats-Batch-Sequence", total.to_string().as_str());
    headers.insert("Nats-Batch-Commit", "1");
    headers.insert(
        async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
        revision.to_string().as_str(),
    );
    let ack = js
        .publish_with_headers(subject(bucket, swarm_id), headers, head)
        .await
        .context("storing the swarm's state")?
        .await;
    match ack {
        Ok(ack) => Ok(Some(ack.sequence)),
        Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context("storing the swarm's state")),
    }
}

/// The swarm's stored state, its chunks put back, and its entry's
/// revision, if it has one.
pub async fn load(bucket: &kv::Store, swarm_id: &str) -> anyhow::Result<Option<(SwarmState, u64)>> {
    for _ in 0..READ_TRIES {
        let Some(entry) = bucket
            .entry(swarm_id)
            .await
            .context("reading swarm state")?
            .filter(|e| e.operation == kv::Operation::Put)
        else {
            return Ok(None);
        };
        let mut state: SwarmState = Codec::MsgPack
            .decode(&entry.value)
            .context("decoding stored swarm state")?;
        let Some(chunks) = state.chunks.clone() else {
            return Ok(Some((state, entry.revision)));
        };
        if let Some(tasks) = read_chunks(bucket, swarm_id, &chunks).await? {
            state.tasks = Tasks::stored(tasks);
            return Ok(Some((state, entry.revision)));
        }
        // A write landed between the entry and its chunks, or a replica
        // answered from behind: read it all again.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    bail!("swarm {swarm_id}'s state kept changing while it was read in chunks")
}

/// The tasks of `chunks`, in order, or `None` if a chunk read back is not
/// the one the entry names.
async fn read_chunks(
    bucket: &kv::Store,
    swarm_id: &str,
    chunks: &Chunks,
) -> anyhow::Result<Option<Vec<TaskState>>> {
    let per = chunks.per_chunk as usize;
    let read: Vec<Option<ChunkIn>> = futures::stream::iter(0..chunks.written.len())
        .map(|k| async move {
            let key = chunk_key(swarm_id, k);
            let Some(bytes) = bucket.get(&key).await.context("reading a chunk of tasks")? else {
                return anyhow::Ok(None);
            };
            let chunk: ChunkIn = Codec::MsgPack
                .decode(&bytes)
                .with_context(|| format!("decoding chunk {k} of swarm {swarm_id}'s tasks"))?;
            Ok(Some(chunk))
        })
        .buffered(READ_AHEAD)
        .try_collect()
        .await?;
    let mut tasks = Vec::with_capacity(chunks.written.len() * per);
    for (k, chunk) in read.into_iter().enumerate() {
        match chunk {
            Some(c) if c.generation == chunks.written[k] && c.first == k * per => {
                tasks.extend(c.tasks);
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(tasks))
}
