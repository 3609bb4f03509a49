//! `swarm up`'s metrics: a local cluster started with a metrics base port
//! serves each role's `/metrics` on 127.0.0.1 at consecutive ports, in start
//! order, and the boss's counts the mission it accepted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use swarm_common::SwarmStatus;
use swarm_testkit::Cluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The status line and body of `GET /metrics` on 127.0.0.1:`port`.
async fn get_metrics(port: u16) -> Option<(String, String)> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .ok()?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await.ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_owned(), body.to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_serves_its_metrics_on_the_port_it_was_given() {
    // Three consecutive ports that are free now (the roles bind them
    // moments later; a port taken in between fails the start, naming it).
    let base = loop {
        let first = swarm_testkit::free_port().unwrap();
        let free = (0..3).all(|i| {
            first
                .checked_add(i)
                .is_some_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        });
        if free {
            break first;
        }
    };
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
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
        ]
    );
    let nc = cluster.client().await;
    let mission = common::mission(
        "echo once",
        vec![common::task("t", &common::echo("hi"), &[])],
    );
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    for (role, port) in &endpoints {
        let (status, body) = common::eventually(
            Duration::from_secs(10),
            Duration::from_millis(100),
            &format!("{role}'s /metrics on {port}"),
            || async move {
                get_metrics(*port)
                    .await
                    .ok_or_else(|| "no answer yet".to_owned())
            },
        )
        .await;
        assert!(status.contains(" 200 "), "{role}: {status}");
        if role == "boss-1" {
            assert!(body.contains("swarm_missions_total"), "{role}: {body}");
        }
    }
    cluster.stop(Duration::from_secs(5)).await;
}
