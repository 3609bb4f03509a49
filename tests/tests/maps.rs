//! Map tasks, end to end: a task fans out over the list its dependency
//! produced (20 items, 4 at a time), its children each echo their item, a
//! reduce task runs after the map, and the mission completes; the report
//! lists every child and the map's result holds the items in order. Run
//! with the real binaries and the offline provider.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use swarm_common::{SwarmStatus, TaskDefinition, TaskStatus};
use swarm_testkit::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_fans_out_over_a_list_and_its_reduce_runs_after_it() {
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
    let files: Vec<String> = (0..20).map(|k| format!("file{k}")).collect();
    let list = serde_json::json!({ "files": files }).to_string();
    let each = TaskDefinition {
        map: Some(
            serde_json::from_value(serde_json::json!(
                {"over": {"task": "list", "pointer": "/files"}, "concurrency": 4}
            ))
            .unwrap(),
        ),
        ..common::task("each", &common::echo("{{item}}"), &["list"])
    };
    let mission = common::mission(
        "list the files, handle each, then sum up",
        vec![
            common::task("list", &common::echo(&list), &[]),
            each,
            common::task("reduce", &common::echo("all handled"), &["each"]),
        ],
    );
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 120).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let children: Vec<_> = report
        .task_results
        .iter()
        .filter(|t| t.task_id.starts_with("each-"))
        .collect();
    assert_eq!(children.len(), 20, "{report:#?}");
    for (k, c) in children.iter().enumerate() {
        assert_eq!(c.task_id, format!("each-{k}"));
        assert_eq!(c.status, TaskStatus::Completed, "{c:#?}");
        assert_eq!(c.result, format!("file{k}"));
    }
    let each = common::outcome(&report, "each");
    assert_eq!(each.status, TaskStatus::Completed, "{each:#?}");
    let items: Vec<String> = serde_json::from_str(&each.result).expect("a JSON array");
    assert_eq!(items, files);
    let reduce = common::outcome(&report, "reduce");
    assert_eq!(reduce.status, TaskStatus::Completed, "{reduce:#?}");
    assert_eq!(reduce.result, "all handled");

    let state = common::state(&nc, &id).await;
    assert_eq!(state.status, SwarmStatus::Completed);
    assert_eq!(state.tasks.len(), 3 + 20);
    common::assert_one_report(&nc, &id).await;
    cluster.stop(Duration::from_secs(5)).await;
}
