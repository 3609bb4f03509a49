//! Reading the seed's A2AP: the original C# classes (System.Text.Json,
//! snake_case names, string enums) shape a few things differently from
//! ours, and a peer that speaks them must still be understood.
//!
//! Renamed fields are serde aliases on the types themselves
//! (`worker_name`, `progress_description`); what needs more than a name
//! lives here: numbers the seed types more loosely than we do, the seed's
//! flat `Error`, and a plan's own mission text, time limit and swarm id.
//! Nothing here changes what Swarm writes.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::error::{ErrorBody, ErrorCode};
use crate::messages::SwarmDeploymentPlan;

/// A task's priority from any JSON integer (C#'s `int` may be negative:
/// held at 0) or from a whole float; `null` is none.
pub(crate) fn priority<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<u32>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a priority (an integer) or nothing")
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

/// What a seed's plan says beyond our plan's fields. The seed's
/// `manager_name` is accepted and not kept: managers here are
/// interchangeable replicas, and a plan cannot pick one.
#[derive(Debug, Default, Deserialize)]
struct PlanExtras {
    /// The mission the plan was made for.
    #[serde(default)]
    original_task: Option<String>,
    /// How long the swarm may run.
    #[serde(default)]
    max_execution_minutes: Option<u32>,
    /// The seed's id of the swarm.
    #[serde(default)]
    swarm_id: Option<String>,
}

/// A plan as it arrives: ours, or the seed's with its extra fields.
#[derive(Debug, Deserialize)]
pub(crate) struct PlanOnWire {
    #[serde(flatten)]
    extras: PlanExtras,
    #[serde(flatten)]
    plan: SwarmDeploymentPlan,
}

/// A plan read, with what the seed's plan said of its mission.
pub(crate) struct ReadPlan {
    /// The plan; a seed plan with no directive gets its `original_task` as
    /// the directive, so the one task per persona it expands to
    /// ([`crate::validate::expand_tasks`]) is the mission itself.
    pub plan: SwarmDeploymentPlan,
    /// The plan's `original_task`.
    pub original_task: Option<String>,
    /// The plan's `max_execution_minutes`.
    pub max_execution_minutes: Option<u32>,
    /// The plan's `swarm_id`.
    pub swarm_id: Option<String>,
}

impl From<PlanOnWire> for ReadPlan {
    fn from(w: PlanOnWire) -> Self {
        let mut plan = w.plan;
        let extras = w.extras;
        if plan.manager_directive.trim().is_empty()
            && let Some(task) = &extras.original_task
        {
            plan.manager_directive = task.clone();
        }
        ReadPlan {
            plan,
            original_task: extras.original_task.filter(|t| !t.trim().is_empty()),
            max_execution_minutes: extras.max_execution_minutes,
            swarm_id: extras.swarm_id.filter(|s| !s.is_empty()),
        }
    }
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
            #[serde(default, deserialize_with = "priority")]
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
