//! The seed's A2AP both ways: the original C# classes (System.Text.Json,
//! snake_case names, string enums) name or type a few things differently
//! from ours, and a peer that speaks them must understand Swarm and be
//! understood.
//!
//! Reading: numbers the seed types more loosely than we do, the seed's flat
//! `Error`. Writing and reading: where a seed field differs from ours in
//! name or type, the field is written twice, the seed's beside ours, by the
//! `flatten, with` modules below, each of which reads whichever of the two
//! came (ours first, since it says more): status fields in the seed's five
//! values with ours in `detailed_status`, `progress_description` beside
//! `message`, `worker_name` beside `name`, the report's seed-typed
//! `insights` (a string) and `metrics` (strings) beside `insight_list` and
//! `metric_values`, a result's `structured_data` and `final_status`, and
//! the flat error fields beside `error`.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::error::{ErrorBody, ErrorCode};
use crate::messages::{SwarmStatus, TaskStatus};

/// A count such as a task's priority or estimate from any JSON integer
/// (C#'s `int` may be negative: held at 0) or from a whole float; `null`
/// is none.
pub(crate) fn whole_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<u32>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a whole number or nothing")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(u32::try_from(v).unwrap_or(u32::MAX)))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(u32::try_from(v.max(0)).unwrap_or(u32::MAX)))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            if v.is_finite() && v.fract() == 0.0 {
                // Whole and finite: the cast saturates at the u32 bounds.
                Ok(Some(v.max(0.0) as u32))
            } else {
                Err(E::invalid_value(de::Unexpected::Float(v), &self))
            }
        }
    }
    d.deserialize_option(V)
}

/// A percentage from any number, rounded and held to 0-100 (the seed's may
/// be a `double`).
pub(crate) fn percentage<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = u8;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a percentage (a number from 0 to 100)")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u8, E> {
            Ok(v.min(100) as u8)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u8, E> {
            Ok(v.clamp(0, 100) as u8)
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u8, E> {
            if v.is_nan() {
                return Err(E::invalid_value(de::Unexpected::Float(v), &self));
            }
            Ok(v.round().clamp(0.0, 100.0) as u8)
        }
    }
    d.deserialize_any(V)
}

/// An `Error` message as it arrives: ours (`error` holds an [`ErrorBody`]),
/// or the seed's, whose error is flat (`error_code`, `error_message`,
/// `details`, `affected_task_id`).
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorOnWire {
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    error: Option<ErrorBody>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    affected_task_id: Option<String>,
    #[serde(default)]
    error_code: Option<Scalar>,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    details: Option<Details>,
}

impl ErrorOnWire {
    /// Our `ErrorMessage`'s fields: `(task_id, attempt, error, token)`.
    pub(crate) fn into_parts<E: de::Error>(
        self,
    ) -> Result<(Option<String>, Option<u32>, ErrorBody, String), E> {
        let task_id = self.task_id.or(self.affected_task_id);
        let token = self.token.unwrap_or_default();
        if let Some(error) = self.error {
            return Ok((task_id, self.attempt, error, token));
        }
        if self.error_code.is_none() && self.error_message.is_none() {
            return Err(E::missing_field("error"));
        }
        let text = self.error_code.map(|c| c.0);
        let known = text.as_deref().and_then(error_code);
        let mut error = ErrorBody::new(
            known.unwrap_or(ErrorCode::Internal),
            self.error_message
                .or_else(|| text.clone())
                .unwrap_or_default(),
        );
        // A code we have no name for is kept as the sender wrote it.
        if let (None, Some(text)) = (known, &text) {
            error = error.with_detail("error_code", text);
        }
        match self.details {
            Some(Details::Map(m)) => {
                for (k, v) in m {
                    let v = match v {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    error = error.with_detail(k, v);
                }
            }
            Some(Details::One(t)) if !t.0.is_empty() => error = error.with_detail("details", t.0),
            _ => {}
        }
        Ok((task_id, self.attempt, error, token))
    }
}

/// The code a seed's `error_code` names, compared without case and
/// underscores (`validation_failed`, `ValidationFailed`, `VALIDATION_FAILED`).
fn error_code(text: &str) -> Option<ErrorCode> {
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted = squash(text);
    ALL_CODES
        .iter()
        .copied()
        .find(|c| squash(c.as_str()) == wanted)
}

const ALL_CODES: [ErrorCode; 12] = [
    ErrorCode::UnsupportedProtocol,
    ErrorCode::DecodeFailed,
    ErrorCode::ValidationFailed,
    ErrorCode::PayloadTooLarge,
    ErrorCode::AuthorizationDenied,
    ErrorCode::Timeout,
    ErrorCode::LimitExceeded,
    ErrorCode::NotFound,
    ErrorCode::ToolFailed,
    ErrorCode::GaveUp,
    ErrorCode::Cancelled,
    ErrorCode::Internal,
];

/// The seed's `details`: a map of values, or one value (a sentence).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Details {
    Map(BTreeMap<String, serde_json::Value>),
    One(Scalar),
}

/// A string, number or boolean, as text (an error code may be an enum's
/// name or its number; a detail may be either).
#[derive(Debug)]
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string, a number or a boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
                Ok(Scalar(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------
// Fields written twice: ours and the seed's
// ---------------------------------------------------------------------------

/// The first of `ours` and `theirs` that says something: ours when it is
/// there and not empty, else the seed's, else ours empty; `field` is named
/// when neither came.
fn either<E: de::Error>(
    ours: Option<String>,
    theirs: Option<String>,
    field: &'static str,
) -> Result<String, E> {
    match (ours, theirs) {
        (Some(o), _) if !o.is_empty() => Ok(o),
        (_, Some(t)) => Ok(t),
        (Some(o), None) => Ok(o),
        (None, None) => Err(E::missing_field(field)),
    }
}

/// A task's status: `status` in the seed's five values
/// ([`TaskStatus::seed`]), `detailed_status` in ours.
pub(crate) mod status {
    use super::*;

    /// A status as it is written.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Out {
        /// One of the seed's five: `Pending`, `InProgress`, `Completed`,
        /// `Failed`, `Cancelled`.
        status: TaskStatus,
        /// Swarm's own, finer status (also `Assigned`, `InputRequired`,
        /// `Skipped`); read first.
        detailed_status: TaskStatus,
    }

    /// A status as it is read: Swarm's own first, then the seed's, then
    /// the seed's name for a result's (which only a result has).
    #[derive(Deserialize)]
    struct Fields {
        #[serde(default)]
        status: Option<TaskStatus>,
        #[serde(default)]
        final_status: Option<TaskStatus>,
        #[serde(default)]
        detailed_status: Option<TaskStatus>,
    }

    pub(crate) fn serialize<S: Serializer>(s: &TaskStatus, ser: S) -> Result<S::Ok, S::Error> {
        Out {
            status: s.seed(),
            detailed_status: *s,
        }
        .serialize(ser)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TaskStatus, D::Error> {
        let f = Fields::deserialize(d)?;
        f.detailed_status
            .or(f.status)
            .or(f.final_status)
            .ok_or_else(|| de::Error::missing_field("status"))
    }
}

/// A result's status: as [`status`], and again as the seed's
/// `final_status` (read by [`status::deserialize`]).
pub(crate) mod result_status {
    use super::*;

    /// A result's status as it is written.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Out {
        /// `Completed` with a result, `Failed` with an error (the seed's
        /// five values).
        status: TaskStatus,
        /// The same, under the seed's name.
        final_status: TaskStatus,
        /// Swarm's own status; read first.
        detailed_status: TaskStatus,
    }

    pub(crate) fn serialize<S: Serializer>(s: &TaskStatus, ser: S) -> Result<S::Ok, S::Error> {
        Out {
            status: s.seed(),
            final_status: s.seed(),
            detailed_status: *s,
        }
        .serialize(ser)
    }

    pub(crate) use super::status::deserialize;
}

/// A report's status: the seed's `overall_status` (a `TaskStatus`,
/// [`SwarmStatus::seed`]) and ours, `swarm_status`.
pub(crate) mod overall_status {
    use super::*;

    /// A report's status as it is written.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Out {
        /// The seed's: `Completed`, `Failed` (a timed-out mission too),
        /// `Cancelled`, or `InProgress` while running. (A swarm's status,
        /// as earlier builds wrote here, is read too.)
        overall_status: TaskStatus,
        /// Swarm's own (`TimedOut` too); read first.
        swarm_status: SwarmStatus,
    }

    /// How a report's status reads: a swarm's status (as Swarm wrote it
    /// before `swarm_status`) or the seed's task status.
    #[derive(Deserialize)]
    #[serde(untagged)]
    pub(crate) enum AnyStatus {
        /// Swarm's own.
        Swarm(SwarmStatus),
        /// The seed's.
        Task(TaskStatus),
    }

    /// A report's status as it is read.
    #[derive(Deserialize)]
    struct Fields {
        #[serde(default)]
        overall_status: Option<AnyStatus>,
        #[serde(default)]
        swarm_status: Option<SwarmStatus>,
    }

    pub(crate) fn serialize<S: Serializer>(s: &SwarmStatus, ser: S) -> Result<S::Ok, S::Error> {
        Out {
            overall_status: s.seed(),
            swarm_status: *s,
        }
        .serialize(ser)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SwarmStatus, D::Error> {
        let f = Fields::deserialize(d)?;
        if let Some(s) = f.swarm_status {
            return Ok(s);
        }
        match f.overall_status {
            Some(AnyStatus::Swarm(s)) => Ok(s),
            Some(AnyStatus::Task(t)) => Ok(match t {
                TaskStatus::Completed | TaskStatus::Skipped => SwarmStatus::Completed,
                TaskStatus::Failed => SwarmStatus::Failed,
                TaskStatus::Cancelled => SwarmStatus::Cancelled,
                TaskStatus::Pending
                | TaskStatus::Assigned
                | TaskStatus::InProgress
                | TaskStatus::InputRequired => SwarmStatus::Running,
            }),
            None => Err(de::Error::missing_field("overall_status")),
        }
    }
}

/// A progress update's text: `message`, and the seed's
/// `progress_description`.
pub(crate) mod description {
    use super::*;

    /// A progress update's text as it is written.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Out<'a> {
        /// What is happening, for people; read first.
        message: &'a str,
        /// The same, under the seed's name.
        progress_description: &'a str,
    }

    /// A progress update's text as it is read.
    #[derive(Deserialize)]
    struct Fields {
        #[serde(default)]
        message: Option<String>,
        #[serde(default)]
        progress_description: Option<String>,
    }

    pub(crate) fn serialize<S: Serializer>(m: &str, ser: S) -> Result<S::Ok, S::Error> {
        Out {
            message: m,
            progress_description: m,
        }
        .serialize(ser)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let f = Fields::deserialize(d)?;
        either(f.message, f.progress_description, "message")
    }
}

/// A persona's name: `name`, and the seed's `worker_name`.
pub(crate) mod worker_name {
    use super::*;

    /// A persona's name as it is written.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Out<'a> {
        /// Unique within the plan; read first.
        name: &'a str,
        /// The same, under the seed's name; read when `name` is empty.
        worker_name: &'a str,
    }

    /// A persona's name as it is read.
    #[derive(Deserialize)]
    struct Fields {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        worker_name: Option<String>,
    }

    pub(crate) fn serialize<S: Serializer>(n: &str, ser: S) -> Result<S::Ok, S::Error> {
        Out {
            name: n,
            worker_name: n,
        }
        .serialize(ser)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let f = Fields::deserialize(d)?;
        either(f.name, f.worker_name, "name")
    }
}

/// The largest result whose JSON object is written again as the seed's
/// `structured_data`: past it the result travels once, as text.
pub const MAX_STRUCTURED_BYTES: usize = 64 * 1024;

/// A result's text: `result`, and when it is a JSON object (of at most
/// [`MAX_STRUCTURED_BYTES`]), the same object as the seed's
/// `structured_data` (else `{}`).
pub(crate) mod result_text {
    use super::*;

    type Object = serde_json::Map<String, serde_json::Value>;

    /// A result's text as it is written.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Out<'a> {
        /// The result text; read first.
        result: &'a str,
        /// The seed's: the result as a JSON object when it is one (of at
        /// most 64 KiB), else `{}`; read as the result's text when there
        /// is no `result`.
        structured_data: Object,
    }

    /// A result's text as it is read.
    #[derive(Deserialize)]
    struct Fields {
        #[serde(default)]
        result: Option<String>,
        #[serde(default)]
        structured_data: Option<Object>,
    }

    /// The object `text` holds, if it is one and small enough.
    fn structured(text: &str) -> Object {
        if text.len() > MAX_STRUCTURED_BYTES || !text.trim_start().starts_with('{') {
            return Object::new();
        }
        serde_json::from_str(text).unwrap_or_default()
    }

    pub(crate) fn serialize<S: Serializer>(r: &str, ser: S) -> Result<S::Ok, S::Error> {
        Out {
            result: r,
            structured_data: structured(r),
        }
        .serialize(ser)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        let f = Fields::deserialize(d)?;
        let data = f
            .structured_data
            .filter(|o| !o.is_empty())
            .map(|o| serde_json::Value::Object(o).to_string());
        either(f.result, data, "result")
    }
}

/// A report's insights: `insight_list`, and the seed's `insights`, one
/// string with an insight per line.
pub(crate) mod insights {
    use super::*;

    /// A report's insights as they are written.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Out<'a> {
        /// The seed's: the insights as one string, one per line. (A list,
        /// as earlier builds wrote here, is read too.)
        insights: String,
        /// Swarm's: one insight per item; read first.
        insight_list: &'a [String],
    }

    /// The seed's `insights`, or a list as Swarm wrote it before
    /// `insight_list`.
    #[derive(Deserialize)]
    #[serde(untagged)]
    pub(crate) enum TextOrList {
        /// One insight per line.
        Text(String),
        /// One insight per item.
        List(Vec<String>),
    }

    /// A report's insights as they are read.
    #[derive(Deserialize)]
    struct Fields {
        #[serde(default)]
        insights: Option<TextOrList>,
        #[serde(default)]
        insight_list: Option<Vec<String>>,
    }

    pub(crate) fn serialize<S: Serializer>(list: &[String], ser: S) -> Result<S::Ok, S::Error> {
        Out {
            insights: list.join("\n"),
            insight_list: list,
        }
        .serialize(ser)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        let f = Fields::deserialize(d)?;
        Ok(match (f.insight_list, f.insights) {
            (Some(list), _) if !list.is_empty() => list,
            (_, Some(TextOrList::Text(text))) => text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
            (_, Some(TextOrList::List(list))) => list,
            (list, None) => list.unwrap_or_default(),
        })
    }
}

/// A report's figures: `metric_values` (numbers), and the seed's `metrics`
/// (a `Dictionary<string, string>`).
pub(crate) mod metrics {
    use super::*;

    /// A report's figures as they are written.
    #[derive(Serialize, JsonSchema)]
    pub(crate) struct Out<'a> {
        /// The seed's: each figure as text (`"3"`, `"0.25"`). (Numbers, as
        /// earlier builds wrote here, are read too.)
        metrics: BTreeMap<&'a str, String>,
        /// Swarm's: each figure as a number; read first.
        metric_values: &'a BTreeMap<String, f64>,
    }

    /// A figure as the seed writes it (text) or as Swarm did before
    /// `metric_values` (a number).
    #[derive(Deserialize)]
    #[serde(untagged)]
    pub(crate) enum Figure {
        /// A number.
        Number(f64),
        /// A number as text; text that is no number is not kept.
        Text(String),
    }

    /// A report's figures as they are read.
    #[derive(Deserialize)]
    struct Fields {
        #[serde(default)]
        metrics: Option<BTreeMap<String, Figure>>,
        #[serde(default)]
        metric_values: Option<BTreeMap<String, f64>>,
    }

    /// A figure as text: whole numbers without a fraction, as a person
    /// writes them.
    pub(crate) fn text(x: f64) -> String {
        if x.fract() == 0.0 && x.abs() < 1e15 {
            format!("{}", x as i64)
        } else {
            format!("{x}")
        }
    }

    pub(crate) fn serialize<S: Serializer>(
        m: &BTreeMap<String, f64>,
        ser: S,
    ) -> Result<S::Ok, S::Error> {
        Out {
            metrics: m.iter().map(|(k, v)| (k.as_str(), text(*v))).collect(),
            metric_values: m,
        }
        .serialize(ser)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, f64>, D::Error> {
        let f = Fields::deserialize(d)?;
        if let Some(values) = f.metric_values.filter(|v| !v.is_empty()) {
            return Ok(values);
        }
        Ok(f.metrics
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| match v {
                Figure::Number(x) => Some((k, x)),
                Figure::Text(t) => t.trim().parse().ok().map(|x| (k, x)),
            })
            .collect())
    }
}

/// An `Error`'s task as it is written: `task_id` and the seed's
/// `affected_task_id` (both absent when it concerns no task).
#[derive(JsonSchema)]
#[allow(dead_code, reason = "a schema: its fields are never read")]
pub(crate) struct AffectedTaskFields {
    /// The task concerned, if any.
    task_id: Option<String>,
    /// The same, under the seed's name.
    affected_task_id: Option<String>,
}

pub(crate) fn affected_task<S: Serializer>(t: &Option<String>, ser: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Out<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        task_id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        affected_task_id: Option<&'a str>,
    }
    Out {
        task_id: t.as_deref(),
        affected_task_id: t.as_deref(),
    }
    .serialize(ser)
}

/// An `Error`'s error as it is written: ours in `error`, and the seed's
/// flat fields beside it.
#[derive(JsonSchema)]
#[allow(dead_code, reason = "a schema: its fields are never read")]
pub(crate) struct FlatErrorFields {
    /// What went wrong (Swarm's); read first.
    error: ErrorBody,
    /// The seed's: the error's code (`validation_failed`; read in any
    /// spelling).
    error_code: String,
    /// The seed's: the sentence for people.
    error_message: String,
    /// The seed's: the structured context, each value a string (read also
    /// as one sentence).
    details: BTreeMap<String, String>,
}

pub(crate) fn flat_error<S: Serializer>(e: &ErrorBody, ser: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Out<'a> {
        error: &'a ErrorBody,
        error_code: &'static str,
        error_message: &'a str,
        details: &'a BTreeMap<String, String>,
    }
    Out {
        error: e,
        error_code: e.code.as_str(),
        error_message: &e.message,
        details: &e.details,
    }
    .serialize(ser)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn seed_error_codes_are_matched_in_any_spelling() {
        assert_eq!(
            error_code("ValidationFailed"),
            Some(ErrorCode::ValidationFailed)
        );
        assert_eq!(error_code("TIMEOUT"), Some(ErrorCode::Timeout));
        assert_eq!(error_code("gave_up"), Some(ErrorCode::GaveUp));
        assert_eq!(error_code("WORKER_CRASHED"), None);
    }

    #[test]
    fn loose_numbers_are_held_to_their_range() {
        #[derive(Deserialize)]
        struct P {
            #[serde(default, deserialize_with = "whole_number")]
            p: Option<u32>,
            #[serde(deserialize_with = "percentage")]
            q: u8,
        }
        let read = |json: &str| serde_json::from_str::<P>(json).map(|v| (v.p, v.q));
        assert_eq!(read(r#"{"p": 3, "q": 42}"#).unwrap(), (Some(3), 42));
        assert_eq!(read(r#"{"p": -2, "q": 42.6}"#).unwrap(), (Some(0), 43));
        assert_eq!(read(r#"{"p": null, "q": 250}"#).unwrap(), (None, 100));
        assert_eq!(read(r#"{"q": -5}"#).unwrap(), (None, 0));
        assert_eq!(read(r#"{"p": 2.0, "q": 0}"#).unwrap(), (Some(2), 0));
        assert!(read(r#"{"p": 2.5, "q": 0}"#).is_err());
        assert!(read(r#"{"p": "high", "q": 0}"#).is_err());
        assert!(read(r#"{"q": "half"}"#).is_err());
        let bytes = rmp_serde::to_vec_named(&serde_json::json!({"p": 7, "q": 99.5})).unwrap();
        let v: P = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!((v.p, v.q), (Some(7), 100));
    }
}
