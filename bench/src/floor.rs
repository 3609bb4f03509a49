//! The floor: what the broker itself costs, measured on the same server as
//! the scenario it is compared with. Request/reply round trip (core NATS),
//! JetStream publish-ack (file storage, one at a time and pipelined), KV
//! compare-and-swap updates (one key one at a time, and many keys at once),
//! and a JetStream ping-pong: a message stored and pulled by a durable
//! consumer on a second connection, whose reply is stored and pulled back,
//! the shape of a task hop (assignment to a worker, result to the manager)
//! with nothing of ours in it.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use async_nats::jetstream::{self, kv, stream};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::stats::{Summary, fmt_ms, fmt_rate, ms};
use crate::table::Table;

/// Subject the echo responder serves.
const ECHO: &str = "bench.floor.echo";
/// Stream of the publish-ack measurements.
const STREAM: &str = "BENCH_FLOOR";
/// Bucket of the compare-and-swap measurements.
const BUCKET: &str = "bench_floor";
/// Payload size: about an A2AP assignment or result of an `echo` task.
const PAYLOAD: usize = 512;
/// Publishes in flight in the pipelined measurement.
const WINDOW: usize = 256;
/// Keys updated at once in the parallel compare-and-swap measurement.
const KEYS: usize = 16;

/// The broker's figures.
#[derive(Debug, Clone, Copy)]
pub struct Floor {
    /// Core NATS request/reply round trip.
    pub rtt: Summary,
    /// JetStream publish, waiting for each ack before the next.
    pub pub_ack: Summary,
    /// JetStream publishes per second with [`WINDOW`] acks outstanding.
    pub pub_rate: f64,
    /// KV update with expected revision, one key, one at a time.
    pub cas: Summary,
    /// KV updates per second over [`KEYS`] keys at once.
    pub cas_rate: f64,
    /// Stored, pulled, answered, stored and pulled back: two durable
    /// deliveries through file storage.
    pub ping_pong: Summary,
}

impl Floor {
    /// The least a task hop can cost with today's protocol: the result
    /// stored (publish-ack), the state stored (compare-and-swap), the next
    /// assignment stored (publish-ack). Medians.
    pub fn hop_ms(&self) -> f64 {
        2.0 * self.pub_ack.p50 + self.cas.p50
    }

    /// The figures as a table.
    pub fn table(&self, label: &str) -> Table {
        let mut t = Table::new(
            format!("Floor ({label})"),
            format!(
                "on the scenario's own nats-server, from one client process: request/reply to an echo \
                 responder on a second connection; JetStream publish of {PAYLOAD} B to a file stream \
                 awaiting each ack, then {WINDOW} acks in flight; KV update with expected revision of a \
                 {PAYLOAD} B value, one key sequentially, then {KEYS} keys concurrently"
            ),
            &["measure", "n", "p50", "p99", "rate"],
        );
        let lat = |name: &str, s: &Summary| {
            vec![
                name.to_owned(),
                s.n.to_string(),
                fmt_ms(s.p50),
                fmt_ms(s.p99),
                fmt_rate(1000.0 / s.mean),
            ]
        };
        t.row(lat("request/reply round trip", &self.rtt));
        t.row(lat("JetStream publish-ack (sequential)", &self.pub_ack));
        t.row(vec![
            format!("JetStream publish-ack ({WINDOW} in flight)"),
            "".into(),
            "".into(),
            "".into(),
            fmt_rate(self.pub_rate),
        ]);
        t.row(lat("KV compare-and-swap (one key)", &self.cas));
        t.row(vec![
            format!("KV compare-and-swap ({KEYS} keys at once)"),
            "".into(),
            "".into(),
            "".into(),
            fmt_rate(self.cas_rate),
        ]);
        t.row(lat(
            "JetStream ping-pong (stored + pulled, there and back)",
            &self.ping_pong,
        ));
        t.note(format!(
            "Hop floor (2 publish-acks + 1 CAS, medians): {}; a hop that writes its state alongside \
             the next assignment cannot beat the ping-pong ({})",
            fmt_ms(self.hop_ms()),
            fmt_ms(self.ping_pong.p50)
        ));
        t
    }
}

/// Measures the floor on the server at `client` with `n` samples each.
pub async fn measure(client: &async_nats::Client, url: &str, n: usize) -> anyhow::Result<Floor> {
    let n = n.max(10);
    let rtt = request_reply(client, url, n).await?;
    let js = jetstream::new(client.clone());
    let (pub_ack, pub_rate) = publish_ack(&js, n).await?;
    let (cas, cas_rate) = compare_and_swap(&js, n).await?;
    let ping_pong = ping_pong(&js, url, n).await?;
    Ok(Floor {
        rtt,
        pub_ack,
        pub_rate,
        cas,
        cas_rate,
        ping_pong,
    })
}

async fn request_reply(
    client: &async_nats::Client,
    url: &str,
    n: usize,
) -> anyhow::Result<Summary> {
    let responder = async_nats::connect(url)
        .await
        .context("connecting the responder")?;
    let mut sub = responder.subscribe(ECHO).await?;
    let replier = responder.clone();
    let task = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Some(reply) = msg.reply {
                let _ = replier.publish(reply, msg.payload).await;
            }
        }
    });
    responder.flush().await?;
    let payload = Bytes::from(vec![b'x'; 64]);
    // The first request may race the responder's subscription: wait until one is answered.
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Err(e) = client.request(ECHO, payload.clone()).await {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the echo responder never answered: {e}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let start = Instant::now();
        client
            .request(ECHO, payload.clone())
            .await
            .context("request to the echo responder")?;
        // The first tenth warms the connection up and is not counted.
        if i >= n / 10 {
            samples.push(ms(start.elapsed()));
        }
    }
    task.abort();
    Summary::of(samples).context("no samples")
}

async fn publish_ack(js: &jetstream::Context, n: usize) -> anyhow::Result<(Summary, f64)> {
    js.create_stream(stream::Config {
        name: STREAM.into(),
        subjects: vec!["bench.floor.js.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .context("creating the floor stream")?;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let start = Instant::now();
        js.publish(format!("bench.floor.js.{}", i % 64), payload.clone())
            .await?
            .await
            .context("publish ack")?;
        if i >= n / 10 {
            samples.push(ms(start.elapsed()));
        }
    }
    let total = (n * 4).max(WINDOW);
    let start = Instant::now();
    let mut acks = FuturesUnordered::new();
    for i in 0..total {
        let ack = js
            .publish(format!("bench.floor.js.{}", i % 64), payload.clone())
            .await?;
        acks.push(ack.into_future());
        if acks.len() >= WINDOW
            && let Some(ack) = acks.next().await
        {
            ack.context("publish ack")?;
        }
    }
    while let Some(ack) = acks.next().await {
        ack.context("publish ack")?;
    }
    let rate = total as f64 / start.elapsed().as_secs_f64();
    let _ = js.delete_stream(STREAM).await;
    Ok((Summary::of(samples).context("no samples")?, rate))
}

async fn compare_and_swap(js: &jetstream::Context, n: usize) -> anyhow::Result<(Summary, f64)> {
    let store = js
        .create_key_value(kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .context("creating the floor bucket")?;
    let value = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut revision = store.put("k", value.clone()).await?;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let start = Instant::now();
        revision = store
            .update("k", value.clone(), revision)
            .await
            .context("KV update")?;
        if i >= n / 10 {
            samples.push(ms(start.elapsed()));
        }
    }
    let per_key = (n / KEYS).max(10);
    let start = Instant::now();
    let mut writers = Vec::new();
    for k in 0..KEYS {
        let store = store.clone();
        let value = value.clone();
        writers.push(tokio::spawn(async move {
            let key = format!("p{k}");
            let mut rev = store.put(&key, value.clone()).await?;
            for _ in 0..per_key {
                rev = store.update(&key, value.clone(), rev).await?;
            }
            anyhow::Ok(())
        }));
    }
    for w in writers {
        w.await.context("a KV writer panicked")??;
    }
    let rate = (KEYS * (per_key + 1)) as f64 / start.elapsed().as_secs_f64();
    let _ = js.delete_key_value(BUCKET).await;
    Ok((Summary::of(samples).context("no samples")?, rate))
}

/// Stream of the ping-pong measurement.
const PING_STREAM: &str = "BENCH_PING";

/// A pull consumer's message stream on `subject` of the ping-pong stream.
async fn pull(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
) -> anyhow::Result<jetstream::consumer::pull::Stream> {
    use jetstream::consumer::{AckPolicy, pull};
    let stream = js.get_stream(PING_STREAM).await?;
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(name.into()),
            filter_subject: subject.into(),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating the {name} consumer"))?;
    Ok(consumer.messages().await?)
}

/// A message stored and pulled by a consumer on a second connection, which
/// stores a reply that a consumer here pulls: the time until it arrives.
async fn ping_pong(js: &jetstream::Context, url: &str, n: usize) -> anyhow::Result<Summary> {
    js.create_stream(stream::Config {
        name: PING_STREAM.into(),
        subjects: vec!["bench.floor.ping.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .context("creating the ping-pong stream")?;
    let other = async_nats::connect(url)
        .await
        .context("connecting the ponger")?;
    let other_js = jetstream::new(other);
    let mut pings = pull(&other_js, "ponger", "bench.floor.ping.ping").await?;
    let ponger = tokio::spawn(async move {
        while let Some(Ok(msg)) = pings.next().await {
            let _ = other_js
                .publish("bench.floor.ping.pong", msg.payload.clone())
                .await;
            let _ = msg.ack().await;
        }
    });
    let mut pongs = pull(js, "pinger", "bench.floor.ping.pong").await?;
    let payload = Bytes::from(vec![b'x'; PAYLOAD]);
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let start = Instant::now();
        js.publish("bench.floor.ping.ping", payload.clone())
            .await
            .context("ping")?;
        let pong = tokio::time::timeout(Duration::from_secs(10), pongs.next())
            .await
            .context("no pong within 10 s")?
            .context("the pong stream ended")?
            .map_err(|e| anyhow::anyhow!("pulling a pong: {e}"))?;
        if i >= n / 10 {
            samples.push(ms(start.elapsed()));
        }
        let _ = pong.ack().await;
    }
    ponger.abort();
    let _ = js.delete_stream(PING_STREAM).await;
    Summary::of(samples).context("no samples")
}

/// How long a whole floor measurement may take before the run is declared
/// broken: generous for the fsync mode, and a guard, not a target.
pub const TIMEOUT: Duration = Duration::from_secs(120);
