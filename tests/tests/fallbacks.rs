//! A task that fails for good, end to end: the plan's fallback runs in its
//! place (offline provider), or, with no fallback, the manager's model adds
//! tasks to the running graph (a scripted model); the tasks after it get the
//! stand-in's result, and the report says what failed and what stood in.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use serde_json::json;
use swarm_common::{SwarmStatus, TaskDefinition, TaskStatus};
use swarm_testkit::{Cluster, Match, MockLlm, Reply, Rule};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_is_replaced_by_its_fallback_and_the_mission_goes_on() {
    let ws = tempfile::tempdir().unwrap();
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .workspace(ws.path())
        .start()
        .await
        .expect("the cluster starts");
    let nc = cluster.client().await;
    let read_missing = common::tool("read_file", serde_json::json!({"path": "missing.txt"}));
    let mission = common::mission(
        "read the data, or its mirror",
        vec![
            TaskDefinition {
                on_failure: Some("mirror".into()),
                ..common::task("read", &read_missing, &[])
            },
            common::task("mirror", &common::echo("from the mirror"), &[]),
            common::task("use", &common::echo("used"), &["read"]),
        ],
    );
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 120).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let read = common::outcome(&report, "read");
    assert_eq!(
        read.status,
        TaskStatus::Failed,
        "the failure stays on record"
    );
    assert!(
        read.error.as_deref().unwrap().contains("missing.txt"),
        "{read:#?}"
    );
    let mirror = common::outcome(&report, "mirror");
    assert_eq!(mirror.status, TaskStatus::Completed);
    assert_eq!(mirror.result, "from the mirror");
    assert_eq!(
        common::outcome(&report, "use").status,
        TaskStatus::Completed
    );
    assert!(
        report.insights.iter().any(|i| i.starts_with("read failed")
            && i.contains("its fallback mirror completed in its place")),
        "{:#?}",
        report.insights
    );
    let state = common::state(&nc, &id).await;
    let use_ = common::messages::<swarm_common::TaskAssignment>(
        &nc,
        &swarm_common::subjects::work("general", &id, "use"),
    )
    .await;
    assert_eq!(use_[0].body.context[0].task_id, "mirror", "{:#?}", state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_managers_model_adds_tasks_when_one_fails_and_they_complete_the_mission() {
    let llm = MockLlm::start().await;
    let stand_in = common::echo("from the archive");
    llm.add(
        Rule::new(
            "replanner",
            Match::new().system_contains("has failed for good"),
        )
        .reply(Reply::json_text(&json!({
            "reason": "The file is gone; the archive has a copy.",
            "tasks": [{
                "task_id": "archive",
                "title": "Read the archive",
                "description": stand_in,
                "assigned_to": "w",
            }],
            "replaces": "archive",
        }))),
    );
    llm.add(
        Rule::new(
            "reviewer",
            Match::new().system_contains("reviewing a worker's result"),
        )
        .then_always(Reply::json_text(&json!({"approved": true, "feedback": ""}))),
    );
    llm.add(
        Rule::new(
            "summarizer",
            Match::new().system_contains("final report of a Swarm mission"),
        )
        .then_always(Reply::json_text(&json!({
            "summary": "The archive stood in for the missing file.",
            "insights": []
        }))),
    );
    let ws = tempfile::tempdir().unwrap();
    let mut builder = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .workspace(ws.path());
    for (k, v) in llm.openai_env("gpt-4o-mini") {
        // Only the manager asks the model; the tasks are explicit tool calls.
        builder = builder.env(
            if k == "SWARM_PROVIDER" {
                "SWARM_MANAGER_PROVIDER".into()
            } else {
                k
            },
            v,
        );
    }
    let cluster = builder.start().await.expect("the cluster starts");
    let nc = cluster.client().await;
    let read_missing = common::tool("read_file", json!({"path": "missing.txt"}));
    let mission = common::mission(
        "read the data, then use it",
        vec![
            common::task("read", &read_missing, &[]),
            common::task("use", &common::echo("used"), &["read"]),
        ],
    );
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 120).await;

    assert_eq!(
        report.overall_status,
        SwarmStatus::Completed,
        "{report:#?}\n{}",
        llm.describe_requests()
    );
    assert_eq!(common::outcome(&report, "read").status, TaskStatus::Failed);
    let archive = common::outcome(&report, "archive");
    assert_eq!(archive.status, TaskStatus::Completed);
    assert_eq!(archive.result, "from the archive");
    assert_eq!(
        common::outcome(&report, "use").status,
        TaskStatus::Completed
    );
    assert_eq!(llm.requests_for("replanner").len(), 1, "asked once");
    let asked = &llm.requests_for("replanner")[0];
    assert!(
        asked.last_user_text().contains("missing.txt"),
        "the model is told why"
    );

    // The change is a message in the swarm's stream, and in its state and report.
    let replans = common::messages::<swarm_common::replan::Replan>(
        &nc,
        &swarm_common::subjects::replan(&id, "read"),
    )
    .await;
    assert_eq!(replans.len(), 1);
    assert_eq!(replans[0].body.replaces.as_deref(), Some("archive"));
    let state = common::state(&nc, &id).await;
    assert_eq!(state.changes.len(), 1);
    assert_eq!(state.changes[0].added, vec!["archive"]);
    assert!(
        report.insights.iter().any(|i| i.contains("added archive")),
        "{:#?}",
        report.insights
    );
    let use_ = common::messages::<swarm_common::TaskAssignment>(
        &nc,
        &swarm_common::subjects::work("general", &id, "use"),
    )
    .await;
    assert_eq!(use_[0].body.context[0].task_id, "archive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_of_a_finished_mission_adds_the_work_its_criteria_still_need() {
    let llm = MockLlm::start().await;
    let check = common::echo("checked against the source");
    llm.add(
        Rule::new(
            "mission review",
            Match::new().system_contains("Every one of its tasks has completed"),
        )
        .reply(Reply::json_text(&json!({
            "reason": "The criteria ask for a check, and none was made.",
            "tasks": [{
                "task_id": "check",
                "title": "Check the answer",
                "description": check,
                "assigned_to": "w",
                "dependencies": ["answer"],
            }],
        })))
        .then_always(Reply::json_text(
            &json!({"reason": "Checked; nothing more.", "tasks": []}),
        )),
    );
    llm.add(
        Rule::new(
            "reviewer",
            Match::new().system_contains("reviewing a worker's result"),
        )
        .then_always(Reply::json_text(&json!({"approved": true, "feedback": ""}))),
    );
    llm.add(
        Rule::new(
            "summarizer",
            Match::new().system_contains("final report of a Swarm mission"),
        )
        .then_always(Reply::json_text(
            &json!({"summary": "Answered and checked.", "insights": []}),
        )),
    );
    let ws = tempfile::tempdir().unwrap();
    let mut builder = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .workspace(ws.path());
    for (k, v) in llm.openai_env("gpt-4o-mini") {
        builder = builder.env(
            if k == "SWARM_PROVIDER" {
                "SWARM_MANAGER_PROVIDER".into()
            } else {
                k
            },
            v,
        );
    }
    let cluster = builder.start().await.expect("the cluster starts");
    let nc = cluster.client().await;
    let mut mission = common::mission(
        "answer, checked",
        vec![common::task("answer", &common::echo("42"), &[])],
    );
    mission.plan.as_mut().unwrap().success_criteria = vec!["the answer is checked".into()];
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 120).await;

    assert_eq!(
        report.overall_status,
        SwarmStatus::Completed,
        "{report:#?}\n{}",
        llm.describe_requests()
    );
    assert_eq!(
        common::outcome(&report, "check").result,
        "checked against the source"
    );
    assert_eq!(
        llm.requests_for("mission review").len(),
        2,
        "reviewed after each last task"
    );
    assert!(
        llm.requests_for("mission review")[0]
            .last_user_text()
            .contains("the answer is checked"),
        "the model is given the criteria"
    );
    let state = common::state(&nc, &id).await;
    assert_eq!(state.changes.len(), 2);
    assert!(state.changes.iter().all(|c| c.review));
    assert!(
        report
            .insights
            .iter()
            .any(|i| i.contains("reviewing the finished mission") && i.contains("added check")),
        "{:#?}",
        report.insights
    );
}
