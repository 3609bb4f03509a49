//! The JSON Schemas checked in under `docs/protocol/` are the ones the code
//! generates: a change to a wire type that is not regenerated fails here.

#![allow(clippy::unwrap_used, reason = "a test reports a failure by panicking")]

use std::collections::BTreeSet;
use std::path::Path;

const REGENERATE: &str = "cargo run -p swarm-common --example schemas";

#[test]
fn checked_in_schemas_match_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol");
    let generated = swarm_common::schema::all();
    let mut stale = Vec::new();
    for (name, schema) in &generated {
        let path = dir.join(format!("{name}.json"));
        // Compared as JSON values, so key order and spacing do not count.
        let on_disk = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
        if on_disk.as_ref() != Some(schema) {
            stale.push(format!("docs/protocol/{name}.json"));
        }
    }
    let names: BTreeSet<String> = generated.iter().map(|(n, _)| format!("{n}.json")).collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().file_name().to_string_lossy().into_owned();
        if file.ends_with(".json") && !names.contains(&file) {
            stale.push(format!("docs/protocol/{file} (no type generates it)"));
        }
    }
    assert!(
        stale.is_empty(),
        "these schemas differ from what the code generates: {stale:?}; regenerate them with `{REGENERATE}`"
    );
}

#[test]
fn schemas_describe_what_is_written() {
    use swarm_common::{Envelope, ProgressUpdate, TaskStatus};
    let schemas: std::collections::BTreeMap<_, _> =
        swarm_common::schema::all().into_iter().collect();
    // A message's schema names the envelope's fields beside the payload's.
    let progress = &schemas["ProgressUpdate"];
    let required: Vec<&str> = progress["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for field in ["message_id", "timestamp", "swarm_id", "task_id", "message"] {
        assert!(required.contains(&field), "{field} in {required:?}");
    }
    assert_eq!(
        progress["properties"]["timestamp"]["format"], "date-time",
        "{progress}"
    );
    // And a message as written has no field the schema does not know.
    let env = Envelope::new(
        "w",
        "m",
        "s",
        "t",
        ProgressUpdate {
            task_id: "t".into(),
            status: TaskStatus::InProgress,
            progress_percentage: 5,
            message: "m".into(),
            attempt: 1,
            revision: 0,
            metrics: Default::default(),
        },
    );
    let written = serde_json::to_value(&env).unwrap();
    for key in written.as_object().unwrap().keys() {
        assert!(
            progress["properties"].get(key).is_some(),
            "{key} is written but not in the schema"
        );
    }
}

/// The examples in docs/protocol.md (```json blocks whose info string names
/// their type) decode as that type, and every schema it links to exists.
#[test]
fn the_specifications_examples_decode_and_its_links_resolve() {
    use swarm_common::approval::DeskRequest;
    use swarm_common::mission::MissionRequest;
    use swarm_common::{Codec, Envelope, ProgressUpdate};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut examples = 0;
    let mut rest = text.as_str();
    while let Some(start) = rest.find("```json ") {
        let block = &rest[start + "```json ".len()..];
        let (kind, body) = block.split_once('\n').unwrap();
        let end = body.find("```").unwrap();
        let json = &body.as_bytes()[..end];
        let decoded = match kind.trim() {
            "ProgressUpdate" => Envelope::<ProgressUpdate>::decode(Codec::Json, json)
                .map(drop)
                .map_err(|e| e.message),
            "MissionRequest" => Codec::Json
                .decode::<MissionRequest>(json)
                .map(drop)
                .map_err(|e| e.to_string()),
            "DeskRequest" => Codec::Json
                .decode::<DeskRequest>(json)
                .map(drop)
                .map_err(|e| e.to_string()),
            other => Err(format!("no decoder for an example of {other:?}")),
        };
        if let Err(e) = decoded {
            panic!("the {} example in docs/protocol.md: {e}", kind.trim());
        }
        examples += 1;
        rest = &body[end..];
    }
    assert!(examples >= 3, "{examples} examples found");
    let names: BTreeSet<&str> = swarm_common::schema::all()
        .iter()
        .map(|(n, _)| *n)
        .collect();
    for link in text.split("(protocol/").skip(1) {
        let Some((file, _)) = link.split_once(')') else {
            continue;
        };
        if let Some(name) = file.strip_suffix(".json") {
            assert!(
                names.contains(name),
                "docs/protocol.md links to {file}, which no type generates"
            );
        }
    }
}
