//! Conditional tasks: a [`Condition`] on a task's dependencies, decided when
//! they have all ended. When it holds the task runs; when it does not the
//! task is `Skipped`, a terminal status that is not a failure.
//!
//! A condition is made of tests, each on one of the task's own dependencies
//! (the plan rules refuse any other task): its status (`completed` or
//! `skipped`), or a value in its result read as JSON (an RFC 6901 pointer
//! compared with a value), combined with `all`, `any` and `not`:
//!
//! ```json
//! {"when": {"task": "check", "status": "completed"}}
//! {"when": {"task": "check", "pointer": "/needs_review", "equals": true}}
//! {"all": [{"when": {...}}, {"not": {"when": {...}}}]}
//! ```
//!
//! A result that is not JSON, or has nothing at the pointer, makes the test
//! false, and the skip reason says which. A skipped dependency has no result,
//! so a pointer test on it is false too. The manager evaluates a pointer test
//! when the dependency's result is accepted ([`check_result`]) and keeps the
//! outcome in the dependency's state under the test's [`Test::key`]: the
//! state machine stays pure and needs no result text later.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::error::excerpt;

/// Most tests in one condition.
pub const MAX_TESTS: usize = 32;
/// Deepest nesting of `all`, `any` and `not`.
pub const MAX_DEPTH: usize = 8;
/// Longest JSON pointer, in bytes.
pub const MAX_POINTER_BYTES: usize = 256;
/// Largest `equals` value, in bytes of JSON.
pub const MAX_EQUALS_BYTES: usize = 1024;

/// When a task runs, decided on its dependencies once they have all ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// One test on one dependency.
    When(Test),
    /// Every condition holds.
    All(Vec<Condition>),
    /// At least one condition holds.
    Any(Vec<Condition>),
    /// The condition does not hold.
    Not(Box<Condition>),
}

/// One test on one dependency: `status`, or `pointer` with `equals`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Test {
    /// The dependency tested (one of the task's own dependencies).
    pub task: String,
    /// The status it must have ended with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DependencyStatus>,
    /// An RFC 6901 JSON pointer into its result parsed as JSON (`""` is
    /// the whole document).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
    /// The value found at `pointer` must equal this (numbers compare by
    /// value: `1` equals `1.0`). `null` is a value here, not an absence.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub equals: Option<Value>,
}

/// An ended dependency's status, as a condition can test it. A dependency
/// that failed or was cancelled cancels its dependents before any condition
/// is looked at, so these are the only two a condition can see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DependencyStatus {
    /// It ran and its result was accepted.
    #[serde(alias = "Completed")]
    Completed,
    /// Its own condition did not hold.
    #[serde(alias = "Skipped")]
    Skipped,
}

/// What a test, or a condition, came to, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Check {
    /// Whether it holds.
    pub holds: bool,
    /// Why, in words for the skip reason and the report.
    pub reason: String,
}

impl Check {
    fn new(holds: bool, reason: impl Into<String>) -> Check {
        Check {
            holds,
            reason: reason.into(),
        }
    }
}

/// `equals: null` is `Some(Value::Null)`; only a missing field is `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

impl Condition {
    /// Every test of the condition, in order.
    pub fn tests(&self) -> Vec<&Test> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a Test>) {
        match self {
            Condition::When(t) => out.push(t),
            Condition::All(cs) | Condition::Any(cs) => cs.iter().for_each(|c| c.collect(out)),
            Condition::Not(c) => c.collect(out),
        }
    }

    /// How deep `all`, `any` and `not` nest (a single test is 1).
    pub fn depth(&self) -> usize {
        match self {
            Condition::When(_) => 1,
            Condition::All(cs) | Condition::Any(cs) => {
                1 + cs.iter().map(Condition::depth).max().unwrap_or(0)
            }
            Condition::Not(c) => 1 + c.depth(),
        }
    }

    /// Evaluates the condition, `test` deciding each test. `all` reports
    /// the first test that fails, `any` the first that holds.
    pub fn evaluate(&self, test: &mut impl FnMut(&Test) -> Check) -> Check {
        match self {
            Condition::When(t) => test(t),
            Condition::All(cs) => {
                let mut reasons = Vec::new();
                for c in cs {
                    let check = c.evaluate(test);
                    if !check.holds {
                        return check;
                    }
                    reasons.push(check.reason);
                }
                Check::new(true, reasons.join("; and "))
            }
            Condition::Any(cs) => {
                let mut reasons = Vec::new();
                for c in cs {
                    let check = c.evaluate(test);
                    if check.holds {
                        return check;
                    }
                    reasons.push(check.reason);
                }
                Check::new(false, format!("none held: {}", reasons.join("; ")))
            }
            Condition::Not(c) => {
                let check = c.evaluate(test);
                Check::new(!check.holds, format!("not ({})", check.reason))
            }
        }
    }
}

impl Test {
    /// The key under which the outcome of a pointer test is kept in the
    /// dependency's state: the pointer and the value, as JSON. `None` for a
    /// status test, decided from the status alone.
    pub fn key(&self) -> Option<String> {
        let pointer = self.pointer.as_deref()?;
        let equals = self.equals.as_ref().unwrap_or(&Value::Null);
        Some(format!("{pointer} == {equals}"))
    }

    /// What the problem with this test is, if any: it tests a status or a
    /// pointer (not both, not neither), a pointer comes with `equals` and is
    /// a pointer, and both are within their bounds.
    pub fn problem(&self) -> Option<String> {
        match (&self.status, &self.pointer, &self.equals) {
            (Some(_), None, None) => None,
            (None, Some(p), Some(v)) => {
                if !(p.is_empty() || p.starts_with('/')) {
                    Some(format!(
                        "pointer {:?} must be empty or start with '/'",
                        excerpt(p, 60)
                    ))
                } else if p.len() > MAX_POINTER_BYTES {
                    Some(format!(
                        "a pointer is {} bytes; the limit is {MAX_POINTER_BYTES}",
                        p.len()
                    ))
                } else if v.to_string().len() > MAX_EQUALS_BYTES {
                    Some(format!(
                        "an `equals` value is over {MAX_EQUALS_BYTES} bytes of JSON"
                    ))
                } else {
                    None
                }
            }
            (None, Some(_), None) => Some("a `pointer` needs `equals`".into()),
            (None, None, Some(_)) => Some("`equals` needs a `pointer`".into()),
            (None, None, None) => Some("a test needs `status` or `pointer`".into()),
            (Some(_), _, _) => Some("a test has `status` or `pointer`, not both".into()),
        }
    }
}

/// Decides a pointer test on the accepted result `result` of the task
/// `task_id`: false when the result is not JSON or has nothing at the
/// pointer. `parsed` is the result parsed as JSON, given when the caller has
/// already parsed it (one parse serves every test on the same result).
pub fn check_result(task_id: &str, test: &Test, parsed: Option<&Value>) -> Check {
    let pointer = test.pointer.as_deref().unwrap_or("");
    let want = test.equals.as_ref().unwrap_or(&Value::Null);
    let Some(doc) = parsed else {
        return Check::new(
            false,
            format!("the result of {task_id} is not JSON, so it has no {pointer:?}"),
        );
    };
    let Some(found) = doc.pointer(pointer) else {
        return Check::new(
            false,
            format!("the result of {task_id} has nothing at {pointer:?}"),
        );
    };
    let shown = excerpt(&found.to_string(), 80);
    if same(found, want) {
        Check::new(true, format!("{task_id}'s {pointer:?} is {shown}"))
    } else {
        Check::new(
            false,
            format!(
                "{task_id}'s {pointer:?} is {shown}, not {}",
                excerpt(&want.to_string(), 80)
            ),
        )
    }
}

/// JSON equality, with numbers compared by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// A result's text parsed as JSON, if it is JSON.
pub fn parse_result(result: &str) -> Option<Value> {
    serde_json::from_str(result.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Condition {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_documented_forms_decode() {
        let c = parse(json!({"when": {"task": "check", "status": "completed"}}));
        assert_eq!(c.tests()[0].status, Some(DependencyStatus::Completed));
        assert_eq!(c.tests()[0].problem(), None);
        let c = parse(json!({"when": {"task": "check", "pointer": "/a", "equals": null}}));
        assert_eq!(c.tests()[0].equals, Some(Value::Null));
        assert_eq!(c.tests()[0].problem(), None);
        let c = parse(json!({"all": [
            {"when": {"task": "a", "status": "Skipped"}},
            {"not": {"any": [{"when": {"task": "b", "pointer": "", "equals": 1}}]}}
        ]}));
        assert_eq!(c.tests().len(), 2);
        assert_eq!(c.depth(), 4);
        // Through MessagePack too, as plans travel.
        let bytes = rmp_serde::to_vec_named(&c).unwrap();
        assert_eq!(rmp_serde::from_slice::<Condition>(&bytes).unwrap(), c);
    }

    #[test]
    fn malformed_tests_say_what_is_wrong() {
        let t = |v: Value| serde_json::from_value::<Test>(v).unwrap().problem();
        assert!(t(json!({"task": "a"})).unwrap().contains("needs"));
        assert!(
            t(json!({"task": "a", "pointer": "/x"}))
                .unwrap()
                .contains("equals")
        );
        assert!(
            t(json!({"task": "a", "pointer": "x", "equals": 1}))
                .unwrap()
                .contains("'/'")
        );
        assert!(
            t(json!({"task": "a", "status": "completed", "pointer": "/x", "equals": 1}))
                .unwrap()
                .contains("not both")
        );
    }

    #[test]
    fn pointer_tests_read_json_results() {
        let test = |pointer: &str, equals: Value| Test {
            task: "check".into(),
            status: None,
            pointer: Some(pointer.into()),
            equals: Some(equals),
        };
        let doc = parse_result(" {\"needs_review\": false, \"n\": 2} \n");
        let c = check_result("check", &test("/needs_review", json!(false)), doc.as_ref());
        assert!(c.holds, "{}", c.reason);
        let c = check_result("check", &test("/needs_review", json!(true)), doc.as_ref());
        assert!(!c.holds);
        assert!(c.reason.contains("is false, not true"), "{}", c.reason);
        assert!(check_result("check", &test("/n", json!(2.0)), doc.as_ref()).holds);
        let c = check_result("check", &test("/missing", json!(1)), doc.as_ref());
        assert!(!c.holds && c.reason.contains("nothing at"), "{}", c.reason);
        let c = check_result("check", &test("/x", json!(1)), parse_result("yes").as_ref());
        assert!(!c.holds && c.reason.contains("not JSON"), "{}", c.reason);
    }

    #[test]
    fn combinators_explain_themselves() {
        let c = parse(json!({"any": [
            {"when": {"task": "a", "status": "completed"}},
            {"not": {"when": {"task": "b", "status": "completed"}}}
        ]}));
        let mut test = |t: &Test| {
            let holds = t.task == "b";
            Check::new(
                holds,
                format!("{} {}", t.task, if holds { "yes" } else { "no" }),
            )
        };
        let check = c.evaluate(&mut test);
        assert!(!check.holds);
        assert_eq!(check.reason, "none held: a no; not (b yes)");
    }
}
