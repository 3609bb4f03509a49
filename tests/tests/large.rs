//! A mission of 100,000 tasks (issue 28), end to end with the real binaries
//! and the offline provider, under the default limits: ten tasks each read
//! a list of 9,998 items from the workspace, ten map tasks fan out over
//! them (64 children at a time each), and every one of the 100,000 tasks
//! completes exactly once: one accepted result stored per task, every task
//! in the state (read back from its chunks) completed at its first attempt,
//! and one report, which speaks of the children through their map tasks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::collections::HashMap;
use std::time::Duration;

use futures::TryStreamExt as _;
use swarm_common::{SwarmStatus, TaskDefinition, TaskStatus, subjects};
use swarm_testkit::Cluster;

const LISTS: usize = 10;
const ITEMS: usize = 9_998;
const TASKS: usize = LISTS * (ITEMS + 2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_of_100_000_tasks_completes_with_each_task_once() {
    assert_eq!(TASKS, 100_000);
    assert_eq!(
        swarm_common::Limits::default().max_tasks,
        TASKS,
        "the default cap"
    );
    let ws = tempfile::tempdir().unwrap();
    let mut tasks = Vec::new();
    for l in 0..LISTS {
        let items: Vec<usize> = (0..ITEMS).collect();
        std::fs::write(
            ws.path().join(format!("list{l}.json")),
            serde_json::to_string(&items).unwrap(),
        )
        .unwrap();
        let list = format!("list{l}");
        let read = common::tool(
            "read_file",
            serde_json::json!({"path": format!("{list}.json")}),
        );
        tasks.push(common::task(&list, &read, &[]));
        tasks.push(TaskDefinition {
            map: Some(
                serde_json::from_value(serde_json::json!(
                    {"over": {"task": list}, "concurrency": 64}
                ))
                .unwrap(),
            ),
            ..common::task(&format!("each{l}"), &common::echo("{{item}}"), &[&list])
        });
    }
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(2)
        .workspace(ws.path())
        // The binaries under test are debug builds, tens of times slower
        // than release ones: expanding 100,000 tasks or writing them all
        // takes the manager seconds, a release build a small fraction of
        // one. A longer pin keeps its partition meanwhile, and a longer
        // ack wait keeps the results queued for it from coming back.
        .env("SWARM_MANAGER_PIN_TTL", "5")
        .env("SWARM_MANAGER_ACK_WAIT", "10")
        .start()
        .await
        .expect("the cluster starts");
    let nc = cluster.client().await;
    let id = common::submit(&nc, &common::mission("a hundred thousand things", tasks)).await;
    let report = common::final_report(&cluster, &nc, &id, 1_500).await;
    assert_eq!(
        report.overall_status,
        SwarmStatus::Completed,
        "{}",
        report.summary
    );
    // Twenty tasks reported; each map's result holds its children's in order.
    assert_eq!(report.task_results.len(), 2 * LISTS);
    let each = common::outcome(&report, "each3");
    assert_eq!(each.status, TaskStatus::Completed);
    assert!(
        each.result.starts_with("[0,1,2,3,"),
        "{}",
        &each.result[..80]
    );
    common::assert_one_report(&nc, &id).await;

    // The state, read back from its chunks: every task completed at its
    // first attempt (a map task runs on no worker: none), none revised.
    let state = common::state(&nc, &id).await;
    assert!(
        state.chunks.is_some(),
        "a state this large is stored in chunks"
    );
    assert_eq!(state.tasks.len(), TASKS);
    for t in state.tasks.iter() {
        let attempts = if t.definition.map.is_some() { 0 } else { 1 };
        assert_eq!(t.status, TaskStatus::Completed, "{}", t.definition.task_id);
        assert_eq!(
            (t.attempt, t.revision),
            (attempts, 0),
            "{}",
            t.definition.task_id
        );
    }
    // One result stored per task, the maps' own aside (they run no worker).
    let js = async_nats::jetstream::new(nc.clone());
    let stream = js.get_stream(subjects::A2AP_STREAM).await.unwrap();
    let counts: HashMap<String, usize> = stream
        .info_with_subjects(subjects::stored(
            &subjects::result(&id, ">"),
            Some(subjects::DEFAULT_PARTITIONS),
        ))
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        counts.len(),
        TASKS - LISTS,
        "a result for every task but the maps"
    );
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "results stored more than once: {twice:?}");
    cluster.stop(Duration::from_secs(5)).await;
}
