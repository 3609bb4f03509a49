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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pacing_gets_its_rows() {
    let args = Args::parse_from(["swarm-bench", "one-task", "--quick", "--sync", "default"]);
    let tables = swarm_bench::run(&args, BuildPolicy::IfMissing)
        .await
        .unwrap();
    let text: String = tables.iter().map(ToString::to_string).collect();
    assert!(text.contains("| one-task mission "), "{text}");
    assert!(text.contains("| one-task mission, back to back "), "{text}");
    let args = Args::parse_from([
        "swarm-bench",
        "one-task",
        "--quick",
        "--sync",
        "default",
        "--pacing",
        "settled",
    ]);
    let tables = swarm_bench::run(&args, BuildPolicy::IfMissing)
        .await
        .unwrap();
    let text: String = tables.iter().map(ToString::to_string).collect();
    assert!(text.contains("| one-task mission "), "{text}");
    assert!(!text.contains("back to back |"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_compared_against_itself_gets_one_row_per_mission() {
    let dir = swarm_bench::cluster::bin_dir(BuildPolicy::IfMissing).unwrap();
    let dir = dir.to_str().unwrap();
    let args = Args::parse_from([
        "swarm-bench",
        "one-task",
        "chain",
        "--quick",
        "--sync",
        "default",
        "--against",
        dir,
        "--b-nats-env",
        "GOMAXPROCS=2",
    ]);
    let tables = swarm_bench::run(&args, BuildPolicy::IfMissing)
        .await
        .unwrap();
    assert_eq!(tables.len(), 1, "only the comparison runs");
    let text = tables[0].to_string();
    assert!(text.contains("A/B, mission by mission"), "{text}");
    // --quick: one-task 5 runs (with and without a mission id), chain of
    // 10 twice, so 5, 5 and 2 pairs.
    let pairs = |scenario: &str| {
        text.lines()
            .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
            .find(|cells| cells.get(1) == Some(&scenario))
            .and_then(|cells| cells.get(2).map(|c| c.to_string()))
    };
    assert_eq!(pairs("one-task mission").as_deref(), Some("5"), "{text}");
    assert_eq!(
        pairs("one-task mission, with a mission id").as_deref(),
        Some("5"),
        "{text}"
    );
    assert_eq!(pairs("chain of 10").as_deref(), Some("2"), "{text}");
}

#[test]
fn a_server_setting_for_b_alone_needs_a_b() {
    assert!(Args::try_parse_from(["swarm-bench", "--b-nats-env", "GOMAXPROCS=2"]).is_err());
    assert!(
        Args::try_parse_from([
            "swarm-bench",
            "--against",
            "/tmp",
            "--b-nats-env",
            "GOMAXPROCS=2"
        ])
        .is_ok()
    );
}
