//! Bounded work for every input: a mission whose gates would take a process
//! down is refused at intake with a typed error, quickly; a plan that
//! bypasses intake is bounded again by the manager and the worker, which
//! keep running at a small size; a 256 KB text mission is planned without
//! holding up the boss.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::{Duration, Instant};

use serde_json::json;
use swarm_common::{
    Codec, Envelope, ErrorCode, Limits, SwarmDeployment, SwarmStatus,
    gates::GateSpec,
    headers as h,
    limits::TaskLimits,
    mission::{MissionErrorReply, MissionReply, MissionRequest},
    subjects,
};

/// What no role may exceed under these probes (debug builds; the k8s
/// limits are 512 MiB for the boss and the manager, 1 GiB for a worker).
const PEAK_MIB: u64 = 200;

/// A schema nested `depth` levels deep.
fn nested(depth: usize) -> serde_json::Value {
    let mut v = json!({"type": "integer"});
    for _ in 1..depth {
        v = json!({ "not": v });
    }
    v
}

/// The schema whose `$ref`s chase each other (it once took a worker to
/// 14 GB in 25 s).
fn ref_cycle() -> serde_json::Value {
    json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})
}

/// An explicit mission of one echo task carrying `gates`.
fn gated(gates: Vec<GateSpec>) -> MissionRequest {
    let mut t = common::task("a", &common::echo("{}"), &[]);
    t.gates = gates;
    common::mission("gated", vec![t])
}

/// Submits `body` (a mission as JSON) and returns the refusal, answered
/// within 2 s.
async fn refusal(nc: &async_nats::Client, body: Vec<u8>) -> (MissionErrorReply, String) {
    let started = Instant::now();
    let reply = common::raw_request(nc, None, body).await;
    let took = started.elapsed();
    let err: MissionErrorReply = Codec::Json
        .decode(&reply.payload)
        .unwrap_or_else(|e| panic!("not an error reply ({e}): {:?}", reply.payload));
    assert!(took < Duration::from_secs(2), "refused after {took:?}");
    let status = reply
        .headers
        .and_then(|hdrs| hdrs.get(h::SERVICE_ERROR_CODE).map(|v| v.to_string()))
        .unwrap_or_default();
    (err, status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_that_would_take_a_process_down_are_refused_at_intake() {
    let mut cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let limits = Limits::default();
    let mut dag = serde_json::Map::new();
    for i in 0..24 {
        let next = format!("#/$defs/a{}", i + 1);
        dag.insert(
            format!("a{i}"),
            json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
        );
    }
    dag.insert("a24".into(), json!({"type": "integer"}));
    let mut duplicate = gated(vec![]);
    if let Some(plan) = duplicate.plan.as_mut() {
        plan.tasks
            .push(common::task("b", &common::echo("b"), &["a", "a"]));
    }
    let mut titled = gated(vec![]);
    if let Some(plan) = titled.plan.as_mut() {
        plan.tasks[0].title = "t".repeat(limits.task.max_title_bytes + 1);
    }
    // 6,000 regex gates, written as briefly as JSON allows, to fit in the
    // largest mission intake accepts.
    let mut many = serde_json::to_value(gated(vec![])).unwrap();
    many["plan"]["tasks"][0]["gates"] = json!(vec![json!({"kind": "regex", "pattern": "a"}); 6000]);
    let many = serde_json::to_vec(&many).unwrap();
    assert!(many.len() <= limits.max_mission_bytes, "{}", many.len());
    let json = |r: MissionRequest| Codec::Json.encode(&r).unwrap();
    let cases: Vec<(&str, Vec<u8>, ErrorCode, &str, &str)> = vec![
        (
            "a $ref cycle",
            json(gated(vec![GateSpec::JsonSchema {
                schema: ref_cycle(),
            }])),
            ErrorCode::ValidationFailed,
            "400",
            "leads back",
        ),
        (
            "a recursive schema",
            json(gated(vec![GateSpec::JsonSchema {
                schema: json!({"properties": {"child": {"$ref": "#"}}}),
            }])),
            ErrorCode::ValidationFailed,
            "400",
            "leads back",
        ),
        (
            "a schema nested 90 deep",
            json(gated(vec![GateSpec::JsonSchema { schema: nested(90) }])),
            ErrorCode::LimitExceeded,
            "422",
            "levels deep",
        ),
        (
            "a schema whose $refs expand exponentially",
            json(gated(vec![GateSpec::JsonSchema {
                schema: json!({"$defs": dag, "$ref": "#/$defs/a0"}),
            }])),
            ErrorCode::LimitExceeded,
            "422",
            "expands",
        ),
        (
            "6,000 regex gates",
            many,
            ErrorCode::LimitExceeded,
            "422",
            "6000 gates",
        ),
        (
            "a pattern too long",
            json(gated(vec![GateSpec::Regex {
                pattern: "a".repeat(limits.task.max_regex_bytes + 1),
                forbid: false,
                description: None,
            }])),
            ErrorCode::LimitExceeded,
            "422",
            "bytes; the limit",
        ),
        (
            "a pattern that does not parse",
            json(gated(vec![GateSpec::Regex {
                pattern: "(unclosed".into(),
                forbid: false,
                description: None,
            }])),
            ErrorCode::ValidationFailed,
            "400",
            "not a valid regular expression",
        ),
        (
            "a dependency listed twice",
            json(duplicate),
            ErrorCode::ValidationFailed,
            "400",
            "twice",
        ),
        (
            "a title too long",
            json(titled),
            ErrorCode::LimitExceeded,
            "422",
            "title",
        ),
    ];
    for (name, body, code, status, says) in cases {
        let (err, got_status) = refusal(&nc, body).await;
        assert_eq!(err.error.code, code, "{name}: {}", err.error.message);
        assert_eq!(got_status, status, "{name}");
        assert!(!err.error.retriable, "{name}");
        assert!(
            err.error.message.contains(says),
            "{name}: {}",
            err.error.message
        );
        assert!(
            err.error.message.len() < 300,
            "{name}: the reason is not short: {}",
            err.error.message
        );
    }
    // The deepest schema allowed and the most regex gates are accepted and run.
    let mut gates: Vec<GateSpec> = (0..limits.task.max_gates_per_task - 1)
        .map(|i| GateSpec::Regex {
            pattern: format!("^\\{{\\}}$|never {i}"),
            forbid: false,
            description: None,
        })
        .collect();
    gates.push(GateSpec::JsonSchema {
        schema: nested(limits.task.max_schema_depth),
    });
    let swarm_id = common::submit(&nc, &gated(gates)).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    // Every gate compiled and passed "{}": the regexes match it, and the
    // schema (an integer, negated 15 times) accepts an object.
    let outcome = common::outcome(&report, "a");
    assert_eq!(
        report.overall_status,
        SwarmStatus::Completed,
        "{:?}",
        outcome.gate_verdicts
    );
    assert!(
        outcome.gate_verdicts.iter().all(|v| v.passed),
        "{:?}",
        outcome.gate_verdicts
    );
    common::assert_all_running(&mut cluster);
    common::assert_peaks_below(&mut cluster, "hostile gates at intake", PEAK_MIB);
}

/// A deployment published straight to the managers, with limits raised so
/// far that the manager's own plan check lets a 90-deep schema through: the
/// gate builders on the worker and the manager bound it with their own
/// limits, the task fails with the reason, and both stay small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_bypassed_intake_is_bounded_by_the_gate_builders() {
    let mut cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let js = async_nats::jetstream::new(nc.clone());
    let swarm_id = "5e1f0c2a-0000-4000-8000-0000000000b0";
    let mut t = common::task("a", &common::echo("{}"), &[]);
    t.gates = vec![GateSpec::JsonSchema { schema: nested(90) }];
    let now = chrono::Utc::now();
    let deployment = SwarmDeployment {
        skills_scope: None,
        trace_id: None,
        failure: None,
        parent: None,
        mission: "bypassed".into(),
        mission_id: None,
        plan: common::plan(vec![t]),
        limits: Limits {
            task: Box::new(TaskLimits {
                max_schema_depth: 1000,
                ..TaskLimits::default()
            }),
            ..Limits::default()
        },
        budget: Default::default(),
        accepted_at: now,
        deadline: now + chrono::Duration::minutes(5),
    };
    let env = Envelope::new("test", "manager", swarm_id, swarm_id, deployment);
    swarm_runtime::wire::publish(&js, subjects::deploy(swarm_id), &env, None)
        .await
        .unwrap();
    let report = common::final_report(&cluster, &nc, swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Failed);
    let outcome = common::outcome(&report, "a");
    let said = serde_json::to_string(outcome).unwrap();
    assert!(said.contains("levels deep"), "{said}");
    common::assert_all_running(&mut cluster);
    // A 90-deep schema compiled would have taken about 645 MiB.
    common::assert_peaks_below(&mut cluster, "a 90-deep schema past intake", PEAK_MIB);
}

/// A 256 KB text mission (the most intake accepts) is planned in linear
/// time: the boss answers the next mission at once, and runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_text_mission_does_not_hold_up_the_boss() {
    let cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let max = Limits::default().max_mission_bytes;
    let unit = "count the words in notes.txt and the lines of it, ";
    let mut big = unit.repeat(max / unit.len() + 1);
    big.truncate(max);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(h::CONTENT_TYPE, "text/plain");
    let reply = common::raw_request(&nc, Some(headers), big.into_bytes()).await;
    let accepted: MissionReply = Codec::Json.decode(&reply.payload).unwrap();
    assert_eq!(accepted.status, "accepted");
    // The boss plans the big mission now (it took the quadratic planner about
    // a minute in a debug build); the next one is answered at once.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let swarm_id = common::submit(&nc, &MissionRequest::text("Compute 6 * 7")).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    let mut cluster = cluster;
    common::assert_peaks_below(&mut cluster, "a 256 KB text mission", PEAK_MIB);
}
