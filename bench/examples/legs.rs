//! The return leg of a hop, four ways: is a result faster to the manager by
//! anything other than the manager's consumer?
//!
//! `cargo run --release -p swarm-bench --example legs [-- <blocks>]` starts a
//! nats-server (the dev configuration, its own store) and one ponger process
//! per way. Each round trip is a ping stored in a stream and pulled by the
//! ponger's consumer (as an assignment reaches a worker), and a pong back
//! (as a result reaches the manager):
//!
//! - `consumer`: the pong is stored and pulled by the pinger's consumer
//!   (Swarm's result path; the JetStream ping-pong of the floor);
//! - `republish`: the pong is stored and the stream's `RePublish` sends it on
//!   to a core subscription of the pinger, which also pulls and acks the
//!   consumer's copy (as a manager would have to);
//! - `direct`: the ponger stores the pong and sends a core copy to the
//!   pinger, which acts on the copy and also pulls and acks the stored one;
//! - `core`: the pong is a core message only (not durable: the bound).
//!
//! Each figure is the time from the ping's publish until the first copy of
//! its pong arrives. The ways take turns in blocks of 300 round trips, in
//! ABCD then DCBA order, so each sees the same host speed; it prints each
//! way's p50 and p90 and the median over blocks of its ratio to `consumer`.

mod support;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::pull, stream};
use bytes::Bytes;
use futures::StreamExt;

/// About the size of an `echo` task's assignment on the wire.
const PAYLOAD: usize = 700;
/// Round trips per block, the first [`WARM`] of them not counted.
const PER_BLOCK: usize = 300;
const WARM: usize = 20;
const STREAM: &str = "LEGS";
const WAYS: [&str; 4] = ["consumer", "republish", "direct", "core"];
/// Where the pingers' core copies arrive.
const DIRECT: &str = "legs.direct-copy";
const REPUBLISHED: &str = "republished.legs.republish.pong";

/// Answers each ping of `way` the way it names, until killed.
async fn pong(url: &str, way: &str) -> anyhow::Result<()> {
    let client = async_nats::connect(url).await?;
    let js = jetstream::new(client.clone());
    let mut pings = support::pull_stream(
        &js,
        STREAM,
        &format!("ponger-{way}"),
        format!("legs.{way}.ping"),
    )
    .await?;
    while let Some(msg) = pings.next().await {
        let msg = msg.map_err(|e| anyhow::anyhow!("pulling a ping: {e}"))?;
        if way != "core" {
            // Stored without waiting for the server's answer, as a worker
            // hands over its result.
            client
                .publish(format!("legs.{way}.pong"), msg.payload.clone())
                .await?;
        }
        if way == "direct" || way == "core" {
            client.publish(DIRECT, msg.payload.clone()).await?;
        }
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
            subjects: vec!["legs.*.ping".into(), "legs.*.pong".into()],
            storage: stream::StorageType::File,
            republish: Some(stream::Republish {
                source: "legs.republish.pong".into(),
                destination: REPUBLISHED.into(),
                headers_only: false,
            }),
            ..Default::default()
        },
    )
    .await?;
    // Killed when dropped, on an early error too.
    let exe = std::env::current_exe()?;
    let _pongers = WAYS
        .iter()
        .map(|way| {
            swarm_local::ManagedProcess::spawn(
                format!("ponger-{way}"),
                &exe,
                ["--pong", url.as_str(), way],
                Vec::new(),
                dir.path().join(format!("ponger-{way}.log")),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut stored = Vec::new();
    for way in WAYS {
        stored.push(
            support::pull_stream(
                &js,
                STREAM,
                &format!("pinger-{way}"),
                format!("legs.{way}.pong"),
            )
            .await?,
        );
    }
    let mut republished = client.subscribe(REPUBLISHED).await?;
    let mut direct = client.subscribe(DIRECT).await?;
    client.flush().await?;
    // The pongers' consumers exist once each has answered a ping.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut figures = support::Figures::new(&WAYS);
    let next = async |s: &mut pull::Stream| -> anyhow::Result<jetstream::Message> {
        tokio::time::timeout(Duration::from_secs(10), s.next())
            .await
            .context("no pong within 10 s")?
            .context("the pong stream ended")?
            .map_err(|e| anyhow::anyhow!("pulling a pong: {e}"))
    };
    for block in 0..blocks {
        for k in figures.turns(block) {
            let way = WAYS[k];
            for i in 0..PER_BLOCK {
                let start = Instant::now();
                let ack = js
                    .publish(format!("legs.{way}.ping"), payload.clone())
                    .await?;
                // The time until the first copy arrives; then the stored copy
                // is taken and acked as the manager would.
                let (elapsed, stored_copy) = match way {
                    "consumer" => {
                        let m = next(&mut stored[k]).await?;
                        (start.elapsed(), Some(m))
                    }
                    "republish" => {
                        republished.next().await.context("republished")?;
                        (start.elapsed(), Some(next(&mut stored[k]).await?))
                    }
                    "direct" => {
                        direct.next().await.context("direct copy")?;
                        (start.elapsed(), Some(next(&mut stored[k]).await?))
                    }
                    _ => {
                        direct.next().await.context("core pong")?;
                        (start.elapsed(), None)
                    }
                };
                if let Some(m) = stored_copy {
                    m.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
                }
                ack.await.context("ping not stored")?;
                if i >= WARM {
                    figures.push(k, elapsed.as_secs_f64() * 1e3);
                }
            }
        }
        figures.end_block();
    }
    figures.print(
        &format!("Return leg, {blocks} blocks of {} round trips per way (ping stored and pulled, then the pong):", PER_BLOCK - WARM),
        "pong by",
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--pong") => pong(&args[1], &args[2]).await,
        blocks => ping(blocks.and_then(|b| b.parse().ok()).unwrap_or(10)).await,
    }
}
