//! The `application/protobuf` codec: A2AP in the messages of
//! `proto/a2ap.proto`, converted to and from the JSON form of Swarm's serde
//! types, which stay the one source of truth.
//!
//! `build.rs` compiles the `.proto` with protox into a descriptor set that
//! is embedded here; a value is encoded by serializing it to a
//! [`serde_json::Value`] and building a `prost_reflect::DynamicMessage`
//! from it field by field, and decoded the reverse way, by the rules at the
//! top of `proto/a2ap.proto` (flat envelope to `Envelope.body`, enum strings
//! to prefixed enum values, RFC 3339 text to `google.protobuf.Timestamp`,
//! tagged enums to `oneof`s). No Rust type is generated for the codec, so
//! there is nothing to keep in step by hand beside the serde types; a JSON
//! field with no counterpart in the `.proto` is an error that names it
//! (docs/decisions.md, "Protobuf through the JSON value").

use std::collections::HashMap;
use std::sync::LazyLock;

use chrono::{DateTime, SecondsFormat, Utc};
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MapKey,
    MessageDescriptor, ReflectMessage, Value as Pv,
};
use serde_json::{Map, Number, Value as Json};

/// The protobuf package of A2AP.
pub const PACKAGE: &str = "swarm.a2ap.v1";

/// The text of `proto/a2ap.proto`, for peers that ask a running build for it.
pub const PROTO_FILE: &str = include_str!("../../proto/a2ap.proto");

/// The descriptor set `build.rs` compiled from `proto/a2ap.proto`.
static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/a2ap.bin"));

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    // Compiled by protox in build.rs from the same sources: it decodes.
    DescriptorPool::decode(DESCRIPTORS).unwrap_or_else(|e| {
        panic!("the embedded descriptor set of proto/a2ap.proto is invalid: {e}")
    })
});

/// `oneof` names that tag a JSON object by a field of that name
/// (`{"kind": "regex", ...}`): serde's internally tagged enums.
const TAGS: &[&str] = &["kind", "command", "action"];

/// Enums whose JSON spelling is snake case (`decode_failed`); the others
/// are written as their Rust variant names (`InProgress`).
const SNAKE_CASE_ENUMS: &[&str] = &["ErrorCode", "DependencyStatus"];

const TIMESTAMP: &str = "google.protobuf.Timestamp";
const VALUE: &str = "google.protobuf.Value";
const STRUCT: &str = "google.protobuf.Struct";
const LIST_VALUE: &str = "google.protobuf.ListValue";

/// Every message, enum and well-known type of `proto/a2ap.proto`.
pub fn pool() -> &'static DescriptorPool {
    &POOL
}

/// The message of `proto/a2ap.proto` named `name` (`"TaskAssignment"`).
pub fn message(name: &str) -> Option<MessageDescriptor> {
    POOL.get_message_by_name(&format!("{PACKAGE}.{name}"))
}

/// The message a Rust type travels as: the one of its name, generics left
/// out (`Envelope<TaskAssignment>` is an `Envelope`).
///
/// [`crate::Codec`] encodes any `Serialize` type, so the type is known here
/// only by its name: `std::any::type_name`'s last path segment, which
/// `common/tests/proto.rs` checks for every type on the wire.
pub fn message_for<T: ?Sized>() -> Result<MessageDescriptor, String> {
    let full = std::any::type_name::<T>();
    let bare = full.split('<').next().unwrap_or(full);
    let name = match bare.rsplit("::").next().unwrap_or(bare) {
        // The envelope's head alone, read before the payload: an `Envelope`.
        "Header" => "Envelope",
        name => name,
    };
    message(name)
        .ok_or_else(|| format!("{full} has no protobuf message (no `{name}` in proto/a2ap.proto)"))
}

/// `json` (a value's serde JSON form) as the protobuf message `desc`.
pub fn encode_json(desc: &MessageDescriptor, json: &Json) -> Result<Vec<u8>, String> {
    Ok(to_message(desc, json, desc.name())?.encode_to_vec())
}

/// Protobuf `bytes` of the message `desc` in the JSON form serde reads.
pub fn decode_json(desc: &MessageDescriptor, bytes: &[u8]) -> Result<Json, String> {
    let msg = DynamicMessage::decode(desc.clone(), bytes).map_err(|e| e.to_string())?;
    from_message(&msg, desc.name())
}

// ---------------------------------------------------------------------------
// JSON to protobuf
// ---------------------------------------------------------------------------

/// `json` as a message of type `desc`; `path` names where it is, for errors.
pub fn to_message(
    desc: &MessageDescriptor,
    json: &Json,
    path: &str,
) -> Result<DynamicMessage, String> {
    if let Some(field) = wrapped(desc) {
        // A `...List` or `...Map` message: the JSON is the field's value itself.
        let mut msg = DynamicMessage::new(desc.clone());
        msg.set_field(&field, field_value(&field, json, path)?);
        return Ok(msg);
    }
    let Json::Object(obj) = json else {
        return Err(format!(
            "{path}: expected an object for {}",
            desc.full_name()
        ));
    };
    if desc.full_name() == format!("{PACKAGE}.Envelope") {
        return envelope_to_message(desc, obj, path);
    }
    if let Some(tag) = tagged_oneof(desc) {
        let Some(Json::String(variant)) = obj.get(tag.name()) else {
            return Err(format!("{path}: no `{}` naming the variant", tag.name()));
        };
        let field = tag.fields().find(|f| f.name() == variant).ok_or_else(|| {
            format!(
                "{path}: `{}` {variant:?} has no field in oneof {}.{} (proto/a2ap.proto)",
                tag.name(),
                desc.full_name(),
                tag.name()
            )
        })?;
        let rest: Map<String, Json> = obj
            .iter()
            .filter(|(k, _)| *k != tag.name())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let Kind::Message(inner) = field.kind() else {
            return Err(format!(
                "{path}: oneof field {} is not a message",
                field.full_name()
            ));
        };
        let body = to_message(&inner, &Json::Object(rest), &format!("{path}.{variant}"))?;
        let mut msg = DynamicMessage::new(desc.clone());
        msg.set_field(&field, Pv::Message(body));
        return Ok(msg);
    }
    fields_to_message(desc, obj.iter(), path)
}

/// A message of `desc` from JSON fields, each of which must be one of its fields.
fn fields_to_message<'a>(
    desc: &MessageDescriptor,
    fields: impl Iterator<Item = (&'a String, &'a Json)>,
    path: &str,
) -> Result<DynamicMessage, String> {
    let mut msg = DynamicMessage::new(desc.clone());
    for (key, value) in fields {
        let field = desc
            .get_field_by_name(key)
            .ok_or_else(|| missing(desc, path, key))?;
        if value.is_null() && !is_message(&field, VALUE) {
            // Null is absence (an `Option` serde writes as null).
            continue;
        }
        msg.set_field(
            &field,
            field_value(&field, value, &format!("{path}.{key}"))?,
        );
    }
    Ok(msg)
}

/// The error for a JSON field the `.proto` lacks: the drift test's message.
fn missing(desc: &MessageDescriptor, path: &str, key: &str) -> String {
    format!(
        "{path}.{key}: the field `{key}` has no counterpart in message {} of proto/a2ap.proto; add it there",
        desc.full_name()
    )
}

/// The flat JSON envelope as an `Envelope` whose `body` holds the payload.
fn envelope_to_message(
    desc: &MessageDescriptor,
    obj: &Map<String, Json>,
    path: &str,
) -> Result<DynamicMessage, String> {
    let Some(Json::String(kind)) = obj.get("message_type") else {
        return Err(format!("{path}: no `message_type`"));
    };
    let body_name = snake_case(kind);
    let body_field = desc
        .get_field_by_name(&body_name)
        .filter(|f| f.containing_oneof().is_some_and(|o| o.name() == "body"))
        .ok_or_else(|| {
            format!("{path}: message_type {kind:?} has no field `{body_name}` in Envelope.body (proto/a2ap.proto)")
        })?;
    let is_head = |k: &str| {
        desc.get_field_by_name(k)
            .is_some_and(|f| f.containing_oneof().is_none_or(|o| o.is_synthetic()))
    };
    let mut msg = fields_to_message(desc, obj.iter().filter(|(k, _)| is_head(k)), path)?;
    let body: Map<String, Json> = obj
        .iter()
        .filter(|(k, _)| !is_head(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let Kind::Message(body_desc) = body_field.kind() else {
        return Err(format!("{path}: Envelope.{body_name} is not a message"));
    };
    let body = to_message(&body_desc, &Json::Object(body), &format!("{path}({kind})"))?;
    msg.set_field(&body_field, Pv::Message(body));
    Ok(msg)
}

/// The value of `field` (singular, repeated or map) from JSON.
fn field_value(field: &FieldDescriptor, json: &Json, path: &str) -> Result<Pv, String> {
    if field.is_map() {
        let Json::Object(obj) = json else {
            return Err(format!("{path}: expected an object"));
        };
        let Kind::Message(entry) = field.kind() else {
            return Err(format!("{path}: a map field without an entry type"));
        };
        let value_kind = entry.map_entry_value_field().kind();
        let mut map = HashMap::new();
        for (k, v) in obj {
            map.insert(
                MapKey::String(k.clone()),
                single(&value_kind, v, &format!("{path}.{k}"))?,
            );
        }
        return Ok(Pv::Map(map));
    }
    if field.is_list() {
        let Json::Array(items) = json else {
            return Err(format!("{path}: expected an array"));
        };
        let kind = field.kind();
        return items
            .iter()
            .enumerate()
            .map(|(i, v)| single(&kind, v, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(Pv::List);
    }
    single(&field.kind(), json, path)
}

/// One value of kind `kind` from JSON.
fn single(kind: &Kind, json: &Json, path: &str) -> Result<Pv, String> {
    let bad = |what: &str| format!("{path}: expected {what}, got {json}");
    Ok(match kind {
        Kind::Message(m) if m.full_name() == TIMESTAMP => {
            let text = json.as_str().ok_or_else(|| bad("an RFC 3339 timestamp"))?;
            let t = DateTime::parse_from_rfc3339(text)
                .map_err(|e| format!("{path}: {e}"))?
                .with_timezone(&Utc);
            let mut ts = DynamicMessage::new(m.clone());
            ts.set_field_by_name("seconds", Pv::I64(t.timestamp()));
            ts.set_field_by_name("nanos", Pv::I32(t.timestamp_subsec_nanos() as i32));
            Pv::Message(ts)
        }
        Kind::Message(m) if m.full_name() == VALUE => Pv::Message(json_to_value(m, json)),
        Kind::Message(m) => Pv::Message(to_message(m, json, path)?),
        Kind::Enum(e) => {
            let text = json.as_str().ok_or_else(|| bad("a string"))?;
            let name = format!("{}_{}", upper_snake(e.name()), upper_snake(text));
            let value = e.get_value_by_name(&name).ok_or_else(|| {
                format!("{path}: {text:?} has no value {name} in enum {} of proto/a2ap.proto; add it there", e.full_name())
            })?;
            Pv::EnumNumber(value.number())
        }
        Kind::String => Pv::String(json.as_str().ok_or_else(|| bad("a string"))?.to_owned()),
        Kind::Bool => Pv::Bool(json.as_bool().ok_or_else(|| bad("a boolean"))?),
        Kind::Uint32 | Kind::Fixed32 => Pv::U32(
            json.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad("a 32-bit unsigned integer"))?,
        ),
        Kind::Uint64 | Kind::Fixed64 => {
            Pv::U64(json.as_u64().ok_or_else(|| bad("an unsigned integer"))?)
        }
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Pv::I32(
            json.as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| bad("a 32-bit integer"))?,
        ),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            Pv::I64(json.as_i64().ok_or_else(|| bad("an integer"))?)
        }
        Kind::Double => Pv::F64(json.as_f64().ok_or_else(|| bad("a number"))?),
        Kind::Float => Pv::F32(json.as_f64().ok_or_else(|| bad("a number"))? as f32),
        Kind::Bytes => return Err(format!("{path}: bytes fields are not used by A2AP")),
    })
}

/// Any JSON as a `google.protobuf.Value`.
fn json_to_value(desc: &MessageDescriptor, json: &Json) -> DynamicMessage {
    let mut v = DynamicMessage::new(desc.clone());
    match json {
        Json::Null => v.set_field_by_name("null_value", Pv::EnumNumber(0)),
        Json::Bool(b) => v.set_field_by_name("bool_value", Pv::Bool(*b)),
        Json::Number(n) => v.set_field_by_name("number_value", Pv::F64(n.as_f64().unwrap_or(0.0))),
        Json::String(s) => v.set_field_by_name("string_value", Pv::String(s.clone())),
        Json::Array(items) => {
            let list_desc = sub(desc, "list_value");
            let mut list = DynamicMessage::new(list_desc.clone());
            let values = items
                .iter()
                .map(|i| Pv::Message(json_to_value(desc, i)))
                .collect();
            list.set_field_by_name("values", Pv::List(values));
            v.set_field_by_name("list_value", Pv::Message(list));
        }
        Json::Object(obj) => {
            let struct_desc = sub(desc, "struct_value");
            let mut st = DynamicMessage::new(struct_desc);
            let fields = obj
                .iter()
                .map(|(k, i)| {
                    (
                        MapKey::String(k.clone()),
                        Pv::Message(json_to_value(desc, i)),
                    )
                })
                .collect();
            st.set_field_by_name("fields", Pv::Map(fields));
            v.set_field_by_name("struct_value", Pv::Message(st));
        }
    }
    v
}

/// The message type of `desc`'s field `name` (a well-known type's, known to exist).
fn sub(desc: &MessageDescriptor, name: &str) -> MessageDescriptor {
    match desc.get_field_by_name(name).map(|f| f.kind()) {
        Some(Kind::Message(m)) => m,
        _ => unreachable!("google.protobuf.Value has a message field {name}"),
    }
}

// ---------------------------------------------------------------------------
// Protobuf to JSON
// ---------------------------------------------------------------------------

/// A message as the JSON serde reads; `path` names where it is, for errors.
pub fn from_message(msg: &DynamicMessage, path: &str) -> Result<Json, String> {
    let desc = msg.descriptor();
    if let Some(field) = wrapped(&desc) {
        return field_json(&field, &msg.get_field(&field), path);
    }
    if desc.full_name() == format!("{PACKAGE}.Envelope") {
        let mut obj = plain_fields(msg, path)?;
        let body = desc
            .oneofs()
            .find(|o| o.name() == "body")
            .and_then(|o| o.fields().find(|f| msg.has_field(f)))
            .ok_or_else(|| format!("{path}: the envelope has no body"))?;
        // The payload's fields beside the envelope's, as JSON has them.
        if let Json::Object(fields) = field_json(&body, &msg.get_field(&body), path)? {
            obj.extend(fields);
        }
        return Ok(Json::Object(obj));
    }
    if let Some(tag) = tagged_oneof(&desc) {
        let field = tag
            .fields()
            .find(|f| msg.has_field(f))
            .ok_or_else(|| format!("{path}: no `{}` is set in {}", tag.name(), desc.full_name()))?;
        let mut obj = match field_json(&field, &msg.get_field(&field), path)? {
            Json::Object(o) => o,
            _ => Map::new(),
        };
        obj.insert(tag.name().to_owned(), Json::String(field.name().to_owned()));
        return Ok(Json::Object(obj));
    }
    plain_fields(msg, path).map(Json::Object)
}

/// The fields of a message that are not in a tagged `oneof` or the envelope's body.
fn plain_fields(msg: &DynamicMessage, path: &str) -> Result<Map<String, Json>, String> {
    let desc = msg.descriptor();
    let mut obj = Map::new();
    for field in desc.fields() {
        let in_oneof = field.containing_oneof().is_some_and(|o| !o.is_synthetic());
        if in_oneof && field.containing_oneof().is_some_and(|o| o.name() == "body") {
            continue;
        }
        // A field with presence is written only when set; one without, always
        // (its zero value is its value), so that serde finds what it requires.
        if (in_oneof || field.supports_presence()) && !msg.has_field(&field) {
            continue;
        }
        let value = msg.get_field(&field);
        if let (Kind::Enum(_), Pv::EnumNumber(0)) = (field.kind(), value.as_ref()) {
            continue; // `*_UNSPECIFIED`: absent.
        }
        let json = field_json(&field, &value, &format!("{path}.{}", field.name()))?;
        obj.insert(field.name().to_owned(), json);
    }
    Ok(obj)
}

/// The JSON of `field`'s value (singular, repeated or map).
fn field_json(field: &FieldDescriptor, value: &Pv, path: &str) -> Result<Json, String> {
    match value {
        Pv::Map(map) => {
            let Kind::Message(entry) = field.kind() else {
                return Err(format!("{path}: a map field without an entry type"));
            };
            let kind = entry.map_entry_value_field().kind();
            let mut obj = Map::new();
            for (k, v) in map {
                let MapKey::String(k) = k else {
                    return Err(format!("{path}: a map key that is not a string"));
                };
                obj.insert(k.clone(), single_json(&kind, v, &format!("{path}.{k}"))?);
            }
            Ok(Json::Object(obj))
        }
        Pv::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| single_json(&field.kind(), v, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(Json::Array),
        v => single_json(&field.kind(), v, path),
    }
}

/// One value as JSON.
fn single_json(kind: &Kind, value: &Pv, path: &str) -> Result<Json, String> {
    Ok(match (kind, value) {
        (Kind::Message(m), Pv::Message(ts)) if m.full_name() == TIMESTAMP => {
            let seconds = ts
                .get_field_by_name("seconds")
                .and_then(|v| v.as_i64())
                .unwrap_or(0);
            let nanos = ts
                .get_field_by_name("nanos")
                .and_then(|v| v.as_i32())
                .unwrap_or(0);
            let t = u32::try_from(nanos)
                .ok()
                .and_then(|n| DateTime::<Utc>::from_timestamp(seconds, n))
                .ok_or_else(|| format!("{path}: timestamp {seconds}s {nanos}ns is out of range"))?;
            Json::String(t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
        }
        (Kind::Message(m), Pv::Message(v)) if m.full_name() == VALUE => value_to_json(v),
        (Kind::Message(_), Pv::Message(inner)) => from_message(inner, path)?,
        (Kind::Enum(e), Pv::EnumNumber(n)) => Json::String(enum_json(e, *n, path)?),
        (_, Pv::String(s)) => Json::String(s.clone()),
        (_, Pv::Bool(b)) => Json::Bool(*b),
        (_, Pv::U32(n)) => Json::from(*n),
        (_, Pv::U64(n)) => Json::from(*n),
        (_, Pv::I32(n)) => Json::from(*n),
        (_, Pv::I64(n)) => Json::from(*n),
        (_, Pv::F64(x)) => number(*x),
        (_, Pv::F32(x)) => number(f64::from(*x)),
        (_, other) => return Err(format!("{path}: unexpected value {other:?}")),
    })
}

fn number(x: f64) -> Json {
    Number::from_f64(x).map_or(Json::Null, Json::Number)
}

/// The JSON spelling of enum value `n` of `e`.
fn enum_json(e: &EnumDescriptor, n: i32, path: &str) -> Result<String, String> {
    let value = e
        .get_value(n)
        .ok_or_else(|| format!("{path}: {n} is no value of enum {}", e.full_name()))?;
    let prefix = format!("{}_", upper_snake(e.name()));
    let rest = value.name().strip_prefix(&prefix).unwrap_or(value.name());
    Ok(if SNAKE_CASE_ENUMS.contains(&e.name()) {
        rest.to_ascii_lowercase()
    } else {
        rest.split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next().map_or_else(String::new, |f| {
                    f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase()
                })
            })
            .collect()
    })
}

/// A `google.protobuf.Value` as JSON.
fn value_to_json(v: &DynamicMessage) -> Json {
    let desc = v.descriptor();
    let Some(field) = desc.fields().find(|f| v.has_field(f)) else {
        return Json::Null;
    };
    let got = v.get_field(&field);
    match (field.name(), got.as_ref()) {
        ("bool_value", Pv::Bool(b)) => Json::Bool(*b),
        ("number_value", Pv::F64(x)) => {
            // Whole numbers back as integers, as they were written.
            if x.fract() == 0.0 && x.abs() < 9.007_199_254_740_992e15 {
                Json::from(*x as i64)
            } else {
                number(*x)
            }
        }
        ("string_value", Pv::String(s)) => Json::String(s.clone()),
        ("list_value", Pv::Message(list)) => match list.get_field_by_name("values").as_deref() {
            Some(Pv::List(items)) => Json::Array(
                items
                    .iter()
                    .filter_map(|i| i.as_message().map(value_to_json))
                    .collect(),
            ),
            _ => Json::Array(Vec::new()),
        },
        ("struct_value", Pv::Message(st)) => match st.get_field_by_name("fields").as_deref() {
            Some(Pv::Map(map)) => Json::Object(
                map.iter()
                    .filter_map(|(k, i)| match (k, i.as_message()) {
                        (MapKey::String(k), Some(m)) => Some((k.clone(), value_to_json(m))),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => Json::Object(Map::new()),
        },
        _ => Json::Null,
    }
}

// ---------------------------------------------------------------------------
// Shapes and names
// ---------------------------------------------------------------------------

/// The one field of a `...List` or `...Map` message, which stands for that
/// field's JSON array or object.
fn wrapped(desc: &MessageDescriptor) -> Option<FieldDescriptor> {
    let name = desc.name();
    if !desc.full_name().starts_with(PACKAGE) || !(name.ends_with("List") || name.ends_with("Map"))
    {
        return None;
    }
    let mut fields = desc.fields();
    let (field, None) = (fields.next()?, fields.next()) else {
        return None;
    };
    (field.is_list() || field.is_map()).then_some(field)
}

/// The `oneof` of `desc` that tags its JSON object, if it has one.
fn tagged_oneof(desc: &MessageDescriptor) -> Option<prost_reflect::OneofDescriptor> {
    desc.oneofs()
        .find(|o| !o.is_synthetic() && TAGS.contains(&o.name()))
}

/// Whether `field` holds the message `full_name` (singly).
fn is_message(field: &FieldDescriptor, full_name: &str) -> bool {
    matches!(field.kind(), Kind::Message(m) if m.full_name() == full_name)
}

/// `InProgress` or `in_progress` as `IN_PROGRESS`; `TaskStatus` as `TASK_STATUS`.
pub fn upper_snake(name: &str) -> String {
    snake_case(name).to_ascii_uppercase()
}

/// `SwarmDeployment` as `swarm_deployment`; snake case stays as it is.
pub fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Well-known types a JSON value may map to (for the drift test's walk).
pub fn is_well_known(full_name: &str) -> bool {
    matches!(full_name, TIMESTAMP | VALUE | STRUCT | LIST_VALUE)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn names_map_between_json_and_proto() {
        assert_eq!(upper_snake("InProgress"), "IN_PROGRESS");
        assert_eq!(upper_snake("decode_failed"), "DECODE_FAILED");
        assert_eq!(upper_snake("TaskStatus"), "TASK_STATUS");
        assert_eq!(snake_case("SwarmDeployment"), "swarm_deployment");
        assert_eq!(snake_case("Error"), "error");
        let status = POOL.get_enum_by_name("swarm.a2ap.v1.TaskStatus").unwrap();
        assert_eq!(enum_json(&status, 3, "t").unwrap(), "InProgress");
        let swarm = POOL.get_enum_by_name("swarm.a2ap.v1.SwarmStatus").unwrap();
        assert_eq!(enum_json(&swarm, 5, "t").unwrap(), "TimedOut");
        let code = POOL.get_enum_by_name("swarm.a2ap.v1.ErrorCode").unwrap();
        assert_eq!(enum_json(&code, 2, "t").unwrap(), "decode_failed");
    }

    #[test]
    fn types_find_their_messages() {
        assert_eq!(
            message_for::<crate::Envelope<crate::Control>>()
                .unwrap()
                .name(),
            "Envelope"
        );
        assert_eq!(
            message_for::<crate::mission::MissionRequest>()
                .unwrap()
                .name(),
            "MissionRequest"
        );
        assert_eq!(message_for::<crate::Header>().unwrap().name(), "Envelope");
        assert!(message_for::<serde_json::Value>().is_err());
    }

    #[test]
    fn any_json_survives_a_value() {
        let json = serde_json::json!({"a": [1, 2.5, "x", null, true, {"b": {}}], "c": -3});
        let desc = POOL.get_message_by_name(VALUE).unwrap();
        assert_eq!(value_to_json(&json_to_value(&desc, &json)), json);
    }
}
