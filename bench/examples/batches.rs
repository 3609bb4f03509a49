//! A fan-out's assignments with every write synced: with `sync_interval:
//! always` the server syncs each stored message before it acknowledges it.
//! Does an atomic batch (nats-server 2.12, `allow_atomic`) store 200
//! messages for the price of one sync?
//!
//! `cargo run --release -p swarm-bench --example batches [-- <blocks>]`
//! starts two nats-servers of its own (the dev configuration, and the same
//! with `sync_interval: always`) and, on each, stores 200 messages of 700
//! bytes (about an `echo` task's assignment) three ways:
//!
//! - `sequential`: each publish awaits its ack before the next (a chain's
//!   hop, 200 times);
//! - `pipelined`: all 200 published, then their acks awaited (how the
//!   manager sends a fan-out's assignments today);
//! - `atomic batch`: 200 messages sharing a `Nats-Batch-Id`, numbered by
//!   `Nats-Batch-Sequence`, sent without a reply subject, the last with
//!   `Nats-Batch-Commit: 1`, whose one ack says all 200 are stored.
//!
//! Each figure is the time from the first publish to the last ack, per
//! message. The ways take turns in blocks (ABC then CBA), so each sees the
//! same host speed; it prints each way's p50 and p90 and the median over
//! blocks of its ratio to `sequential`, for each server.

#[allow(dead_code)] // this probe needs the server and the figures only
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use async_nats::jetstream::{self, stream};
use bytes::Bytes;

/// About the size of an `echo` task's assignment on the wire.
const PAYLOAD: usize = 700;
/// A fan-out's assignments.
const MESSAGES: usize = 200;
/// Rounds of each way per block, the first not counted.
const ROUNDS: usize = 6;
const STREAM: &str = "BATCHES";
const WAYS: [&str; 3] = ["sequential", "pipelined", "atomic batch"];

/// A nats-server with `sync_interval: always` and its store in `dir`.
fn synced_server(dir: &std::path::Path) -> anyhow::Result<swarm_local::NatsProcess> {
    let conf = dir.join("nats-sync-always.conf");
    std::fs::write(
        &conf,
        "host: 127.0.0.1\nmax_payload: 8MB\n\
         jetstream {\n    max_memory_store: 256MB\n    max_file_store: 2GB\n    sync_interval: always\n}\n",
    )
    .context("writing the server's configuration")?;
    swarm_local::NatsProcess::start(
        &swarm_local::nats_server_bin()?,
        Some(&conf),
        None,
        &dir.join("store"),
        &dir.join("nats.log"),
    )
}

/// Stores [`MESSAGES`] on `subject` the way `way` names; the time per
/// message in milliseconds.
async fn store(
    client: &async_nats::Client,
    js: &jetstream::Context,
    way: &str,
    payload: &Bytes,
) -> anyhow::Result<f64> {
    let subject = "batches.work";
    let start = Instant::now();
    match way {
        "sequential" => {
            for _ in 0..MESSAGES {
                js.publish(subject, payload.clone()).await?.await?;
            }
        }
        "pipelined" => {
            let mut acks = Vec::with_capacity(MESSAGES);
            for _ in 0..MESSAGES {
                acks.push(js.publish(subject, payload.clone()).await?);
            }
            for ack in acks {
                ack.await?;
            }
        }
        _ => {
            static BATCHES: AtomicU64 = AtomicU64::new(0);
            let id = format!("batch-{}", BATCHES.fetch_add(1, Ordering::Relaxed));
            for n in 1..=MESSAGES {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert("Nats-Batch-Id", id.as_str());
                headers.insert("Nats-Batch-Sequence", n.to_string().as_str());
                if n < MESSAGES {
                    client
                        .publish_with_headers(subject, headers, payload.clone())
                        .await?;
                } else {
                    headers.insert("Nats-Batch-Commit", "1");
                    let ack = js
                        .publish_with_headers(subject, headers, payload.clone())
                        .await?
                        .await
                        .context("committing the batch")?;
                    anyhow::ensure!(
                        ack.sequence >= MESSAGES as u64,
                        "the batch was not stored whole: {ack:?}"
                    );
                }
            }
        }
    }
    Ok(start.elapsed().as_secs_f64() * 1000.0 / MESSAGES as f64)
}

/// Runs every way `blocks` times on the server at `url`.
async fn measure(url: &str, blocks: usize) -> anyhow::Result<support::Figures> {
    let client = async_nats::connect(url).await?;
    let js = jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: STREAM.into(),
        subjects: vec!["batches.>".into()],
        storage: stream::StorageType::File,
        allow_atomic_publish: true,
        ..Default::default()
    })
    .await
    .context("creating the stream (atomic batches need nats-server 2.12)")?;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut figures = support::Figures::new(&WAYS);
    for block in 0..blocks {
        for k in figures.turns(block) {
            for round in 0..ROUNDS {
                let ms = store(&client, &js, WAYS[k], &payload).await?;
                if round > 0 {
                    figures.push(k, ms);
                }
            }
        }
        figures.end_block();
    }
    Ok(figures)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let blocks: usize = std::env::args()
        .nth(1)
        .map(|b| b.parse())
        .transpose()
        .context("blocks must be a number")?
        .unwrap_or(10);
    for (name, synced) in [
        ("dev configuration", false),
        ("sync_interval: always", true),
    ] {
        let dir = tempfile::tempdir()?;
        let nats = if synced {
            synced_server(dir.path())?
        } else {
            support::server(dir.path())?
        };
        let mut figures = measure(&nats.url(), blocks).await?;
        figures.print(
            &format!(
                "## {MESSAGES} messages of {PAYLOAD} bytes stored, {name} ({blocks} blocks of {} rounds a way)",
                ROUNDS - 1
            ),
            "way (per message)",
        );
        println!();
    }
    Ok(())
}
