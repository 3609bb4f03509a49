//! Conditional tasks, end to end: a task whose condition on its dependency's
//! JSON result does not hold is `Skipped` with the reason, a task after it
//! still runs, and the mission completes; the report, the stored state and
//! the HTML page all say so. Run with the real binaries and the offline
//! provider.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use swarm_common::{SwarmStatus, TaskDefinition, TaskStatus};
use swarm_testkit::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_condition_does_not_hold_is_skipped_and_the_mission_completes() {
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
    let review = TaskDefinition {
        condition: Some(
            serde_json::from_value(serde_json::json!(
                {"when": {"task": "check", "pointer": "/needs_review", "equals": true}}
            ))
            .unwrap(),
        ),
        ..common::task("review", &common::echo("reviewed"), &["check"])
    };
    let mission = common::mission(
        "check, review only if the check asks for it, then publish",
        vec![
            common::task("check", &common::echo(r#"{"needs_review": false}"#), &[]),
            review,
            common::task("publish", &common::echo("published"), &["check", "review"]),
        ],
    );
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let review = common::outcome(&report, "review");
    assert_eq!(review.status, TaskStatus::Skipped, "{review:#?}");
    let why = review.error.as_deref().unwrap_or_default();
    assert!(
        why.starts_with("condition not met: ") && why.contains("is false, not true"),
        "{why}"
    );
    assert!(
        review.result.is_empty() && review.attempts == 0,
        "{review:#?}"
    );
    let publish = common::outcome(&report, "publish");
    assert_eq!(publish.status, TaskStatus::Completed, "{publish:#?}");
    assert_eq!(publish.result, "published");
    assert_eq!(report.metrics["tasks_skipped"], 1.0);
    assert!(report.summary.contains("1 skipped"), "{}", report.summary);

    let state = common::state(&nc, &id).await;
    assert_eq!(state.status, SwarmStatus::Completed);
    assert_eq!(state.task("review").unwrap().status, TaskStatus::Skipped);
    common::assert_one_report(&nc, &id).await;

    let record = swarm_client::client::wait_for_rendering(&nc, &id, Duration::from_secs(20))
        .await
        .unwrap();
    let html = std::fs::read_to_string(record.report_file.expect("a report file")).unwrap();
    assert!(html.contains(r#"data-status="Skipped">Skipped<"#));
    assert!(html.contains(r#"<div class="callout muted"><strong>Skipped</strong>"#));
    cluster.stop(Duration::from_secs(5)).await;
}
