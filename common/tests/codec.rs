//! Round trips of every A2AP message, the swarm state and the mission types
//! through the codecs, the JSON shape peers rely on, and the refusals:
//! another message type, an unknown protocol version, and garbage bytes.

#![allow(
    clippy::unwrap_used,
    reason = "helpers of a test report a failure by panicking, as the tests do"
)]

use std::collections::BTreeMap;
use std::fmt::Debug;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use swarm_common::mission::{MissionRecord, MissionRequest, MissionStatus};
use swarm_common::{
    Codec, ContextRef, Control, Envelope, ErrorBody, ErrorCode, ErrorMessage, FinalReport,
    GateVerdict, Limits, MessageType, Payload, ProgressUpdate, ResultSubmission, StepRecord,
    SwarmDeployment, SwarmDeploymentPlan, SwarmState, SwarmStatus, TaskAssignment, TaskDefinition,
    TaskOutcome, TaskState, TaskStatus, WorkerDeploymentPlan,
};

const CODECS: [Codec; 2] = [Codec::MsgPack, Codec::Json];

fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .with_timezone(&Utc)
}

fn metrics(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn envelope<T: Payload>(body: T) -> Envelope<T> {
    Envelope {
        protocol_version: "1.0".into(),
        message_id: "6f1c9a2e-3b4d-4e5f-8a7b-9c0d1e2f3a4b".into(),
        timestamp: at("2025-03-01T12:34:56.789123Z"),
        sender_agent: "worker-7".into(),
        recipient_agent: "manager".into(),
        message_type: T::MESSAGE_TYPE,
        correlation_id: "t2".into(),
        swarm_id: "0b6e3c1a-9f2d-4c8e-a1b7-5d4f3e2a1c0b".into(),
        body,
    }
}

fn persona() -> WorkerDeploymentPlan {
    WorkerDeploymentPlan {
        name: "file-analyst".into(),
        role: "Reads files".into(),
        system_prompt: "You examine files in the workspace.".into(),
        tools: vec!["read_file".into(), "count".into()],
        collaborators: vec!["calculator".into()],
        pool: "general".into(),
        a2a_url: None,
        a2a_credential: None,
        skill: None,
    }
}

fn task_definition() -> TaskDefinition {
    TaskDefinition {
        estimated_minutes: None,
        on_failure: None,
        task_id: "t2".into(),
        title: "Count the words".into(),
        description: "count the words in notes.txt".into(),
        assigned_to: "file-analyst".into(),
        dependencies: vec!["t1".into()],
        priority: Some(3),
        max_result_bytes: Some(4096),
        gates: Vec::new(),
        condition: Some(
            serde_json::from_value(serde_json::json!({"any": [
                {"when": {"task": "t1", "pointer": "/words", "equals": null}},
                {"not": {"when": {"task": "t1", "status": "skipped"}}}
            ]}))
            .unwrap(),
        ),
        map: Some(
            serde_json::from_value(
                serde_json::json!({"over": {"task": "t1", "pointer": "/files"}, "concurrency": 2}),
            )
            .unwrap(),
        ),
    }
}

fn plan() -> SwarmDeploymentPlan {
    SwarmDeploymentPlan {
        seed: Default::default(),
        sub_managers: Vec::new(),
        manager_directive: "Count the words, then report.".into(),
        workers: vec![persona()],
        tasks: vec![
            TaskDefinition {
                estimated_minutes: None,
                on_failure: None,
                task_id: "t1".into(),
                title: "Read".into(),
                description: "read notes.txt".into(),
                assigned_to: "file-analyst".into(),
                dependencies: vec![],
                priority: Some(4),
                max_result_bytes: Some(8192),
                gates: Vec::new(),
                condition: None,
                map: None,
            },
            task_definition(),
        ],
        success_criteria: vec!["t2 completes with a non-empty result".into()],
        planner: "offline-planner".into(),
    }
}

fn error_body() -> ErrorBody {
    ErrorBody::new(
        ErrorCode::ToolFailed,
        "tool \"read_file\" failed: no such file",
    )
    .with_detail("tool", "read_file")
    .with_detail("path", "missing.txt")
}

fn budget() -> swarm_common::MissionBudget {
    swarm_common::MissionBudget {
        max_tokens: Some(50_000),
        max_cost_usd: Some(1.5),
    }
}

fn deployment() -> SwarmDeployment {
    SwarmDeployment {
        skills_scope: None,
        trace_id: None,
        failure: None,
        parent: None,
        mission: "1. read notes.txt\n2. count the words".into(),
        mission_id: Some("mission-42".into()),
        plan: plan(),
        limits: Limits {
            max_steps: 5,
            ..Limits::default()
        },
        budget: budget(),
        accepted_at: at("2025-03-01T12:00:00Z"),
        deadline: at("2025-03-01T13:00:00Z"),
    }
}

fn assignment() -> TaskAssignment {
    TaskAssignment {
        skills_scope: None,
        tasks: Vec::new(),
        child: None,
        token: String::new(),
        collaborators: Vec::new(),
        task_id: "t2".into(),
        title: "Count the words".into(),
        description: "count the words in notes.txt".into(),
        persona: persona(),
        attempt: 2,
        revision: 1,
        feedback: vec!["Keep it to at most 200 bytes.".into()],
        context: vec![ContextRef {
            task_id: "t1".into(),
            title: "Read".into(),
            result_seq: 17,
            result: Some("notes.txt holds 42 words".into()),
        }],
        max_steps: 8,
        max_attempts: 3,
        max_result_bytes: 65536,
        priority: 3,
        deadline: at("2025-03-01T13:00:00Z"),
        gates: vec![swarm_common::gates::GateSpec::Length {
            min_chars: Some(1),
            max_chars: Some(200),
        }],
        budget: budget(),
        spent_tokens: 1234,
        spent_cost_usd: 0.25,
    }
}

fn progress() -> ProgressUpdate {
    ProgressUpdate {
        task_id: "t2".into(),
        status: TaskStatus::InProgress,
        progress_percentage: 40,
        message: "step 2: calling count".into(),
        attempt: 2,
        revision: 1,
        metrics: metrics(&[("steps", 2.0), ("tool_calls", 1.0), ("elapsed_ms", 12.5)]),
    }
}

fn submission() -> ResultSubmission {
    ResultSubmission {
        skills: Default::default(),
        artifacts: Vec::new(),
        token: String::new(),
        task_id: "t2".into(),
        status: TaskStatus::Completed,
        result: "[offline provider] count of notes.txt: 9 words".into(),
        attempt: 2,
        revision: 1,
        provider: "offline".into(),
        worker_id: "worker-7".into(),
        started_at: at("2025-03-01T12:30:00.5Z"),
        completed_at: at("2025-03-01T12:30:01.25Z"),
        steps: vec![StepRecord {
            step: 1,
            tool: Some("count".into()),
            arguments: Some(r#"{"path":"notes.txt"}"#.into()),
            observation: r#"{"words":9,"lines":2,"characters":44,"bytes":44}"#.into(),
            is_error: false,
        }],
        metrics: metrics(&[
            ("steps", 2.0),
            ("input_tokens", 0.0),
            ("elapsed_ms", 750.25),
        ]),
        error: Some(error_body()),
        gate_verdicts: vec![GateVerdict {
            gate: "length".into(),
            passed: false,
            reason: "too long".into(),
            revision: 1,
        }],
    }
}

fn outcome() -> TaskOutcome {
    TaskOutcome {
        skills: Default::default(),
        child_swarm: None,
        task_id: "t2".into(),
        title: "Count the words".into(),
        description: "count the words in notes.txt".into(),
        assigned_to: "file-analyst".into(),
        dependencies: vec!["t1".into()],
        status: TaskStatus::Completed,
        result: "9 words".into(),
        result_truncated: true,
        result_seq: Some(23),
        attempts: 2,
        revisions: 1,
        assigned_at: Some(at("2025-03-01T12:29:59Z")),
        started_at: Some(at("2025-03-01T12:30:00Z")),
        completed_at: Some(at("2025-03-01T12:30:01Z")),
        error: Some("first attempt timed out".into()),
        gate_verdicts: vec![GateVerdict {
            gate: "max_result_bytes".into(),
            passed: false,
            reason: "the result is 300 bytes; the limit is 200".into(),
            revision: 0,
        }],
        provider: "offline".into(),
        asked_by: None,
    }
}

fn report() -> FinalReport {
    FinalReport {
        skills: Default::default(),
        trace_id: None,
        overall_status: SwarmStatus::Completed,
        mission: "count the words in notes.txt".into(),
        summary: "1 of 1 tasks completed".into(),
        insights: vec!["t2 needed one revision".into()],
        task_results: vec![outcome()],
        metrics: metrics(&[
            ("tasks_completed", 1.0),
            ("revisions", 1.0),
            ("duration_ms", 61000.0),
        ]),
        started_at: at("2025-03-01T12:00:00Z"),
        completed_at: at("2025-03-01T12:31:00Z"),
    }
}

fn error_message() -> ErrorMessage {
    ErrorMessage {
        token: String::new(),
        task_id: Some("t2".into()),
        attempt: Some(2),
        error: error_body(),
    }
}

fn control() -> Control {
    Control::Cancel {
        reason: "stopped by an operator".into(),
    }
}

fn swarm_state() -> SwarmState {
    SwarmState {
        skills_scope: None,
        chunks: None,
        trace_id: None,
        success_criteria: Vec::new(),
        changes: Vec::new(),
        replan: false,
        parent: None,
        sub_managers: Vec::new(),
        swarm_id: "0b6e3c1a-9f2d-4c8e-a1b7-5d4f3e2a1c0b".into(),
        mission: "count the words in notes.txt".into(),
        mission_id: Some("mission-42".into()),
        status: SwarmStatus::Running,
        manager_directive: "Count the words.".into(),
        workers: vec![persona()],
        planner: "offline-planner".into(),
        tasks: vec![TaskState {
            skills: Default::default(),
            replanning: false,
            fallback_for: None,
            definition: task_definition(),
            status: TaskStatus::Completed,
            pool: "general".into(),
            priority: 3,
            attempt: 2,
            revision: 1,
            feedback: vec!["shorter please".into()],
            assigned_at: Some(at("2025-03-01T12:29:59Z")),
            started_at: Some(at("2025-03-01T12:30:00Z")),
            completed_at: Some(at("2025-03-01T12:30:01Z")),
            result_seq: Some(23),
            result_bytes: 47,
            result_preview: "[offline provider] count".into(),
            provider: "offline".into(),
            error: Some("first attempt timed out".into()),
            worker_id: Some("worker-2".into()),
            redeliveries: 1,
            gate_verdicts: vec![GateVerdict {
                gate: "non_empty".into(),
                passed: true,
                reason: String::new(),
                revision: 1,
            }],
            checks: [(
                "/words == null".to_string(),
                swarm_common::condition::Check {
                    holds: false,
                    reason: "t1's \"/words\" is 3, not null".into(),
                },
            )]
            .into(),
            map: Some(swarm_common::map::MapState {
                items: vec![serde_json::json!("a.txt")],
                error: None,
                expanded: true,
                children: vec!["t2-0".into()],
                progress: Some(swarm_common::map::MapProgress {
                    started: 1,
                    completed: 0,
                }),
            }),
            parent: Some("t0".into()),
            asked_by: Some("t0".into()),
            asks: vec![swarm_common::collaborate::AskRecord {
                attempt: 1,
                revision: 0,
                ask: 1,
                collaborator: "reviewer".into(),
                task_id: Some("t1-ask1".into()),
                refused: None,
            }],
        }]
        .into(),
        limits: Limits::default(),
        budget: budget(),
        accepted_at: at("2025-03-01T12:00:00Z"),
        started_at: at("2025-03-01T12:00:01Z"),
        deadline: at("2025-03-01T13:00:00Z"),
        completed_at: Some(at("2025-03-01T12:31:00Z")),
        cancel_reason: Some("none yet".into()),
        last_event_seq: 99,
        metrics: metrics(&[("attempts", 2.0), ("gate_failures", 1.0)]),
        last_manager: "manager-2".into(),
        report_published: true,
    }
}

fn mission_request() -> MissionRequest {
    MissionRequest {
        skills_scope: None,
        mission: "count the words in notes.txt".into(),
        mission_id: Some("mission-42".into()),
        max_execution_minutes: Some(30),
        max_execution_seconds: Some(90),
        max_tokens: Some(50_000),
        max_cost_usd: Some(1.5),
        plan: Some(plan()),
        protocol_version: Some("1.0".into()),
    }
}

fn mission_record() -> MissionRecord {
    MissionRecord {
        parent: None,
        swarm_id: "0b6e3c1a-9f2d-4c8e-a1b7-5d4f3e2a1c0b".into(),
        request: mission_request(),
        status: MissionStatus::Deployed,
        accepted_at: at("2025-03-01T12:00:00Z"),
        updated_at: at("2025-03-01T12:00:02Z"),
        plan: Some(plan()),
        overall_status: Some(SwarmStatus::Completed),
        report_object: Some("report-0b6e3c1a.html".into()),
        report_file: Some("/var/lib/swarm/reports/0b6e3c1a.html".into()),
        error: Some(error_body()),
    }
}

/// Encodes in both codecs, checks the round trip, and returns the JSON form
/// (for JSON directly, for MessagePack read back as a generic value).
fn round_trip<T>(message: &Envelope<T>) -> Value
where
    T: Payload + PartialEq + Debug + Clone,
{
    let mut json_forms = Vec::new();
    for codec in CODECS {
        let bytes = message.encode(codec).unwrap();
        let back = Envelope::<T>::decode(codec, &bytes).unwrap();
        assert_eq!(&back, message, "{codec:?}");
        let generic: Value = match codec {
            Codec::Json => serde_json::from_slice(&bytes).unwrap(),
            Codec::MsgPack | Codec::Protobuf => rmp_serde::from_slice(&bytes).unwrap(),
        };
        json_forms.push(generic);
    }
    // MessagePack carries named fields: the same flat map as the JSON.
    assert_eq!(json_forms[0], json_forms[1]);
    // Protobuf carries every field too (proto/a2ap.proto); the error names
    // a field the .proto lacks.
    let bytes = message
        .encode(Codec::Protobuf)
        .unwrap_or_else(|e| panic!("{e}"));
    let back = Envelope::<T>::decode(Codec::Protobuf, &bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&back, message, "protobuf");
    json_forms.remove(1)
}

fn plain_round_trip<T>(value: &T) -> Value
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    for codec in CODECS {
        let bytes = codec.encode(value).unwrap();
        let back: T = codec.decode(&bytes).unwrap();
        assert_eq!(&back, value, "{codec:?}");
    }
    // The types that travel on a subject have a protobuf message too.
    if swarm_common::proto::message_for::<T>().is_ok() {
        let bytes = Codec::Protobuf
            .encode(value)
            .unwrap_or_else(|e| panic!("{e}"));
        let back: T = Codec::Protobuf
            .decode(&bytes)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&back, value, "protobuf");
    }
    serde_json::to_value(value).unwrap()
}

fn assert_flat_envelope(json: &Value, message_type: &str) {
    assert_eq!(json["protocol_version"], "1.0");
    assert_eq!(json["message_type"], message_type);
    assert_eq!(json["message_id"], "6f1c9a2e-3b4d-4e5f-8a7b-9c0d1e2f3a4b");
    assert_eq!(json["sender_agent"], "worker-7");
    assert_eq!(json["recipient_agent"], "manager");
    assert_eq!(json["correlation_id"], "t2");
    assert_eq!(json["swarm_id"], "0b6e3c1a-9f2d-4c8e-a1b7-5d4f3e2a1c0b");
    assert!(
        json["timestamp"]
            .as_str()
            .unwrap()
            .starts_with("2025-03-01T12:34:56.789123")
    );
    assert!(
        json.get("body").is_none(),
        "the payload is flat, not nested"
    );
}

#[test]
fn swarm_deployment_round_trips() {
    let json = round_trip(&envelope(deployment()));
    assert_flat_envelope(&json, "SwarmDeployment");
    assert_eq!(json["mission_id"], "mission-42");
    assert_eq!(json["plan"]["planner"], "offline-planner");
    assert_eq!(json["plan"]["workers"][0]["name"], "file-analyst");
    assert_eq!(
        json["plan"]["workers"][0]["system_prompt"],
        "You examine files in the workspace."
    );
    assert_eq!(json["plan"]["tasks"][1]["dependencies"], json!(["t1"]));
    assert_eq!(json["plan"]["tasks"][1]["max_result_bytes"], 4096);
    assert_eq!(json["limits"]["max_steps"], 5);
    assert_eq!(json["deadline"], "2025-03-01T13:00:00Z");
}

#[test]
fn task_assignment_round_trips() {
    let json = round_trip(&envelope(assignment()));
    assert_flat_envelope(&json, "TaskAssignment");
    assert_eq!(json["task_id"], "t2");
    assert_eq!(json["persona"]["pool"], "general");
    assert_eq!(json["persona"]["tools"], json!(["read_file", "count"]));
    assert_eq!(json["context"][0]["result_seq"], 17);
    assert_eq!(json["feedback"][0], "Keep it to at most 200 bytes.");
    assert_eq!(json["max_result_bytes"], 65536);
}

#[test]
fn progress_update_round_trips() {
    let json = round_trip(&envelope(progress()));
    assert_flat_envelope(&json, "ProgressUpdate");
    assert_eq!(json["task_id"], "t2");
    assert_eq!(json["status"], "InProgress");
    assert_eq!(json["progress_percentage"], 40);
    assert_eq!(json["metrics"]["elapsed_ms"], 12.5);
}

#[test]
fn result_submission_round_trips() {
    let json = round_trip(&envelope(submission()));
    assert_flat_envelope(&json, "ResultSubmission");
    assert_eq!(json["task_id"], "t2");
    assert_eq!(json["status"], "Completed");
    assert_eq!(json["provider"], "offline");
    assert_eq!(json["steps"][0]["tool"], "count");
    assert_eq!(json["steps"][0]["is_error"], false);
    assert_eq!(json["error"]["code"], "tool_failed");
    assert_eq!(json["error"]["retriable"], false);
    assert_eq!(json["error"]["details"]["path"], "missing.txt");
    assert_eq!(json["metrics"]["elapsed_ms"], 750.25);
}

#[test]
fn final_report_round_trips() {
    let json = round_trip(&envelope(report()));
    assert_flat_envelope(&json, "FinalReport");
    assert_eq!(json["overall_status"], "Completed");
    let task = &json["task_results"][0];
    assert_eq!(task["status"], "Completed");
    assert_eq!(task["result_truncated"], true);
    assert_eq!(task["result_seq"], 23);
    assert_eq!(task["gate_verdicts"][0]["passed"], false);
    assert_eq!(task["assigned_at"], "2025-03-01T12:29:59Z");
    assert_eq!(json["metric_values"]["duration_ms"], 61000.0);
    // The seed's types beside ours.
    assert_eq!(json["swarm_status"], "Completed");
    assert_eq!(json["metrics"]["duration_ms"], "61000");
    assert_eq!(task["detailed_status"], "Completed");
}

#[test]
fn error_message_round_trips() {
    let json = round_trip(&envelope(error_message()));
    assert_flat_envelope(&json, "Error");
    assert_eq!(json["task_id"], "t2");
    assert_eq!(json["attempt"], 2);
    assert_eq!(json["error"]["code"], "tool_failed");
    assert_eq!(
        json["error"]["message"],
        "tool \"read_file\" failed: no such file"
    );
}

#[test]
fn control_round_trips() {
    let json = round_trip(&envelope(control()));
    assert_flat_envelope(&json, "Control");
    assert_eq!(json["command"], "cancel");
    assert_eq!(json["reason"], "stopped by an operator");
}

#[test]
fn swarm_state_and_mission_types_round_trip() {
    let json = plain_round_trip(&swarm_state());
    assert_eq!(json["status"], "Running");
    assert_eq!(json["tasks"][0]["definition"]["task_id"], "t2");
    assert_eq!(json["tasks"][0]["status"], "Completed");
    assert_eq!(json["tasks"][0]["result_seq"], 23);
    assert_eq!(json["last_event_seq"], 99);
    assert_eq!(json["cancel_reason"], "none yet");
    assert_eq!(json["report_published"], true);

    let json = plain_round_trip(&mission_request());
    assert_eq!(json["mission"], "count the words in notes.txt");
    assert_eq!(json["max_execution_minutes"], 30);
    assert_eq!(json["plan"]["tasks"][0]["task_id"], "t1");

    let json = plain_round_trip(&mission_record());
    assert_eq!(json["status"], "Deployed");
    assert_eq!(json["overall_status"], "Completed");
    assert_eq!(json["request"]["mission_id"], "mission-42");
    assert_eq!(json["error"]["code"], "tool_failed");
}

/// Every message, encoded, with its type.
fn all_messages(codec: Codec, version: &str) -> Vec<(MessageType, Vec<u8>)> {
    fn encoded<T: Payload>(body: T, codec: Codec, version: &str) -> (MessageType, Vec<u8>) {
        let mut e = envelope(body);
        e.protocol_version = version.to_string();
        (T::MESSAGE_TYPE, e.encode(codec).unwrap())
    }
    vec![
        encoded(deployment(), codec, version),
        encoded(assignment(), codec, version),
        encoded(progress(), codec, version),
        encoded(submission(), codec, version),
        encoded(report(), codec, version),
        encoded(error_message(), codec, version),
        encoded(control(), codec, version),
    ]
}

const ALL_TYPES: [MessageType; 7] = [
    MessageType::SwarmDeployment,
    MessageType::TaskAssignment,
    MessageType::ProgressUpdate,
    MessageType::ResultSubmission,
    MessageType::FinalReport,
    MessageType::Error,
    MessageType::Control,
];

/// Decodes `bytes` as a message of type `as_type`, keeping only the error.
fn decode_as(as_type: MessageType, codec: Codec, bytes: &[u8]) -> Result<(), ErrorBody> {
    match as_type {
        MessageType::SwarmDeployment => Envelope::<SwarmDeployment>::decode(codec, bytes).map(drop),
        MessageType::TaskAssignment => Envelope::<TaskAssignment>::decode(codec, bytes).map(drop),
        MessageType::ProgressUpdate => Envelope::<ProgressUpdate>::decode(codec, bytes).map(drop),
        MessageType::ResultSubmission => {
            Envelope::<ResultSubmission>::decode(codec, bytes).map(drop)
        }
        MessageType::FinalReport => Envelope::<FinalReport>::decode(codec, bytes).map(drop),
        MessageType::Error => Envelope::<ErrorMessage>::decode(codec, bytes).map(drop),
        MessageType::Control => Envelope::<Control>::decode(codec, bytes).map(drop),
        MessageType::CollaborationRequest => {
            Envelope::<swarm_common::CollaborationRequest>::decode(codec, bytes).map(drop)
        }
        MessageType::Replan => {
            Envelope::<swarm_common::replan::Replan>::decode(codec, bytes).map(drop)
        }
    }
}

#[test]
fn a_message_of_another_type_is_refused() {
    for codec in CODECS {
        for (sent, bytes) in all_messages(codec, "1.0") {
            for wanted in ALL_TYPES {
                let result = decode_as(wanted, codec, &bytes);
                if wanted == sent {
                    assert!(result.is_ok(), "{codec:?} {sent:?}: {result:?}");
                } else {
                    let e = result.unwrap_err();
                    assert_eq!(
                        e.code,
                        ErrorCode::ValidationFailed,
                        "{codec:?} {sent:?} as {wanted:?}"
                    );
                    assert!(e.message.contains("expected"), "{}", e.message);
                }
            }
        }
    }
}

#[test]
fn an_unknown_protocol_version_is_refused() {
    for codec in CODECS {
        for (sent, bytes) in all_messages(codec, "9.9") {
            let e = decode_as(sent, codec, &bytes).unwrap_err();
            assert_eq!(e.code, ErrorCode::UnsupportedProtocol, "{codec:?} {sent:?}");
            assert!(e.message.contains("9.9"), "{}", e.message);
        }
    }
}

#[test]
fn broken_bytes_are_decode_failures() {
    for codec in CODECS {
        for (sent, bytes) in all_messages(codec, "1.0") {
            let cut = &bytes[..bytes.len() / 2];
            let e = decode_as(sent, codec, cut).unwrap_err();
            assert_eq!(e.code, ErrorCode::DecodeFailed, "{codec:?} {sent:?} cut");
        }
        for garbage in [
            &b""[..],
            b"not a message",
            b"\xc1\xc1",
            b"{\"protocol_version\":",
        ] {
            for wanted in ALL_TYPES {
                let e = decode_as(wanted, codec, garbage).unwrap_err();
                assert_eq!(e.code, ErrorCode::DecodeFailed, "{codec:?} {garbage:?}");
            }
        }
    }
    // A valid header with a payload that misses its fields.
    let header_only = json!({
        "protocol_version": "1.0",
        "message_id": "m",
        "timestamp": "2025-03-01T12:00:00Z",
        "sender_agent": "a",
        "recipient_agent": "b",
        "message_type": "ResultSubmission",
        "correlation_id": "c",
        "swarm_id": "s",
    });
    let bytes = serde_json::to_vec(&header_only).unwrap();
    let e = decode_as(MessageType::ResultSubmission, Codec::Json, &bytes).unwrap_err();
    assert_eq!(e.code, ErrorCode::DecodeFailed);
}

#[test]
fn a_missing_envelope_field_is_named_and_the_version_is_checked_first() {
    for codec in CODECS {
        let full = round_trip_value(&envelope(submission()), codec);
        for field in [
            "message_id",
            "timestamp",
            "sender_agent",
            "recipient_agent",
            "correlation_id",
            "swarm_id",
        ] {
            let mut v = full.clone();
            v.as_object_mut().unwrap().remove(field);
            let bytes = codec.encode(&v).unwrap();
            let e = decode_as(MessageType::ResultSubmission, codec, &bytes).unwrap_err();
            assert_eq!(e.code, ErrorCode::DecodeFailed, "{codec:?} {field}");
            assert!(
                e.message.contains(field),
                "{codec:?} {field}: {}",
                e.message
            );
            // An unknown version is refused for that, whatever else is missing.
            v["protocol_version"] = json!("9.9");
            let bytes = codec.encode(&v).unwrap();
            let e = decode_as(MessageType::ResultSubmission, codec, &bytes).unwrap_err();
            assert_eq!(e.code, ErrorCode::UnsupportedProtocol, "{codec:?} {field}");
        }
    }
}

/// A message as a generic value, for tests that take fields away.
fn round_trip_value<T: Payload>(message: &Envelope<T>, codec: Codec) -> Value {
    let bytes = message.encode(codec).unwrap();
    codec.decode(&bytes).unwrap()
}

proptest! {
    #[test]
    fn random_bytes_never_panic_and_are_decode_failures(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        for codec in CODECS {
            for wanted in ALL_TYPES {
                let e = decode_as(wanted, codec, &bytes).unwrap_err();
                prop_assert_eq!(e.code, ErrorCode::DecodeFailed);
            }
            let state: Result<SwarmState, _> = codec.decode(&bytes);
            prop_assert!(state.is_err());
            // Every field of a mission request but its text has a default,
            // so a few byte strings are a valid one (`[0x91, 0xa0]` in
            // MessagePack: a request whose text is empty, which the intake
            // then refuses): decoding one must only not panic.
            let request: Result<MissionRequest, _> = codec.decode(&bytes);
            if let Ok(r) = request {
                prop_assert!(r.mission.len() < bytes.len());
            }
        }
    }

    #[test]
    fn mangled_messages_never_panic(
        index in 0usize..7,
        codec_is_json in any::<bool>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let codec = if codec_is_json { Codec::Json } else { Codec::MsgPack };
        let (sent, mut bytes) = all_messages(codec, "1.0").swap_remove(index);
        for (at, value) in flips {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        // Either it still decodes, or it is refused with a typed error.
        if let Err(e) = decode_as(sent, codec, &bytes) {
            prop_assert!(matches!(
                e.code,
                ErrorCode::DecodeFailed | ErrorCode::ValidationFailed | ErrorCode::UnsupportedProtocol
            ));
        }
    }
}
