//! The harness works: a quick one-task scenario on a real local cluster.

#![allow(clippy::unwrap_used)] // tests report failure by panicking

use clap::Parser;
use swarm_bench::{Args, cluster::BuildPolicy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_one_task_scenario_prints_its_figures() {
    let args = Args::parse_from(["swarm-bench", "one-task", "--quick", "--sync", "default"]);
    let started = std::time::Instant::now();
    let tables = swarm_bench::run(&args, BuildPolicy::IfMissing)
        .await
        .unwrap();
    let text: String = tables.iter().map(ToString::to_string).collect();
    assert!(text.contains("one-task mission"), "{text}");
    assert!(text.contains("x RTT"), "{text}");
    eprintln!("smoke run took {:?}", started.elapsed());
}
