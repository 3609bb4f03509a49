//! The harness works: a quick one-task scenario on a real local cluster.

#![allow(clippy::unwrap_used)] // tests report failure by panicking

use clap::Parser;
use swarm_bench::{Args, cluster::BuildPolicy, table::Table};

/// Runs the harness with these arguments (after the program name).
async fn run(args: &[&str]) -> Vec<Table> {
    let args = Args::parse_from(std::iter::once("swarm-bench").chain(args.iter().copied()));
    swarm_bench::run(&args, BuildPolicy::IfMissing)
        .await
        .unwrap()
}

/// The cells of the row of `text`'s table whose first cell is `scenario`.
fn row(text: &str, scenario: &str) -> Option<Vec<String>> {
    text.lines()
        .map(|l| {
            l.split('|')
                .map(str::trim)
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.get(1).map(String::as_str) == Some(scenario))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_one_task_scenario_prints_its_figures() {
    let started = std::time::Instant::now();
    let tables = run(&["one-task", "--quick", "--sync", "default"]).await;
    let text: String = tables.iter().map(ToString::to_string).collect();
    assert!(text.contains("one-task mission"), "{text}");
    assert!(text.contains("x RTT"), "{text}");
    eprintln!("smoke run took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pacing_gets_its_rows() {
    let tables = run(&["one-task", "--quick", "--sync", "default"]).await;
    let text: String = tables.iter().map(ToString::to_string).collect();
    assert!(text.contains("| one-task mission "), "{text}");
    assert!(text.contains("| one-task mission, back to back "), "{text}");
    let tables = run(&[
        "one-task", "--quick", "--sync", "default", "--pacing", "settled",
    ])
    .await;
    let text: String = tables.iter().map(ToString::to_string).collect();
    assert!(text.contains("| one-task mission "), "{text}");
    assert!(!text.contains("back to back |"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_compared_against_itself_gets_one_row_per_mission() {
    let dir = swarm_bench::cluster::bin_dir(BuildPolicy::IfMissing).unwrap();
    let dir = dir.to_str().unwrap();
    let tables = run(&[
        "one-task",
        "chain",
        "--quick",
        "--sync",
        "default",
        "--against",
        dir,
        "--b-nats-env",
        "GOMAXPROCS=2",
    ])
    .await;
    assert_eq!(tables.len(), 1, "only the comparison runs");
    let text = tables[0].to_string();
    assert!(text.contains("A/B, mission by mission"), "{text}");
    // --quick: one-task 5 runs (with and without a mission id), chain of
    // 10 twice, so 5, 5 and 2 pairs.
    let pairs = |scenario: &str| row(&text, scenario).map(|cells| cells[2].clone());
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

#[test]
fn peers_are_not_compared_with_another_build_at_once() {
    assert!(
        Args::try_parse_from(["swarm-bench", "--peers", "threads", "--against", "/tmp"]).is_err()
    );
    assert!(Args::try_parse_from(["swarm-bench", "--peers", "ray,celery,threads"]).is_ok());
    assert!(Args::try_parse_from(["swarm-bench", "--peers", "dask"]).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_gets_one_row_per_mission_beside_swarm() {
    // `threads` needs nothing but python3; Ray and Celery run the same
    // driver with the packages bench/peers/setup.sh installs.
    let tables = run(&[
        "one-task",
        "chain",
        "sustained",
        "--quick",
        "--sync",
        "default",
        "--peers",
        "threads",
    ])
    .await;
    assert_eq!(tables.len(), 1, "only the comparison runs");
    let text = tables[0].to_string();
    // --quick: one-task 5 runs, chain of 10 twice, one load of 20 missions;
    // the mission-id row is Swarm's own and has no peer counterpart.
    let one = row(&text, "one-task mission").expect("a one-task row");
    let chain = row(&text, "chain of 10").expect("a chain row");
    let load = row(&text, "sustained, 20 missions x 10 tasks (wall time)").expect("a load row");
    assert_eq!(load[3], "1", "{text}");
    assert!(
        text.contains("sustained load beside Python threads"),
        "{text}"
    );
    assert!(one[2].starts_with("Python threads "), "{text}");
    assert_eq!(one[3], "5", "{text}");
    assert_eq!(chain[3], "2", "{text}");
    assert!(
        row(&text, "one-task mission, with a mission id").is_none(),
        "{text}"
    );
    for cells in [one, chain, load] {
        let ratio: f64 = cells[6].parse().unwrap();
        assert!(ratio > 0.0, "{text}");
    }
    assert!(text.contains("ThreadPoolExecutor"), "{text}");
}
