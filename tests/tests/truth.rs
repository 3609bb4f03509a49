//! A swarm tells the truth: a task whose tool failed, whose path was
//! refused, or that no tool could do ends `Failed` with the reason after its
//! revisions; its dependents are `Cancelled`; the mission is `Failed`, and
//! the report's summary names the first task that failed and why. Run with
//! the real binaries and the offline provider.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use serde_json::json;
use swarm_common::{
    ErrorCode, FinalReport, ResultSubmission, SwarmStatus, TaskStatus, mission::MissionRequest,
    subjects,
};
use swarm_testkit::Cluster;

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha beta gamma\n").unwrap();
    dir
}

async fn cluster(ws: &tempfile::TempDir) -> Cluster {
    Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .workspace(ws.path())
        .start()
        .await
        .expect("the cluster starts")
}

/// Every result the workers submitted for `task_id`, in order.
async fn results(nc: &async_nats::Client, swarm_id: &str, task_id: &str) -> Vec<ResultSubmission> {
    common::messages::<ResultSubmission>(nc, &subjects::result(swarm_id, task_id))
        .await
        .into_iter()
        .map(|e| e.body)
        .collect()
}

fn assert_failed_first(report: &FinalReport, task_id: &str, reason: &str) {
    assert_eq!(report.overall_status, SwarmStatus::Failed, "{report:#?}");
    let t = common::outcome(report, task_id);
    assert_eq!(t.status, TaskStatus::Failed, "{t:#?}");
    let error = t.error.as_deref().unwrap_or_default();
    assert!(error.contains(reason), "{task_id}'s error: {error}");
    assert!(t.result.is_empty(), "a failed task has no result: {t:#?}");
    assert!(
        report
            .summary
            .starts_with(&format!("The mission failed: task {task_id} (")),
        "{}",
        report.summary
    );
    assert!(report.summary.contains(reason), "{}", report.summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_tool_fails_fails_after_its_revisions_and_cancels_its_dependents() {
    let ws = workspace();
    let cluster = cluster(&ws).await;
    let nc = cluster.client().await;
    let mission = common::mission(
        "count a file that is not there, then checksum the count",
        vec![
            common::task("count", "Count the words in NOPE.md", &[]),
            common::task("sum", "checksum the previous result", &["count"]),
            common::task("ok", &common::echo("independent work"), &[]),
        ],
    );
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;

    assert_failed_first(&report, "count", "`count` on NOPE.md failed: NOPE.md");
    let count = common::outcome(&report, "count");
    let revisions = swarm_common::Limits::default().max_revisions;
    assert_eq!(count.revisions, revisions, "revised like a failed gate");
    let sum = common::outcome(&report, "sum");
    assert_eq!(sum.status, TaskStatus::Cancelled);
    assert_eq!(
        sum.error.as_deref(),
        Some("not run: dependency count did not complete")
    );
    assert_eq!(
        common::outcome(&report, "ok").status,
        TaskStatus::Completed,
        "work that did not depend on the failure is kept"
    );
    // Each version was a typed failure on the wire, not a result whose text
    // happens to describe one.
    let submitted = results(&nc, &id, "count").await;
    assert_eq!(submitted.len() as u32, revisions + 1);
    for r in &submitted {
        assert_eq!(r.status, TaskStatus::Failed);
        assert_eq!(r.error.as_ref().unwrap().code, ErrorCode::GaveUp);
        assert!(r.result.is_empty());
    }
    let state = common::state(&nc, &id).await;
    assert_eq!(state.status, SwarmStatus::Failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_paths_missing_tools_and_unknown_requests_fail_their_missions() {
    let ws = workspace();
    let cluster = cluster(&ws).await;
    let nc = cluster.client().await;
    let cases = [
        // The sandbox refuses the path.
        ("Read /etc/passwd", "outside the workspace"),
        // The offline provider has no tool for a poem: it says so and fails.
        (
            "Write a poem about the sea",
            "no tool matched this request offline",
        ),
    ];
    let mut ids = Vec::new();
    for (text, _) in cases {
        ids.push(common::submit(&nc, &MissionRequest::text(text)).await);
    }
    for ((text, reason), id) in cases.iter().zip(&ids) {
        let report = common::final_report(&cluster, &nc, id, 60).await;
        assert_eq!(report.task_results.len(), 1, "{text}: {report:#?}");
        let task_id = report.task_results[0].task_id.clone();
        assert_failed_first(&report, &task_id, reason);
    }

    // An explicit call of a tool the worker lacks, and one that fails.
    let mission = common::mission(
        "explicit calls",
        vec![
            common::task("unknown", &common::tool("teleport", json!({})), &[]),
            common::task(
                "divide",
                &common::tool("calc", json!({"expression": "1/0"})),
                &[],
            ),
        ],
    );
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Failed);
    let unknown = common::outcome(&report, "unknown");
    assert_eq!(unknown.status, TaskStatus::Failed);
    assert!(
        unknown
            .error
            .as_deref()
            .unwrap()
            .contains("unknown tool \"teleport\""),
        "{unknown:#?}"
    );
    let divide = common::outcome(&report, "divide");
    assert_eq!(divide.status, TaskStatus::Failed);
    assert!(
        divide
            .error
            .as_deref()
            .unwrap()
            .contains("division by zero"),
        "{divide:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_that_did_what_it_was_asked_still_completes() {
    let ws = workspace();
    let cluster = cluster(&ws).await;
    let nc = cluster.client().await;
    let id = common::submit(
        &nc,
        &MissionRequest::text("1. Count the words in notes.txt\n2. Compute 6 * 7\n"),
    )
    .await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert!(
        report.summary.starts_with("The mission completed."),
        "{}",
        report.summary
    );
    for t in &report.task_results {
        assert_eq!(t.status, TaskStatus::Completed);
        assert_eq!(t.revisions, 0);
        assert!(t.error.is_none());
    }
}
