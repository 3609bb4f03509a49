//! Snapshots of `swarm status` and `swarm list` output, built from fixed
//! values and laid out for the fixed width used when stdout is not a
//! terminal: a column that shifts, or a header that parts from its cells,
//! changes the text and fails the test.

#![allow(clippy::unwrap_used)] // tests report failure by panicking

use chrono::{DateTime, Utc};
use serde_json::json;
use swarm_cli::display;
use swarm_client::list;
use swarm_common::{Limits, SwarmState, SwarmStatus, mission::MissionRecord};

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn task(id: &str, title: &str, status: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut t = json!({
        "definition": {"task_id": id, "title": title, "description": "d", "assigned_to": "analyst"},
        "status": status,
        "pool": "general",
        "priority": 0,
        "attempt": 1,
        "revision": 0,
    });
    if let (Some(t), serde_json::Value::Object(extra)) = (t.as_object_mut(), extra) {
        t.extend(extra);
    }
    t
}

/// A swarm of three tasks: one completed after a revision and a
/// redelivery, one failed, one waiting.
fn state() -> SwarmState {
    serde_json::from_value(json!({
        "swarm_id": "0b6e3c1a-9f2d-4c8e-a1b7-5d4f3e2a1c0b",
        "mission": "1. Count the words in README.md\n2. Checksum it",
        "status": "Failed",
        "manager_directive": "Check every result.",
        "workers": [],
        "planner": "offline-planner",
        "tasks": [
            task("words", "Count the words", "Completed", json!({
                "attempt": 2, "revision": 1, "redeliveries": 1,
                "worker_id": "worker-1",
                "assigned_at": "2025-03-01T12:00:01Z",
                "completed_at": "2025-03-01T12:00:01.250Z",
                "result_preview": "[offline provider] 1234 words in README.md",
            })),
            task("sum", "Checksum the count", "Failed", json!({
                "worker_id": "worker-2",
                "assigned_at": "2025-03-01T12:00:02Z",
                "completed_at": "2025-03-01T12:00:04.5Z",
                "error": "checksum: no such file: missing.txt",
            })),
            task("late", "A task that never ran", "Cancelled", json!({"attempt": 0})),
        ],
        "limits": serde_json::to_value(Limits::default()).unwrap(),
        "accepted_at": "2025-03-01T12:00:00Z",
        "started_at": "2025-03-01T12:00:00.5Z",
        "deadline": "2025-03-01T13:00:00Z",
        "completed_at": "2025-03-01T12:00:05Z",
        "last_event_seq": 9,
        "last_manager": "manager-1",
    }))
    .unwrap()
}

fn record(id: &str, mission: &str, status: &str, accepted: &str) -> MissionRecord {
    serde_json::from_value(json!({
        "swarm_id": id,
        "request": {"mission": mission},
        "status": status,
        "accepted_at": accepted,
        "updated_at": accepted,
        "overall_status": if status == "Reported" { json!("Completed") } else { json!(null) },
    }))
    .unwrap()
}

#[test]
fn status_lists_every_task_under_its_own_headers() {
    let out = display::status_table(
        &state(),
        None,
        at("2025-03-01T12:10:00Z"),
        Some(display::PLAIN_WIDTH),
    );
    let expected = "\
swarm     0b6e3c1a-9f2d-4c8e-a1b7-5d4f3e2a1c0b
status    Failed
mission   1. Count the words in README.md 2. Checksum it
planner   offline-planner
manager   manager-1 (last to change the state)
accepted  2025-03-01 12:00:00 UTC
elapsed   5.00 s
tasks     3 (Completed 1, Failed 1, Cancelled 1)

TASK   TITLE                  PERSONA  WORKER    STATUS     ATTEMPT  REVISION  REDELIVERIES  TIME      RESULT / ERROR
words  Count the words        analyst  worker-1  Completed  2        1         1             250.0 ms  [offline provider] 1234 words in README.md
sum    Checksum the count     analyst  worker-2  Failed     1        0         0             2.50 s    checksum: no such file: missing.txt
late   A task that never ran  analyst  -         Cancelled  0        0         0             -
";
    assert_eq!(out, expected, "\n{out}");
}

#[test]
fn a_narrow_table_leaves_out_the_least_needed_columns_and_cuts_free_text() {
    let out = display::status_table(&state(), None, at("2025-03-01T12:10:00Z"), Some(100));
    let table: String = out
        .lines()
        .skip_while(|l| !l.starts_with("TASK"))
        .map(|l| format!("{l}\n"))
        .collect();
    let expected = "\
TASK   TITLE             PERSONA  WORKER    STATUS     ATTEMPT  REVISION  TIME      RESULT / ERROR
words  Count the words   analyst  worker-1  Completed  2        1         250.0 ms  [offline…
sum    Checksum the…     analyst  worker-2  Failed     1        0         2.50 s    checksum: no…
late   A task that…      analyst  -         Cancelled  0        0         -
";
    assert_eq!(table, expected, "\n{table}");
    for line in table.lines() {
        assert!(line.chars().count() <= 100, "{line:?} is wider than 100");
    }
}

#[test]
fn list_shows_one_line_per_swarm_newest_first() {
    let now = at("2025-03-01T14:00:00Z");
    let done = record(
        "11111111-1111-4111-8111-111111111111",
        "Count the words in README.md\nthen checksum it",
        "Reported",
        "2025-03-01T13:58:00Z",
    );
    let planning = record(
        "22222222-2222-4222-8222-222222222222",
        "Summarise the release notes",
        "Accepted",
        "2025-03-01T11:00:00Z",
    );
    let rows = vec![
        list::row(&done, Some(&state()), SwarmStatus::Completed),
        list::row(&planning, None, SwarmStatus::Running),
    ];
    let out = display::list_table(&rows, now, Some(display::PLAIN_WIDTH));
    let expected = "\
SWARM                                 STATUS     TASKS  FAILED  AGE  STARTED (UTC)        ENDED (UTC)          MISSION
11111111-1111-4111-8111-111111111111  Completed  1/3    1       2m   2025-03-01 13:58:00  2025-03-01 12:00:05  Count the words in README.md
22222222-2222-4222-8222-222222222222  Running    -/-    -       3h   2025-03-01 11:00:00  -                    Summarise the release notes
";
    assert_eq!(out, expected, "\n{out}");
    let json = serde_json::to_value(&rows).unwrap();
    assert_eq!(json[0]["swarm_id"], "11111111-1111-4111-8111-111111111111");
    assert_eq!(json[0]["status"], "Completed");
    assert_eq!(json[0]["tasks_done"], 1);
    assert_eq!(json[0]["tasks_total"], 3);
    assert_eq!(json[0]["tasks_failed"], 1);
    assert_eq!(json[1]["tasks_total"], serde_json::Value::Null);

    // On an 80-column terminal the times give way first.
    let out = display::list_table(&rows, now, Some(80));
    let expected = "\
SWARM                                 STATUS     TASKS  FAILED  MISSION
11111111-1111-4111-8111-111111111111  Completed  1/3    1       Count the word…
22222222-2222-4222-8222-222222222222  Running    -/-    -       Summarise the…
";
    assert_eq!(out, expected, "\n{out}");
}

#[test]
fn nothing_is_coloured() {
    let out = display::status_table(&state(), None, at("2025-03-01T12:10:00Z"), Some(80));
    assert!(!out.contains('\u{1b}'), "{out:?}");
}

#[test]
fn status_shows_the_tree_of_child_swarms() {
    let mut parent = state();
    parent.tasks[0].pool = swarm_common::hierarchy::SUB_MANAGER_POOL.into();
    parent.tasks[2].pool = swarm_common::hierarchy::SUB_MANAGER_POOL.into();
    let child_id = parent.child_of(&parent.tasks[0]).unwrap();
    let mut child = state();
    child.swarm_id = child_id.clone();
    child.tasks[1].pool = swarm_common::hierarchy::SUB_MANAGER_POOL.into();
    let grandchild = child.child_of(&child.tasks[1]).unwrap();
    assert!(
        parent.child_of(&parent.tasks[2]).is_none(),
        "a task never assigned has no child"
    );
    let children = std::collections::HashMap::from([(child_id.clone(), child)]);
    assert_eq!(
        display::child_tree(&parent, &children),
        format!(
            "\nchild swarms\n  words -> {child_id} Failed (3/3 tasks)\n    sum -> {grandchild} (not started)\n"
        )
    );
    assert_eq!(display::child_tree(&state(), &children), "");
}

#[test]
fn a_collaborators_task_shows_the_task_that_asked_for_it() {
    let mut s = state();
    let mut helper: swarm_common::TaskState = serde_json::from_value(task(
        "words-ask1",
        "reviewer answers words",
        "Completed",
        json!({"asked_by": "words"}),
    ))
    .unwrap();
    helper.definition.assigned_to = "reviewer".into();
    s.tasks.push(helper);
    let out = display::status_table(&s, None, at("2025-03-01T12:10:00Z"), Some(200));
    assert!(out.contains("words-ask1 (asked by words)"), "\n{out}");
}
