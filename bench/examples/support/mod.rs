//! What the probes (`legs`, `cycle`) share: their own nats-server, a pulled
//! consumer on their stream, and the figures they take and print.

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::AckPolicy, consumer::pull};

/// A nats-server with the dev configuration and its store in `dir`, killed
/// when dropped.
pub fn server(dir: &std::path::Path) -> anyhow::Result<swarm_local::NatsProcess> {
    swarm_local::NatsProcess::start(
        &swarm_local::nats_server_bin()?,
        Some(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../nats.conf"
        ))),
        None,
        &dir.join("store"),
        &dir.join("nats.log"),
    )
}

/// A probe's server and stream: a nats-server of its own in `dir` (see
/// [`server`]), its URL, a client of it and its JetStream context, with
/// `stream` created.
pub async fn with_stream(
    dir: &std::path::Path,
    stream: jetstream::stream::Config,
) -> anyhow::Result<(
    swarm_local::NatsProcess,
    String,
    async_nats::Client,
    jetstream::Context,
)> {
    let nats = server(dir)?;
    let url = nats.url();
    let client = async_nats::connect(&url).await?;
    let js = jetstream::new(client.clone());
    js.create_stream(stream)
        .await
        .context("creating the stream")?;
    Ok((nats, url, client, js))
}

/// The messages of a durable consumer `name` of `stream` on `subject`,
/// acked one by one.
pub async fn pull_stream(
    js: &jetstream::Context,
    stream: &str,
    name: &str,
    subject: String,
) -> anyhow::Result<pull::Stream> {
    let consumer = js
        .get_stream(stream)
        .await?
        .create_consumer(pull::Config {
            durable_name: Some(name.into()),
            filter_subject: subject,
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating the consumer {name}"))?;
    Ok(consumer.messages().await?)
}

/// The figures of a probe whose ways take turns in blocks, in order then
/// reversed (ABCD, DCBA), so each way sees the same host speed: every
/// sample of each way, and each block's median of each way as a ratio to
/// the first way's.
pub struct Figures {
    ways: &'static [&'static str],
    samples: Vec<Vec<f64>>,
    ratios: Vec<Vec<f64>>,
    block: Vec<Vec<f64>>,
}

impl Figures {
    /// No samples yet of the `ways`, the first of them the baseline.
    pub fn new(ways: &'static [&'static str]) -> Figures {
        Figures {
            ways,
            samples: vec![Vec::new(); ways.len()],
            ratios: vec![Vec::new(); ways.len()],
            block: vec![Vec::new(); ways.len()],
        }
    }

    /// The ways of block `block` in the order they take their turns.
    pub fn turns(&self, block: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.ways.len()).collect();
        if block % 2 == 1 {
            order.reverse();
        }
        order
    }

    /// One sample of way `k` in the current block, in milliseconds.
    pub fn push(&mut self, k: usize, ms: f64) {
        self.block[k].push(ms);
    }

    /// Closes the current block: every way has had its turn.
    pub fn end_block(&mut self) {
        let medians: Vec<f64> = self.block.iter().map(|b| median(b.clone())).collect();
        for (k, b) in self.block.iter_mut().enumerate() {
            self.ratios[k].push(medians[k] / medians[0]);
            self.samples[k].append(b);
        }
    }

    /// Prints `heading`, then each way's p50 and p90 and the median over
    /// blocks of its ratio to the first way, as a Markdown table.
    pub fn print(&mut self, heading: &str, what: &str) {
        println!("{heading}\n");
        println!(
            "| {what} | p50 | p90 | / {}, median of blocks |",
            self.ways[0]
        );
        println!("|---|---|---|---|");
        for (k, way) in self.ways.iter().enumerate() {
            let s = &mut self.samples[k];
            s.sort_by(f64::total_cmp);
            println!(
                "| {way} | {:.3} ms | {:.3} ms | {:.3} |",
                percentile(s, 0.5),
                percentile(s, 0.9),
                median(self.ratios[k].clone())
            );
        }
    }
}

/// The nearest-rank `q` quantile of `sorted`.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// The median of `xs`.
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
