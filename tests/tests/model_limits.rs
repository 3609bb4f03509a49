//! Swarm-wide model limits, whole system: three worker processes call one
//! scripted OpenAI-compatible server (the test kit's) and share its limits
//! through the `model-limits` bucket. A `429` with `Retry-After: 2` seen by
//! one worker stops all three for those two seconds (the server's request
//! log shows none in the window), and the wait reaches the task's progress
//! and the report; a cap of 2 concurrent requests holds under a fan-out of
//! 20; and a small mission is not starved by a large one under that cap.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::{Duration, Instant};

use swarm_common::{FinalReport, ProgressUpdate, SwarmStatus, subjects};
use swarm_testkit::{Cluster, Match, MockLlm, Reply, Rule};

const MODEL: &str = "gpt-4o-mini";
const WAIT: Duration = Duration::from_secs(60);

/// Three workers (and one boss and manager) whose model is `llm`; only the
/// workers call it (the missions carry their plans).
async fn cluster(llm: &MockLlm, extra: &[(&str, &str)]) -> Cluster {
    let mut builder = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(3)
        .env("SWARM_WORKER_PROVIDER", "openai");
    for (k, v) in llm.openai_env(MODEL) {
        if k != "SWARM_PROVIDER" {
            builder = builder.env(k, v);
        }
    }
    for (k, v) in extra {
        builder = builder.env(*k, *v);
    }
    builder.start().await.expect("the cluster starts")
}

async fn report(
    nc: &async_nats::Client,
    llm: &MockLlm,
    cluster: &Cluster,
    id: &str,
) -> FinalReport {
    match swarm_client::client::watch(nc, id, WAIT, |_| {}).await {
        Ok(r) => r,
        Err(e) => panic!(
            "{e:#}\n{}\n{}",
            llm.describe_requests(),
            cluster.log_tails()
        ),
    }
}

/// Tasks `<prefix>0..n` with no dependencies, each one model call.
fn tasks(prefix: &str, n: usize) -> Vec<swarm_common::TaskDefinition> {
    (0..n)
        .map(|i| {
            common::task(
                &format!("{prefix}{i}"),
                &format!("Say done ({prefix}{i})."),
                &[],
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_seen_by_one_worker_pauses_every_worker() {
    let llm = MockLlm::start().await;
    // The first request is refused; every other is answered after 300 ms,
    // so chained tasks keep asking through the refusal's two seconds.
    llm.add(
        Rule::new("chat", Match::new())
            .reply(Reply::rate_limited(2))
            .then_always(
                Reply::text("done")
                    .usage(20, 2)
                    .after(Duration::from_millis(300)),
            ),
    );
    let cluster = cluster(&llm, &[]).await;
    let nc = cluster.client().await;
    // Three chains of four, so the three workers all have work throughout.
    let mut plan = Vec::new();
    for c in ["a", "b", "c"] {
        for i in 0..4 {
            let deps = if i == 0 {
                vec![]
            } else {
                vec![format!("{c}{}", i - 1)]
            };
            let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
            plan.push(common::task(
                &format!("{c}{i}"),
                &format!("Say done ({c}{i})."),
                &deps,
            ));
        }
    }
    let id = common::submit(&nc, &common::mission("three chains", plan)).await;
    let report = report(&nc, &llm, &cluster, &id).await;
    assert_eq!(
        report.overall_status,
        SwarmStatus::Completed,
        "{report:#?}\n{}",
        llm.describe_requests()
    );

    let refused_at = llm
        .answered()
        .iter()
        .find(|(status, _)| *status == 429)
        .map(|(_, at)| *at)
        .expect("the server refused one request");
    // Requests already in flight when the refusal went out arrive at once;
    // after that, none until its two seconds are over.
    let window = refused_at + Duration::from_millis(100)..refused_at + Duration::from_millis(1900);
    let requests = llm.requests();
    let inside: Vec<Duration> = requests
        .iter()
        .filter(|r| window.contains(&r.at))
        .map(|r| r.at - refused_at)
        .collect();
    assert!(
        inside.is_empty(),
        "requests sent while the provider had said to wait, at {inside:?} after the 429"
    );
    // The control of this test: the chains did go on after the window
    // (12 tasks, one call each, plus the refused one).
    let after = requests.iter().filter(|r| r.at >= window.end).count();
    assert!(after >= 6, "{}", llm.describe_requests());
    assert_eq!(requests.len(), 13, "{}", llm.describe_requests());

    // The wait is told: in the tasks' progress and in the report.
    let mut told = Vec::new();
    for c in ["a", "b", "c"] {
        for i in 0..4 {
            let updates = common::messages::<ProgressUpdate>(
                &nc,
                &subjects::progress(&id, &format!("{c}{i}")),
            )
            .await;
            told.extend(
                updates
                    .into_iter()
                    .map(|u| u.body.message)
                    .filter(|m| m.contains("waiting for the model's limits (paused")),
            );
        }
    }
    assert!(!told.is_empty(), "no progress update told of the pause");
    let waited = report.metrics.get("model_wait_ms").copied().unwrap_or(0.0);
    assert!(
        waited >= 500.0,
        "the report counts the time spent waiting: {:?}",
        report.metrics
    );
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_cap_holds_across_workers_and_small_missions_are_not_starved() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("chat", Match::new()).then_always(
            Reply::text("done")
                .usage(20, 2)
                .after(Duration::from_millis(200)),
        ),
    );
    let cluster = cluster(&llm, &[("SWARM_MODEL_MAX_CONCURRENT", "2")]).await;
    let nc = cluster.client().await;

    // A fan-out of 20 over three workers, then a mission of 2 while it runs.
    let big = common::submit(&nc, &common::mission("fan-out of 20", tasks("big", 20))).await;
    common::eventually(
        WAIT,
        Duration::from_millis(20),
        "the fan-out calls the model",
        || async {
            let n = llm.requests().len();
            if n >= 2 {
                Ok(())
            } else {
                Err(format!("{n} requests"))
            }
        },
    )
    .await;
    let small_started = Instant::now();
    let small = common::submit(&nc, &common::mission("two tasks", tasks("small", 2))).await;
    let small_report = report(&nc, &llm, &cluster, &small).await;
    let small_took = small_started.elapsed();
    let big_calls_when_small_done = llm
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("(big"))
        .count();
    let big_report = report(&nc, &llm, &cluster, &big).await;
    for r in [&small_report, &big_report] {
        assert_eq!(r.overall_status, SwarmStatus::Completed, "{r:#?}");
    }
    assert_eq!(llm.requests().len(), 22, "{}", llm.describe_requests());
    let peak = llm.peak_in_flight();
    assert!(
        peak <= 2,
        "{peak} requests were in flight at once under a cap of 2"
    );
    assert_eq!(peak, 2, "the load filled the cap");
    // With a fair share (one slot each while both wait) the small mission
    // is done after a few calls' time, while most of the fan-out still
    // waits; served in turn behind the fan-out it would wait for it all.
    assert!(
        big_calls_when_small_done < 16,
        "the small mission finished after {big_calls_when_small_done} of the fan-out's 20 calls \
         ({small_took:?})"
    );
    cluster.stop(Duration::from_secs(5)).await;
}
