//! The boss's mission records in the `missions` bucket, changed only by
//! compare-and-swap so two boss replicas never overwrite each other.

use anyhow::Context as _;
use async_nats::jetstream::kv;
use bytes::Bytes;
use chrono::Utc;
use swarm_common::{Codec, mission::MissionRecord};

/// Reads a mission record and its revision.
pub async fn load(
    store: &kv::Store,
    swarm_id: &str,
) -> anyhow::Result<Option<(MissionRecord, u64)>> {
    match store
        .entry(swarm_id)
        .await
        .context("reading the mission record")?
    {
        Some(e) if e.operation == kv::Operation::Put => {
            let record = Codec::MsgPack
                .decode(&e.value)
                .context("decoding the mission record")?;
            Ok(Some((record, e.revision)))
        }
        _ => Ok(None),
    }
}

/// Applies `change` to the stored record (or to `fallback` when there is
/// none), retrying on a lost compare-and-swap. Returns the stored record.
pub async fn update(
    store: &kv::Store,
    swarm_id: &str,
    fallback: Option<&MissionRecord>,
    change: impl Fn(&mut MissionRecord),
) -> anyhow::Result<MissionRecord> {
    update_from(store, swarm_id, None, fallback, change).await
}

/// Like [`update`], starting from `known` (the record and its revision as
/// just read) instead of reading it again; a lost race reads.
pub async fn update_from(
    store: &kv::Store,
    swarm_id: &str,
    mut known: Option<(MissionRecord, u64)>,
    fallback: Option<&MissionRecord>,
    change: impl Fn(&mut MissionRecord),
) -> anyhow::Result<MissionRecord> {
    for _ in 0..16 {
        let current = match known.take() {
            Some(k) => Some(k),
            None => load(store, swarm_id).await?,
        };
        let (mut record, revision) = match current {
            Some((r, rev)) => (r, Some(rev)),
            None => match fallback {
                Some(r) => (r.clone(), None),
                None => anyhow::bail!("no mission record for {swarm_id}"),
            },
        };
        change(&mut record);
        record.updated_at = Utc::now();
        let bytes = Bytes::from(Codec::MsgPack.encode(&record)?);
        let stored = match revision {
            Some(rev) => store
                .update(swarm_id, bytes, rev)
                .await
                .map(|_| ())
                .map_err(|e| {
                    (
                        e.kind() == kv::UpdateErrorKind::WrongLastRevision,
                        anyhow::Error::new(e),
                    )
                }),
            None => store
                .create(swarm_id, bytes)
                .await
                .map(|_| ())
                .map_err(|e| {
                    (
                        e.kind() == kv::CreateErrorKind::AlreadyExists,
                        anyhow::Error::new(e),
                    )
                }),
        };
        match stored {
            Ok(()) => return Ok(record),
            Err((true, _)) => continue,
            Err((false, e)) => return Err(e.context("storing the mission record")),
        }
    }
    anyhow::bail!("the mission record of {swarm_id} kept changing")
}
