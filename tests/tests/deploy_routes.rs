//! The production cluster's routes are authenticated (k8s/base/nats/cluster.conf):
//! a three-node cluster from the production config, with the route
//! password in its `--routes` URLs as the StatefulSet passes it, refuses a
//! fourth nats-server started from the same config without that password.
//! The stranger never joins: no node lists a route to it on `/routez`;
//! what it publishes reaches no subscriber of the cluster and the
//! cluster's messages do not reach it; its JetStream has no meta leader
//! and does not serve Swarm's streams. The route password shows on no
//! monitoring page and in no log.
//!
//! Before the route authorization, such a node joined, could become the
//! JetStream meta leader, and received and injected swarm traffic.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use async_nats::{Client, ConnectOptions};
use bytes::Bytes;
use futures::StreamExt;
use serde_json::Value;
use swarm_common::subjects;
use swarm_runtime::Infra;
use swarm_testkit::{NatsCluster, NatsNode, ROUTE_PASSWORD, http_get, role};

/// How long a refused node keeps trying (it retries about once a second)
/// while the test watches that it never gets in.
const WATCH: Duration = Duration::from_secs(3);

/// The node's monitoring page `path` as JSON.
fn monitor(node: &NatsNode, path: &str) -> Value {
    let (status, body) = http_get(node.monitor_addr(), path)
        .unwrap_or_else(|e| panic!("{} {path}: {e}", node.name()));
    assert_eq!(status, 200, "{} {path}: {body}", node.name());
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{} {path}: {e}: {body}", node.name()))
}

/// The names and ids of the servers node `node` has routes to.
fn route_peers(node: &NatsNode) -> BTreeSet<String> {
    let routez = monitor(node, "/routez");
    routez["routes"]
        .as_array()
        .map(|routes| {
            routes
                .iter()
                .flat_map(|r| [&r["remote_name"], &r["remote_id"]])
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Panics if any node of `nats` has a route to `outsider` (name or id).
fn assert_no_route_to(nats: &NatsCluster, outsider: &NatsNode, outsider_id: &str) {
    for node in nats.nodes() {
        let peers = route_peers(node);
        assert!(
            !peers
                .iter()
                .any(|p| p == outsider.name() || p == outsider_id),
            "{} joined the cluster: {} has routes to {peers:?}",
            outsider.name(),
            node.name()
        );
    }
}

/// A client of `url` as `user` (the test passwords, which the outsider,
/// started from the same config, shares: it is its own server).
async fn connect(url: &str, user: &str) -> Client {
    let r = role(user);
    ConnectOptions::new()
        .user_and_password(r.user.into(), r.password.into())
        .custom_inbox_prefix(format!("_INBOX.{user}"))
        .request_timeout(Some(Duration::from_secs(2)))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect as {user} to {url}: {e}"))
}

/// The subjects of the messages `sub` has received so far (without waiting
/// for more than `quiet` after the last one).
async fn received(sub: &mut async_nats::Subscriber, quiet: Duration) -> Vec<String> {
    let mut subjects = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout(quiet, sub.next()).await {
        subjects.push(msg.subject.to_string());
    }
    subjects
}

/// Starts a three-node cluster with Swarm's streams, then a fourth node
/// with `route_password` (or none) routing to it, and proves the cluster
/// refuses it.
async fn outsider_is_refused(route_password: Option<&str>) {
    let nats = NatsCluster::start(3).unwrap();
    // Swarm's streams and buckets, three replicas each, as the roles make them.
    let admin = connect(&nats.nodes()[0].url(), "admin").await;
    Infra::ensure(&admin, 3).await.unwrap();
    let boss = connect(&nats.nodes()[0].url(), "boss").await;
    let cluster_names: Vec<&str> = nats.nodes().iter().map(NatsNode::name).collect();

    // A subscriber on node 0, and proof that it hears node 2's publishers:
    // the cluster's routes carry messages, so silence below means refusal.
    let listener = connect(&nats.nodes()[0].url(), "client").await;
    let mut heard = listener.subscribe("a2ap.*.*.*").await.unwrap();
    listener.flush().await.unwrap();
    let insider = connect(&nats.nodes()[2].url(), "worker").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        insider
            .publish("a2ap.genuine.result.t1", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        insider.flush().await.unwrap();
        if !received(&mut heard, Duration::from_millis(300))
            .await
            .is_empty()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node 0 never heard node 2: the cluster's own routes do not work"
        );
    }

    let name = match route_password {
        Some(_) => "outsider-wrong-password",
        None => "outsider-no-credentials",
    };
    let mut outsider = nats.start_outsider(name, route_password).unwrap();
    let outsider_id = monitor(&outsider, "/varz")["server_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // It tries its routes and the cluster turns them away: wait for both
    // sides to say so, checking all along that no node let it in.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert_no_route_to(&nats, &outsider, &outsider_id);
        let refused_here = outsider
            .process()
            .log_tail(200)
            .contains("Authorization Violation");
        let refused_there = nats
            .log_tails(100_000)
            .lines()
            .any(|l| l.contains("rid:") && l.contains("authentication error"));
        if refused_here && refused_there {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no refused route seen (outsider: {refused_here}, cluster: {refused_there}):\n{}\n==> {name} <==\n{}",
            nats.log_tails(30),
            outsider.process().log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // It keeps trying; it keeps being refused.
    let until = Instant::now() + WATCH;
    while Instant::now() < until {
        assert_no_route_to(&nats, &outsider, &outsider_id);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for node in nats.nodes() {
        let meta = &monitor(node, "/jsz")["meta_cluster"];
        assert_eq!(meta["cluster_size"], 3, "{}: {meta}", node.name());
        let leader = meta["leader"].as_str().unwrap_or_default();
        assert!(
            cluster_names.contains(&leader),
            "{}: the meta leader is {leader:?}",
            node.name()
        );
    }

    // Messages do not cross: not a result injected on the outsider into the
    // cluster, not the cluster's traffic out to the outsider.
    let outsider_url = outsider.url();
    let injector = connect(&outsider_url, "worker").await;
    let eavesdropper = connect(&outsider_url, "client").await;
    let mut overheard = eavesdropper.subscribe("a2ap.*.*.*").await.unwrap();
    eavesdropper.flush().await.unwrap();
    for _ in 0..5 {
        injector
            .publish("a2ap.injected.result.t1", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        insider
            .publish("a2ap.genuine.result.t2", Bytes::from_static(b"{}"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    injector.flush().await.unwrap();
    insider.flush().await.unwrap();
    let in_cluster = received(&mut heard, Duration::from_millis(500)).await;
    assert!(
        in_cluster.iter().any(|s| s == "a2ap.genuine.result.t2"),
        "the cluster's subscriber stopped hearing the cluster: {in_cluster:?}"
    );
    assert!(
        !in_cluster.iter().any(|s| s.contains("injected")),
        "the outsider injected into the cluster: {in_cluster:?}"
    );
    let outside = received(&mut overheard, Duration::from_millis(500)).await;
    assert!(
        !outside.iter().any(|s| s.contains("genuine")),
        "the outsider received the cluster's messages: {outside:?}"
    );

    // Its JetStream has no meta leader and serves none of Swarm's streams,
    // which the cluster does.
    let (health, body) = http_get(outsider.monitor_addr(), "/healthz").unwrap();
    assert_ne!(health, 200, "the outsider's JetStream is healthy: {body}");
    let meta = &monitor(&outsider, "/jsz")["meta_cluster"];
    assert!(
        meta["leader"].as_str().unwrap_or_default().is_empty(),
        "the outsider has a meta leader: {meta}"
    );
    let outsider_js = async_nats::jetstream::new(connect(&outsider_url, "boss").await);
    let cluster_js = async_nats::jetstream::new(boss.clone());
    for stream in [
        subjects::A2AP_STREAM,
        subjects::MISSIONS_STREAM,
        "KV_swarms",
    ] {
        assert!(
            outsider_js.get_stream(stream).await.is_err(),
            "the outsider serves {stream}"
        );
        let info = cluster_js
            .get_stream(stream)
            .await
            .unwrap()
            .cached_info()
            .clone();
        let cluster = info.cluster.unwrap();
        let mut members: Vec<String> = cluster.replicas.iter().map(|r| r.name.clone()).collect();
        members.extend(cluster.leader);
        assert!(
            members.iter().all(|m| cluster_names.contains(&m.as_str())),
            "{stream} is kept by {members:?}"
        );
    }

    // Nothing shows the route password: not the monitoring pages (which
    // the NetworkPolicy opens to the whole Kubernetes cluster), not the logs.
    for node in nats.nodes().iter().chain([&outsider]) {
        for path in ["/varz", "/routez", "/jsz"] {
            let (_, body) = http_get(node.monitor_addr(), path).unwrap();
            assert!(
                !body.contains(ROUTE_PASSWORD),
                "{} {path} shows the route password",
                node.name()
            );
        }
    }
    let logs = format!(
        "{}{}",
        nats.log_tails(100_000),
        outsider.process().log_tail(100_000)
    );
    // The test harness heads each log with the command it ran, `--routes`
    // and all; the server's own lines are what a pod's log would hold.
    let leaks: Vec<&str> = logs
        .lines()
        .filter(|l| !l.starts_with("=== swarm: starting") && l.contains(ROUTE_PASSWORD))
        .collect();
    assert!(
        leaks.is_empty(),
        "a log shows the route password: {leaks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_no_route_credentials_cannot_join_the_cluster() {
    outsider_is_refused(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_wrong_route_password_cannot_join_the_cluster() {
    outsider_is_refused(Some("not-the-route-password")).await;
}
