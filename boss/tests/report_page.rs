//! The rendered report page as a reader meets it: times to the millisecond
//! and durations below one, metrics under names a person reads, and for a
//! mission that did not complete, its failures first.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use swarm_boss::{ReportInput, render_html};
use swarm_common::{
    FinalReport, GateVerdict, SwarmDeploymentPlan, SwarmStatus, TaskOutcome, TaskStatus,
    WorkerDeploymentPlan,
};

/// The instant `h:m:s.ms` on 2026-12-02.
fn at(h: u32, m: u32, s: u32, ms: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, h, m, s)
        .single()
        .expect("a valid time")
        + TimeDelta::milliseconds(ms.into())
}

fn task(id: &str, status: TaskStatus) -> TaskOutcome {
    TaskOutcome {
        skills: Default::default(),
        child_swarm: None,
        task_id: id.to_string(),
        title: format!("Title of {id}"),
        description: format!("Do {id}"),
        assigned_to: "writer".to_string(),
        dependencies: Vec::new(),
        status,
        result: String::new(),
        result_truncated: false,
        result_seq: None,
        attempts: 1,
        revisions: 0,
        assigned_at: None,
        started_at: None,
        completed_at: None,
        error: None,
        gate_verdicts: Vec::new(),
        provider: "offline".to_string(),
        asked_by: None,
    }
}

/// A report of `tasks` with the given status, started at 12:40:00.000.
fn report(status: SwarmStatus, tasks: Vec<TaskOutcome>) -> FinalReport {
    FinalReport {
        skills: Default::default(),
        trace_id: None,
        overall_status: status,
        mission: "Summarise the notes".to_string(),
        summary: "The manager's summary.".to_string(),
        insights: Vec::new(),
        task_results: tasks,
        metrics: BTreeMap::new(),
        started_at: at(12, 40, 0, 0),
        completed_at: at(12, 40, 2, 500),
    }
}

fn render(report: &FinalReport, plan: Option<&SwarmDeploymentPlan>) -> String {
    render_html(&ReportInput {
        swarm_id: "swarm-1",
        mission: &report.mission,
        mission_id: None,
        plan,
        report,
        rendered_by: "boss-1",
    })
    .expect("the report renders")
}

/// The part of `html` from `from` up to the next `to`.
fn between<'a>(html: &'a str, from: &str, to: &str) -> &'a str {
    let start = pos(html, from);
    let end = start + pos(&html[start..], to);
    &html[start..end]
}

/// Where `needle` first occurs in `haystack`, failing the test if nowhere.
fn pos(haystack: &str, needle: &str) -> usize {
    haystack
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} missing from:\n{haystack}"))
}

/// A failed mission: research completed, analysis failed after a gate
/// rejection, and the write-up was cancelled because of it.
fn failed_mission() -> (FinalReport, SwarmDeploymentPlan) {
    let mut research = task("research", TaskStatus::Completed);
    research.assigned_to = "researcher".to_string();
    research.result = "Three frameworks found.".to_string();
    research.assigned_at = Some(at(12, 40, 0, 3));
    research.started_at = Some(at(12, 40, 0, 5));
    research.completed_at = Some(at(12, 40, 1, 245));

    let mut analyse = task("analyse", TaskStatus::Failed);
    analyse.assigned_to = "analyst".to_string();
    analyse.dependencies = vec!["research".to_string()];
    analyse.attempts = 3;
    analyse.assigned_at = Some(at(12, 40, 1, 250));
    analyse.started_at = Some(at(12, 40, 2, 100));
    analyse.completed_at = Some(at(12, 40, 2, 240));
    analyse.error = Some("model refused: quota exceeded".to_string());
    analyse.gate_verdicts = vec![GateVerdict {
        gate: "non_empty".to_string(),
        passed: false,
        reason: "the result is empty".to_string(),
        revision: 0,
    }];

    let mut write = task("write-up", TaskStatus::Cancelled);
    write.dependencies = vec!["analyse".to_string()];
    write.attempts = 0;
    write.completed_at = Some(at(12, 40, 2, 241));
    write.error = Some("not run: dependency analyse did not complete".to_string());

    let mut report = report(SwarmStatus::Failed, vec![research, analyse, write]);
    report.summary = "The mission failed: 1 of 3 task(s) completed.".to_string();
    report.metrics = BTreeMap::from([
        ("tasks_total".to_string(), 3.0),
        ("tasks_completed".to_string(), 1.0),
        ("tasks_failed".to_string(), 1.0),
        ("tasks_cancelled".to_string(), 1.0),
        ("attempts_total".to_string(), 4.0),
        ("revisions_total".to_string(), 0.0),
        ("gate_failures".to_string(), 1.0),
        ("result_bytes_total".to_string(), 23.0),
        ("duration_seconds".to_string(), 2.5),
        ("input_tokens".to_string(), 18_250.0),
        ("output_tokens".to_string(), 2_113.0),
        ("cost_usd".to_string(), 0.0123),
    ]);
    let persona = |name: &str| WorkerDeploymentPlan {
        name: name.to_string(),
        role: format!("The {name}"),
        system_prompt: format!("You are the {name}."),
        tools: vec!["web_search".to_string()],
        collaborators: Vec::new(),
        pool: "general".to_string(),
        a2a_url: None,
        a2a_credential: None,
        skill: None,
    };
    let plan = SwarmDeploymentPlan {
        seed: Default::default(),
        sub_managers: Vec::new(),
        manager_directive: "Compare the frameworks.".to_string(),
        workers: vec![persona("researcher"), persona("analyst"), persona("writer")],
        tasks: Vec::new(),
        success_criteria: vec!["Names three frameworks".to_string()],
        planner: "offline-planner".to_string(),
    };
    (report, plan)
}

#[test]
fn a_sub_millisecond_task_does_not_read_zero_ms() {
    let mut quick = task("quick", TaskStatus::Completed);
    quick.assigned_at = Some(at(12, 40, 1, 0));
    quick.started_at = Some(at(12, 40, 1, 0) + TimeDelta::microseconds(2_300));
    quick.completed_at = quick.started_at.map(|t| t + TimeDelta::microseconds(400));
    let html = render(&report(SwarmStatus::Completed, vec![quick]), None);
    assert!(!html.contains("0 ms"), "a task read as taking no time");
    let table = between(&html, r#"id="tasks""#, "</table>");
    assert!(table.contains(">0.4 ms<"), "running time missing");
    assert!(table.contains(">2.3 ms<"), "waiting time missing");
    assert!(table.contains(">2.7 ms<"), "total time missing");
    let details = between(&html, r#"id="task-details""#, "</section>");
    for label in ["Waiting", "Running", "Total"] {
        assert!(details.contains(label), "{label} missing from the details");
    }
}

#[test]
fn timestamps_carry_milliseconds() {
    let mut t = task("t1", TaskStatus::Completed);
    t.assigned_at = Some(at(12, 40, 1, 7));
    t.started_at = Some(at(12, 40, 1, 234));
    t.completed_at = Some(at(12, 40, 1, 999) + TimeDelta::microseconds(900));
    let html = render(&report(SwarmStatus::Completed, vec![t]), None);
    assert!(html.contains("2026-12-02 12:40:00.000 UTC"), "report start");
    assert!(html.contains("2026-12-02 12:40:02.500 UTC"), "report end");
    assert!(html.contains("2026-12-02 12:40:01.007 UTC"), "assigned");
    assert!(html.contains("2026-12-02 12:40:01.234 UTC"), "started");
    // Cut, not rounded: the task did not end in the next second.
    assert!(html.contains("2026-12-02 12:40:01.999 UTC"), "completed");
    assert!(html.contains(r#"datetime="2026-12-02T12:40:01.234Z""#));
    // The task table gives the time of day; the date is the mission's.
    let table = between(&html, r#"id="tasks""#, "</table>");
    assert!(table.contains(">12:40:01.234</time>"));
    assert!(!html.contains("12:40:01Z"), "a time to the second");
}

#[test]
fn metric_labels_are_readable() {
    let mut report = report(SwarmStatus::Completed, Vec::new());
    report.metrics = BTreeMap::from([
        ("tasks_total".to_string(), 3.0),
        ("attempts_total".to_string(), 4.0),
        ("revisions_total".to_string(), 1.0),
        ("gate_failures".to_string(), 2.0),
        ("input_tokens".to_string(), 12_345.0),
        ("output_tokens".to_string(), 1_234_567.0),
        ("cost_usd".to_string(), 0.012_34),
        ("elapsed_ms".to_string(), 185_000.0),
        ("duration_seconds".to_string(), 1.24),
        ("result_bytes_total".to_string(), 3_500.0),
        ("queue_wait_ms".to_string(), 0.4),
        ("snake_case_total".to_string(), 7.0),
    ]);
    let html = render(&report, None);
    for key in report.metrics.keys() {
        assert!(!html.contains(key.as_str()), "developer key {key} shown");
    }
    let table = between(&html, r#"id="metrics""#, "</table>");
    for (name, value) in [
        ("Tasks", "3"),
        ("Attempts", "4"),
        ("Revisions", "1"),
        ("Gate failures", "2"),
        ("Input tokens", "12,345"),
        ("Output tokens", "1,234,567"),
        ("Cost (USD)", "$0.0123"),
        ("Elapsed", "3 min 05 s"),
        ("Duration", "1.24 s"),
        ("Result size", "3.4 KiB"),
        ("Queue wait", "0.4 ms"),
        ("Snake case", "7"),
    ] {
        let row = format!(r#"<tr><td>{name}</td><td class="num">{value}"#);
        assert!(table.contains(&row), "{row} missing from {table}");
    }
    assert!(table.contains("(3,500 bytes)"));
    // The manager's keys in a fixed order, then any others.
    assert!(pos(table, ">Tasks<") < pos(table, ">Attempts<"));
    assert!(pos(table, ">Cost (USD)<") < pos(table, ">Queue wait<"));
}

#[test]
fn a_failed_report_leads_with_its_failures() {
    let (report, plan) = failed_mission();
    let html = render(&report, Some(&plan));
    let failure = pos(&html, r#"id="failure""#);
    assert!(
        pos(&html, "</header>") < failure,
        "the box is under the title"
    );
    assert!(
        failure < pos(&html, r#"id="summary""#),
        "the box comes first"
    );
    assert!(
        failure < pos(&html, r#"id="tasks""#),
        "the box precedes the tasks"
    );
    assert!(pos(&html, r#"id="summary""#) < pos(&html, r#"id="metrics""#));

    let boxed = between(&html, r#"id="failure""#, "</section>");
    assert!(boxed.contains("Why the mission failed"));
    assert!(boxed.contains("1 task failed and 1 task was cancelled."));
    let failed = pos(boxed, r##"href="#task-1-analyse""##);
    let cancelled = pos(boxed, r##"href="#task-2-write-up""##);
    assert!(failed < cancelled, "the failed task is named first");
    assert!(failed < pos(boxed, "model refused: quota exceeded"));
    assert!(cancelled < pos(boxed, "not run: dependency analyse did not complete"));
    assert!(
        !boxed.contains("research"),
        "a completed task is no failure"
    );

    // Failed, then cancelled, then the rest, in the table and the details.
    let table = between(&html, r#"id="tasks""#, "</table>");
    assert!(table.contains("Failed tasks first"));
    let row = |id: &str| pos(table, &format!("<td>Title of {id}</td>"));
    assert!(row("analyse") < row("write-up") && row("write-up") < row("research"));
    let details = between(&html, r#"id="task-details""#, "</main>");
    let article = |anchor: &str| pos(details, &format!(r#"id="{anchor}""#));
    assert!(article("task-1-analyse") < article("task-2-write-up"));
    assert!(article("task-2-write-up") < article("task-0-research"));
}

#[test]
fn tasks_stopped_for_one_reason_are_named_together() {
    let deadline = "the swarm's deadline (2026-12-02T12:45:00Z) passed";
    let mut failed = task("fetch", TaskStatus::Failed);
    failed.error = Some("tool web_fetch: connection refused".to_string());
    let stopped = |id: &str, why: &str| {
        let mut t = task(id, TaskStatus::Cancelled);
        t.error = Some(why.to_string());
        t
    };
    let tasks = vec![
        stopped("draft", deadline),
        failed,
        stopped("review", deadline),
        stopped("publish", "not run: dependency fetch did not complete"),
        stopped("index", deadline),
    ];
    let html = render(&report(SwarmStatus::TimedOut, tasks), None);
    let boxed = between(&html, r#"id="failure""#, "</section>");
    assert!(boxed.contains("Why the mission timed out"));
    assert!(boxed.contains("1 task failed and 4 tasks were cancelled."));
    assert_eq!(boxed.matches("<li").count(), 3, "{boxed}");
    assert_eq!(boxed.matches("2026-12-02T12:45:00Z").count(), 1, "{boxed}");
    let group = between(boxed, "#task-0-draft", "</li>");
    assert!(group.contains("#task-2-review") && group.contains("#task-4-index"));
    assert!(pos(boxed, "connection refused") < pos(boxed, "#task-0-draft"));
}

#[test]
fn a_completed_report_has_no_failure_box() {
    let mut done = task("only", TaskStatus::Completed);
    done.started_at = Some(at(12, 40, 0, 10));
    done.completed_at = Some(at(12, 40, 0, 150));
    let html = render(&report(SwarmStatus::Completed, vec![done]), None);
    assert!(!html.contains(r#"id="failure""#));
    assert!(!html.contains("Why the mission"));
    assert!(!html.contains("Failed tasks first"));
    assert!(pos(&html, "</header>") < pos(&html, r#"id="summary""#));
    assert!(html.contains("The manager&#x27;s summary."));
}

#[test]
fn a_mission_ended_before_any_task_still_says_so() {
    let html = render(&report(SwarmStatus::Cancelled, Vec::new()), None);
    let boxed = between(&html, r#"id="failure""#, "</section>");
    assert!(boxed.contains("Why the mission was cancelled"));
    assert!(boxed.contains("No task failed or was cancelled"));
    assert!(!boxed.contains("<ol"));
}

#[test]
fn failure_reasons_are_escaped() {
    let mut bad = task("x", TaskStatus::Failed);
    bad.error = Some("<img src=x onerror=alert(1)>".to_string());
    bad.title = "<b>bold</b>".to_string();
    let html = render(&report(SwarmStatus::Failed, vec![bad]), None);
    let boxed = between(&html, r#"id="failure""#, "</section>");
    assert!(boxed.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(boxed.contains("&lt;b&gt;bold&lt;&#x2f;b&gt;"));
    assert!(!html.contains("<img"));
}
