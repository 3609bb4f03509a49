//! The ground the partitioned managers stand on (issue 28), against a real
//! nats-server: a stream's `{{partition(n,1)}}` subject transform stores
//! each swarm's messages under the partition `subjects::partition` names,
//! and a consumer filtered on one partition's token sees exactly the swarms
//! of that partition, every one of their messages in order.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use async_nats::jetstream::{
    self,
    consumer::{AckPolicy, pull},
    stream::{self, SubjectTransform},
};
use futures::StreamExt;
use swarm_common::subjects;
use swarm_testkit::NatsServer;

const PARTITIONS: u32 = 8;
const SWARMS: usize = 64;

/// A scratch stream shaped like A2AP, whose stored subjects carry the
/// swarm's partition as their third token.
async fn partitioned(js: &jetstream::Context) -> stream::Stream {
    js.create_stream(stream::Config {
        name: "PARTS".into(),
        subjects: vec!["parts.*.>".into()],
        subject_transform: Some(SubjectTransform {
            source: "parts.*.>".into(),
            destination: format!("parts.{{{{wildcard(1)}}}}.{{{{partition({PARTITIONS},1)}}}}.>"),
        }),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A server, its JetStream context and the scratch stream.
async fn setup() -> (NatsServer, jetstream::Context, stream::Stream) {
    let nats = NatsServer::start().unwrap();
    let js = jetstream::new(nats.client().await);
    let stream = partitioned(&js).await;
    (nats, js, stream)
}

/// Stores a result of each task `t0` to `t<rounds - 1>` of every swarm, one round
/// of all swarms after another, each confirmed by the server.
async fn store_results(js: &jetstream::Context, ids: &[String], rounds: usize) {
    for step in 0..rounds {
        for id in ids {
            let ack = js.publish(format!("parts.{id}.result.t{step}"), "r".into());
            ack.await.unwrap().await.unwrap();
        }
    }
}

/// The swarm ids of the test: plain, with dashes and underscores, and the
/// uuids the boss gives missions that name no id.
fn swarm_ids() -> Vec<String> {
    (0..SWARMS)
        .map(|i| match i % 3 {
            0 => format!("s{i}"),
            1 => format!("swarm-{i}-x_y"),
            _ => uuid::Uuid::new_v4().to_string(),
        })
        .collect()
}

#[tokio::test]
async fn the_server_stores_each_swarm_in_the_partition_swarm_common_computes() {
    let (_nats, js, stream) = setup().await;
    let ids = swarm_ids();
    store_results(&js, &ids, 1).await;
    let mut seen = HashSet::new();
    for (n, id) in ids.iter().enumerate() {
        let stored = stream.get_raw_message(n as u64 + 1).await.unwrap();
        let want = format!(
            "parts.{id}.{}.result.t0",
            subjects::partition(id, PARTITIONS)
        );
        assert_eq!(stored.subject.as_str(), want, "swarm {id}");
        seen.insert(subjects::partition(id, PARTITIONS));
    }
    assert!(
        seen.len() > PARTITIONS as usize / 2,
        "the swarms spread: {seen:?}"
    );
}

#[tokio::test]
async fn a_consumer_of_one_partition_gets_that_partitions_swarms_and_nothing_else() {
    let (_nats, js, stream) = setup().await;
    let ids = swarm_ids();
    // Three events per swarm, interleaved across swarms as a running
    // system would store them.
    store_results(&js, &ids, 3).await;
    let mut union = 0;
    for p in 0..PARTITIONS {
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(format!("manager-p{p}")),
                filter_subjects: vec![
                    format!("parts.*.{p}.result.*"),
                    format!("parts.*.{p}.deploy"),
                ],
                ack_policy: AckPolicy::Explicit,
                ..Default::default()
            })
            .await
            .unwrap();
        let want: Vec<&String> = ids
            .iter()
            .filter(|id| subjects::partition(id, PARTITIONS) == p)
            .collect();
        let mut batch = consumer
            .fetch()
            .max_messages(3 * SWARMS)
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .unwrap();
        let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
        while let Some(msg) = batch.next().await {
            let msg = msg.unwrap();
            let tokens: Vec<&str> = msg.subject.split('.').collect();
            assert_eq!(tokens[2], p.to_string(), "{}", msg.subject);
            got.entry(tokens[1].to_owned())
                .or_default()
                .push(tokens[4].to_owned());
            msg.ack().await.unwrap();
        }
        assert_eq!(got.len(), want.len(), "partition {p}: {got:?}");
        for id in want {
            assert_eq!(got[id.as_str()], ["t0", "t1", "t2"], "swarm {id}: in order");
        }
        union += got.len();
    }
    assert_eq!(union, SWARMS, "every swarm in one partition");
}
