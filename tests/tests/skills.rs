//! Skills that bubble up, whole system: in one mission a worker's model
//! records a skill (`record_skill`) and its task passes, so the skill's
//! score rises; the next mission's task that fits it is offered the skill
//! in its system prompt, fails its gate, and the score falls.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use async_nats::jetstream;
use serde_json::json;
use swarm_common::gates::GateSpec;
use swarm_common::skill::{self, LearnedSkill};
use swarm_common::{SwarmStatus, subjects};
use swarm_testkit::{Cluster, Match, MockLlm, Reply, Rule};

const WAIT: Duration = Duration::from_secs(60);
const HOW_TO: &str = "Read the header row first, then total each column of the CSV.";

async fn stored(nc: &async_nats::Client, key: &str) -> Option<LearnedSkill> {
    let kv = jetstream::new(nc.clone())
        .get_key_value(subjects::SKILLS_BUCKET)
        .await
        .unwrap();
    let value = kv.get(key).await.unwrap()?;
    Some(serde_json::from_slice(&value).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_recorded_in_one_mission_is_offered_in_the_next_and_scored_by_its_gates() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("first", Match::new().any_message_contains("sales.csv"))
            .reply(Reply::tool_call(
                "record_skill",
                json!({"name": "Summarise a CSV by column", "how_to": HOW_TO}),
            ))
            .then_always(Reply::text("totals: 42")),
    );
    llm.add(
        Rule::new("second", Match::new().any_message_contains("costs.csv"))
            .then_always(Reply::text("no totals")),
    );
    let mut builder = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .env("SWARM_WORKER_PROVIDER", "openai");
    for (k, v) in llm.openai_env("gpt-4o-mini") {
        if k != "SWARM_PROVIDER" {
            builder = builder.env(k, v);
        }
    }
    let cluster = builder.start().await.expect("the cluster starts");
    let nc = cluster.client().await;
    let report = |id: String| {
        let nc = nc.clone();
        async move {
            swarm_client::client::watch(&nc, &id, WAIT, |_| {})
                .await
                .unwrap_or_else(|e| panic!("{e:#}"))
        }
    };

    let first = common::submit(
        &nc,
        &common::mission(
            "sales",
            vec![common::task(
                "t1",
                "Summarise the columns of sales.csv.",
                &[],
            )],
        ),
    )
    .await;
    let r = report(first).await;
    assert_eq!(
        r.overall_status,
        SwarmStatus::Completed,
        "{r:#?}\n{}",
        llm.describe_requests()
    );
    let key = skill::key(skill::DEFAULT_SCOPE, "Summarise a CSV by column");
    let learned = stored(&nc, &key).await.expect("the skill is kept");
    assert_eq!(learned.how_to, HOW_TO);
    assert_eq!(learned.task_id, "t1");
    assert_eq!(
        (learned.score, learned.passes),
        (skill::INITIAL_SCORE + skill::PASS_GAIN, 1),
        "a skill whose task passed rises"
    );
    // The control: the first mission had nothing to be offered.
    let firsts = llm.requests_for("first");
    assert!(
        !firsts[0].system().contains("Skills learned"),
        "{}",
        firsts[0].system()
    );

    let mut task = common::task("t1", "Summarise the columns of costs.csv.", &[]);
    task.gates = vec![GateSpec::Regex {
        pattern: "^total".into(),
        forbid: false,
        description: Some("starts with the totals".into()),
    }];
    let second = common::submit(&nc, &common::mission("costs", vec![task])).await;
    let r = report(second).await;
    assert_eq!(r.overall_status, SwarmStatus::Failed, "{r:#?}");
    let seconds = llm.requests_for("second");
    assert!(!seconds.is_empty());
    let system = seconds[0].system();
    assert!(
        system.contains("Skills learned") && system.contains(HOW_TO),
        "the fitting skill is in the next mission's prompt: {system}"
    );
    let after = stored(&nc, &key).await.expect("still kept");
    assert!(after.fails >= 1, "{after:?}");
    assert!(
        after.score < learned.score,
        "a skill whose task failed its gate falls: {} then {}",
        learned.score,
        after.score
    );
    cluster.stop(Duration::from_secs(5)).await;
}
