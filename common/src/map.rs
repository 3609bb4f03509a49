//! Map tasks: a task that fans out over a list one of its dependencies
//! produced, one child task per item, made from the task as a template.
//!
//! ```json
//! {"task_id": "summarise", "dependencies": ["list"],
//!  "description": "Summarise {{item}} (file {{index}})",
//!  "map": {"over": {"task": "list", "pointer": "/files"}, "concurrency": 4}}
//! ```
//!
//! When the `over` dependency's result is accepted, the manager reads the
//! JSON array at `pointer` in it ([`read_items`]) and keeps the items in the
//! map task's state (the machine stays pure: no result text is needed
//! later). When the map task is ready it expands into child tasks
//! `<map id>-<index>` (ids stay subject tokens), each with the template's
//! persona, gates and limits and its description with `{{item}}` (the
//! item's JSON text, or the string itself) and `{{index}}` replaced; at
//! most `concurrency` of them are assigned at once. The map task completes
//! when every child has, its result being the JSON array of their results
//! in item order (its dependents get the children's results as context;
//! a child gets its item, not the whole list, so the list is not carried
//! in each of up to 100,000 assignments),
//! and fails as soon as one fails for good. An empty list completes it at
//! once with `[]`. A result that is not JSON, a missing pointer, a value
//! that is not an array, or more items than the mission's remaining task
//! limit fail the map task with the reason (a map over nothing readable is
//! a mistake to see, not a quiet skip). A map over a dependency that was
//! skipped has nothing to map over and is skipped too.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::excerpt;

/// Most children a map task may run at once.
pub const MAX_CONCURRENCY: u32 = 64;
/// Longest map task id: room for `-<index>` within a 128-byte token.
pub const MAX_MAP_ID_BYTES: usize = 120;

/// How a task fans out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MapSpec {
    /// Where the list is.
    pub over: MapSource,
    /// Most children assigned at once (1 to [`MAX_CONCURRENCY`]).
    #[serde(default = "one")]
    pub concurrency: u32,
}

fn one() -> u32 {
    1
}

/// A JSON array in a dependency's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MapSource {
    /// The dependency (one of the map task's own dependencies).
    pub task: String,
    /// An RFC 6901 pointer into its result parsed as JSON (`""`, the
    /// default, is the whole result).
    #[serde(default)]
    pub pointer: String,
}

/// Where a map task stands, in its state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MapState {
    /// The items read from the dependency's result, kept until the map
    /// task expands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<Value>,
    /// Why the list could not be used; the map task fails with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether it has expanded.
    #[serde(default)]
    pub expanded: bool,
    /// Its children's ids, in item order, once expanded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// How far the children have got, kept as they go so that one child's
    /// end costs the same however many there are (`None` in a state stored
    /// before it was kept: counted again when next needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<MapProgress>,
}

/// How far a map task's children have got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MapProgress {
    /// The children handed out so far: the first `started`, in item order.
    pub started: usize,
    /// The children completed so far.
    pub completed: usize,
}

/// The id of the child of `map_id` for the item at `index`.
pub fn child_id(map_id: &str, index: usize) -> String {
    format!("{map_id}-{index}")
}

/// Reads the items of `source` from the accepted result of its task, at
/// most `room` of them: the items, or why they cannot be used.
pub fn read_items(source: &MapSource, result: &str, room: usize) -> Result<Vec<Value>, String> {
    let task = &source.task;
    let pointer = &source.pointer;
    let doc: Value = serde_json::from_str(result.trim()).map_err(|_| {
        format!("the result of {task} is not JSON, so it has no list at {pointer:?}")
    })?;
    let found = doc
        .pointer(pointer)
        .ok_or_else(|| format!("the result of {task} has nothing at {pointer:?}"))?;
    let Value::Array(items) = found else {
        return Err(format!(
            "{task}'s {pointer:?} is {}, not a list",
            excerpt(&found.to_string(), 80)
        ));
    };
    if items.len() > room {
        return Err(format!(
            "{task}'s {pointer:?} has {} items; the mission's task limit leaves room for {room}",
            items.len()
        ));
    }
    Ok(items.clone())
}

/// The description of a child: the template's with `{{item}}` (the item's
/// JSON text, or the string itself for a string) and `{{index}}` replaced.
pub fn child_description(template: &str, item: &Value, index: usize) -> String {
    let text = match item {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    template
        .replace("{{index}}", &index.to_string())
        .replace("{{item}}", &text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source(pointer: &str) -> MapSource {
        MapSource {
            task: "list".into(),
            pointer: pointer.into(),
        }
    }

    #[test]
    fn items_are_read_at_the_pointer() {
        let r = r#"{"files": ["a", {"b": 1}]}"#;
        assert_eq!(
            read_items(&source("/files"), r, 10),
            Ok(vec![json!("a"), json!({"b": 1})])
        );
        assert_eq!(read_items(&source(""), "[]", 0), Ok(vec![]));
    }

    #[test]
    fn unusable_lists_say_why() {
        let e = read_items(&source("/x"), "not json", 10).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
        let e = read_items(&source("/x"), "{}", 10).unwrap_err();
        assert!(e.contains("nothing at"), "{e}");
        let e = read_items(&source("/x"), r#"{"x": 3}"#, 10).unwrap_err();
        assert!(e.contains("not a list"), "{e}");
        let e = read_items(&source(""), "[1,2,3]", 2).unwrap_err();
        assert!(e.contains("room for 2"), "{e}");
    }

    #[test]
    fn descriptions_take_the_item() {
        assert_eq!(
            child_description("do {{item}} #{{index}}", &json!("a"), 3),
            "do a #3"
        );
        assert_eq!(
            child_description("{{item}}", &json!({"k": 1}), 0),
            r#"{"k":1}"#
        );
        assert!(crate::subjects::is_token(&child_id("m", 19)));
    }
}
