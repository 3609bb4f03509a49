//! JSON Schemas of everything Swarm puts on the wire or in its buckets, for
//! peers in other languages: checked in under `docs/protocol/<Type>.json`,
//! written by `cargo run -p swarm-common --example schemas`, and compared
//! with what the code generates by `common/tests/schemas.rs`.
//!
//! A message's schema describes the whole message as it travels: the
//! envelope's fields and the payload's, flat in one object. The schemas say
//! what Swarm reads (a field with a default is not required); Swarm writes
//! every field of its types except those its docs say are left out when
//! empty. The names the seed's classes use, which Swarm also reads, are in
//! `docs/protocol.md`, not here.

use schemars::{JsonSchema, Schema, generate::SchemaSettings};
use serde_json::{Map, Value};

use crate::approval::{ApprovalRecord, DeskReply, DeskRequest, InputRecord};
use crate::messages::{
    Control, DeadLetter, Envelope, ErrorMessage, FinalReport, Payload, ProgressUpdate,
    ResultSubmission, SwarmDeployment, SwarmDeploymentPlan, TaskAssignment,
};
use crate::mission::{MissionErrorReply, MissionRecord, MissionReply, MissionRequest};
use crate::state::SwarmState;

/// The envelope with no payload: its fields alone.
#[derive(JsonSchema)]
struct NoPayload {}

/// Every schema, by the name of its file in `docs/protocol/` (without
/// `.json`), keys sorted so the text does not depend on serde_json's
/// features.
pub fn all() -> Vec<(&'static str, Value)> {
    let mut out = vec![(
        "Envelope",
        titled::<Envelope<NoPayload>>(
            "Envelope",
            "The fields every A2AP message carries, flat beside its payload's.",
        ),
    )];
    out.push(message::<SwarmDeployment>("SwarmDeployment"));
    out.push(message::<TaskAssignment>("TaskAssignment"));
    out.push(message::<ProgressUpdate>("ProgressUpdate"));
    out.push(message::<ResultSubmission>("ResultSubmission"));
    out.push(message::<FinalReport>("FinalReport"));
    out.push(message::<ErrorMessage>("ErrorMessage"));
    out.push(message::<Control>("Control"));
    out.push(message::<crate::collaborate::CollaborationRequest>(
        "CollaborationRequest",
    ));
    out.push(message::<crate::replan::Replan>("Replan"));
    out.push(plain::<MissionRequest>("MissionRequest"));
    out.push(plain::<MissionReply>("MissionReply"));
    out.push(plain::<MissionErrorReply>("MissionErrorReply"));
    out.push(plain::<MissionRecord>("MissionRecord"));
    out.push(plain::<SwarmDeploymentPlan>("SwarmDeploymentPlan"));
    out.push(plain::<SwarmState>("SwarmState"));
    out.push(plain::<DeadLetter>("DeadLetter"));
    out.push(plain::<DeskRequest>("DeskRequest"));
    out.push(plain::<DeskReply>("DeskReply"));
    out.push(plain::<ApprovalRecord>("ApprovalRecord"));
    out.push(plain::<InputRecord>("InputRecord"));
    out.push(plain::<crate::card::AgentCard>("AgentCard"));
    out
}

/// The text of a schema's file: pretty JSON and a final newline.
pub fn file_text(schema: &Value) -> String {
    let mut text = serde_json::to_string_pretty(schema).unwrap_or_default();
    text.push('\n');
    text
}

fn message<T: Payload + JsonSchema>(name: &'static str) -> (&'static str, Value) {
    let what = format!(
        "A2AP {:?} message: the envelope's fields and the payload's, in one object.",
        T::MESSAGE_TYPE
    );
    let mut schema = titled::<Envelope<T>>(name, &what);
    // One message type per schema: `message_type` is that type's name.
    let kind = serde_json::to_value(T::MESSAGE_TYPE).unwrap_or_default();
    if let Some(p) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        p.insert(
            "message_type".into(),
            serde_json::json!({"const": kind, "type": "string", "description": "What the payload is."}),
        );
    }
    if let Some(defs) = schema.get_mut("$defs").and_then(|d| d.as_object_mut()) {
        defs.remove("MessageType");
    }
    (name, sorted(schema))
}

fn plain<T: JsonSchema>(name: &'static str) -> (&'static str, Value) {
    (name, sorted(schema_of::<T>().to_value()))
}

fn titled<T: JsonSchema>(title: &str, description: &str) -> Value {
    let mut v = schema_of::<T>().to_value();
    if let Some(o) = v.as_object_mut() {
        o.insert("title".into(), Value::String(title.into()));
        o.insert("description".into(), Value::String(description.into()));
    }
    sorted(v)
}

fn schema_of<T: JsonSchema>() -> Schema {
    SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>()
}

/// `v` with every object's keys in order.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut pairs: Vec<(String, Value)> = o.into_iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let mut m = Map::new();
            for (k, v) in pairs {
                m.insert(k, sorted(v));
            }
            Value::Object(m)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}
