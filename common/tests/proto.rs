//! `proto/a2ap.proto` against the serde types: every field of every JSON
//! Schema in `docs/protocol/` of a type that travels on a subject has its
//! protobuf field (the failure names the ones missing), and values that
//! use every shape (each gate kind, conditions, both commands, absent
//! optional fields) come back from the protobuf codec as they went in.

#![allow(clippy::unwrap_used, reason = "a test reports a failure by panicking")]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use chrono::{DateTime, Utc};
use prost_reflect::{Kind, MessageDescriptor};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value, json};
use swarm_common::mission::{MissionErrorReply, MissionReply, MissionRequest};
use swarm_common::proto;
use swarm_common::{
    Codec, Control, DeadLetter, Envelope, ErrorBody, ErrorCode, ErrorMessage, Payload,
    ProgressUpdate, SwarmDeploymentPlan, TaskAssignment, TaskStatus,
};

/// Schemas of what travels on subjects besides the A2AP messages (which
/// are found by their `message_type`), with the message each travels as.
const ON_THE_WIRE: &[(&str, &str)] = &[
    ("Envelope", "Envelope"),
    ("MissionRequest", "MissionRequest"),
    ("MissionReply", "MissionReply"),
    ("MissionErrorReply", "MissionErrorReply"),
    ("DeadLetter", "DeadLetter"),
    ("SwarmDeploymentPlan", "SwarmDeploymentPlan"),
];

const ENVELOPE_FIELDS: &[&str] = &[
    "protocol_version",
    "message_id",
    "timestamp",
    "sender_agent",
    "recipient_agent",
    "message_type",
    "correlation_id",
    "swarm_id",
];

/// Walks a JSON Schema beside a protobuf message and records what the
/// message lacks.
struct Walk<'a> {
    defs: &'a Map<String, Value>,
    /// The whole schema, which a recursive type's `{"$ref": "#"}` names.
    root: &'a Value,
    missing: BTreeSet<String>,
    seen: BTreeSet<(String, String)>,
}

impl Walk<'_> {
    /// `schema` with `$ref`s followed and `null` alternatives dropped.
    fn resolve(&self, schema: &Value) -> Vec<Value> {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            if r == "#" {
                return self.resolve(self.root);
            }
            let name = r.trim_start_matches("#/$defs/");
            return self.resolve(&self.defs[name]);
        }
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
            return any
                .iter()
                .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
                .flat_map(|v| self.resolve(v))
                .collect();
        }
        vec![schema.clone()]
    }

    /// An object schema (or a union of them) as the message `desc`.
    fn message(&mut self, schema: &Value, desc: &MessageDescriptor, path: &str) {
        let key = (schema.to_string(), desc.full_name().to_owned());
        if !self.seen.insert(key) {
            return; // A recursive type (Condition): walked once.
        }
        for s in self.resolve(schema) {
            if let Some(variants) = s.get("oneOf").and_then(Value::as_array) {
                for v in variants {
                    self.message(&v.clone(), desc, path);
                }
                continue;
            }
            let Some(props) = s.get("properties").and_then(Value::as_object) else {
                continue;
            };
            // A tagged variant: its fields are in the oneof field the tag names.
            let tag = desc
                .oneofs()
                .find(|o| !o.is_synthetic() && props.contains_key(o.name()));
            if let Some(tag) = tag {
                let variant = props[tag.name()]["const"].as_str().unwrap_or_default();
                let Some(field) = tag.fields().find(|f| f.name() == variant) else {
                    self.missing.insert(format!(
                        "{path}: `{}` {variant:?} (a oneof field `{variant}` in {}.{})",
                        tag.name(),
                        desc.full_name(),
                        tag.name()
                    ));
                    continue;
                };
                let Kind::Message(inner) = field.kind() else {
                    continue;
                };
                let rest: Map<String, Value> = props
                    .iter()
                    .filter(|(k, _)| *k != tag.name())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                self.message(
                    &json!({"properties": rest}),
                    &inner,
                    &format!("{path}.{variant}"),
                );
                continue;
            }
            for (name, prop) in props {
                match desc.get_field_by_name(name) {
                    None => {
                        self.missing.insert(format!(
                            "{path}.{name} (a field `{name}` in {})",
                            desc.full_name()
                        ));
                    }
                    Some(field) => {
                        let path = format!("{path}.{name}");
                        if field.is_map() {
                            let Kind::Message(entry) = field.kind() else {
                                continue;
                            };
                            let value = entry.map_entry_value_field().kind();
                            for s in self.resolve(prop) {
                                if let Some(item) = s.get("additionalProperties") {
                                    self.kind(item, &value, &path);
                                }
                            }
                        } else if field.is_list() {
                            for s in self.resolve(prop) {
                                if let Some(item) = s.get("items") {
                                    self.kind(item, &field.kind(), &path);
                                }
                            }
                        } else {
                            self.kind(prop, &field.kind(), &path);
                        }
                    }
                }
            }
        }
    }

    /// One value's schema as a protobuf kind.
    fn kind(&mut self, schema: &Value, kind: &Kind, path: &str) {
        match kind {
            Kind::Message(m) if proto::is_well_known(m.full_name()) => {}
            Kind::Message(m) if m.name().ends_with("List") || m.name().ends_with("Map") => {
                let only = m.fields().next().unwrap();
                for s in self.resolve(schema) {
                    if let Some(items) = s.get("items") {
                        self.kind(items, &only.kind(), path);
                    }
                    if let Some(values) = s.get("additionalProperties")
                        && let Kind::Message(entry) = only.kind()
                    {
                        let value = entry.map_entry_value_field().kind();
                        for v in self.resolve(values) {
                            if let Some(items) = v.get("items") {
                                self.kind(items, &value, path);
                            }
                        }
                    }
                }
            }
            Kind::Message(m) => self.message(schema, m, path),
            Kind::Enum(e) => {
                for s in self.resolve(schema) {
                    let mut names: Vec<String> = Vec::new();
                    if let Some(all) = s.get("enum").and_then(Value::as_array) {
                        names.extend(all.iter().filter_map(Value::as_str).map(String::from));
                    }
                    if let Some(all) = s.get("oneOf").and_then(Value::as_array) {
                        names.extend(
                            all.iter()
                                .filter_map(|v| v["const"].as_str())
                                .map(String::from),
                        );
                    }
                    for n in names {
                        let value = format!(
                            "{}_{}",
                            proto::upper_snake(e.name()),
                            proto::upper_snake(&n)
                        );
                        if e.get_value_by_name(&value).is_none() {
                            self.missing.insert(format!(
                                "{path}: {n:?} (a value {value} in enum {})",
                                e.full_name()
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

#[test]
fn every_field_of_the_wire_schemas_is_in_the_proto() {
    let schemas = swarm_common::schema::all();
    let envelope = proto::message("Envelope").unwrap();
    let mut missing = BTreeSet::new();
    let mut checked = Vec::new();
    for (schema_name, schema) in &schemas {
        let mut top = schema.clone();
        let desc = if let Some(kind) = schema["properties"]["message_type"]["const"].as_str() {
            // An A2AP message: its payload is the field of the envelope's
            // body its type names; the envelope's own fields are checked
            // with the Envelope schema.
            let field = proto::snake_case(kind);
            let body = envelope
                .get_field_by_name(&field)
                .filter(|f| f.containing_oneof().is_some_and(|o| o.name() == "body"));
            let Some(Kind::Message(desc)) = body.map(|f| f.kind()) else {
                missing.insert(format!(
                    "{schema_name}: a field `{field}` in oneof swarm.a2ap.v1.Envelope.body for message_type {kind}"
                ));
                continue;
            };
            if let Some(props) = top.get_mut("properties").and_then(Value::as_object_mut) {
                props.retain(|k, _| !ENVELOPE_FIELDS.contains(&k.as_str()));
            }
            desc
        } else if let Some((_, message)) = ON_THE_WIRE.iter().find(|(n, _)| n == schema_name) {
            proto::message(message)
                .unwrap_or_else(|| panic!("proto/a2ap.proto has no message {message}"))
        } else {
            continue; // A stored record, not sent on a subject.
        };
        checked.push(*schema_name);
        let empty = Map::new();
        let defs = schema
            .get("$defs")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let mut walk = Walk {
            defs,
            root: schema,
            missing: BTreeSet::new(),
            seen: BTreeSet::new(),
        };
        walk.message(&top, &desc, schema_name);
        missing.extend(walk.missing);
    }
    assert!(
        missing.is_empty(),
        "proto/a2ap.proto lacks what the Rust types write; add these:\n  {}",
        missing.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    // Every message type was found, and every other wire type.
    for name in [
        "TaskAssignment",
        "FinalReport",
        "Control",
        "ErrorMessage",
        "MissionRequest",
    ] {
        assert!(checked.contains(&name), "{name} not checked: {checked:?}");
    }
    assert!(checked.len() >= 7 + ON_THE_WIRE.len(), "{checked:?}");
}

#[test]
fn a_field_the_proto_lacks_is_refused_by_name() {
    let env = Envelope::new("w", "m", "s", "t", progress());
    let mut json = serde_json::to_value(&env).unwrap();
    json["sub_manager"] = json!("m-2");
    let desc = proto::message("Envelope").unwrap();
    let e = proto::encode_json(&desc, &json).unwrap_err();
    assert!(
        e.contains("`sub_manager`") && e.contains("swarm.a2ap.v1.ProgressUpdate"),
        "{e}"
    );
}

fn at(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .with_timezone(&Utc)
}

fn progress() -> ProgressUpdate {
    ProgressUpdate {
        task_id: "t1".into(),
        status: TaskStatus::InputRequired,
        progress_percentage: 100,
        message: "waiting".into(),
        attempt: 1,
        revision: 0,
        metrics: BTreeMap::new(),
    }
}

fn same<T>(value: &T)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let bytes = Codec::Protobuf
        .encode(value)
        .unwrap_or_else(|e| panic!("{e}"));
    let back: T = Codec::Protobuf
        .decode(&bytes)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&back, value);
}

fn message<T: Payload + PartialEq + Debug>(body: T) {
    let env = Envelope::new("boss", "manager", "s-1", "c-1", body);
    let bytes = env
        .encode(Codec::Protobuf)
        .unwrap_or_else(|e| panic!("{e}"));
    let back = Envelope::<T>::decode(Codec::Protobuf, &bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, env);
}

/// A plan with every gate kind, a nested condition and a map task.
fn plan() -> SwarmDeploymentPlan {
    serde_json::from_value(json!({
        "manager_directive": "d",
        "planner": "explicit",
        "success_criteria": ["ok"],
        "workers": [{"name": "w", "role": "r", "system_prompt": "p", "tools": ["a"], "collaborators": ["b"], "pool": "gpu"}],
        "tasks": [
            {"task_id": "t1", "title": "one", "description": "x", "assigned_to": "w"},
            {"task_id": "t2", "title": "two", "description": "y", "assigned_to": "w",
             "dependencies": ["t1"], "priority": 7, "max_result_bytes": 100,
             "gates": [
                {"kind": "json_schema", "schema": {"type": "object", "required": ["a"], "maxProperties": 3}},
                {"kind": "regex", "pattern": "^a", "forbid": true, "description": "starts with a"},
                {"kind": "regex", "pattern": "b"},
                {"kind": "length", "min_chars": 1},
                {"kind": "sql", "dialect": "sqlite", "schema": {"users": ["id", "name"], "empty": []}},
                {"kind": "sql"},
                {"kind": "command", "program": "true", "args": ["-x"], "timeout_secs": 5}
             ],
             "condition": {"all": [
                {"when": {"task": "t1", "status": "completed"}},
                {"not": {"any": [{"when": {"task": "t1", "pointer": "/a", "equals": null}},
                                 {"when": {"task": "t1", "pointer": "", "equals": [1, "x", {"y": true}]}}]}}
             ]},
             "map": {"over": {"task": "t1", "pointer": "/items"}, "concurrency": 4}}
        ]
    }))
    .unwrap()
}

#[test]
fn every_shape_comes_back_as_it_went() {
    same(&plan());
    let mut assignment: TaskAssignment = serde_json::from_value(json!({
        "task_id": "t2", "title": "two", "description": "y",
        "persona": {"name": "w"}, "attempt": 1, "revision": 0, "max_steps": 4,
        "max_result_bytes": 10, "deadline": "2026-01-01T00:00:00Z", "token": "secret"
    }))
    .unwrap();
    assignment.gates = plan().tasks[1].gates.clone();
    message(assignment);
    message(Control::Expire);
    message(Control::Cancel {
        reason: String::new(),
    });
    message(ErrorMessage {
        task_id: None,
        attempt: None,
        error: ErrorBody::new(ErrorCode::UnsupportedProtocol, "no"),
        token: String::new(),
    });
    message(progress());
    same(&MissionRequest {
        plan: Some(plan()),
        mission_id: Some("m".into()),
        max_execution_minutes: Some(3),
        max_execution_seconds: Some(30),
        max_tokens: Some(u64::MAX),
        max_cost_usd: Some(0.5),
        protocol_version: Some("1.0".into()),
        ..MissionRequest::text("do it")
    });
    same(&MissionRequest::text("just this"));
    same(&MissionReply {
        swarm_id: "s".into(),
        status: "accepted".into(),
        duplicate: true,
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
    });
    same(&MissionErrorReply {
        error: ErrorBody::new(ErrorCode::ValidationFailed, "bad").with_detail("field", "x"),
    });
    let mut letter = DeadLetter::new(
        "a2ap.s.result.t",
        ErrorBody::new(ErrorCode::DecodeFailed, "x"),
        b"\xff",
        "manager-1",
    );
    letter.recorded_at = at("1970-01-01T00:00:00Z");
    same(&letter);
}

#[test]
fn a_field_a_peer_leaves_out_reads_as_swarms_default() {
    // Written by a peer that sets only what it must: no version, no pool,
    // no limits, no max_attempts.
    let desc = proto::message("Envelope").unwrap();
    let bytes = proto::encode_json(
        &desc,
        &json!({
            "message_id": "m", "timestamp": "2026-01-01T00:00:00.5Z", "sender_agent": "peer",
            "recipient_agent": "manager", "message_type": "TaskAssignment",
            "correlation_id": "t", "swarm_id": "s",
            "task_id": "t", "title": "t", "description": "d", "persona": {"name": "w"},
            "attempt": 1, "revision": 0, "max_steps": 2, "max_result_bytes": 9,
            "deadline": "2026-01-01T01:00:00Z"
        }),
    )
    .unwrap();
    let got = Envelope::<TaskAssignment>::decode(Codec::Protobuf, &bytes).unwrap();
    assert_eq!(got.protocol_version, "1.0");
    assert_eq!(got.body.persona.pool, "general");
    assert_eq!(
        got.body.max_attempts,
        swarm_common::Limits::default().max_attempts
    );
    assert_eq!(got.timestamp, at("2026-01-01T00:00:00.5Z"));
    // A message of another type is refused for its type, as in JSON.
    let e = Envelope::<ProgressUpdate>::decode(Codec::Protobuf, &bytes).unwrap_err();
    assert_eq!(e.code, ErrorCode::ValidationFailed, "{}", e.message);
    // Garbage is a decode failure.
    let e = Envelope::<ProgressUpdate>::decode(Codec::Protobuf, b"\xff\xff\xff").unwrap_err();
    assert_eq!(e.code, ErrorCode::DecodeFailed);
}

#[test]
fn protobuf_is_chosen_by_content_type_and_by_name() {
    for ct in [
        "application/protobuf",
        "application/x-protobuf; proto=swarm.a2ap.v1.Envelope",
    ] {
        assert_eq!(Codec::from_content_type(Some(ct)).unwrap(), Codec::Protobuf);
    }
    assert_eq!(Codec::Protobuf.content_type(), "application/protobuf");
    assert_eq!(Codec::from_name("protobuf"), Some(Codec::Protobuf));
    assert_eq!(Codec::from_name("JSON"), Some(Codec::Json));
    assert_eq!(Codec::from_name("xml"), None);
    let (request, format) = swarm_common::mission::parse_mission(
        Some("application/protobuf"),
        None,
        &Codec::Protobuf.encode(&MissionRequest::text("hi")).unwrap(),
        &swarm_common::Limits::default(),
    )
    .unwrap();
    assert_eq!(request.mission, "hi");
    assert_eq!(format.reply_codec(), Codec::Protobuf);
}

proptest::proptest! {
    #[test]
    fn any_bytes_as_protobuf_are_read_or_refused_with_a_typed_error(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
    ) {
        use swarm_common::{FinalReport, ResultSubmission, SwarmDeployment};
        let codes = [ErrorCode::DecodeFailed, ErrorCode::ValidationFailed, ErrorCode::UnsupportedProtocol];
        let results = [
            Envelope::<SwarmDeployment>::decode(Codec::Protobuf, &bytes).err(),
            Envelope::<TaskAssignment>::decode(Codec::Protobuf, &bytes).err(),
            Envelope::<ProgressUpdate>::decode(Codec::Protobuf, &bytes).err(),
            Envelope::<ResultSubmission>::decode(Codec::Protobuf, &bytes).err(),
            Envelope::<FinalReport>::decode(Codec::Protobuf, &bytes).err(),
            Envelope::<ErrorMessage>::decode(Codec::Protobuf, &bytes).err(),
            Envelope::<Control>::decode(Codec::Protobuf, &bytes).err(),
        ];
        for e in results.into_iter().flatten() {
            proptest::prop_assert!(codes.contains(&e.code), "{:?}", e);
        }
        let _ = Codec::Protobuf.decode::<MissionRequest>(&bytes);
        let _ = Codec::Protobuf.decode::<DeadLetter>(&bytes);
    }
}
