//! Where a swarm's state is kept: the `swarms` bucket, one entry per swarm
//! (and chunks of a large swarm's tasks beside it: [`states`]), written by
//! compare-and-swap; and the swarm's deployment in the A2AP stream, which
//! stands in for a state not yet written (docs/decisions.md, "One key per
//! swarm state").
//!
//! Reads and writes only: whether a state is read, written or dropped is
//! the driver's to decide ([`crate::driver`]).

use anyhow::Context as _;
use swarm_common::{SwarmDeployment, SwarmState, subjects};
use swarm_runtime::{states, wire};

use super::Ctx;

/// The swarm's stored state and its revision, if it has one.
pub(super) async fn load(ctx: &Ctx, swarm_id: &str) -> anyhow::Result<Option<(SwarmState, u64)>> {
    states::load(&ctx.infra.swarms, swarm_id).await
}

/// Stores `state` if the key is still at `revision` (0: must not exist).
/// `Ok(None)` means another writer got there first.
pub(super) async fn store(
    ctx: &Ctx,
    state: &SwarmState,
    revision: u64,
) -> anyhow::Result<Option<states::Written>> {
    states::store(&ctx.infra.js, &ctx.infra.swarms, state, revision).await
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
