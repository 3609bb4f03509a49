//! A task that fails for good and the plan's fallback for it, end to end:
//! the fallback runs in its place, the tasks after it get the fallback's
//! result, and the report says what failed and what stood in. Run with the
//! real binaries and the offline provider.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use swarm_common::{SwarmStatus, TaskDefinition, TaskStatus};
use swarm_testkit::Cluster;

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
