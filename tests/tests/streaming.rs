//! Streamed tokens, whole system: a worker whose model (the test kit's
//! server speaking Anthropic's event stream) writes its answer over a few
//! seconds; a watcher of the swarm sees the answer grow in several
//! progress updates before the task's result, and the result is the whole
//! answer, taken once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use swarm_client::client::Update;
use swarm_common::SwarmStatus;
use swarm_testkit::{Cluster, Match, MockLlm, Reply, Rule};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_reaches_a_watcher_as_it_is_written() {
    let answer = (1..=40)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let llm = MockLlm::start().await;
    // Two words an event, 20 events 100 ms apart: two seconds of writing.
    llm.add(
        Rule::new("chat", Match::new())
            .then_always(Reply::text(&answer).trickled(Duration::from_millis(100))),
    );
    let mut builder = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .env("SWARM_WORKER_PROVIDER", "anthropic");
    for (k, v) in llm.anthropic_env("claude-sonnet-4-5") {
        if k != "SWARM_PROVIDER" {
            builder = builder.env(k, v);
        }
    }
    let cluster = builder.start().await.expect("the cluster starts");
    let nc = cluster.client().await;
    let id = common::submit(
        &nc,
        &common::mission(
            "one long answer",
            vec![common::task("t1", "Write forty words.", &[])],
        ),
    )
    .await;

    let mut seen: Vec<Option<String>> = Vec::new();
    let report = swarm_client::client::watch(&nc, &id, WAIT, |u| match u {
        Update::Progress(p) if p.task_id == "t1" => seen.push(Some(p.message.clone())),
        Update::Result(r) if r.task_id == "t1" => seen.push(None),
        _ => {}
    })
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.log_tails()));
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let t1 = report
        .task_results
        .iter()
        .find(|t| t.task_id == "t1")
        .unwrap();
    assert_eq!(t1.result.trim(), answer);

    let result_at = seen
        .iter()
        .position(Option::is_none)
        .expect("the watcher saw the result");
    let written: Vec<&str> = seen[..result_at]
        .iter()
        .flatten()
        .filter_map(|m| m.strip_prefix("writing: "))
        .collect();
    assert!(
        written.len() >= 3,
        "the answer reached the watcher in {} updates before its result: {seen:?}",
        written.len()
    );
    // Each update shows more of the same answer, paced: 20 events made
    // far fewer than 20 updates.
    assert!(
        written
            .windows(2)
            .all(|w| w[1].len() > w[0].len() && w[1].starts_with(w[0])),
        "{written:?}"
    );
    assert!(answer.starts_with(written[0]), "{written:?}");
    assert!(
        written.len() < 20,
        "{} updates for 20 events",
        written.len()
    );
    // One model call, whole: the stream was not taken for several.
    assert_eq!(llm.requests().len(), 1, "{}", llm.describe_requests());
    cluster.stop(Duration::from_secs(5)).await;
}
