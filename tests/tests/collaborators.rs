//! Collaborators end to end (`swarm_common::collaborate`): a worker's agent
//! asks another persona of its plan for help with `ask_collaborator`, the
//! manager turns the ask into a task for that persona, and the answer comes
//! back to the asking agent loop as the tool's result; a worker killed
//! while it waits for the answer neither loses nor repeats the exchange;
//! an ask without its assignment's token is set aside.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use serde_json::json;
use swarm_common::mission::MissionRequest;
use swarm_common::{
    Codec, CollaborationRequest, DeadLetter, Envelope, ErrorCode, FinalReport, ResultSubmission,
    SwarmStatus, TaskStatus, WorkerDeploymentPlan, subjects,
};
use swarm_testkit::{Cluster, ClusterBuilder, Match, MockLlm, Reply, Rule};

const MODEL: &str = "gpt-4o-mini";
/// The asking persona's prompt, which only its requests carry.
const ASKER: &str = "You are Ada, who writes the answer.";
/// The collaborator's prompt.
const HELPER: &str = "You are Bea, who does the arithmetic.";
/// What the asking agent asks.
const REQUEST: &str = "What is six times seven? Answer with the number.";
/// What the collaborator answers.
const ANSWER: &str = "forty-two (42)";

fn persona(name: &str, prompt: &str, collaborators: &[&str], pool: &str) -> WorkerDeploymentPlan {
    WorkerDeploymentPlan {
        name: name.into(),
        role: if name == "bea" {
            "arithmetic".into()
        } else {
            "writing".into()
        },
        system_prompt: prompt.into(),
        tools: vec![],
        collaborators: collaborators.iter().map(|c| c.to_string()).collect(),
        pool: pool.into(),
        a2a_url: None,
        a2a_credential: None,
        skill: None,
    }
}

/// One task, `a`, for persona `ada`, who may ask `bea` (in `helper_pool`).
fn mission(asker_pool: &str, helper_pool: &str) -> MissionRequest {
    let mut m = common::mission(
        "Say what six times seven is",
        vec![common::task(
            "a",
            "Write down what six times seven is.",
            &[],
        )],
    );
    let plan = m.plan.as_mut().unwrap();
    plan.workers = vec![
        persona("ada", ASKER, &["bea"], asker_pool),
        persona("bea", HELPER, &[], helper_pool),
    ];
    plan.tasks[0].assigned_to = "ada".into();
    m
}

/// The scripted model: Ada asks Bea once, Bea answers, Ada writes the
/// answer with Bea's words once the tool's result is in her conversation.
fn script(llm: &MockLlm, helper_delay: Duration) {
    llm.add(
        Rule::new(
            "ada-final",
            Match::new()
                .system_contains(ASKER)
                .any_message_contains(ANSWER),
        )
        .then_always(Reply::text(format!(
            "Six times seven is {ANSWER}, says Bea."
        ))),
    );
    llm.add(
        Rule::new("ada-asks", Match::new().system_contains(ASKER)).then_always(Reply::tool_call(
            "ask_collaborator",
            json!({"name": "bea", "request": REQUEST}),
        )),
    );
    llm.add(
        Rule::new("bea", Match::new().system_contains(HELPER))
            .then_always(Reply::text(ANSWER).after(helper_delay)),
    );
}

/// A cluster whose workers ask `llm` (the boss and manager stay offline).
fn builder(llm: &MockLlm) -> ClusterBuilder {
    let mut b = Cluster::builder().bosses(1).managers(1);
    for (k, v) in llm.openai_env(MODEL) {
        b = if k == "SWARM_PROVIDER" {
            b.env("SWARM_WORKER_PROVIDER", v)
        } else {
            b.env(k, v)
        };
    }
    b
}

async fn report(
    cluster: &Cluster,
    llm: &MockLlm,
    nc: &async_nats::Client,
    id: &str,
) -> FinalReport {
    match swarm_client::client::watch(nc, id, Duration::from_secs(90), |_| {}).await {
        Ok(r) => r,
        Err(e) => panic!(
            "{e:#}\n--- model requests ---\n{}\n{}",
            llm.describe_requests(),
            cluster.log_tails()
        ),
    }
}

/// What a finished exchange shows: the mission completed, one task for
/// Bea asked by `a`, Ada's answer built on Bea's, Bea asked once.
fn assert_one_exchange(report: &FinalReport, llm: &MockLlm) {
    assert_eq!(
        report.overall_status,
        SwarmStatus::Completed,
        "{report:#?}\n{}",
        llm.describe_requests()
    );
    assert_eq!(report.task_results.len(), 2, "{report:#?}");
    let a = common::outcome(report, "a");
    assert!(a.result.contains(ANSWER), "{a:?}");
    let helper = common::outcome(report, "a-ask1");
    assert_eq!(helper.asked_by.as_deref(), Some("a"));
    assert_eq!(helper.assigned_to, "bea");
    assert_eq!(helper.status, TaskStatus::Completed);
    assert_eq!(helper.result, ANSWER);
    assert_eq!(helper.description, REQUEST, "the request is Bea's task");
    let bea = llm.requests_for("bea");
    assert_eq!(bea.len(), 1, "{}", llm.describe_requests());
    assert!(bea[0].contains(REQUEST));
    assert!(
        !bea[0].tool_names().iter().any(|t| t == "ask_collaborator"),
        "a persona without collaborators is not offered the tool"
    );
    let finals = llm.requests_for("ada-final");
    assert_eq!(finals.len(), 1, "{}", llm.describe_requests());
    let results = finals[0].tool_results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].1, ANSWER, "Bea's answer is the tool's result");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_asks_a_collaborator_and_uses_the_answer() {
    let llm = MockLlm::start().await;
    script(&llm, Duration::ZERO);
    let cluster = builder(&llm).workers(1).start().await.unwrap();
    let nc = cluster.client().await;
    let id = common::submit(&nc, &mission("general", "general")).await;
    let report = report(&cluster, &llm, &nc, &id).await;
    assert_one_exchange(&report, &llm);
    let asks = llm.requests_for("ada-asks");
    assert_eq!(asks.len(), 1, "{}", llm.describe_requests());
    let offered = serde_json::to_string(&asks[0].body).unwrap();
    assert!(
        offered.contains("ask_collaborator") && offered.contains("bea (arithmetic)"),
        "the tool names who may be asked: {offered}"
    );
    let state = common::state(&nc, &id).await;
    assert_eq!(state.task("a").unwrap().asks.len(), 1);
    assert_eq!(
        common::messages::<CollaborationRequest>(&nc, &subjects::ask(&id, "a"))
            .await
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_while_it_waits_for_the_answer_neither_loses_nor_repeats_it() {
    let llm = MockLlm::start().await;
    // Bea takes her time: the asking worker is killed while she works.
    script(&llm, Duration::from_secs(2));
    let mut cluster = builder(&llm)
        .env("SWARM_MANAGER_ACK_WAIT", "2")
        .env("SWARM_WORKER_ACK_WAIT", "3")
        .workers(1)
        .start()
        .await
        .unwrap();
    // Bea's pool has a worker of its own, which lives on.
    cluster
        .local_mut()
        .spawn_worker(&["--pool", "helpers"])
        .unwrap();
    let nc = cluster.client().await;
    let id = common::submit(&nc, &mission("general", "helpers")).await;

    // Once the manager has recorded the ask, Ada's worker waits for Bea.
    common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(20),
        "the ask recorded",
        || async {
            let state = swarm_client::client::state(&nc, &id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no state yet".to_string())?;
            state
                .task("a-ask1")
                .map(|_| ())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    let asker = &mut cluster.local_mut().workers[0];
    assert_eq!(asker.name(), "worker-1");
    asker.kill();
    // Bea answers while Ada's worker is dead.
    let state = common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(50),
        "Bea's answer",
        || async {
            let state = common::state(&nc, &id).await;
            match state.task("a-ask1").unwrap().status {
                TaskStatus::Completed => Ok(state),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(state.task("a").unwrap().status, TaskStatus::Assigned);
    cluster.local_mut().workers[0].restart().unwrap();

    let report = report(&cluster, &llm, &nc, &id).await;
    assert_one_exchange(&report, &llm);
    // Ada's first reply came from the journal: her model was asked once to
    // call the tool, and once more, with the answer.
    assert_eq!(
        llm.requests_for("ada-asks").len(),
        1,
        "{}",
        llm.describe_requests()
    );
    let state = common::state(&nc, &id).await;
    let a = state.task("a").unwrap();
    assert_eq!(a.asks.len(), 1, "{:?}", a.asks);
    assert_eq!(a.redeliveries, 1, "the state counts the redelivery");
    // The ask sent again after the restart landed once.
    let asks = common::messages::<CollaborationRequest>(&nc, &subjects::ask(&id, "a")).await;
    assert_eq!(asks.len(), 1);
    let results = common::messages::<ResultSubmission>(&nc, &subjects::result(&id, "a")).await;
    assert_eq!(results.len(), 1, "the killed run submitted nothing");
    let replayed = results[0].body.metrics.get("journal_replayed").copied();
    assert!(
        replayed >= Some(1.0),
        "Ada's first reply was replayed: {replayed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_without_its_assignments_token_is_set_aside() {
    let cluster = Cluster::builder()
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    // No worker serves the personas' pool: the test plays the asking worker.
    let id = common::submit(&nc, &mission("nobody", "nobody")).await;
    let js = jetstream::new(nc.clone());
    let ask = |token: String, n: u32| {
        Envelope::new(
            "test-worker",
            "manager",
            id.as_str(),
            "a",
            CollaborationRequest {
                task_id: "a".into(),
                attempt: 1,
                revision: 0,
                ask: n,
                collaborator: "bea".into(),
                request: REQUEST.into(),
                token,
            },
        )
    };
    let subject = subjects::ask(&id, "a");
    swarm_runtime::wire::publish(&js, subject.clone(), &ask("forged".into(), 1), None)
        .await
        .unwrap();
    let letter = tokio::time::timeout(Duration::from_secs(20), async {
        let stream = js.get_stream(subjects::DEADLETTER_STREAM).await.unwrap();
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: subjects::deadletter("manager"),
                ..Default::default()
            })
            .await
            .unwrap();
        let m = consumer
            .messages()
            .await
            .unwrap()
            .next()
            .await
            .unwrap()
            .unwrap();
        Codec::MsgPack.decode::<DeadLetter>(&m.payload).unwrap()
    })
    .await
    .unwrap_or_else(|_| panic!("no dead letter\n{}", cluster.log_tails()));
    assert_eq!(letter.subject, subject);
    assert_eq!(letter.reason.code, ErrorCode::AuthorizationDenied);
    // The first state write may be deferred a moment after the deployment.
    let state = common::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        "the swarm's state stored",
        || async {
            swarm_client::client::state(&nc, &id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    assert!(state.task("a").unwrap().asks.is_empty());
    assert!(state.task("a-ask1").is_none());

    // The holder's ask, with the token, adds Bea's task.
    let real = common::token(&id, "a", 1, 0);
    swarm_runtime::wire::publish(&js, subject, &ask(real, 1), None)
        .await
        .unwrap();
    let helper = common::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        "Bea's task",
        || async {
            common::state(&nc, &id)
                .await
                .task("a-ask1")
                .cloned()
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    assert_eq!(helper.asked_by.as_deref(), Some("a"));
    assert_eq!(helper.status, TaskStatus::Assigned);
    assert_eq!(helper.definition.assigned_to, "bea");
}
