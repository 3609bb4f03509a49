//! Conformance with the seed's A2AP: JSON as the original C# classes write
//! it (System.Text.Json, snake_case names, enums as strings, .NET's seven
//! fraction digits in timestamps), checked to decode into our types with
//! each value where it belongs, and what we write checked to stay ours.

#![allow(clippy::unwrap_used, reason = "a test reports a failure by panicking")]

use serde_json::{Value, json};
use swarm_common::mission::{MissionFormat, MissionRequest, parse_mission};
use swarm_common::validate::{expand_tasks, validate_plan};
use swarm_common::{
    Codec, Envelope, ErrorCode, ErrorMessage, Limits, MessageType, ProgressUpdate, SwarmDeployment,
    SwarmDeploymentPlan, TaskDefinition, TaskStatus, WorkerDeploymentPlan,
};

fn decode<T: serde::de::DeserializeOwned>(json: &Value) -> T {
    let bytes = serde_json::to_vec(json).unwrap();
    let value = Codec::Json.decode(&bytes).unwrap();
    // The same fields in MessagePack, as a peer may send them.
    let packed = Codec::MsgPack.encode(json).unwrap();
    Codec::MsgPack.decode::<T>(&packed).unwrap();
    value
}

/// The seed's envelope fields as its base class writes them.
fn seed_envelope(message_type: &str, correlation_id: &str) -> Value {
    json!({
        "message_id": "3f0c5a4e-8e2b-4c1d-9f6a-0b7d2e4c6a81",
        "timestamp": "2025-03-01T12:34:56.1234567Z",
        "sender_agent": "worker-alpha",
        "recipient_agent": "manager-alpha",
        "message_type": message_type,
        "correlation_id": correlation_id,
        "swarm_id": "seed-swarm-1",
    })
}

/// `payload`'s fields beside the envelope's, as one flat object, with the
/// protocol version Swarm requires of every message.
fn seed_message(message_type: &str, correlation_id: &str, payload: Value) -> Vec<u8> {
    let mut m = seed_envelope(message_type, correlation_id);
    m["protocol_version"] = json!("1.0");
    for (k, v) in payload.as_object().unwrap() {
        m[k] = v.clone();
    }
    serde_json::to_vec(&m).unwrap()
}

fn seed_persona(name: &str) -> Value {
    json!({
        "worker_name": name,
        "role": "Researcher",
        "system_prompt": format!("You are {name}. Find the facts."),
        "tools": ["read_file", "count"],
        "collaborators": ["writer"],
    })
}

/// A plan as the seed's boss makes it: personas, no tasks.
fn seed_plan() -> Value {
    json!({
        "swarm_id": "seed-swarm-1",
        "manager_name": "manager-alpha",
        "original_task": "Summarise the notes in notes.txt",
        "max_execution_minutes": 15,
        "workers": [seed_persona("researcher"), seed_persona("writer")],
    })
}

#[test]
fn worker_deployment_plan_reads_worker_name() {
    let persona: WorkerDeploymentPlan = decode(&seed_persona("researcher"));
    assert_eq!(persona.name, "researcher");
    assert_eq!(persona.role, "Researcher");
    assert_eq!(persona.tools, ["read_file", "count"]);
    assert_eq!(persona.collaborators, ["writer"]);
    assert_eq!(persona.pool, "general");
    // Written under both names, and read back from ours alone too.
    let ours = serde_json::to_value(&persona).unwrap();
    assert_eq!(ours["name"], "researcher");
    assert_eq!(ours["worker_name"], "researcher");
    let mut only_ours = ours.clone();
    only_ours.as_object_mut().unwrap().remove("worker_name");
    assert_eq!(decode::<WorkerDeploymentPlan>(&only_ours), persona);
    // Neither name: refused, naming ours.
    let e = Codec::Json
        .decode::<WorkerDeploymentPlan>(br#"{"role": "x"}"#)
        .unwrap_err();
    assert!(e.to_string().contains("name"), "{e}");
}

#[test]
fn a_seed_plan_without_tasks_runs_one_task_per_persona_on_its_original_task() {
    let plan: SwarmDeploymentPlan = decode(&seed_plan());
    assert_eq!(plan.workers.len(), 2);
    assert!(plan.tasks.is_empty());

    // As a mission: the plan's own text, limit and id fill the request.
    let request = json!({ "plan": seed_plan() });
    let bytes = serde_json::to_vec(&request).unwrap();
    let (request, format) =
        parse_mission(Some("application/json"), None, &bytes, &Limits::default()).unwrap();
    assert_eq!(format, MissionFormat::Json);
    assert_eq!(request.mission, "Summarise the notes in notes.txt");
    assert_eq!(request.mission_id.as_deref(), Some("seed-swarm-1"));
    assert_eq!(request.max_execution_minutes, Some(15));
    assert_eq!(
        request.max_execution(&Limits::default()),
        std::time::Duration::from_secs(15 * 60)
    );
    let plan = request.plan.as_ref().unwrap();
    assert_eq!(plan.manager_directive, "Summarise the notes in notes.txt");
    validate_plan(plan, &Limits::default()).unwrap();
    let tasks = expand_tasks(plan);
    assert_eq!(tasks.len(), 2);
    for (task, persona) in tasks.iter().zip(["researcher", "writer"]) {
        assert_eq!(task.assigned_to, persona);
        assert_eq!(task.description, "Summarise the notes in notes.txt");
    }

    // What the request says of itself wins over the plan.
    let request: MissionRequest = decode(&json!({
        "mission": "our text",
        "mission_id": "ours",
        "max_execution_seconds": 30,
        "plan": seed_plan(),
    }));
    assert_eq!(request.mission, "our text");
    assert_eq!(request.mission_id.as_deref(), Some("ours"));
    assert_eq!(request.max_execution_minutes, None);
    assert_eq!(request.max_execution_seconds, Some(30));

    // A request with neither text nor a plan that has one is still refused.
    let bytes = serde_json::to_vec(&json!({"plan": {"workers": [seed_persona("w")]}})).unwrap();
    let (e, _) = parse_mission(None, None, &bytes, &Limits::default()).unwrap_err();
    assert_eq!(e.code, ErrorCode::DecodeFailed);
    assert!(e.message.contains("mission"), "{}", e.message);
}

#[test]
fn a_seed_deployment_takes_its_text_and_deadline_from_the_plan() {
    let payload = json!({
        "plan": seed_plan(),
        "accepted_at": "2025-03-01T12:00:00Z",
    });
    let bytes = seed_message("SwarmDeployment", "seed-swarm-1", payload);
    let env = Envelope::<SwarmDeployment>::decode(Codec::Json, &bytes).unwrap();
    let d = env.body;
    assert_eq!(d.mission, "Summarise the notes in notes.txt");
    assert_eq!(
        d.deadline - d.accepted_at,
        chrono::Duration::minutes(15),
        "{d:?}"
    );
    assert_eq!(d.plan.workers[1].name, "writer");
    // Without a limit in the plan, the limits' own.
    let mut plan = seed_plan();
    plan.as_object_mut()
        .unwrap()
        .remove("max_execution_minutes");
    let d: SwarmDeployment = decode(&json!({"plan": plan, "accepted_at": "2025-03-01T12:00:00Z"}));
    assert_eq!(
        d.deadline - d.accepted_at,
        chrono::Duration::minutes(i64::from(Limits::default().max_execution_minutes))
    );
}

#[test]
fn task_definitions_read_the_seeds_priority_and_estimate() {
    let task: TaskDefinition = decode(&json!({
        "task_id": "t1",
        "title": "Gather",
        "description": "gather the facts",
        "assigned_to": "researcher",
        "dependencies": [],
        "priority": 2,
        "estimated_minutes": 30,
    }));
    assert_eq!(task.priority, Some(2));
    assert_eq!(task.task_id, "t1");
    let task: TaskDefinition = decode(&json!({
        "task_id": "t2", "title": "x", "description": "y", "assigned_to": "z",
        "priority": -1,
    }));
    assert_eq!(task.priority, Some(0));
    assert!(task.dependencies.is_empty());
}

#[test]
fn task_status_reads_the_seeds_five_in_their_spellings() {
    for (text, status) in [
        ("Pending", TaskStatus::Pending),
        ("InProgress", TaskStatus::InProgress),
        ("Completed", TaskStatus::Completed),
        ("Failed", TaskStatus::Failed),
        ("Cancelled", TaskStatus::Cancelled),
        ("Canceled", TaskStatus::Cancelled),
        ("pending", TaskStatus::Pending),
        ("in_progress", TaskStatus::InProgress),
        ("completed", TaskStatus::Completed),
        ("failed", TaskStatus::Failed),
        ("cancelled", TaskStatus::Cancelled),
    ] {
        let read: TaskStatus = decode(&json!(text));
        assert_eq!(read, status, "{text}");
    }
    // Written as the variant's name.
    assert_eq!(json!(TaskStatus::InProgress), json!("InProgress"));
    let read: MessageType = decode(&json!("progress_update"));
    assert_eq!(read, MessageType::ProgressUpdate);
}

#[test]
fn progress_update_reads_progress_description() {
    let payload = json!({
        "task_id": "t1",
        "status": "InProgress",
        "progress_percentage": 42.5,
        "progress_description": "reading notes.txt",
    });
    let update: ProgressUpdate = decode(&payload);
    assert_eq!(update.message, "reading notes.txt");
    assert_eq!(update.status, TaskStatus::InProgress);
    assert_eq!(update.progress_percentage, 43);
    assert_eq!((update.attempt, update.revision), (0, 0));
    // As a whole message, snake_case type name and .NET timestamp included.
    let bytes = seed_message("progress_update", "t1", payload);
    let env = Envelope::<ProgressUpdate>::decode(Codec::Json, &bytes).unwrap();
    assert_eq!(env.body, update);
    assert_eq!(env.sender_agent, "worker-alpha");
    assert_eq!(env.swarm_id, "seed-swarm-1");
    assert_eq!(
        env.timestamp.timestamp_subsec_nanos(),
        123_456_700,
        "{}",
        env.timestamp
    );
    // Written under both names.
    let ours = serde_json::to_value(&update).unwrap();
    assert_eq!(ours["message"], "reading notes.txt");
    assert_eq!(ours["progress_description"], "reading notes.txt");
}

#[test]
fn the_seeds_flat_error_is_read_into_ours() {
    let payload = json!({
        "error_code": "ValidationFailed",
        "error_message": "the plan names no workers",
        "details": "workers: []",
        "affected_task_id": "t3",
    });
    let bytes = seed_message("Error", "t3", payload);
    let e = Envelope::<ErrorMessage>::decode(Codec::Json, &bytes)
        .unwrap()
        .body;
    assert_eq!(e.task_id.as_deref(), Some("t3"));
    assert_eq!(e.error.code, ErrorCode::ValidationFailed);
    assert_eq!(e.error.message, "the plan names no workers");
    assert_eq!(e.error.details["details"], "workers: []");
    assert_eq!(e.attempt, None);
    assert!(e.token.is_empty());

    // A code we do not know is kept; details may be a map.
    let e: ErrorMessage = decode(&json!({
        "error_code": "WORKER_CRASHED",
        "error_message": "the worker died",
        "details": {"exit_code": 137, "host": "node-2"},
        "affected_task_id": null,
    }));
    assert_eq!(e.task_id, None);
    assert_eq!(e.error.code, ErrorCode::Internal);
    assert_eq!(e.error.details["error_code"], "WORKER_CRASHED");
    assert_eq!(e.error.details["exit_code"], "137");
    assert_eq!(e.error.details["host"], "node-2");

    // Ours is read as before, and written in both shapes.
    let ours = json!({
        "task_id": "t1",
        "attempt": 2,
        "error": {"code": "timeout", "message": "too slow", "retriable": true},
    });
    let e: ErrorMessage = decode(&ours);
    assert_eq!(e.error.code, ErrorCode::Timeout);
    assert_eq!(e.attempt, Some(2));
    let mut both = ours.clone();
    for (k, v) in [
        ("affected_task_id", json!("t1")),
        ("error_code", json!("timeout")),
        ("error_message", json!("too slow")),
        ("details", json!({})),
    ] {
        both[k] = v;
    }
    assert_eq!(serde_json::to_value(&e).unwrap(), both);
    assert_eq!(decode::<ErrorMessage>(&both), e);

    // Neither shape: refused, naming what is missing.
    let e = Codec::Json
        .decode::<ErrorMessage>(br#"{"task_id": "t1"}"#)
        .unwrap_err();
    assert!(e.to_string().contains("error"), "{e}");
}
