//! What the probes (`legs`, `cycle`) share: their own nats-server, a pulled
//! consumer on their stream, and the figures they print.

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::AckPolicy, consumer::pull};

/// A nats-server with the dev configuration and its store in `dir`, killed
/// when dropped.
pub fn server(dir: &std::path::Path) -> anyhow::Result<swarm_cli::local::NatsProcess> {
    swarm_cli::local::NatsProcess::start(
        &swarm_cli::local::nats_server_bin()?,
        Some(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../nats.conf"
        ))),
        None,
        &dir.join("store"),
        &dir.join("nats.log"),
    )
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

/// The nearest-rank `q` quantile of `sorted`.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// The median of `xs`.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
