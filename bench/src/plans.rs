//! The missions the scenarios submit: explicit plans of `echo` tool calls,
//! so a worker runs a tool directly and no model time is counted.
//!
//! Plans are written as JSON, as any client would send them, and read into
//! [`MissionRequest`]: optional fields the protocol gains later take their
//! defaults, so the harness keeps building against a moving `swarm-common`.

use anyhow::Context as _;
use serde_json::{Value, json};
use swarm_common::mission::MissionRequest;

/// The persona every benchmark task is assigned to.
const PERSONA: &str = "echo";

/// A task (JSON) that echoes `text`, after `deps`.
pub fn echo_task(task_id: &str, text: &str, deps: Vec<String>) -> Value {
    json!({
        "task_id": task_id,
        "title": task_id,
        "description": json!({"tool": "echo", "arguments": {"text": text}}).to_string(),
        "assigned_to": PERSONA,
        "dependencies": deps,
    })
}

/// `n` independent tasks.
pub fn independent(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| echo_task(&format!("t{i}"), &format!("r{i}"), Vec::new()))
        .collect()
}

/// Most items of one list of [`mapped`]: its file (about 6 bytes an item)
/// stays within a result's default limit of 64 KiB.
const ITEMS_PER_LIST: usize = 9_998;

/// A mission of exactly `n` tasks (at least 3) as a user would send
/// 100,000: lists of at most [`ITEMS_PER_LIST`] numbers written to
/// `workspace` as `<tag>-list<l>.json`, for each a task that reads it and a
/// map task that echoes each item, 64 at a time.
pub fn mapped(n: usize, workspace: &std::path::Path, tag: &str) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(n >= 3, "a mapped mission has at least 3 tasks");
    let lists = n.div_ceil(ITEMS_PER_LIST + 2);
    let items = n - 2 * lists;
    let mut tasks = Vec::with_capacity(2 * lists);
    for l in 0..lists {
        let count = items / lists + usize::from(l < items % lists);
        let file = format!("{tag}-list{l}.json");
        let list: Vec<usize> = (0..count).collect();
        std::fs::write(workspace.join(&file), serde_json::to_vec(&list)?)?;
        let read = json!({"tool": "read_file", "arguments": {"path": file}}).to_string();
        let list_id = format!("list{l}");
        tasks.push(json!({
            "task_id": list_id,
            "title": list_id,
            "description": read,
            "assigned_to": PERSONA,
            "dependencies": [],
        }));
        tasks.push(json!({
            "task_id": format!("each{l}"),
            "title": format!("each{l}"),
            "description": json!({"tool": "echo", "arguments": {"text": "{{item}}"}}).to_string(),
            "assigned_to": PERSONA,
            "dependencies": [list_id],
            "map": {"over": {"task": list_id}, "concurrency": 64},
        }));
    }
    Ok(tasks)
}

/// `n` independent tasks and one more (`join`) that depends on all of them.
pub fn fan_out(n: usize) -> Vec<Value> {
    let mut tasks = independent(n);
    let deps = (0..n).map(|i| format!("t{i}")).collect();
    tasks.push(echo_task("join", "joined", deps));
    tasks
}

/// `n` tasks, each depending on the one before.
pub fn chain(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let deps = if i == 0 {
                Vec::new()
            } else {
                vec![format!("t{}", i - 1)]
            };
            echo_task(&format!("t{i}"), &format!("r{i}"), deps)
        })
        .collect()
}

/// A mission with an explicit plan of `tasks`, run by workers of `pool`,
/// under the caller's `mission_id` (so its swarm id is known before it is
/// submitted: [`swarm_common::mission::swarm_id_for`]).
pub fn mission(mission_id: &str, pool: &str, tasks: Vec<Value>) -> anyhow::Result<MissionRequest> {
    let request = json!({
        "mission": format!("benchmark {mission_id}"),
        "mission_id": mission_id,
        "plan": {
            "manager_directive": "Run every task; accept any non-empty result.",
            "workers": [{
                "name": PERSONA,
                "role": "echo",
                "system_prompt": "You echo.",
                "tools": ["echo", "read_file"],
                "collaborators": [],
                "pool": pool,
            }],
            "tasks": tasks,
            "success_criteria": [],
            "planner": "",
        },
    });
    serde_json::from_value(request).context("a benchmark plan does not fit the protocol's types")
}

/// As [`mission`], with no mission id, as `swarm run` sends a mission
/// unless told one: the boss names a new swarm for it (`label` only names
/// the mission's text).
pub fn fresh(label: &str, pool: &str, tasks: Vec<Value>) -> anyhow::Result<MissionRequest> {
    let mut request = mission(label, pool, tasks)?;
    request.mission_id = None;
    Ok(request)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests report failure by panicking

    use super::*;

    #[test]
    fn shapes() {
        let f = fan_out(3);
        assert_eq!(f.len(), 4);
        assert_eq!(f[3]["dependencies"], json!(["t0", "t1", "t2"]));
        let c = chain(3);
        assert_eq!(c[2]["dependencies"], json!(["t1"]));
        assert_eq!(fresh("m0", "general", chain(2)).unwrap().mission_id, None);
        let m = mission("m1", "general", c).unwrap();
        assert_eq!(m.mission_id.as_deref(), Some("m1"));
        let plan = m.plan.unwrap();
        assert_eq!(plan.tasks.len(), 3);
        assert!(plan.tasks[1].description.contains(r#""tool":"echo""#));
        assert!(
            swarm_common::validate::validate_plan(&plan, &swarm_common::Limits::default()).is_ok()
        );
    }
}
