//! The wire helpers against a real nats-server: a message posted without
//! asking for the server's answer (`wire::Posted`, how the manager sends a
//! chain's next assignment) is stored exactly once once it is confirmed,
//! whether its first send landed or was lost.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use async_nats::jetstream;
use swarm_common::{Envelope, ErrorBody, ErrorCode, ErrorMessage, subjects};
use swarm_runtime::{Infra, wire::Posted};
use swarm_testkit::NatsServer;

/// An `Error` message of task `task_id` in swarm `swarm_id`, posted on its
/// subject with the deduplication id `msg_id`; not sent yet.
fn posted(swarm_id: &str, task_id: &str, msg_id: &str) -> Posted {
    let env = Envelope::new(
        "worker-1",
        "manager",
        swarm_id,
        task_id,
        ErrorMessage {
            token: String::new(),
            task_id: Some(task_id.into()),
            attempt: Some(1),
            error: ErrorBody::new(ErrorCode::Internal, format!("{task_id} failed")),
        },
    );
    Posted::new(subjects::error(swarm_id), &env, msg_id).unwrap()
}

/// The server, a client and its JetStream context, with Swarm's streams.
async fn setup() -> (NatsServer, async_nats::Client, jetstream::Context) {
    let nats = NatsServer::start().unwrap();
    let nc = nats.client().await;
    Infra::ensure(&nc, 1).await.unwrap();
    let js = jetstream::new(nc.clone());
    (nats, nc, js)
}

#[tokio::test]
async fn a_posted_message_that_landed_is_not_stored_again_by_its_confirmation() {
    let (_nats, nc, js) = setup().await;
    let p = posted("s-landed", "t1", "s-landed.t1.a1.r0.test");
    p.send(&js).await.unwrap();
    let ack = p.confirm(&js).await.unwrap().await.unwrap();
    assert!(
        ack.duplicate,
        "the confirmation found the first send stored"
    );
    let stored = common::messages::<ErrorMessage>(&nc, &subjects::error("s-landed")).await;
    assert_eq!(stored.len(), 1, "stored once");
    assert_eq!(stored[0].body.error.message, "t1 failed");
}

#[tokio::test]
async fn a_posted_message_whose_send_was_lost_is_stored_by_its_confirmation() {
    let (_nats, nc, js) = setup().await;
    // Never sent: as if the connection dropped it.
    let p = posted("s-lost", "t1", "s-lost.t1.a1.r0.test");
    let subject = subjects::error("s-lost");
    assert!(
        common::messages::<ErrorMessage>(&nc, &subject)
            .await
            .is_empty()
    );
    let ack = p.confirm(&js).await.unwrap().await.unwrap();
    assert!(!ack.duplicate, "the confirmation stored it");
    // Confirmed twice (a write that failed after confirming, then again):
    // still once.
    let again = p.confirm(&js).await.unwrap().await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.sequence, ack.sequence);
    let stored = common::messages::<ErrorMessage>(&nc, &subject).await;
    assert_eq!(stored.len(), 1, "stored once");
}
