//! What Swarm writes, read as the seed's A2AP classes read it: every
//! message a real mission stores (deployment, assignments, progress,
//! results, the report) carries each field of the seed's class with the
//! seed's JSON type, and every status field a seed peer reads holds one of
//! the seed's five values, with Swarm's finer status beside it. The read
//! side (the seed's JSON decoding into Swarm's types) is
//! `common/tests/seed.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use swarm_common::{
    Codec, Envelope, ErrorBody, ErrorCode, ErrorMessage, FinalReport, ProgressUpdate, SwarmStatus,
    TaskDefinition, TaskOutcome, TaskStatus, subjects,
};
use swarm_testkit::Cluster;

/// A JSON type as System.Text.Json needs it for a property of the seed's
/// classes.
#[derive(Clone, Copy)]
enum Ty {
    /// `string`.
    Str,
    /// `int`: a whole number.
    Int,
    /// `double`.
    Num,
    /// `List<string>`.
    Strs,
    /// `Dictionary<string, object>`.
    Obj,
    /// `Dictionary<string, string>`.
    StrMap,
    /// `TaskStatus`, a string enum of five values.
    Status,
    /// A nested class.
    One(&'static [Field]),
    /// A list of a class.
    Many(&'static [Field]),
    /// A nullable property: absent or null, or the type.
    Maybe(&'static Ty),
}

type Field = (&'static str, Ty);

use Ty::*;

/// The seed's `TaskStatus`.
const SEED_STATUSES: [&str; 5] = ["Pending", "InProgress", "Completed", "Failed", "Cancelled"];

/// The base class of every seed message.
const ENVELOPE: &[Field] = &[
    ("message_id", Str),
    ("timestamp", Str),
    ("sender_agent", Str),
    ("recipient_agent", Str),
    ("message_type", Str),
    ("correlation_id", Str),
    ("swarm_id", Str),
];
const WORKER_PLAN: &[Field] = &[
    ("worker_name", Str),
    ("role", Str),
    ("system_prompt", Str),
    ("tools", Strs),
    ("collaborators", Strs),
];
const TASK_DEFINITION: &[Field] = &[
    ("task_id", Str),
    ("title", Str),
    ("description", Str),
    ("assigned_to", Str),
    ("dependencies", Strs),
    ("priority", Maybe(&Int)),
    ("estimated_minutes", Maybe(&Int)),
];
const DEPLOYMENT_PLAN: &[Field] = &[
    ("swarm_id", Str),
    ("manager_name", Str),
    ("original_task", Str),
    ("max_execution_minutes", Int),
    ("workers", Many(WORKER_PLAN)),
];
const DEPLOYMENT: &[Field] = &[("plan", One(DEPLOYMENT_PLAN))];
const ASSIGNMENT: &[Field] = &[("tasks", Many(TASK_DEFINITION))];
const PROGRESS: &[Field] = &[
    ("task_id", Str),
    ("status", Status),
    ("progress_percentage", Num),
    ("progress_description", Str),
];
const RESULT: &[Field] = &[
    ("task_id", Str),
    ("result", Str),
    ("structured_data", Obj),
    ("artifacts", Strs),
    ("final_status", Status),
];
const TASK_RESULT: &[Field] = &[("task_id", Str), ("status", Status), ("result", Str)];
const REPORT: &[Field] = &[
    ("overall_status", Status),
    ("summary", Str),
    ("insights", Str),
    ("metrics", StrMap),
    ("task_results", Many(TASK_RESULT)),
];
const ERROR: &[Field] = &[
    ("error_code", Str),
    ("error_message", Str),
    ("details", StrMap),
    ("affected_task_id", Maybe(&Str)),
];

/// The seed's class of a message type Swarm sends, past the envelope.
fn class_of(message_type: &str) -> Option<&'static [Field]> {
    Some(match message_type {
        "SwarmDeployment" => DEPLOYMENT,
        "TaskAssignment" => ASSIGNMENT,
        "ProgressUpdate" => PROGRESS,
        "ResultSubmission" => RESULT,
        "FinalReport" => REPORT,
        "Error" => ERROR,
        _ => return None,
    })
}

/// Where `value` is not of type `ty`, at `path`.
fn check(ty: Ty, value: Option<&Value>, path: &str, problems: &mut Vec<String>) {
    let Some(v) = value else {
        if !matches!(ty, Maybe(_)) {
            problems.push(format!("{path}: missing"));
        }
        return;
    };
    let ok = match ty {
        Str => v.is_string(),
        Int => v.is_i64() || v.is_u64(),
        Num => v.is_number(),
        Strs => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        Obj => v.is_object(),
        StrMap => v
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string)),
        Status => v.as_str().is_some_and(|s| SEED_STATUSES.contains(&s)),
        One(fields) => {
            conforms(fields, v, path, problems);
            v.is_object()
        }
        Many(fields) => match v.as_array() {
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    conforms(fields, item, &format!("{path}[{i}]"), problems);
                }
                true
            }
            None => false,
        },
        Maybe(inner) => {
            if !v.is_null() {
                check(*inner, Some(v), path, problems);
            }
            true
        }
    };
    if !ok {
        problems.push(format!("{path}: {v} is not what the seed's class holds"));
    }
}

/// Where `value` is not an instance of the seed's class `fields`.
fn conforms(fields: &[Field], value: &Value, path: &str, problems: &mut Vec<String>) {
    for (name, ty) in fields {
        check(*ty, value.get(name), &format!("{path}.{name}"), problems);
    }
}

/// Where a whole message is not what the seed's class of its type reads;
/// the type itself must be one the seed has.
fn seed_problems(message: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    conforms(ENVELOPE, message, "", &mut problems);
    let kind = message["message_type"].as_str().unwrap_or_default();
    match class_of(kind) {
        Some(class) => conforms(class, message, kind, &mut problems),
        None => problems.push(format!("{kind}: not a class the seed has")),
    }
    problems
}

/// `value` as JSON, whichever of Swarm's codecs wrote it.
fn as_json(bytes: &[u8]) -> Value {
    Codec::Json
        .decode(bytes)
        .or_else(|_| Codec::MsgPack.decode(bytes))
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(bytes)))
}

fn encoded<T: swarm_common::Payload>(body: T) -> Value {
    let env = Envelope::new("manager-1", "boss", "s1", "s1", body);
    serde_json::from_slice(&env.encode(Codec::Json).unwrap()).unwrap()
}

fn outcome(task_id: &str, status: TaskStatus) -> TaskOutcome {
    TaskOutcome {
        skills: Default::default(),
        task_id: task_id.into(),
        title: task_id.into(),
        description: String::new(),
        assigned_to: "w".into(),
        dependencies: Vec::new(),
        status,
        result: String::new(),
        result_truncated: false,
        result_seq: None,
        attempts: 1,
        revisions: 0,
        assigned_at: None,
        started_at: None,
        completed_at: None,
        error: None,
        gate_verdicts: Vec::new(),
        provider: String::new(),
        child_swarm: None,
        asked_by: None,
    }
}

#[test]
fn statuses_the_seed_lacks_travel_as_one_of_its_five_with_ours_beside() {
    let update = encoded(ProgressUpdate {
        task_id: "t1".into(),
        status: TaskStatus::InputRequired,
        progress_percentage: 40,
        message: "waiting for an answer".into(),
        attempt: 1,
        revision: 0,
        metrics: BTreeMap::new(),
    });
    assert_eq!(seed_problems(&update), Vec::<String>::new());
    assert_eq!(update["status"], "InProgress");
    assert_eq!(update["detailed_status"], "InputRequired");
    assert_eq!(update["progress_description"], "waiting for an answer");

    let at = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
        .unwrap()
        .to_utc();
    let report = FinalReport {
        skills: Default::default(),
        trace_id: None,
        overall_status: SwarmStatus::TimedOut,
        mission: "m".into(),
        summary: "ran out of time".into(),
        insights: vec!["one".into(), "two".into()],
        task_results: vec![
            outcome("done", TaskStatus::Completed),
            outcome("skipped", TaskStatus::Skipped),
            outcome("waiting", TaskStatus::Assigned),
        ],
        metrics: [("tasks".to_string(), 3.0), ("cost_usd".to_string(), 0.25)]
            .into_iter()
            .collect(),
        started_at: at,
        completed_at: at,
    };
    let json = encoded(report.clone());
    assert_eq!(seed_problems(&json), Vec::<String>::new());
    assert_eq!(json["overall_status"], "Failed");
    assert_eq!(json["swarm_status"], "TimedOut");
    assert_eq!(json["insights"], "one\ntwo");
    assert_eq!(json["insight_list"], json!(["one", "two"]));
    assert_eq!(json["metrics"], json!({"cost_usd": "0.25", "tasks": "3"}));
    assert_eq!(json["metric_values"]["tasks"], 3.0);
    let statuses: Vec<(&Value, &Value)> = json["task_results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (&t["status"], &t["detailed_status"]))
        .collect();
    assert_eq!(
        statuses,
        [
            (&json!("Completed"), &json!("Completed")),
            (&json!("Cancelled"), &json!("Skipped")),
            (&json!("Pending"), &json!("Assigned")),
        ]
    );
    // Read back whole by Swarm, in every codec.
    let env = Envelope::new("manager-1", "boss", "s1", "s1", report);
    for codec in [Codec::Json, Codec::MsgPack, Codec::Protobuf] {
        let back = Envelope::<FinalReport>::decode(codec, &env.encode(codec).unwrap()).unwrap();
        assert_eq!(back, env, "{codec:?}");
    }
    // A seed peer's report (its five values, text insights and figures)
    // reads into ours.
    let seed: FinalReport = serde_json::from_value(json!({
        "overall_status": "Cancelled",
        "mission": "m",
        "summary": "s",
        "insights": "first\n\n second ",
        "task_results": [],
        "metrics": {"tasks": "2", "note": "not a number"},
        "started_at": "2026-01-02T03:04:05Z",
        "completed_at": "2026-01-02T03:04:05Z",
    }))
    .unwrap();
    assert_eq!(seed.overall_status, SwarmStatus::Cancelled);
    assert_eq!(seed.insights, ["first", "second"]);
    assert_eq!(
        seed.metrics,
        [("tasks".to_string(), 2.0)].into_iter().collect()
    );

    let error = encoded(ErrorMessage {
        task_id: Some("t3".into()),
        attempt: Some(1),
        error: ErrorBody::new(ErrorCode::ToolFailed, "no such file").with_detail("path", "x.txt"),
        token: String::new(),
    });
    assert_eq!(seed_problems(&error), Vec::<String>::new());
    assert_eq!(error["error_code"], "tool_failed");
    assert_eq!(error["affected_task_id"], "t3");
    assert_eq!(error["details"], json!({"path": "x.txt"}));
}

#[test]
fn the_checker_finds_what_a_seed_peer_could_not_read() {
    // The conformance check itself: a message in Swarm's earlier shape
    // (list insights, numeric metrics, a status the seed lacks) fails it.
    let old = json!({
        "message_id": "m", "timestamp": "2026-01-02T03:04:05Z", "sender_agent": "a",
        "recipient_agent": "b", "message_type": "FinalReport", "correlation_id": "c",
        "swarm_id": "s", "overall_status": "TimedOut", "summary": "s",
        "insights": ["a"], "metrics": {"tasks": 1.0},
        "task_results": [{"task_id": "t", "status": "Skipped", "result": ""}],
    });
    let problems = seed_problems(&old);
    for field in [
        "FinalReport.overall_status",
        "FinalReport.insights",
        "FinalReport.metrics",
        "FinalReport.task_results[0].status",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(&format!("{field}:"))),
            "{field} in {problems:?}"
        );
    }
}

/// A real mission, in JSON on the wire: a JSON result, a skipped task, a
/// file written, an agent-loop task and one long enough to report
/// progress; every stored
/// message of the swarm is checked against the seed's class of its type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_a_mission_stores_is_what_the_seeds_classes_read() {
    let ws = tempfile::tempdir().unwrap();
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .workspace(ws.path())
        .env("SWARM_CODEC", "json")
        .env("SWARM_TOOL_WRITE_FILE", "true")
        .start()
        .await
        .expect("the cluster starts");
    let nc = cluster.client().await;
    let review = TaskDefinition {
        condition: Some(
            serde_json::from_value(json!(
                {"when": {"task": "check", "pointer": "/needs_review", "equals": true}}
            ))
            .unwrap(),
        ),
        ..common::task("review", &common::echo("reviewed"), &["check"])
    };
    let write = TaskDefinition {
        estimated_minutes: Some(5),
        ..common::task(
            "write",
            &common::tool(
                "write_file",
                json!({"path": "out/seed.txt", "content": "written for the seed"}),
            ),
            &["check"],
        )
    };
    let mission = common::mission(
        "check, review if asked, write a file, then count",
        vec![
            common::task("check", &common::echo(r#"{"needs_review": false}"#), &[]),
            review,
            write,
            common::task("count", "Count the words in: one two three", &["write"]),
            // Still running past the first progress interval: it reports.
            common::task("wait", &common::sleep(400), &["check"]),
        ],
    );
    let id = common::submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 90).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");

    let mut stored: Vec<Value> = Vec::new();
    for (stream, subject) in [
        (subjects::A2AP_STREAM, format!("a2ap.{id}.>")),
        (subjects::WORK_STREAM, format!("a2ap.work.*.{id}.>")),
    ] {
        let raw = common::messages_raw(&nc, stream, &subject).await;
        stored.extend(raw.iter().map(|b| as_json(b)));
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for message in &stored {
        let kind = message["message_type"].as_str().unwrap_or_default();
        *seen.entry(kind.to_owned()).or_default() += 1;
        if class_of(kind).is_none() {
            continue; // Swarm's own (control, asks, replans): no seed class.
        }
        let problems = seed_problems(message);
        assert!(problems.is_empty(), "{problems:#?}\nin {message:#}");
    }
    for kind in [
        "SwarmDeployment",
        "TaskAssignment",
        "ProgressUpdate",
        "ResultSubmission",
        "FinalReport",
    ] {
        assert!(seen.contains_key(kind), "no {kind} among {seen:?}");
    }

    // Where the seed's fields carry what they should.
    fn of<'a>(stored: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> {
        stored.iter().filter(move |m| m["message_type"] == kind)
    }
    let deployment = of(&stored, "SwarmDeployment").next().unwrap();
    assert_eq!(
        deployment["plan"]["original_task"],
        "check, review if asked, write a file, then count"
    );
    assert_eq!(deployment["plan"]["swarm_id"], id.as_str());
    assert_eq!(deployment["plan"]["workers"][0]["worker_name"], "w");
    let assigned = of(&stored, "TaskAssignment")
        .find(|m| m["task_id"] == "write")
        .unwrap();
    assert_eq!(assigned["tasks"][0]["task_id"], "write");
    assert_eq!(assigned["tasks"][0]["estimated_minutes"], 5);
    let result = |task: &str| {
        of(&stored, "ResultSubmission")
            .find(|m| m["task_id"] == task)
            .unwrap_or_else(|| panic!("no result of {task}"))
    };
    assert_eq!(
        result("check")["structured_data"],
        json!({"needs_review": false})
    );
    assert_eq!(result("check")["final_status"], "Completed");
    assert_eq!(result("write")["artifacts"], json!(["out/seed.txt"]));
    assert_eq!(result("write")["structured_data"], json!({}));
    let report = of(&stored, "FinalReport").next().unwrap();
    assert_eq!(report["overall_status"], "Completed");
    let review = report["task_results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task_id"] == "review")
        .unwrap();
    assert_eq!(
        (&review["status"], &review["detailed_status"]),
        (&json!("Cancelled"), &json!("Skipped"))
    );
    cluster.stop(Duration::from_secs(5)).await;
}
