//! Sub-managers, end to end: a task assigned to a sub-manager runs as a
//! child swarm (with the sub-manager's own plan, or planned by the boss from
//! the task's description), whose outcome is the parent task's result and
//! feeds the tasks after it; cancelling the parent cancels the child. Run
//! with the real binaries and the offline provider.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use swarm_common::{
    FinalReport, SwarmDeploymentPlan, SwarmStatus, TaskStatus, hierarchy::SubManagerPlan,
    mission::MissionRequest,
};
use swarm_testkit::Cluster;

/// A plan whose task `part` is the sub-manager `lead`'s (with `child` as
/// its plan, or none: the boss plans it), followed by a task of the worker.
fn parent_plan(part: &str, child: Option<SwarmDeploymentPlan>) -> SwarmDeploymentPlan {
    let mut plan = common::plan(vec![
        swarm_common::TaskDefinition {
            assigned_to: "lead".into(),
            ..common::task("part", part, &[])
        },
        common::task("after", &common::echo("after the part"), &["part"]),
    ]);
    plan.sub_managers = vec![SubManagerPlan {
        name: "lead".into(),
        role: "runs a part of the mission as a swarm of its own".into(),
        plan: child.map(Box::new),
    }];
    plan
}

async fn cluster(ws: &std::path::Path) -> Cluster {
    Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(2)
        .workspace(ws)
        .start()
        .await
        .expect("the cluster starts")
}

async fn child_report(
    cluster: &Cluster,
    nc: &async_nats::Client,
    parent: &FinalReport,
) -> (String, FinalReport) {
    let child = common::outcome(parent, "part")
        .child_swarm
        .clone()
        .expect("the report names the child swarm");
    let report = common::final_report(cluster, nc, &child, 60).await;
    (child, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_managers_task_runs_as_a_child_swarm_whose_outcome_is_its_result() {
    let ws = tempfile::tempdir().unwrap();
    let cluster = cluster(ws.path()).await;
    let nc = cluster.client().await;
    let child_plan = common::plan(vec![
        common::task("a", &common::echo("alpha"), &[]),
        common::task("b", &common::echo("beta"), &["a"]),
    ]);
    let mission = MissionRequest {
        plan: Some(parent_plan("Run the part's two steps.", Some(child_plan))),
        ..MissionRequest::text("a mission with a part run by a sub-manager")
    };
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 120).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let part = common::outcome(&report, "part");
    assert_eq!(part.status, TaskStatus::Completed, "{part:#?}");
    assert!(
        part.result.contains("alpha") && part.result.contains("beta"),
        "the child's results are the part's: {part:#?}"
    );
    assert_eq!(
        common::outcome(&report, "after").status,
        TaskStatus::Completed
    );

    let (child, child_report) = child_report(&cluster, &nc, &report).await;
    assert_eq!(child_report.overall_status, SwarmStatus::Completed);
    assert_eq!(child_report.task_results.len(), 2);
    let state = common::state(&nc, &child).await;
    let parent = state.parent.expect("the child knows its parent");
    assert_eq!(
        (
            parent.swarm_id.as_str(),
            parent.task_id.as_str(),
            parent.depth
        ),
        (id.as_str(), "part", 1)
    );
    common::assert_one_report(&nc, &child).await;
    common::assert_one_report(&nc, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_manager_without_a_plan_has_the_boss_plan_its_task() {
    let ws = tempfile::tempdir().unwrap();
    let cluster = cluster(ws.path()).await;
    let nc = cluster.client().await;
    let mission = MissionRequest {
        plan: Some(parent_plan("Compute (17 * 23) + 2^10", None)),
        ..MissionRequest::text("a mission whose part the boss plans")
    };
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 120).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let part = common::outcome(&report, "part");
    assert!(part.result.contains("1415"), "{part:#?}");
    let (child, child_report) = child_report(&cluster, &nc, &report).await;
    assert_eq!(child_report.overall_status, SwarmStatus::Completed);
    assert_eq!(
        child_report.mission, "Compute (17 * 23) + 2^10",
        "the task's description is the child's mission"
    );
    assert_eq!(common::state(&nc, &child).await.planner, "offline-planner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_cancels_its_child() {
    let ws = tempfile::tempdir().unwrap();
    let cluster = cluster(ws.path()).await;
    let nc = cluster.client().await;
    let child_plan = common::plan(vec![common::task("slow", &common::sleep(60_000), &[])]);
    let mission = MissionRequest {
        plan: Some(parent_plan("Wait a long time.", Some(child_plan))),
        ..MissionRequest::text("a mission cancelled while its child runs")
    };
    let id = common::submit(&nc, &mission).await;
    let child = common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(100),
        "the child swarm runs",
        || {
            let (nc, id) = (nc.clone(), id.clone());
            async move {
                let read = |id: String| {
                    let nc = nc.clone();
                    async move {
                        swarm_client::client::state(&nc, &id)
                            .await
                            .map_err(|e| format!("{e:#}"))?
                            .ok_or_else(|| format!("no state for {id} yet"))
                    }
                };
                let parent = read(id).await?;
                let task = parent.task("part").ok_or("no task part")?;
                let child = parent.child_of(task).ok_or("part not assigned yet")?;
                let state = read(child.clone()).await?;
                if state.status == SwarmStatus::Running {
                    Ok(child)
                } else {
                    Err(format!("the child is {:?}", state.status))
                }
            }
        },
    )
    .await;

    swarm_client::client::cancel(&nc, &id, "changed my mind")
        .await
        .unwrap();
    let report = common::final_report(&cluster, &nc, &id, 30).await;
    assert_eq!(report.overall_status, SwarmStatus::Cancelled);
    let child_report = common::final_report(&cluster, &nc, &child, 30).await;
    assert_eq!(
        child_report.overall_status,
        SwarmStatus::Cancelled,
        "{child_report:#?}"
    );
    assert!(
        child_report.summary.contains(&id),
        "the child says its parent ended: {}",
        child_report.summary
    );
}
