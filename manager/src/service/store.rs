//! Where a swarm's state is kept: one key per swarm in the `swarms` bucket,
//! read whole and written whole by compare-and-swap, and the swarm's
//! deployment in the A2AP stream, which stands in for a state not yet
//! written (docs/decisions.md, "One key per swarm state").
//!
//! Reads and writes only: whether a state is read, written or dropped is
//! the driver's to decide ([`crate::driver`]).

use anyhow::Context as _;
use async_nats::jetstream::kv;
use bytes::Bytes;
use swarm_common::{Codec, SwarmDeployment, SwarmState, subjects};
use swarm_runtime::wire;

use super::Ctx;

fn encode_state(state: &SwarmState) -> anyhow::Result<Bytes> {
    // About 530 bytes a task (see BENCHMARKS.md), so the buffer seldom regrows.
    let hint = 1024 + state.tasks.len() * 640;
    Ok(Bytes::from(Codec::MsgPack.encode_sized(state, hint)?))
}

/// The swarm's stored state and its revision, if it has one.
pub(super) async fn load(ctx: &Ctx, swarm_id: &str) -> anyhow::Result<Option<(SwarmState, u64)>> {
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
            Ok(Some((state, e.revision)))
        }
        _ => Ok(None),
    }
}

/// Stores `state` if the key is still at `revision` (0: must not exist).
/// `Ok(None)` means another writer got there first.
pub(super) async fn store(
    ctx: &Ctx,
    state: &SwarmState,
    revision: u64,
) -> anyhow::Result<Option<u64>> {
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

/// The swarm's deployment as stored in the A2AP stream, with its sequence,
/// if it is there and decodes (whether it is recent enough to deploy from
/// is [`crate::driver::recent`]).
pub(super) async fn deployment(
    ctx: &Ctx,
    swarm_id: &str,
) -> anyhow::Result<Option<(SwarmDeployment, u64)>> {
    let Some(msg) = wire::last_on(&ctx.a2ap, &subjects::deploy(swarm_id))
        .await
        .context("reading the swarm's deployment")?
    else {
        return Ok(None);
    };
    let Ok(env) = wire::decode::<SwarmDeployment>(Some(&msg.headers), &msg.payload) else {
        return Ok(None);
    };
    Ok((env.swarm_id == swarm_id).then_some((env.body, msg.sequence)))
}
