//! The fence a report published ahead of its state write relies on,
//! against a real nats-server: a publish expecting the last sequence of the
//! swarm's control subject lands only while no cancel or expiry was stored
//! there since.

#![allow(clippy::unwrap_used)] // tests report failure by panicking

use swarm_common::{Control, Envelope, subjects};
use swarm_runtime::{Infra, wire};
use swarm_testkit::NatsServer;

fn cancel(swarm_id: &str) -> Envelope<Control> {
    Envelope::new(
        "cli",
        "manager",
        swarm_id,
        swarm_id,
        Control::Cancel {
            reason: "enough".into(),
        },
    )
}

#[tokio::test]
async fn a_fenced_publish_lands_only_while_the_control_subject_is_where_it_was_seen() {
    let server = NatsServer::start().unwrap();
    let client = server.client().await;
    let infra = Infra::ensure(&client, 1).await.unwrap();
    let fenced = |swarm_id: &'static str, id: &'static str, seen: u64| {
        let js = infra.js.clone();
        async move {
            wire::publish_fenced(
                &js,
                subjects::report(swarm_id),
                &cancel(swarm_id),
                id,
                &subjects::control(swarm_id),
                seen,
            )
            .await
            .unwrap()
        }
    };

    // No control message yet: 0 is what was seen, and it lands.
    assert!(fenced("s1", "s1.report", 0).await.is_some());

    // A cancel stored since: the same expectation is refused ...
    let stored = wire::publish(&infra.js, subjects::control("s2"), &cancel("s2"), None)
        .await
        .unwrap();
    assert!(fenced("s2", "s2.report", 0).await.is_none());
    // ... and nothing was stored on the report's subject.
    let on_report = infra
        .js
        .get_stream(subjects::A2AP_STREAM)
        .await
        .unwrap()
        .get_last_raw_message_by_subject(&subjects::report("s2"))
        .await;
    assert!(on_report.is_err(), "a refused report was stored");
    // One that has seen the cancel lands.
    assert!(fenced("s2", "s2.report", stored.sequence).await.is_some());
    // Another swarm's control messages are no concern of this one's.
    assert!(fenced("s3", "s3.report", 0).await.is_some());
}
