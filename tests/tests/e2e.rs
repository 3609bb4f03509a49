//! A mission travels from `boss.missions` to an HTML report through the
//! boss, manager and worker binaries, each a separate process, over a real
//! nats-server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::collections::HashMap;
use std::time::Duration;

use swarm_common::{FinalReport, SwarmStatus, TaskOutcome, TaskStatus, mission::MissionRequest};
use swarm_testkit::Cluster;

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("notes.txt"),
        "alpha beta gamma delta\nepsilon\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    for name in ["one.txt", "two.txt", "three.txt", "four.txt"] {
        std::fs::write(dir.path().join("data").join(name), format!("{name}\n")).unwrap();
    }
    dir
}

/// Every task started only after each of its dependencies was accepted.
fn assert_dependency_order(report: &FinalReport) {
    let by_id: HashMap<&str, &TaskOutcome> = report
        .task_results
        .iter()
        .map(|t| (t.task_id.as_str(), t))
        .collect();
    for t in &report.task_results {
        for d in &t.dependencies {
            let dep = by_id[d.as_str()];
            let (Some(done), Some(started)) = (dep.completed_at, t.started_at) else {
                panic!("{} or its dependency {d} has no timestamps", t.task_id);
            };
            assert!(
                done <= started,
                "{} started at {started} before its dependency {d} was accepted at {done}",
                t.task_id
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_mission_travels_to_an_html_report() {
    let ws = workspace();
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(2)
        .workers(2)
        .workspace(ws.path())
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let mission = "1. Count the words in notes.txt\n2. List the files in data\n3. Compute 6 * 7, then checksum the previous result\n";
    let swarm_id = common::submit(&nc, &MissionRequest::text(mission)).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert!(report.task_results.len() >= 3);
    assert!(
        report
            .task_results
            .iter()
            .all(|t| t.status == TaskStatus::Completed)
    );
    assert_dependency_order(&report);
    // Numbered steps form a chain: every task after the first waits on another.
    assert!(
        report
            .task_results
            .iter()
            .skip(1)
            .all(|t| !t.dependencies.is_empty())
    );
    // Real work through real tools, labelled as the offline provider's.
    let count = report
        .task_results
        .iter()
        .find(|t| t.description.contains("notes.txt"))
        .unwrap();
    assert!(
        count.result.contains("5 words")
            || count.result.contains("\"words\":5")
            || count.result.contains("words: 5"),
        "notes.txt has 5 words: {}",
        count.result
    );
    let listing = report
        .task_results
        .iter()
        .find(|t| t.description.contains("data"))
        .unwrap();
    assert!(
        listing.result.contains("one.txt") && listing.result.contains("four.txt"),
        "{}",
        listing.result
    );
    assert!(
        report.task_results.iter().any(|t| t.result.contains("42")),
        "6 * 7 was computed"
    );
    assert!(report.task_results.iter().all(|t| t.provider == "offline"));
    assert!(count.result.contains("offline"), "{}", count.result);

    common::assert_one_report(&nc, &swarm_id).await;
    let state = common::state(&nc, &swarm_id).await;
    assert_eq!(state.status, SwarmStatus::Completed);
    assert!(
        state
            .tasks
            .iter()
            .all(|t| t.status == TaskStatus::Completed && t.result_seq.is_some())
    );

    let record = swarm_client::client::wait_for_rendering(&nc, &swarm_id, Duration::from_secs(20))
        .await
        .unwrap();
    let file = record
        .report_file
        .expect("the boss wrote the report to a file");
    let html = std::fs::read_to_string(&file).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains(&swarm_id));
    assert!(html.contains("notes.txt"));
    for t in &report.task_results {
        assert!(html.contains(&t.task_id));
    }
    let copy = tempfile::tempdir().unwrap();
    let fetched = swarm_client::client::fetch_report(&nc, &swarm_id, copy.path())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(fetched).unwrap(),
        html,
        "object store and file hold the same report"
    );
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_plan_runs_a_chain_a_fan_out_and_a_revision() {
    let ws = workspace();
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(2)
        .workspace(ws.path())
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let mut condensed = common::task("r", "List the files in data", &[]);
    // The listing is longer than this, so review asks for a shorter version once.
    condensed.max_result_bytes = Some(60);
    let tasks = vec![
        common::task(
            "a",
            r#"{"tool": "echo", "arguments": {"text": "alpha"}}"#,
            &[],
        ),
        common::task(
            "b",
            r#"{"tool": "count", "arguments": {"text": "one two three"}}"#,
            &["a"],
        ),
        common::task(
            "c",
            r#"{"tool": "checksum", "arguments": {"text": "alpha"}}"#,
            &["a"],
        ),
        common::task(
            "d",
            r#"{"tool": "calc", "arguments": {"expression": "2^10 + 1"}}"#,
            &["b", "c"],
        ),
        condensed,
    ];
    let request = MissionRequest {
        plan: Some(common::plan(tasks)),
        ..MissionRequest::text("An explicit plan")
    };
    let swarm_id = common::submit(&nc, &request).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_dependency_order(&report);
    let get = |id: &str| common::outcome(&report, id);
    assert_eq!(get("a").result, "alpha");
    assert!(get("b").result.contains('3'), "{}", get("b").result);
    assert!(
        get("c")
            .result
            .contains("8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8")
    );
    assert!(get("d").result.contains("1025"), "{}", get("d").result);
    let r = get("r");
    assert_eq!(r.revisions, 1, "{r:#?}");
    assert!(r.result.len() <= 60 && !r.result.is_empty(), "{}", r.result);
    let failed: Vec<_> = r.gate_verdicts.iter().filter(|v| !v.passed).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        (failed[0].gate.as_str(), failed[0].revision),
        ("max_bytes", 0)
    );
    assert!(r.gate_verdicts.iter().any(|v| v.passed && v.revision == 1));
    let state = common::state(&nc, &swarm_id).await;
    assert_eq!(state.planner, "explicit");
    // The manager had a's result at hand and sent it along with b's assignment.
    let b = common::messages::<swarm_common::TaskAssignment>(
        &nc,
        &swarm_common::subjects::work("*", &swarm_id, "b"),
    )
    .await;
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].body.context.len(), 1);
    assert_eq!(b[0].body.context[0].result.as_deref(), Some("alpha"));
    // The offline provider is deterministic: a replay asks it again, so its
    // replies are not journaled (echo is read-only, so nothing is).
    let a = common::messages::<swarm_common::ResultSubmission>(
        &nc,
        &swarm_common::subjects::result(&swarm_id, "a"),
    )
    .await;
    assert_eq!(a[0].body.metrics.get("journal_recorded"), Some(&0.0));
    // An explicit plan needs no planner: the boss deployed it as it took it in.
    let js = async_nats::jetstream::new(nc.clone());
    let missions = js
        .get_stream(swarm_common::subjects::MISSIONS_STREAM)
        .await
        .unwrap();
    assert!(
        missions
            .get_last_raw_message_by_subject(&swarm_common::subjects::mission_record(&swarm_id))
            .await
            .is_err(),
        "the mission went through the planners"
    );
    common::assert_one_report(&nc, &swarm_id).await;
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_cancels_its_dependents_and_the_report_says_failed() {
    let cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let tasks = vec![
        common::task(
            "empty",
            r#"{"tool": "echo", "arguments": {"text": ""}}"#,
            &[],
        ),
        common::task(
            "after",
            r#"{"tool": "echo", "arguments": {"text": "never"}}"#,
            &["empty"],
        ),
        common::task(
            "after-after",
            r#"{"tool": "echo", "arguments": {"text": "never"}}"#,
            &["after"],
        ),
        common::task(
            "free",
            r#"{"tool": "echo", "arguments": {"text": "independent"}}"#,
            &[],
        ),
    ];
    let request = MissionRequest {
        plan: Some(common::plan(tasks)),
        ..MissionRequest::text("A plan whose first task can never pass review")
    };
    let swarm_id = common::submit(&nc, &request).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Failed);
    let get = |id: &str| common::outcome(&report, id);
    let empty = get("empty");
    assert_eq!(empty.status, TaskStatus::Failed);
    assert_eq!(
        empty.revisions,
        swarm_common::Limits::default().max_revisions
    );
    assert!(empty.error.as_deref().unwrap().contains("empty"));
    assert_eq!(get("after").status, TaskStatus::Cancelled);
    assert_eq!(get("after-after").status, TaskStatus::Cancelled);
    assert_eq!(get("free").status, TaskStatus::Completed);
    assert!(report.summary.contains("failed"), "{}", report.summary);
    common::assert_one_report(&nc, &swarm_id).await;
    let record = swarm_client::client::wait_for_rendering(&nc, &swarm_id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(record.overall_status, Some(SwarmStatus::Failed));
    cluster.stop(Duration::from_secs(5)).await;
}

/// A plan as the seed's A2AP classes write it (personas named
/// `worker_name`, no tasks, the mission in `original_task`, the limit in
/// `max_execution_minutes`, the swarm named by `swarm_id`) runs: one task
/// per persona, on the plan's own text, within its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_in_the_seeds_shape_runs_one_task_per_persona() {
    let cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let persona = |name: &str| {
        serde_json::json!({
            "worker_name": name,
            "role": format!("{name} role"),
            "system_prompt": format!("You are {name}."),
            "tools": ["echo"],
            "collaborators": [],
        })
    };
    let original_task = common::echo("seed task done");
    let seed_id = format!("seed-{}", uuid::Uuid::new_v4());
    let body = serde_json::json!({
        "plan": {
            "swarm_id": seed_id,
            "manager_name": "manager-alpha",
            "original_task": original_task,
            "max_execution_minutes": 15,
            "workers": [persona("researcher"), persona("writer")],
        }
    });
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Content-Type", "application/json");
    let reply = common::raw_request(&nc, Some(headers), serde_json::to_vec(&body).unwrap()).await;
    let reply: swarm_common::mission::MissionReply = serde_json::from_slice(&reply.payload)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&reply.payload)));
    // The plan's swarm id is the mission id: the same plan makes one swarm.
    assert_eq!(
        reply.swarm_id,
        swarm_common::mission::swarm_id_for(Some(&seed_id))
    );
    let report = common::final_report(&cluster, &nc, &reply.swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(report.mission, original_task);
    let by_persona: Vec<(&str, &str)> = report
        .task_results
        .iter()
        .map(|t| (t.assigned_to.as_str(), t.result.as_str()))
        .collect();
    assert_eq!(
        by_persona,
        [
            ("researcher", "seed task done"),
            ("writer", "seed task done")
        ]
    );
    let state = common::state(&nc, &reply.swarm_id).await;
    assert_eq!(
        state.deadline - state.accepted_at,
        chrono::Duration::minutes(15)
    );
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_wider_than_the_clients_publish_window_is_deployed_whole() {
    // A NATS connection lets 5,000 publishes wait for their acks; a
    // deployment of more ready tasks than that must not wait on itself.
    const TASKS: usize = 5_200;
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(0)
        .env("SWARM_MAX_TASKS", "10000")
        .env("SWARM_MAX_MISSION_BYTES", (4 << 20).to_string())
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let tasks = (0..TASKS)
        .map(|i| common::task(&format!("t{i}"), &common::echo("x"), &[]))
        .collect();
    let swarm_id = common::submit(&nc, &common::mission("wide", tasks)).await;
    let js = async_nats::jetstream::new(nc.clone());
    let stream = js
        .get_stream(swarm_common::subjects::WORK_STREAM)
        .await
        .unwrap();
    let filter = swarm_common::subjects::work("*", &swarm_id, "*");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subject: filter.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        let stored = consumer.cached_info().num_pending as usize;
        if stored == TASKS {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{stored} of {TASKS} assignments stored\n{}",
            cluster.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The deployment's state write went through too (it goes out alongside
    // the assignments, so it may land just after them).
    let state = loop {
        if let Some(state) = swarm_client::client::state(&nc, &swarm_id).await.unwrap() {
            break state;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no swarm state stored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(state.tasks.len(), TASKS);
    assert!(
        state.tasks.iter().all(|t| t.status == TaskStatus::Assigned),
        "every task assigned"
    );
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_answers_the_handshake_and_refuses_a_peer_of_another_major() {
    let cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    for role in ["boss", "manager", "worker"] {
        let subject = swarm_common::subjects::hello(role);
        let answer = common::eventually(
            Duration::from_secs(20),
            Duration::from_millis(200),
            "a handshake answer",
            || {
                let (nc, subject) = (nc.clone(), subject.clone());
                async move {
                    nc.request(subject, bytes::Bytes::new())
                        .await
                        .map_err(|e| e.to_string())
                }
            },
        )
        .await;
        let hello: swarm_runtime::hello::Hello = serde_json::from_slice(&answer.payload).unwrap();
        assert_eq!(hello.role, role);
        assert!(hello.id.contains(role), "{}", hello.id);
        assert_eq!(hello.protocol_versions, ["1.0"]);
        assert_eq!(
            hello.codecs,
            [
                "application/msgpack",
                "application/json",
                "application/protobuf"
            ]
        );
        // An older or newer minor of 1 is a common version.
        let ok = nc
            .request(
                subject.clone(),
                bytes::Bytes::from_static(br#"{"protocol_versions": ["1.4"]}"#),
            )
            .await
            .unwrap();
        assert!(serde_json::from_slice::<swarm_runtime::hello::Hello>(&ok.payload).is_ok());
        // No common major: a typed refusal.
        let refused = nc
            .request(
                subject,
                bytes::Bytes::from_static(br#"{"protocol_versions": ["99.0", "2.1"]}"#),
            )
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&refused.payload).unwrap();
        assert_eq!(v["error"]["code"], "unsupported_protocol", "{v}");
    }
    // The boss's NATS service says the same in its metadata.
    let info = nc
        .request("$SRV.INFO.boss", bytes::Bytes::new())
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
    assert_eq!(v["metadata"]["protocol_versions"], "1.0", "{v}");
    assert_eq!(
        v["metadata"]["codecs"], "application/msgpack,application/json,application/protobuf",
        "{v}"
    );
    assert_eq!(v["metadata"]["hello"], "swarm.hello.boss", "{v}");
}
