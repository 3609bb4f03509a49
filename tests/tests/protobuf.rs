//! The `application/protobuf` codec against `proto/a2ap.proto` from the
//! outside: Rust types generated from the `.proto` by prost-build
//! (tests/build.rs) read what Swarm writes and write what Swarm reads, and
//! a peer in Python, with code generated at test time by grpcio-tools'
//! protoc, submits a mission in protobuf to the boss, manager and worker
//! binaries started with `--codec protobuf` and follows the swarm's
//! messages to its `FinalReport`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use futures::StreamExt;
use prost::Message as _;
use swarm_common::{
    Codec, Envelope, ErrorBody, ErrorCode, FinalReport, GateVerdict, SwarmStatus, TaskOutcome,
    TaskStatus, mission::MissionRequest,
};
use swarm_testkit::Cluster;

/// Types generated from `proto/a2ap.proto`.
#[allow(missing_docs, dead_code, clippy::all, clippy::pedantic)]
mod a2ap {
    include!(concat!(env!("OUT_DIR"), "/swarm.a2ap.v1.rs"));
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn report() -> FinalReport {
    let at = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .with_timezone(&chrono::Utc)
    };
    FinalReport {
        skills: Default::default(),
        trace_id: None,
        overall_status: SwarmStatus::TimedOut,
        mission: "m".into(),
        summary: "s".into(),
        insights: vec!["i".into()],
        task_results: vec![TaskOutcome {
            skills: Default::default(),
            asked_by: None,
            child_swarm: None,
            task_id: "t1".into(),
            title: "T".into(),
            description: "d".into(),
            assigned_to: "w".into(),
            dependencies: vec!["t0".into()],
            status: TaskStatus::InProgress,
            result: "r".into(),
            result_truncated: true,
            result_seq: Some(42),
            attempts: 2,
            revisions: 1,
            assigned_at: Some(at("2026-01-02T03:04:05.5Z")),
            started_at: None,
            completed_at: None,
            error: Some("late".into()),
            gate_verdicts: vec![GateVerdict {
                gate: "length".into(),
                passed: false,
                reason: "too long".into(),
                revision: 1,
            }],
            provider: "offline".into(),
        }],
        metrics: [("tasks".to_string(), 1.5)].into_iter().collect(),
        started_at: at("2026-01-02T03:00:00Z"),
        completed_at: at("2026-01-02T03:10:00Z"),
    }
}

#[test]
fn generated_types_read_what_swarm_writes() {
    let sent = Envelope::new("manager-1", "boss", "s-1", "s-1", report());
    let bytes = sent.encode(Codec::Protobuf).unwrap();
    let env = a2ap::Envelope::decode(bytes.as_slice()).unwrap();
    assert_eq!(env.message_type, a2ap::MessageType::FinalReport as i32);
    assert_eq!(env.protocol_version.as_deref(), Some("1.0"));
    assert_eq!(env.sender_agent, "manager-1");
    assert_eq!(
        env.timestamp.unwrap().seconds,
        sent.timestamp.timestamp(),
        "the envelope's timestamp"
    );
    let Some(a2ap::envelope::Body::FinalReport(r)) = env.body else {
        panic!("the body is not a FinalReport: {:?}", env.body);
    };
    assert_eq!(r.swarm_status, a2ap::SwarmStatus::TimedOut as i32);
    assert_eq!(r.insight_list, ["i"]);
    assert_eq!(r.metric_values["tasks"], 1.5);
    // The seed's fields beside ours: its five statuses, text insights and figures.
    assert_eq!(r.overall_status, a2ap::TaskStatus::Failed as i32);
    assert_eq!(r.insights, "i");
    assert_eq!(r.metrics["tasks"], "1.5");
    let t = &r.task_results[0];
    assert_eq!(t.status, a2ap::TaskStatus::InProgress as i32);
    assert_eq!(t.result_seq, Some(42));
    assert!(t.result_truncated);
    assert_eq!(t.error.as_deref(), Some("late"));
    let assigned = t.assigned_at.unwrap();
    assert_eq!((assigned.seconds % 60, assigned.nanos), (5, 500_000_000));
    assert!(t.started_at.is_none());
    assert_eq!(t.gate_verdicts[0].reason, "too long");
    assert_eq!(r.completed_at.unwrap().seconds, 1_767_323_400);

    let error = Envelope::new(
        "worker-1",
        "manager",
        "s-1",
        "t1",
        swarm_common::ErrorMessage {
            task_id: Some("t1".into()),
            attempt: None,
            error: ErrorBody::new(ErrorCode::GaveUp, "no way").with_detail("step", "3"),
            token: "tok".into(),
        },
    );
    let env = a2ap::Envelope::decode(error.encode(Codec::Protobuf).unwrap().as_slice()).unwrap();
    let Some(a2ap::envelope::Body::Error(e)) = env.body else {
        panic!("not an error: {:?}", env.body);
    };
    assert_eq!(e.task_id.as_deref(), Some("t1"));
    assert_eq!(e.attempt, None);
    assert_eq!(e.token, "tok");
    let body = e.error.unwrap();
    assert_eq!(body.code, a2ap::ErrorCode::GaveUp as i32);
    assert_eq!(body.details["step"], "3");
}

#[test]
fn swarm_reads_what_generated_types_write() {
    let request = a2ap::MissionRequest {
        mission: "count".into(),
        mission_id: Some("m-7".into()),
        max_execution_seconds: Some(90),
        plan: Some(a2ap::SwarmDeploymentPlan {
            workers: vec![a2ap::WorkerDeploymentPlan {
                name: "w".into(),
                ..Default::default()
            }],
            tasks: vec![a2ap::TaskDefinition {
                task_id: "t1".into(),
                title: "t".into(),
                description: "d".into(),
                assigned_to: "w".into(),
                gates: vec![a2ap::GateSpec {
                    kind: Some(a2ap::gate_spec::Kind::Regex(a2ap::RegexGate {
                        pattern: "^ok".into(),
                        forbid: false,
                        description: None,
                    })),
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let (got, format) = swarm_common::mission::parse_mission(
        Some("application/protobuf"),
        None,
        &request.encode_to_vec(),
        &swarm_common::Limits::default(),
    )
    .unwrap();
    assert_eq!(format.reply_codec(), Codec::Protobuf);
    assert_eq!(got.mission_id.as_deref(), Some("m-7"));
    assert_eq!(got.max_execution_seconds, Some(90));
    assert_eq!(got.max_execution_minutes, None);
    let plan = got.plan.unwrap();
    // A field the peer left out is Swarm's default, not the zero value.
    assert_eq!(plan.workers[0].pool, "general");
    assert_eq!(plan.tasks[0].priority, None);
    assert_eq!(
        plan.tasks[0].gates,
        [swarm_common::gates::GateSpec::Regex {
            pattern: "^ok".into(),
            forbid: false,
            description: None,
        }]
    );
}

/// Whether `python3` can import what the peer needs.
fn python_ready(pythonpath: &str) -> Result<(), String> {
    let out = Command::new("python3")
        .env("PYTHONPATH", pythonpath)
        .args(["-c", "import google.protobuf, grpc_tools.protoc, nats"])
        .output()
        .map_err(|e| format!("python3 does not run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_peer_runs_a_mission_in_protobuf() {
    // Packages installed for CI with `pip install --target .python` (.ci/run)
    // are found there, before any PYTHONPATH of the caller's.
    let local = repo().join(".python");
    let pythonpath = std::env::join_paths(
        std::iter::once(local).chain(std::env::var_os("PYTHONPATH").map(PathBuf::from)),
    )
    .unwrap()
    .to_string_lossy()
    .into_owned();
    if let Err(why) = python_ready(&pythonpath) {
        let how = "pip install --target .python protobuf grpcio-tools nats-py";
        if std::env::var_os("CI").is_some() {
            panic!("CI is set, so the Python peer must run, but: {why}; install with `{how}`");
        }
        eprintln!(
            "SKIPPED: the Python peer needs protobuf, grpcio-tools and nats-py ({why}); `{how}` to run it"
        );
        return;
    }
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .env("SWARM_CODEC", "protobuf")
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let url = cluster.local().url();
    let script = repo().join("tests/python/protobuf_peer.py");
    let proto_dir = repo().join("proto");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .env("PYTHONPATH", &pythonpath)
            .arg(&script)
            .arg("--nats")
            .arg(&url)
            .arg("--proto-dir")
            .arg(&proto_dir)
            .output()
    })
    .await
    .unwrap()
    .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python peer failed ({}):\n{stdout}\n{stderr}\n{}",
        out.status,
        cluster.log_tails()
    );
    eprintln!("the Python peer: {stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(summary["overall_status"], "Completed", "{summary}");
    for kind in [
        "swarm_deployment",
        "task_assignment",
        "result_submission",
        "final_report",
    ] {
        assert!(
            summary["seen"][kind].as_u64().unwrap_or(0) >= 1,
            "{summary}"
        );
    }

    // What the roles stored is protobuf, and Swarm reads it back by its
    // Content-Type like any other codec.
    let swarm_id = summary["swarm_id"].as_str().unwrap();
    let report_subject = swarm_common::subjects::report(swarm_id);
    let js = async_nats::jetstream::new(nc.clone());
    let stream = js
        .get_stream(swarm_common::subjects::A2AP_STREAM)
        .await
        .unwrap();
    let raw = swarm_runtime::wire::last_on(&stream, &report_subject)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        swarm_runtime::wire::header(Some(&raw.headers), "Content-Type"),
        Some("application/protobuf")
    );
    let reports = common::messages::<FinalReport>(&nc, &report_subject).await;
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].body.overall_status, SwarmStatus::Completed);
    // And a client that asks in JSON still gets JSON.
    let mut sub = nc.subscribe("a2ap.>").await.unwrap();
    let again = common::submit(&nc, &MissionRequest::text("Compute 6 * 7")).await;
    let report = common::final_report(&cluster, &nc, &again, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let first = tokio::time::timeout(std::time::Duration::from_secs(5), sub.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        swarm_runtime::wire::header(first.headers.as_ref(), "Content-Type"),
        Some("application/protobuf"),
        "the roles write protobuf whatever the client speaks"
    );
}
