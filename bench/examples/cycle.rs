//! A chain's hop two ways: is a result faster to the manager as a core
//! request that the manager stores itself, than as a stored message its
//! consumer pulls?
//!
//! `cargo run --release -p swarm-bench --example cycle [-- <blocks>]` starts a
//! nats-server (the dev configuration, its own store) and one ponger process
//! (the worker). Each hop is a ping stored in a stream and pulled by the
//! ponger's consumer (an assignment reaching a worker), and a pong back (its
//! result):
//!
//! - `stream`: the pong is stored by the ponger without waiting for the
//!   server's answer and pulled by the pinger's consumer, which publishes the
//!   next ping as it arrives and then acks it (Swarm's path today);
//! - `request`: the pong is a core request to the pinger, which stores it in
//!   the stream itself (the same message id), publishes the next ping right
//!   after it, and answers the request once the pong's store is
//!   acknowledged; the stored copy is still pulled and acked by the pinger's
//!   consumer, off the hop's path.
//!
//! Each figure is a hop: from a ping's publish until the pinger may act on
//! its pong. The two ways take turns in blocks of 300 hops (AB then BA), so
//! each sees the same host speed; it prints each way's p50 and p90 and the
//! median over blocks of its ratio to `stream`.

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
const STREAM: &str = "CYCLE";
const WAYS: [&str; 2] = ["stream", "request"];
/// Where the pinger takes pongs sent as core requests.
const REQUESTS: &str = "cycle-requests.pong";

/// Answers each ping the way its subject names, until killed.
async fn pong(url: &str) -> anyhow::Result<()> {
    let client = async_nats::connect(url).await?;
    let js = jetstream::new(client.clone());
    let mut pings = support::pull_stream(&js, STREAM, "ponger", "cycle.*.ping".into()).await?;
    while let Some(msg) = pings.next().await {
        let msg = msg.map_err(|e| anyhow::anyhow!("pulling a ping: {e}"))?;
        if msg.subject.as_str() == "cycle.request.ping" {
            // The answer is awaited beside the next pings, as a worker would
            // keep its result until the manager says it is stored.
            let (client, payload) = (client.clone(), msg.payload.clone());
            tokio::spawn(async move {
                if let Err(e) = client.request(REQUESTS, payload).await {
                    eprintln!("pong request: {e}");
                }
            });
        } else {
            client
                .publish("cycle.stream.pong", msg.payload.clone())
                .await?;
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
            subjects: vec!["cycle.*.ping".into(), "cycle.*.pong".into()],
            storage: stream::StorageType::File,
            duplicate_window: Duration::from_secs(3600),
            ..Default::default()
        },
    )
    .await?;
    // Killed when dropped, on an early error too.
    let exe = std::env::current_exe()?;
    let _ponger = swarm_local::ManagedProcess::spawn(
        "ponger".to_string(),
        &exe,
        ["--pong", url.as_str()],
        Vec::new(),
        dir.path().join("ponger.log"),
    )?;
    let mut stored =
        support::pull_stream(&js, STREAM, "pinger-stream", "cycle.stream.pong".into()).await?;
    // The request way's stored copies are taken and acked off the path.
    let mut copies =
        support::pull_stream(&js, STREAM, "pinger-request", "cycle.request.pong".into()).await?;
    tokio::spawn(async move {
        while let Some(Ok(m)) = copies.next().await {
            let _ = m.ack().await;
        }
    });
    let mut requests = client.subscribe(REQUESTS).await?;
    client.flush().await?;
    // The ponger's consumer exists once it has answered a ping.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut figures = support::Figures::new(&WAYS);
    let mut sequence = 0u64;
    for block in 0..blocks {
        for k in figures.turns(block) {
            let way = WAYS[k];
            let mut held: Option<jetstream::Message> = None;
            for i in 0..PER_BLOCK {
                let start = Instant::now();
                let ack = js
                    .publish(format!("cycle.{way}.ping"), payload.clone())
                    .await?;
                // Acked after the next ping is out, as the manager does.
                if let Some(m) = held.take() {
                    m.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
                }
                let elapsed = if way == "stream" {
                    let m = tokio::time::timeout(Duration::from_secs(10), stored.next())
                        .await
                        .context("no pong within 10 s")?
                        .context("the pong stream ended")?
                        .map_err(|e| anyhow::anyhow!("pulling a pong: {e}"))?;
                    held = Some(m);
                    start.elapsed()
                } else {
                    let r = tokio::time::timeout(Duration::from_secs(10), requests.next())
                        .await
                        .context("no pong request within 10 s")?
                        .context("the request subscription ended")?;
                    let elapsed = start.elapsed();
                    sequence += 1;
                    let mut headers = async_nats::HeaderMap::new();
                    headers.insert("Nats-Msg-Id", format!("pong-{sequence}").as_str());
                    let stored_ack = js
                        .publish_with_headers("cycle.request.pong", headers, r.payload.clone())
                        .await?;
                    let reply = r.reply.clone();
                    let answer = client.clone();
                    tokio::spawn(async move {
                        if stored_ack.await.is_ok()
                            && let Some(reply) = reply
                        {
                            let _ = answer.publish(reply, Bytes::new()).await;
                        }
                    });
                    elapsed
                };
                ack.await.context("ping not stored")?;
                if i >= WARM {
                    figures.push(k, elapsed.as_secs_f64() * 1e3);
                }
            }
            if let Some(m) = held.take() {
                m.ack().await.map_err(|e| anyhow::anyhow!("ack: {e}"))?;
            }
        }
        figures.end_block();
    }
    figures.print(
        &format!(
            "A hop, {blocks} blocks of {} hops per way (ping stored and pulled, then the pong):",
            PER_BLOCK - WARM
        ),
        "pong by",
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
