//! An assignment's publish-ack: what does the server's answer to a stored
//! publish cost the hop it starts?
//!
//! `cargo run --release -p swarm-bench --example pubacks [-- <blocks>]`
//! starts a nats-server (the dev configuration, its own store) and one ponger
//! process (the worker). Each hop is a ping stored in a stream and pulled by
//! the ponger's consumer (an assignment reaching a worker), and a pong stored
//! by the ponger without waiting for an answer and pulled by the pinger's
//! consumer (its result reaching the manager). The ping is published two
//! ways:
//!
//! - `acked`: with a reply subject, so the server answers with a publish-ack
//!   once the ping is stored, awaited after the pong arrives (the manager's
//!   way with an assignment);
//! - `unacked`: without one, as the worker hands over its result: the server
//!   stores it and answers nothing.
//!
//! Each figure is a hop: from a ping's publish until its pong is pulled. The
//! two ways take turns in blocks of 300 hops (AB then BA), so each sees the
//! same host speed; it prints each way's p50 and p90 and the median over
//! blocks of its ratio to `acked`.

mod support;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;
use futures::StreamExt;

/// About the size of an `echo` task's assignment on the wire.
const PAYLOAD: usize = 700;
/// Hops per block, the first [`WARM`] of them not counted.
const PER_BLOCK: usize = 300;
const WARM: usize = 20;
const STREAM: &str = "PUBACKS";
const WAYS: [&str; 2] = ["acked", "unacked"];

/// Answers each ping with a stored pong, until killed.
async fn pong(url: &str) -> anyhow::Result<()> {
    let client = async_nats::connect(url).await?;
    let js = jetstream::new(client.clone());
    let mut pings = support::pull_stream(&js, STREAM, "ponger", "pubacks.ping".to_string()).await?;
    while let Some(msg) = pings.next().await {
        let msg = msg.map_err(|e| anyhow::anyhow!("pulling a ping: {e}"))?;
        client.publish("pubacks.pong", msg.payload.clone()).await?;
        msg.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
    }
    Ok(())
}

async fn ping(blocks: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (_nats, url, client, js) = support::with_stream(
        dir.path(),
        stream::Config {
            name: STREAM.into(),
            subjects: vec!["pubacks.ping".into(), "pubacks.pong".into()],
            storage: stream::StorageType::File,
            ..Default::default()
        },
    )
    .await?;
    // Killed when dropped, on an early error too.
    let _ponger = swarm_local::ManagedProcess::spawn(
        "ponger",
        std::env::current_exe()?,
        ["--pong", url.as_str()],
        Vec::new(),
        dir.path().join("ponger.log"),
    )?;
    let mut pongs = support::pull_stream(&js, STREAM, "pinger", "pubacks.pong".to_string()).await?;
    // The ponger's consumer exists once it has started.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut figures = support::Figures::new(&WAYS);
    for block in 0..blocks {
        for k in figures.turns(block) {
            for i in 0..PER_BLOCK {
                let start = Instant::now();
                let ack = if WAYS[k] == "acked" {
                    Some(js.publish("pubacks.ping", payload.clone()).await?)
                } else {
                    client.publish("pubacks.ping", payload.clone()).await?;
                    None
                };
                let m = tokio::time::timeout(Duration::from_secs(10), pongs.next())
                    .await
                    .context("no pong within 10 s")?
                    .context("the pong stream ended")?
                    .map_err(|e| anyhow::anyhow!("pulling a pong: {e}"))?;
                let elapsed = start.elapsed();
                m.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
                if let Some(ack) = ack {
                    ack.await.context("ping not stored")?;
                }
                if i >= WARM {
                    figures.push(k, elapsed.as_secs_f64() * 1e3);
                }
            }
        }
        figures.end_block();
    }
    figures.print(
        &format!(
            "A hop's first leg, {blocks} blocks of {} hops per way (ping stored and pulled, pong stored and pulled):",
            PER_BLOCK - WARM
        ),
        "ping published",
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--pong") => pong(&args[1]).await,
        blocks => ping(blocks.and_then(|b| b.parse().ok()).unwrap_or(10)).await,
    }
}
