//! A provider's 429 window: how many requests does a swarm send while the
//! provider has said to wait, with and without the shared model limits?
//!
//! `cargo run --release -p swarm-bench --example rate_limits [-- <runs>]`
//! starts a nats-server (the dev configuration, its own store) and the test
//! kit's scripted model server, which answers each request after 50 ms. `n`
//! callers (3, 10 and 20: a worker each, with its own OpenAI-compatible
//! provider) call it one request after another. After 500 ms the server is
//! saturated for 2 s, then serves again; the callers go on for 1 s more.
//! The saturation is shown two ways:
//!
//! - `429`: every request is answered `429` with a `Retry-After` of the
//!   seconds left (OpenAI's way when a limit is reached);
//! - `529`: every request is answered `529 overloaded` without
//!   `Retry-After` (Anthropic's way when it is overloaded), so a caller has
//!   only its backoff to go by.
//!
//! Each is met two ways:
//!
//! - `alone`: each caller retries its own refusals, honouring the
//!   `Retry-After` it was sent or else backing off from 10 ms (what every
//!   worker did before the shared limits, and what other agent runtimes
//!   do);
//! - `shared`: each caller asks its own limiter over one JetStream KV
//!   bucket, as the workers do over `model-limits`: the first refusal any
//!   of them sees pauses all of them until its `Retry-After` has passed
//!   (1 s when none was sent).
//!
//! For each `n` and way it prints the median over runs of the requests the
//! server refused in the window, and of the requests answered in the whole
//! run (so the pause costs no work beyond the window). Both ways run in
//! turns, so each sees the same host.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, kv};
use swarm_agent::provider::limit::{CallLimiter, Limits, SharedLimiter};
use swarm_agent::provider::{ChatMessage, CompletionRequest, ProviderConfig};
use swarm_agent::{OpenAiProvider, Provider};
use swarm_testkit::{Match, MockLlm, Reply, Rule};
use swarm_worker::limits::KvLimits;

const CALLERS: [usize; 3] = [3, 10, 20];
const WAYS: [&str; 2] = ["alone", "shared"];
const WARM: Duration = Duration::from_millis(500);
const WINDOW: Duration = Duration::from_secs(2);
const AFTER: Duration = Duration::from_secs(1);

/// One run's figures: requests refused in the window, requests answered.
struct Run {
    refused: usize,
    answered: usize,
}

async fn run(
    js: &jetstream::Context,
    n: usize,
    told: bool,
    shared: bool,
    id: usize,
) -> anyhow::Result<Run> {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("chat", Match::new()).then_always(
            Reply::text("ok")
                .usage(5, 1)
                .after(Duration::from_millis(50)),
        ),
    );
    let store = if shared {
        let bucket = js
            .create_key_value(kv::Config {
                bucket: format!("bench-limits-{id}"),
                history: 1,
                ..Default::default()
            })
            .await
            .context("creating the limits bucket")?;
        Some(Arc::new(KvLimits::new(bucket)))
    } else {
        None
    };
    let config = ProviderConfig {
        base_url: Some(llm.openai_base_url()),
        api_key: Some("sk-bench".into()),
        timeout: Duration::from_secs(10),
        max_retries: 10,
        retry_min_delay: Duration::from_millis(10),
        ..ProviderConfig::openai("gpt-4o-mini")
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for i in 0..n {
        let plain = OpenAiProvider::new(&config)?;
        let provider: Arc<dyn Provider> = match &store {
            Some(store) => {
                let limiter: Arc<dyn CallLimiter> = Arc::new(SharedLimiter::new(
                    store.clone(),
                    Limits::default(),
                    Duration::from_secs(30),
                ));
                Arc::new(plain.with_limiter(limiter))
            }
            None => Arc::new(plain),
        };
        let stop = stop.clone();
        callers.push(tokio::spawn(async move {
            // Spread the callers' starts over one reply's time, as workers
            // that took their tasks at different moments.
            tokio::time::sleep(Duration::from_millis((50 * i / n.max(1)) as u64)).await;
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let request = CompletionRequest {
                    messages: vec![ChatMessage::user(format!("caller {i} call {k}"))],
                    tools: vec![],
                    max_tokens: None,
                };
                provider.complete(request).await?;
                k += 1;
            }
            anyhow::Ok(())
        }));
    }
    tokio::time::sleep(WARM).await;
    if told {
        llm.saturate(WINDOW);
    } else {
        llm.overload(WINDOW);
    }
    tokio::time::sleep(WINDOW + AFTER).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.context("a caller panicked")??;
    }
    let statuses = llm.answered();
    Ok(Run {
        refused: statuses.iter().filter(|(s, _)| *s != 200).count(),
        answered: statuses.iter().filter(|(s, _)| *s == 200).count(),
    })
}

fn median(mut xs: Vec<usize>) -> usize {
    xs.sort_unstable();
    xs[xs.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let runs: usize = match std::env::args().nth(1) {
        Some(a) => a.parse().context("the argument is the number of runs")?,
        None => 3,
    };
    let dir = tempfile::tempdir()?;
    let server = swarm_local::NatsProcess::start(
        &swarm_local::nats_server_bin()?,
        Some(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../nats.conf"
        ))),
        None,
        &dir.path().join("store"),
        &dir.path().join("nats.log"),
    )?;
    let client = async_nats::connect(server.url()).await?;
    let js = jetstream::new(client);
    println!(
        "| refusal | callers | refused in the 2 s window, alone | refused, shared | answered in {:.1} s, alone | answered, shared |",
        (WARM + WINDOW + AFTER).as_secs_f64()
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut id = 0;
    for (told, n) in [true, false]
        .into_iter()
        .flat_map(|t| CALLERS.map(|n| (t, n)))
    {
        let mut refused = [Vec::new(), Vec::new()];
        let mut answered = [Vec::new(), Vec::new()];
        for r in 0..runs {
            // AB then BA, so neither way always runs on a warmer host.
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            for w in order {
                id += 1;
                let figures = run(&js, n, told, WAYS[w] == "shared", id).await?;
                refused[w].push(figures.refused);
                answered[w].push(figures.answered);
            }
        }
        let [ra, rs] = refused.map(median);
        let [aa, ash] = answered.map(median);
        let refusal = if told {
            "429 + Retry-After"
        } else {
            "529, no Retry-After"
        };
        println!("| {refusal} | {n} | {ra} | {rs} | {aa} | {ash} |");
    }
    Ok(())
}
