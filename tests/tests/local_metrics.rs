//! `swarm up`'s metrics: a local cluster started with a metrics base port
//! serves each role's `/metrics` (the gateway's too) on 127.0.0.1 at
//! consecutive ports, in start order; the boss counts missions at intake
//! apart from their outcomes; every role shows its process's metrics; and
//! `swarm up` prints every URL.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{free_ports, get_metrics, series};
use swarm_common::SwarmStatus;
use swarm_testkit::Cluster;
use tokio::io::AsyncBufReadExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_serves_its_metrics_on_the_port_it_was_given() {
    let base = free_ports(4);
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .gateway()
        .metrics_base_port(base)
        .start()
        .await
        .expect("the cluster starts");
    let endpoints = cluster.local().metrics_endpoints().to_vec();
    assert_eq!(
        endpoints,
        [
            ("boss-1".to_owned(), base),
            ("manager-1".to_owned(), base + 1),
            ("worker-1".to_owned(), base + 2),
            ("gateway-1".to_owned(), base + 3),
        ]
    );
    let nc = cluster.client().await;
    // One mission accepted, the same mission again (a duplicate), and a
    // blank one (refused).
    let mut mission = common::mission(
        "echo once",
        vec![common::task("t", &common::echo("hi"), &[])],
    );
    mission.mission_id = Some("metrics-once".into());
    let id = common::submit(&nc, &mission).await;
    let again = swarm_client::client::submit(&nc, &mission, Duration::from_secs(15))
        .await
        .unwrap();
    assert!(again.duplicate && again.swarm_id == id, "{again:?}");
    let refused = common::raw_request(&nc, None, b"   \n".to_vec()).await;
    assert!(
        String::from_utf8_lossy(&refused.payload).contains("\"error\""),
        "{refused:?}"
    );
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");

    let started_before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for (id, port) in &endpoints {
        let role = id.split('-').next().unwrap();
        // The boss counts the outcome once it has stored the report, a
        // moment after the report went out.
        let body = common::eventually(
            Duration::from_secs(15),
            Duration::from_millis(100),
            &format!("{id}'s /metrics on {port}"),
            || async move {
                let (status, body) = get_metrics(*port)
                    .await
                    .ok_or_else(|| "no answer yet".to_owned())?;
                if !status.contains(" 200 ") {
                    return Err(status);
                }
                let reported = "swarm_mission_outcomes_total{role=\"boss\",status=\"completed\"}";
                if role == "boss" && !body.contains(reported) {
                    return Err(format!("no outcome yet:\n{body}"));
                }
                Ok(body)
            },
        )
        .await;
        let all = series(&body);
        let value = |name: &str| all.get(name).copied();
        let label = format!("{{role=\"{role}\"}}");

        // The process's metrics, on every role.
        let cpu = value(&format!("process_cpu_seconds_total{label}"));
        assert!(cpu.is_some_and(|c| c >= 0.0), "{id}: {body}");
        let rss = value(&format!("process_resident_memory_bytes{label}"));
        let vms = value(&format!("process_virtual_memory_bytes{label}"));
        assert!(rss.is_some_and(|b| b > 1e6), "{id}: {body}");
        assert!(vms >= rss, "{id}: {body}");
        let fds = value(&format!("process_open_fds{label}")).unwrap();
        let max = value(&format!("process_max_fds{label}")).unwrap();
        assert!(fds >= 3.0 && max >= fds, "{id}: {body}");
        assert!(value(&format!("process_threads{label}")).is_some_and(|n| n >= 1.0));
        let started = value(&format!("process_start_time_seconds{label}")).unwrap();
        assert!(
            started <= started_before + 1.0 && started > started_before - 600.0,
            "{id} started at {started}, now is {started_before}"
        );
        assert!(body.contains(&format!("swarm_build_info{{role=\"{role}\"")));

        let intake: BTreeMap<&str, f64> = all
            .iter()
            .filter(|(k, _)| k.starts_with("swarm_missions_intake_total{"))
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        let outcomes: BTreeMap<&str, f64> = all
            .iter()
            .filter(|(k, _)| k.starts_with("swarm_mission_outcomes_total{"))
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        if role == "boss" {
            assert_eq!(
                intake,
                BTreeMap::from([
                    (
                        "swarm_missions_intake_total{role=\"boss\",state=\"accepted\"}",
                        1.0
                    ),
                    (
                        "swarm_missions_intake_total{role=\"boss\",state=\"duplicate\"}",
                        1.0
                    ),
                    (
                        "swarm_missions_intake_total{role=\"boss\",state=\"refused\"}",
                        1.0
                    ),
                ]),
                "{body}"
            );
            assert_eq!(
                outcomes,
                BTreeMap::from([(
                    "swarm_mission_outcomes_total{role=\"boss\",status=\"completed\"}",
                    1.0
                )]),
                "{body}"
            );
            let refused: f64 = all
                .iter()
                .filter(|(k, _)| k.starts_with("swarm_missions_refused_total{role=\"boss\""))
                .map(|(_, v)| v)
                .sum();
            assert_eq!(refused, 1.0, "{body}");
            assert_eq!(
                value("swarm_mission_duration_seconds_count{role=\"boss\",status=\"completed\"}"),
                Some(1.0),
                "{body}"
            );
            assert!(!body.contains("swarm_missions_total"), "{body}");
        } else {
            assert!(intake.is_empty() && outcomes.is_empty(), "{id}: {body}");
        }
        if role == "worker" {
            assert_eq!(
                value("swarm_tasks_total{role=\"worker\",status=\"completed\"}"),
                Some(1.0),
                "{body}"
            );
            assert_eq!(
                value("swarm_tasks_in_flight{role=\"worker\"}"),
                Some(0.0),
                "{body}"
            );
        }
    }
    cluster.stop(Duration::from_secs(5)).await;
}

/// `swarm up` serves metrics by default and prints each role's URL, the
/// gateway's included, at the base port plus its place in the start order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swarm_up_prints_every_roles_metrics_url() {
    let base = free_ports(4);
    let nats_port = swarm_testkit::free_port().unwrap();
    let a2a_port = swarm_testkit::free_port().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let swarm = swarm_testkit::bin_dir().join(format!("swarm{}", std::env::consts::EXE_SUFFIX));
    let mut up = tokio::process::Command::new(&swarm)
        .args(["up", "--bosses", "1", "--managers", "1", "--workers", "1"])
        .args(["--port", &nats_port.to_string()])
        .args(["--metrics-port", &base.to_string()])
        .args(["--a2a-port", &a2a_port.to_string()])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--workspace")
        .arg(dir.path())
        .env_remove("NATS_URL")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", swarm.display()));
    let mut lines = tokio::io::BufReader::new(up.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.trim().strip_prefix("metrics:") {
                printed.push(rest.trim().to_owned());
            }
            if line.contains("Ctrl-C stops everything") {
                return;
            }
        }
        panic!("swarm up ended before it was up: {printed:?}");
    })
    .await
    .expect("swarm up is up within 90 s");
    assert_eq!(
        printed,
        [
            format!("http://127.0.0.1:{base}/metrics (boss-1)"),
            format!("http://127.0.0.1:{}/metrics (manager-1)", base + 1),
            format!("http://127.0.0.1:{}/metrics (worker-1)", base + 2),
            format!("http://127.0.0.1:{}/metrics (gateway-1)", base + 3),
        ]
    );
    for (i, role) in ["boss", "manager", "worker", "gateway"].iter().enumerate() {
        let port = base + u16::try_from(i).unwrap();
        let (status, body) = get_metrics(port).await.expect("the printed port answers");
        assert!(status.contains(" 200 "), "{role}: {status}");
        assert!(
            body.contains(&format!("process_resident_memory_bytes{{role=\"{role}\"}}")),
            "{role}: {body}"
        );
    }
    // Ctrl-C stops everything.
    let pid = up.id().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status();
    let stopped = tokio::time::timeout(Duration::from_secs(30), up.wait()).await;
    assert!(stopped.is_ok_and(|s| s.is_ok()), "swarm up stops on SIGINT");
}
