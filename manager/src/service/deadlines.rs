//! Swarms' deadlines: every replica tracks those of the running swarms it
//! has seen ([`crate::driver::Effect::Deadline`]) and, once one passes,
//! sends the swarm `Control::Expire` (one deduplication id across
//! replicas); the replica that applies it publishes the `TimedOut` report.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use swarm_common::{Control, Envelope, subjects};
use swarm_runtime::wire;
use tracing::{info, warn};

use super::{Ctx, store};

/// Remembers a running swarm's deadline for the sweeper; forgets an ended
/// one (`None`).
pub(super) fn track(ctx: &Ctx, swarm_id: &str, deadline: Option<DateTime<Utc>>) {
    let Ok(mut map) = ctx.deadlines.lock() else {
        return;
    };
    match deadline {
        Some(deadline) => {
            map.insert(swarm_id.to_owned(), deadline);
        }
        None => {
            map.remove(swarm_id);
        }
    }
}

/// Reads every stored swarm and tracks the running ones: at start, and every
/// ten minutes as a backstop. Between scans a replica learns of swarms from
/// their events; a swarm tracked only by a replica that died reaches the
/// others through that replica's redelivered events, or its workers'
/// results. The scan reads the whole bucket, so it stays rare.
async fn scan(ctx: &Ctx) -> anyhow::Result<()> {
    let mut keys = ctx.infra.swarms.keys().await.context("listing swarms")?;
    while let Some(key) = keys.next().await {
        let key = key.context("listing swarms")?;
        if crate::poison::is_mark(&key) || !swarm_runtime::states::is_state_key(&key) {
            continue;
        }
        if let Some((state, _)) = store::load(ctx, &key).await? {
            let running = !state.status.is_terminal();
            track(ctx, &state.swarm_id, running.then_some(state.deadline));
        }
    }
    Ok(())
}

/// Ends swarms whose deadline passed: sends each an `Expire` control message
/// (deduplicated across replicas by its id); the replica that applies it
/// publishes the TimedOut report.
pub(super) async fn sweep(ctx: Arc<Ctx>) {
    const SCAN_EVERY: Duration = Duration::from_secs(600);
    let mut last_scan: Option<tokio::time::Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if last_scan.is_none_or(|t| t.elapsed() >= SCAN_EVERY) {
            if let Err(e) = scan(&ctx).await {
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
