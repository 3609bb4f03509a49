//! The test nats-server: a current version, JetStream on disk, kill and restart.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use swarm_testkit::NatsServer;

/// Whether a `MAJOR.MINOR.PATCH[-suffix]` version is at least `major.minor`.
fn at_least(version: &str, major: u64, minor: u64) -> bool {
    let mut parts = version
        .split(['.', '-'])
        .map(|p| p.parse::<u64>().unwrap_or(0));
    let (v_major, v_minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (v_major, v_minor) >= (major, minor)
}

#[test]
fn version_comparison() {
    assert!(at_least("2.12.8", 2, 11));
    assert!(at_least("2.11.0-RC.1", 2, 11));
    assert!(at_least("3.0.0", 2, 11));
    assert!(!at_least("2.9.10", 2, 11));
    assert!(!at_least("2.10.99", 2, 11));
}

#[tokio::test]
async fn jetstream_messages_survive_a_killed_server() {
    let mut server = NatsServer::start().unwrap();
    let client = server.client().await;
    let version = client.server_info().version;
    assert!(
        at_least(&version, 2, 12),
        "nats-server {version} is older than 2.12"
    );

    let js = jetstream::new(client.clone());
    js.create_stream(stream::Config {
        name: "TESTKIT".into(),
        subjects: vec!["testkit.>".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
    let ack = js
        .publish("testkit.kept", "survives".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ack.sequence, 1);

    server.kill();
    server.restart().unwrap();

    let fresh = server.client().await;
    let stream = jetstream::new(fresh).get_stream("TESTKIT").await.unwrap();
    let message = stream.get_raw_message(1).await.unwrap();
    assert_eq!(message.subject.as_str(), "testkit.kept");
    assert_eq!(message.payload, "survives");

    // The first client reconnects by itself to the restarted server.
    let reconnected = tokio::time::timeout(Duration::from_secs(15), async {
        while client.connection_state() != async_nats::connection::State::Connected {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(reconnected.is_ok(), "{}", server.log_tail(20));
    let reply = jetstream::new(client).get_stream("TESTKIT").await;
    assert!(reply.is_ok(), "{reply:?}");
}

#[tokio::test]
async fn servers_run_side_by_side() {
    let a = NatsServer::start().unwrap();
    let b = NatsServer::start().unwrap();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    let (ca, cb) = (a.client().await, b.client().await);
    ca.flush().await.unwrap();
    cb.flush().await.unwrap();
    let dir = a.dir().to_path_buf();
    drop(a);
    assert!(!dir.exists() || std::env::var_os("SWARM_KEEP_TEST_DIRS").is_some());
}
