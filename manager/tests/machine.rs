//! Script tests of the swarm state machine: every rule, no broker.

#![allow(clippy::unwrap_used)] // tests report failure by panicking

mod support;

use chrono::{TimeZone, Utc};
use swarm_common::{
    ErrorBody, ErrorCode, Limits, ResultSubmission, SwarmDeployment, SwarmState, SwarmStatus,
    TaskDefinition, TaskStatus,
};
use swarm_manager::index::Indexed;
use swarm_manager::machine::{self, Command, Event};

fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
}

use support::task;

fn deployment(tasks: Vec<TaskDefinition>) -> SwarmDeployment {
    support::deployment_between(tasks, now(), now() + chrono::Duration::hours(1))
}

fn assigned(cmds: &[Command]) -> Vec<(String, u32, u32)> {
    cmds.iter()
        .filter_map(|c| match c {
            Command::Assign { assignment, .. } => Some((
                assignment.task_id.clone(),
                assignment.attempt,
                assignment.revision,
            )),
            Command::Finalize | Command::ScoreSkills(_) => None,
        })
        .collect()
}

fn result(task_id: &str, attempt: u32, revision: u32, text: &str) -> ResultSubmission {
    ResultSubmission {
        skills: Default::default(),
        artifacts: Vec::new(),
        token: String::new(),
        task_id: task_id.into(),
        status: TaskStatus::Completed,
        result: text.into(),
        attempt,
        revision,
        provider: "offline".into(),
        worker_id: "worker-1".into(),
        started_at: now(),
        completed_at: now(),
        steps: vec![],
        metrics: Default::default(),
        error: None,
        gate_verdicts: vec![],
    }
}

fn submit(state: &mut Indexed, seq: u64, r: ResultSubmission) -> machine::Applied {
    machine::apply(
        state,
        seq,
        &Event::Result {
            replan: false,
            seq,
            submission: Box::new(r),
            review: vec![],
        },
        now(),
    )
}

fn status(state: &SwarmState, id: &str) -> TaskStatus {
    state.task(id).unwrap().status
}

#[test]
fn chain_and_fan_out_run_in_dependency_order() {
    // a -> (b, c) -> d
    let d = deployment(vec![
        task("a", &[]),
        task("b", &["a"]),
        task("c", &["a"]),
        task("d", &["b", "c"]),
    ]);
    let (mut s, cmds) = machine::deploy("s1", &d, 1, now());
    assert_eq!(assigned(&cmds), vec![("a".into(), 1, 0)]);
    match &cmds[0] {
        Command::Assign { pool, msg_id, .. } => {
            assert_eq!(pool, "code");
            assert_eq!(msg_id, "s1.a.a1.r0");
        }
        Command::Finalize | Command::ScoreSkills(_) => panic!("no report yet"),
    }
    let out = submit(&mut s, 10, result("a", 1, 0, "A"));
    assert!(out.changed);
    let mut fan: Vec<String> = assigned(&out.commands).into_iter().map(|x| x.0).collect();
    fan.sort();
    assert_eq!(fan, vec!["b", "c"]);
    // b's assignment carries a's result as context, by stream sequence.
    let ctx = out
        .commands
        .iter()
        .find_map(|c| match c {
            Command::Assign { assignment, .. } if assignment.task_id == "b" => {
                Some(assignment.context.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(ctx.len(), 1);
    assert_eq!((ctx[0].task_id.as_str(), ctx[0].result_seq), ("a", 10));
    let out = submit(&mut s, 11, result("b", 1, 0, "B"));
    assert!(assigned(&out.commands).is_empty(), "d waits for c");
    let out = submit(&mut s, 12, result("c", 1, 0, "C"));
    assert_eq!(assigned(&out.commands), vec![("d".into(), 1, 0)]);
    let out = submit(&mut s, 13, result("d", 1, 0, "D"));
    assert_eq!(out.commands, vec![Command::Finalize]);
    assert_eq!(s.status, SwarmStatus::Completed);
    assert!(s.tasks.iter().all(|t| t.status == TaskStatus::Completed));
}

#[test]
fn a_redelivered_result_changes_nothing() {
    let (mut s, _) = machine::deploy(
        "s1",
        &deployment(vec![task("a", &[]), task("b", &["a"])]),
        1,
        now(),
    );
    assert!(submit(&mut s, 5, result("a", 1, 0, "A")).changed);
    let before = s.clone();
    let again = submit(&mut s, 5, result("a", 1, 0, "A"));
    assert!(!again.changed);
    assert_eq!(s, before);
    // What is owed is re-sent: b's assignment (deduplicated downstream by its id).
    assert_eq!(assigned(&again.commands), vec![("b".into(), 1, 0)]);
}

#[test]
fn a_result_ahead_of_the_state_waits_and_is_not_dropped() {
    // The state as stored before a lost write: a is assigned, b is pending.
    // b's assignment went out alongside the lost write, and b's result came.
    let (mut s, _) = machine::deploy(
        "s1",
        &deployment(vec![task("a", &[]), task("b", &["a"])]),
        1,
        now(),
    );
    let before = s.clone();
    let early = submit(&mut s, 7, result("b", 1, 0, "B"));
    assert!(early.ahead, "a result for a pending task is ahead");
    assert!(!early.changed && early.commands.is_empty());
    assert_eq!(s, before);
    // Once a's redelivered result is applied again, b's result counts.
    assert!(submit(&mut s, 5, result("a", 1, 0, "A")).changed);
    let out = submit(&mut s, 7, result("b", 1, 0, "B"));
    assert!(!out.ahead && out.changed);
    assert_eq!(out.commands, vec![Command::Finalize]);
    // A later revision than the state records is ahead too; an earlier one is stale.
    let mut t = task("c", &[]);
    t.max_result_bytes = Some(3);
    let (mut s, _) = machine::deploy("s2", &deployment(vec![t]), 1, now());
    assert!(submit(&mut s, 2, result("c", 1, 1, "ok")).ahead);
    assert!(submit(&mut s, 2, result("c", 2, 0, "ok")).ahead);
    let error = Event::TaskError {
        task_id: "c".into(),
        attempt: Some(2),
        error: ErrorBody::new(ErrorCode::Internal, "boom"),
    };
    assert!(machine::apply(&mut s, 3, &error, now()).ahead);
    let out = submit(&mut s, 4, result("c", 1, 0, "too long"));
    assert!(!out.ahead && out.changed, "revision 1 is asked for");
    let stale = submit(&mut s, 5, result("c", 1, 0, "ok"));
    assert!(!stale.ahead && !stale.changed);
}

#[test]
fn gate_failure_asks_for_a_revision_with_the_reason() {
    let mut t = task("a", &[]);
    t.max_result_bytes = Some(10);
    let (mut s, _) = machine::deploy("s1", &deployment(vec![t]), 1, now());
    let out = submit(&mut s, 2, result("a", 1, 0, "far too long a result"));
    assert_eq!(assigned(&out.commands), vec![("a".into(), 1, 1)]);
    let feedback = match &out.commands[0] {
        Command::Assign { assignment, .. } => assignment.feedback.clone(),
        Command::Finalize | Command::ScoreSkills(_) => unreachable!(),
    };
    assert!(feedback[0].contains("at most 10 bytes"), "{feedback:?}");
    // A late copy of revision 0 is stale.
    assert!(!submit(&mut s, 3, result("a", 1, 0, "short")).changed);
    let out = submit(&mut s, 4, result("a", 1, 1, "short"));
    assert_eq!(out.commands, vec![Command::Finalize]);
    let a = s.task("a").unwrap();
    assert_eq!((a.status, a.revision), (TaskStatus::Completed, 1));
    assert_eq!(a.gate_verdicts.iter().filter(|v| !v.passed).count(), 1);
}

#[test]
fn exhausted_revisions_fail_the_task_and_cancel_its_dependents() {
    let (mut s, _) = machine::deploy(
        "s1",
        &deployment(vec![
            task("a", &[]),
            task("b", &["a"]),
            task("c", &["b"]),
            task("x", &[]),
        ]),
        1,
        now(),
    );
    for rev in 0..=Limits::default().max_revisions {
        submit(&mut s, 10 + u64::from(rev), result("a", 1, rev, "   "));
    }
    assert_eq!(status(&s, "a"), TaskStatus::Failed);
    assert!(
        s.task("a")
            .unwrap()
            .error
            .as_deref()
            .unwrap()
            .contains("empty")
    );
    assert_eq!(status(&s, "b"), TaskStatus::Cancelled);
    assert_eq!(status(&s, "c"), TaskStatus::Cancelled);
    assert_eq!(s.status, SwarmStatus::Running, "x is still running");
    let out = submit(&mut s, 20, result("x", 1, 0, "X"));
    assert_eq!(out.commands, vec![Command::Finalize]);
    assert_eq!(s.status, SwarmStatus::Failed);
}

#[test]
fn worker_failures_retry_when_retriable_and_fail_otherwise() {
    let (mut s, _) = machine::deploy(
        "s1",
        &deployment(vec![task("a", &[]), task("b", &[])]),
        1,
        now(),
    );
    let mut failed = result("a", 1, 0, "");
    failed.status = TaskStatus::Failed;
    failed.error = Some(ErrorBody::new(ErrorCode::Internal, "provider hiccup"));
    let out = submit(&mut s, 2, failed);
    assert_eq!(assigned(&out.commands), vec![("a".into(), 2, 0)]);
    let out = machine::apply(
        &mut s,
        3,
        &Event::TaskError {
            task_id: "b".into(),
            attempt: None,
            error: ErrorBody::new(ErrorCode::DecodeFailed, "bad assignment"),
        },
        now(),
    );
    assert!(out.changed);
    assert_eq!(status(&s, "b"), TaskStatus::Failed);
    // Attempts are bounded.
    for attempt in 2..=Limits::default().max_attempts {
        let mut f = result("a", attempt, 0, "");
        f.status = TaskStatus::Failed;
        f.error = Some(ErrorBody::new(ErrorCode::Internal, "again"));
        submit(&mut s, 10 + u64::from(attempt), f);
    }
    assert_eq!(status(&s, "a"), TaskStatus::Failed);
    assert_eq!(s.task("a").unwrap().attempt, Limits::default().max_attempts);
    assert_eq!(s.status, SwarmStatus::Failed);
}

#[test]
fn cancel_ends_the_swarm_once() {
    let (mut s, _) = machine::deploy(
        "s1",
        &deployment(vec![task("a", &[]), task("b", &["a"])]),
        1,
        now(),
    );
    let out = machine::apply(
        &mut s,
        2,
        &Event::Cancel {
            reason: "enough".into(),
        },
        now(),
    );
    assert_eq!(out.commands, vec![Command::Finalize]);
    assert_eq!(s.status, SwarmStatus::Cancelled);
    assert!(s.tasks.iter().all(|t| t.status == TaskStatus::Cancelled));
    // A late result is ignored; the report is still owed until published.
    let late = submit(&mut s, 3, result("a", 1, 0, "A"));
    assert!(!late.changed);
    assert_eq!(late.commands, vec![Command::Finalize]);
    s.report_published = true;
    assert!(machine::outstanding(&s).is_empty());
}

#[test]
fn an_invalid_plan_ends_failed_with_a_report() {
    let (s, cmds) = machine::deploy(
        "s1",
        &deployment(vec![task("a", &["b"]), task("b", &["a"])]),
        1,
        now(),
    );
    assert_eq!(s.status, SwarmStatus::Failed);
    assert_eq!(cmds, vec![Command::Finalize]);
    assert!(s.cancel_reason.as_deref().unwrap().contains("cycle"));
}

#[test]
fn ready_tasks_go_out_critical_path_first() {
    let d = deployment(vec![
        task("leaf", &[]),
        task("root", &[]),
        task("mid", &["root"]),
        task("end", &["mid"]),
    ]);
    let (_, cmds) = machine::deploy("s1", &d, 1, now());
    let order: Vec<String> = assigned(&cmds).into_iter().map(|x| x.0).collect();
    assert_eq!(order, vec!["root", "leaf"]);
}

#[test]
fn the_report_shortens_results_to_fit_its_budget() {
    let (mut s, _) = machine::deploy(
        "s1",
        &deployment(vec![task("a", &[]), task("b", &[])]),
        1,
        now(),
    );
    submit(&mut s, 2, result("a", 1, 0, &"x".repeat(100)));
    submit(&mut s, 3, result("b", 1, 0, "short"));
    let results = [
        ("a".to_string(), "x".repeat(100)),
        ("b".to_string(), "short".to_string()),
    ]
    .into();
    let r = swarm_manager::report::build(&s, &results, 40, now());
    assert_eq!(r.overall_status, SwarmStatus::Completed);
    let a = r.task_results.iter().find(|t| t.task_id == "a").unwrap();
    assert!(a.result_truncated && a.result.len() == 20);
    let b = r.task_results.iter().find(|t| t.task_id == "b").unwrap();
    assert!(!b.result_truncated && b.result == "short");
    assert_eq!(r.metrics["tasks_completed"], 2.0);
    assert!(r.summary.contains("2 of 2"), "{}", r.summary);
}

#[test]
fn a_model_reviewer_rejection_becomes_a_revision_with_its_feedback() {
    let (mut s, _) = machine::deploy("s1", &deployment(vec![task("a", &[])]), 1, now());
    let verdict = swarm_common::GateVerdict {
        gate: "model_review".into(),
        passed: false,
        reason: "cite the file you counted".into(),
        revision: 0,
    };
    let out = machine::apply(
        &mut s,
        2,
        &Event::Result {
            replan: false,
            seq: 2,
            submission: Box::new(result("a", 1, 0, "12 words")),
            review: vec![verdict],
        },
        now(),
    );
    assert_eq!(assigned(&out.commands), vec![("a".into(), 1, 1)]);
    match &out.commands[0] {
        Command::Assign { assignment, .. } => assert_eq!(
            assignment.feedback,
            vec!["cite the file you counted".to_string()]
        ),
        Command::Finalize | Command::ScoreSkills(_) => unreachable!(),
    }
    let a = s.task("a").unwrap();
    assert!(
        a.gate_verdicts
            .iter()
            .any(|v| v.gate == "model_review" && !v.passed)
    );
}

#[test]
fn a_spent_budget_ends_the_mission_failed_with_the_reason() {
    let mut d = deployment(vec![task("a", &[]), task("b", &[])]);
    d.budget.max_tokens = Some(1000);
    let (mut s, cmds) = machine::deploy("s1", &d, 1, now());
    match &cmds[0] {
        Command::Assign { assignment, .. } => assert_eq!(assignment.budget.max_tokens, Some(1000)),
        Command::Finalize | Command::ScoreSkills(_) => unreachable!(),
    }
    let mut r = result("a", 1, 0, "A");
    r.metrics.insert("input_tokens".into(), 900.0);
    r.metrics.insert("output_tokens".into(), 200.0);
    let out = submit(&mut s, 2, r);
    assert_eq!(out.commands, vec![Command::Finalize]);
    assert_eq!(s.status, SwarmStatus::Failed);
    let why = s.cancel_reason.as_deref().unwrap();
    assert!(
        why.contains("token budget") && why.contains("1100"),
        "{why}"
    );
    assert_eq!(status(&s, "b"), TaskStatus::Cancelled);
    assert_eq!(machine::tokens_spent(&s), 1100);
}

#[test]
fn a_wide_fan_in_assigns_its_last_task_once_every_dependency_is_done() {
    let n = 2_000;
    let ids: Vec<String> = (0..n).map(|i| format!("w{i}")).collect();
    let mut tasks: Vec<TaskDefinition> = ids.iter().map(|id| task(id, &[])).collect();
    let deps: Vec<&str> = ids.iter().map(String::as_str).collect();
    tasks.push(task("join", &deps));
    let mut d = deployment(tasks);
    d.limits.max_tasks = n + 1;
    let (mut s, cmds) = machine::deploy("s1", &d, 1, now());
    assert_eq!(assigned(&cmds).len(), n, "every independent task at once");
    // Results in reverse plan order: the join waits for the very last one.
    for (k, id) in ids.iter().enumerate().rev() {
        let out = submit(&mut s, 10 + k as u64, result(id, 1, 0, "ok"));
        assert!(out.changed);
        if k > 0 {
            assert!(
                assigned(&out.commands).is_empty(),
                "join assigned early at {id}"
            );
        } else {
            assert_eq!(assigned(&out.commands), vec![("join".into(), 1, 0)]);
        }
    }
    assert_eq!(status(&s, "join"), TaskStatus::Assigned);
    // A state read back from storage has no index yet and builds its own.
    let stored: SwarmState = swarm_common::Codec::MsgPack
        .decode(&swarm_common::Codec::MsgPack.encode(&s.state).unwrap())
        .unwrap();
    assert_eq!(stored, s.state);
    let stored = Indexed::new(stored);
    assert_eq!(stored.task("w1999").unwrap().status, TaskStatus::Completed);
    let out = submit(&mut s, 99_999, result("join", 1, 0, "joined"));
    assert_eq!(out.commands, vec![Command::Finalize]);
}

fn tool_failure(task_id: &str, attempt: u32, revision: u32) -> ResultSubmission {
    let mut r = result(task_id, attempt, revision, "");
    r.status = TaskStatus::Failed;
    r.error = Some(ErrorBody::new(
        ErrorCode::ToolFailed,
        "tool \"count\" failed: NOPE.md: no such file (step 1)",
    ));
    r
}

#[test]
fn a_failed_attempt_is_revised_with_its_reason_then_fails_the_mission() {
    // a -> b: a's tool keeps failing.
    let (mut s, _) = machine::deploy(
        "s1",
        &deployment(vec![task("a", &[]), task("b", &["a"])]),
        1,
        now(),
    );
    let max_revisions = Limits::default().max_revisions;
    for revision in 0..max_revisions {
        let out = submit(
            &mut s,
            10 + u64::from(revision),
            tool_failure("a", 1, revision),
        );
        assert!(out.changed);
        assert_eq!(
            assigned(&out.commands),
            vec![("a".into(), 1, revision + 1)],
            "a failed attempt is revised like a failed gate"
        );
        let feedback = s.task("a").unwrap().feedback.last().unwrap();
        assert!(
            feedback.contains("The previous version failed (tool_failed)")
                && feedback.contains("NOPE.md: no such file"),
            "{feedback}"
        );
    }
    let out = submit(&mut s, 20, tool_failure("a", 1, max_revisions));
    assert_eq!(out.commands, vec![Command::Finalize]);
    assert_eq!(status(&s, "a"), TaskStatus::Failed);
    let why = s.task("a").unwrap().error.clone().unwrap();
    assert!(
        why.starts_with("tool_failed: tool \"count\" failed: NOPE.md: no such file")
            && why.ends_with(&format!(
                "(after 1 attempt(s) and {max_revisions} revision(s))"
            )),
        "{why}"
    );
    assert_eq!(status(&s, "b"), TaskStatus::Cancelled);
    assert_eq!(
        s.task("b").unwrap().error.as_deref(),
        Some("not run: dependency a did not complete")
    );
    assert_eq!(s.status, SwarmStatus::Failed);
    // The report's first words say which task failed and why.
    let r = swarm_manager::report::build(&s, &Default::default(), 1 << 20, now());
    assert_eq!(r.overall_status, SwarmStatus::Failed);
    assert!(
        r.summary.starts_with(
            "The mission failed: task a (title a) failed: tool_failed: tool \"count\" failed: \
             NOPE.md: no such file"
        ),
        "{}",
        r.summary
    );
    assert!(
        r.summary
            .contains("0 of 2 task(s) completed, 1 failed, 1 cancelled")
    );
}

#[test]
fn a_completed_claim_with_a_failed_tool_step_is_not_accepted() {
    let (mut s, _) = machine::deploy("s1", &deployment(vec![task("a", &[])]), 1, now());
    // A worker (an older build, or a forged message) says Completed, but its
    // own steps show a tool call that failed and was never made good.
    let mut r = result("a", 1, 0, "[offline provider] `count` on NOPE.md failed");
    r.steps = vec![
        swarm_common::StepRecord {
            step: 1,
            tool: Some("count".into()),
            arguments: Some(r#"{"path":"NOPE.md"}"#.into()),
            observation: "failed: NOPE.md: no such file".into(),
            is_error: true,
        },
        swarm_common::StepRecord {
            step: 2,
            tool: None,
            arguments: None,
            observation: "[offline provider] `count` on NOPE.md failed".into(),
            is_error: false,
        },
    ];
    let out = submit(&mut s, 2, r);
    assert_eq!(assigned(&out.commands), vec![("a".into(), 1, 1)]);
    let verdict = s
        .task("a")
        .unwrap()
        .gate_verdicts
        .iter()
        .find(|v| v.gate == "no_failed_tool")
        .unwrap()
        .clone();
    assert!(!verdict.passed);
    assert!(
        verdict
            .reason
            .starts_with("tool \"count\" failed at step 1"),
        "{}",
        verdict.reason
    );
}

#[test]
fn an_empty_result_is_not_accepted() {
    let (mut s, _) = machine::deploy("s1", &deployment(vec![task("a", &[])]), 1, now());
    let out = submit(&mut s, 2, result("a", 1, 0, "  \n"));
    assert_eq!(assigned(&out.commands), vec![("a".into(), 1, 1)]);
    assert_eq!(status(&s, "a"), TaskStatus::Assigned);
}

#[test]
fn task_lookups_survive_tasks_added_after_the_first_lookup() {
    let (mut s, _) = machine::deploy("s1", &deployment(vec![task("a", &[])]), 1, now());
    s.tasks[0].status = TaskStatus::Completed;
    assert_eq!(s.position("a"), Some(0));
    let mut second = s.tasks[0].clone();
    second.definition.task_id = "added".into();
    second.definition.dependencies = vec!["a".into()];
    s.tasks.push(second);
    assert_eq!(s.position("added"), Some(1));
    assert_eq!(s.task("a").map(|t| t.status), Some(TaskStatus::Completed));
    assert!(s.position("missing").is_none());
    // The index is a cache: it is not part of the state's value, and a
    // state read back builds its own.
    let back: SwarmState = swarm_common::Codec::MsgPack
        .decode(&swarm_common::Codec::MsgPack.encode(&s.state).unwrap())
        .unwrap();
    let mut back = Indexed::new(back);
    assert_eq!(back, s);
    assert_eq!(back.dependents(0), &[1]);
    assert!(back.dependencies_done(1));
}

/// A task with a condition, from its JSON form as a plan writes it.
fn conditional(id: &str, deps: &[&str], condition: serde_json::Value) -> TaskDefinition {
    TaskDefinition {
        condition: Some(serde_json::from_value(condition).unwrap()),
        ..task(id, deps)
    }
}

fn error_of(state: &SwarmState, id: &str) -> String {
    state.task(id).unwrap().error.clone().unwrap_or_default()
}

/// check -> review (if check's /needs_review is true) -> publish (after both).
fn review_plan() -> SwarmDeployment {
    deployment(vec![
        task("check", &[]),
        conditional(
            "review",
            &["check"],
            serde_json::json!({"when": {"task": "check", "pointer": "/needs_review", "equals": true}}),
        ),
        task("publish", &["check", "review"]),
    ])
}

#[test]
fn a_condition_that_holds_runs_the_task() {
    let d = deployment(vec![
        task("a", &[]),
        conditional(
            "b",
            &["a"],
            serde_json::json!({"when": {"task": "a", "status": "completed"}}),
        ),
    ]);
    let (mut s, _) = machine::deploy("s1", &d, 1, now());
    let out = submit(&mut s, 2, result("a", 1, 0, "plain text is fine here"));
    assert_eq!(assigned(&out.commands), vec![("b".into(), 1, 0)]);
    assert_eq!(status(&s, "b"), TaskStatus::Assigned);
}

#[test]
fn a_pointer_into_a_json_result_decides_the_condition() {
    // True: review runs, and publish waits for it.
    let (mut s, _) = machine::deploy("s1", &review_plan(), 1, now());
    let out = submit(
        &mut s,
        2,
        result("check", 1, 0, r#"{"needs_review": true}"#),
    );
    assert_eq!(assigned(&out.commands), vec![("review".into(), 1, 0)]);
    // False: review is skipped with the reason, and publish, which needs no
    // output of it, runs at once with check's result alone as context.
    let (mut s, _) = machine::deploy("s1", &review_plan(), 1, now());
    let out = submit(
        &mut s,
        2,
        result("check", 1, 0, r#"{"needs_review": false}"#),
    );
    assert_eq!(status(&s, "review"), TaskStatus::Skipped);
    let why = error_of(&s, "review");
    assert!(why.starts_with("condition not met: "), "{why}");
    assert!(
        why.contains("\"/needs_review\" is false, not true"),
        "{why}"
    );
    assert_eq!(assigned(&out.commands), vec![("publish".into(), 1, 0)]);
    let ctx: Vec<String> = out
        .commands
        .iter()
        .find_map(|c| match c {
            Command::Assign { assignment, .. } => Some(
                assignment
                    .context
                    .iter()
                    .map(|c| c.task_id.clone())
                    .collect(),
            ),
            Command::Finalize | Command::ScoreSkills(_) => None,
        })
        .unwrap();
    assert_eq!(ctx, vec!["check"]);
    // The swarm completes: a skip is an outcome, not a failure.
    let out = submit(&mut s, 3, result("publish", 1, 0, "published"));
    assert!(out.commands.contains(&Command::Finalize));
    assert_eq!(s.status, SwarmStatus::Completed);
    let r = swarm_manager::report::build(&s, &Default::default(), 1 << 20, now());
    assert_eq!(r.overall_status, SwarmStatus::Completed);
    let review = r
        .task_results
        .iter()
        .find(|t| t.task_id == "review")
        .unwrap();
    assert_eq!(review.status, TaskStatus::Skipped);
    assert_eq!(review.error.as_deref(), Some(why.as_str()));
    assert_eq!(r.metrics["tasks_skipped"], 1.0);
    assert!(r.summary.contains("1 skipped"), "{}", r.summary);
    assert!(
        r.insights
            .iter()
            .any(|i| i.starts_with("review was skipped: ")),
        "{:?}",
        r.insights
    );
}

#[test]
fn a_result_that_is_not_json_or_lacks_the_pointer_skips_and_says_so() {
    let (mut s, _) = machine::deploy("s1", &review_plan(), 1, now());
    submit(&mut s, 2, result("check", 1, 0, "looks fine to me"));
    assert_eq!(status(&s, "review"), TaskStatus::Skipped);
    assert!(
        error_of(&s, "review").contains("is not JSON"),
        "{}",
        error_of(&s, "review")
    );
    assert_eq!(status(&s, "publish"), TaskStatus::Assigned);

    let (mut s, _) = machine::deploy("s1", &review_plan(), 1, now());
    submit(&mut s, 2, result("check", 1, 0, r#"{"other": 1}"#));
    assert_eq!(status(&s, "review"), TaskStatus::Skipped);
    assert!(
        error_of(&s, "review").contains("has nothing at \"/needs_review\""),
        "{}",
        error_of(&s, "review")
    );
}

#[test]
fn dependents_of_a_skipped_task_run_unless_their_condition_needs_it() {
    // a -> b (skipped) -> c (plain: runs), d (needs b completed: skipped),
    // e (after d, runs if d was skipped: `not` of a status test).
    let d = deployment(vec![
        task("a", &[]),
        conditional(
            "b",
            &["a"],
            serde_json::json!({"when": {"task": "a", "pointer": "/go", "equals": true}}),
        ),
        task("c", &["b"]),
        conditional(
            "d",
            &["b"],
            serde_json::json!({"when": {"task": "b", "status": "completed"}}),
        ),
        conditional(
            "e",
            &["d"],
            serde_json::json!({"not": {"when": {"task": "d", "status": "completed"}}}),
        ),
    ]);
    let (mut s, _) = machine::deploy("s1", &d, 1, now());
    let out = submit(&mut s, 2, result("a", 1, 0, r#"{"go": false}"#));
    let mut run: Vec<String> = assigned(&out.commands).into_iter().map(|x| x.0).collect();
    run.sort();
    assert_eq!(run, vec!["c", "e"]);
    assert_eq!(status(&s, "b"), TaskStatus::Skipped);
    assert_eq!(status(&s, "d"), TaskStatus::Skipped);
    assert_eq!(error_of(&s, "d"), "condition not met: b was skipped");
    submit(&mut s, 3, result("c", 1, 0, "C"));
    submit(&mut s, 4, result("e", 1, 0, "E"));
    assert_eq!(s.status, SwarmStatus::Completed);
}

#[test]
fn a_skip_is_decided_once_under_a_redelivered_result() {
    let (mut s, _) = machine::deploy("s1", &review_plan(), 1, now());
    let first = submit(
        &mut s,
        2,
        result("check", 1, 0, r#"{"needs_review": false}"#),
    );
    assert!(first.changed);
    let before = s.clone();
    // The same result again, and one that would now say otherwise: both stale.
    let again = submit(
        &mut s,
        2,
        result("check", 1, 0, r#"{"needs_review": false}"#),
    );
    assert!(!again.changed);
    let other = submit(
        &mut s,
        3,
        result("check", 1, 0, r#"{"needs_review": true}"#),
    );
    assert!(!other.changed);
    assert_eq!(s, before);
    assert_eq!(status(&s, "review"), TaskStatus::Skipped);
    // What is owed is publish's assignment only; review is never assigned.
    assert_eq!(assigned(&again.commands), vec![("publish".into(), 1, 0)]);
    // The state read back from storage decides the same.
    let stored: SwarmState =
        serde_json::from_slice(&serde_json::to_vec(&s.state).unwrap()).unwrap();
    assert_eq!(stored, s.state);
}

#[test]
fn a_condition_on_a_task_that_is_not_a_dependency_is_refused() {
    let d = deployment(vec![
        task("a", &[]),
        task("x", &[]),
        conditional(
            "b",
            &["a"],
            serde_json::json!({"when": {"task": "x", "status": "completed"}}),
        ),
    ]);
    let (s, cmds) = machine::deploy("s1", &d, 1, now());
    assert_eq!(s.status, SwarmStatus::Failed);
    assert_eq!(cmds, vec![Command::Finalize]);
    let why = s.cancel_reason.clone().unwrap();
    assert!(why.contains("not one of its dependencies"), "{why}");
}

fn mapped(id: &str, deps: &[&str], over: &str, pointer: &str, concurrency: u32) -> TaskDefinition {
    let mut t = task(id, deps);
    t.description = "handle {{item}} (#{{index}})".into();
    t.map = Some(
        serde_json::from_value(serde_json::json!({
            "over": {"task": over, "pointer": pointer},
            "concurrency": concurrency
        }))
        .unwrap(),
    );
    t
}

fn list(n: usize) -> String {
    let files: Vec<String> = (0..n).map(|k| format!("f{k}")).collect();
    serde_json::json!({ "files": files }).to_string()
}

/// list -> map (over list's /files, 2 at a time) -> reduce.
fn map_plan() -> SwarmDeployment {
    deployment(vec![
        task("list", &[]),
        mapped("m", &["list"], "list", "/files", 2),
        task("reduce", &["m"]),
    ])
}

fn ids(cmds: &[Command]) -> Vec<String> {
    assigned(cmds).into_iter().map(|x| x.0).collect()
}

#[test]
fn a_map_expands_on_its_lists_result_within_its_concurrency() {
    let (mut s, _) = machine::deploy("s1", &map_plan(), 1, now());
    let out = submit(&mut s, 10, result("list", 1, 0, &list(5)));
    // Five children exist; two go out, with the item in their description.
    assert_eq!(ids(&out.commands), vec!["m-0", "m-1"]);
    assert_eq!(status(&s, "m"), TaskStatus::InProgress);
    assert_eq!(s.tasks.len(), 3 + 5);
    assert_eq!(status(&s, "m-4"), TaskStatus::Pending);
    let Command::Assign { assignment, .. } = &out.commands[1] else {
        panic!("an assignment")
    };
    assert_eq!(assignment.description, "handle f1 (#1)");
    assert!(
        assignment.context.is_empty(),
        "a child gets its item, not the whole list: {:?}",
        assignment.context
    );
    // A redelivered list result expands nothing twice.
    let again = submit(&mut s, 10, result("list", 1, 0, &list(5)));
    assert!(!again.changed);
    assert_eq!(s.tasks.len(), 8);
    // As one completes the next goes out; never more than two at once.
    let mut seq = 20;
    let mut done = Vec::new();
    for k in 0..5 {
        let out = submit(
            &mut s,
            seq,
            result(&format!("m-{k}"), 1, 0, &format!("\"r{k}\"")),
        );
        seq += 1;
        done.push(k);
        let out_now = s
            .tasks
            .iter()
            .filter(|t| t.parent.is_some() && t.status == TaskStatus::Assigned)
            .count();
        assert!(out_now <= 2, "{out_now} children out at once");
        if k + 2 < 5 {
            assert_eq!(ids(&out.commands), vec![format!("m-{}", k + 2)]);
        } else if k < 4 {
            assert!(ids(&out.commands).is_empty());
        } else {
            // The last child completes the map; reduce runs on the children's results.
            assert_eq!(ids(&out.commands), vec!["reduce"]);
            let Command::Assign { assignment, .. } = &out.commands[0] else {
                panic!("an assignment")
            };
            let ctx: Vec<&str> = assignment
                .context
                .iter()
                .map(|c| c.task_id.as_str())
                .collect();
            assert_eq!(ctx, vec!["m-0", "m-1", "m-2", "m-3", "m-4"]);
        }
    }
    assert_eq!(status(&s, "m"), TaskStatus::Completed);
    submit(&mut s, seq, result("reduce", 1, 0, "all done"));
    assert_eq!(s.status, SwarmStatus::Completed);
    // The report shows every child, and the map's result is theirs in order.
    let mut results: std::collections::HashMap<String, String> = (0..5)
        .map(|k| (format!("m-{k}"), format!("\"r{k}\"")))
        .collect();
    results.insert("list".into(), list(5));
    let report = swarm_manager::report::build(&s, &results, 1 << 20, now());
    assert_eq!(report.task_results.len(), 8);
    let m = report
        .task_results
        .iter()
        .find(|t| t.task_id == "m")
        .unwrap();
    assert_eq!(m.result, r#"["r0","r1","r2","r3","r4"]"#);
}

#[test]
fn a_failing_child_fails_the_map_and_cancels_its_dependents() {
    let (mut s, _) = machine::deploy("s1", &map_plan(), 1, now());
    submit(&mut s, 10, result("list", 1, 0, &list(4)));
    let out = machine::apply(
        &mut s,
        11,
        &Event::TaskError {
            task_id: "m-1".into(),
            attempt: Some(1),
            error: ErrorBody {
                retriable: false,
                ..ErrorBody::new(ErrorCode::Internal, "broken")
            },
        },
        now(),
    );
    assert!(out.changed);
    assert!(ids(&out.commands).is_empty(), "no further child goes out");
    assert_eq!(status(&s, "m-1"), TaskStatus::Failed);
    assert_eq!(status(&s, "m"), TaskStatus::Failed);
    assert!(error_of(&s, "m").contains("m-1"), "{}", error_of(&s, "m"));
    for c in ["m-0", "m-2", "m-3", "reduce"] {
        assert_eq!(status(&s, c), TaskStatus::Cancelled, "{c}");
    }
    assert_eq!(s.status, SwarmStatus::Failed);
    // The late result of a cancelled child changes nothing.
    assert!(!submit(&mut s, 12, result("m-0", 1, 0, "late")).changed);
}

#[test]
fn an_empty_list_completes_the_map_at_once() {
    let (mut s, _) = machine::deploy("s1", &map_plan(), 1, now());
    let out = submit(&mut s, 10, result("list", 1, 0, r#"{"files": []}"#));
    assert_eq!(status(&s, "m"), TaskStatus::Completed);
    assert_eq!(s.task("m").unwrap().result_preview, "[]");
    assert_eq!(ids(&out.commands), vec!["reduce"]);
    let report = swarm_manager::report::build(&s, &Default::default(), 1 << 20, now());
    let m = report
        .task_results
        .iter()
        .find(|t| t.task_id == "m")
        .unwrap();
    assert_eq!(m.result, "[]");
}

#[test]
fn a_list_that_cannot_be_used_fails_the_map_with_the_reason() {
    for (text, why) in [
        ("not json", "not JSON"),
        (r#"{"other": 1}"#, "nothing at"),
        (r#"{"files": "a"}"#, "not a list"),
    ] {
        let (mut s, _) = machine::deploy("s1", &map_plan(), 1, now());
        let out = submit(&mut s, 10, result("list", 1, 0, text));
        assert!(ids(&out.commands).is_empty());
        assert_eq!(status(&s, "m"), TaskStatus::Failed);
        assert!(error_of(&s, "m").contains(why), "{}", error_of(&s, "m"));
        assert_eq!(status(&s, "reduce"), TaskStatus::Cancelled);
        assert_eq!(s.status, SwarmStatus::Failed);
    }
}

#[test]
fn the_task_limit_bounds_the_expansion() {
    let mut d = map_plan();
    d.limits.max_tasks = 10;
    // Three planned tasks leave room for seven children.
    let (mut s, _) = machine::deploy("s1", &d, 1, now());
    submit(&mut s, 10, result("list", 1, 0, &list(8)));
    assert_eq!(status(&s, "m"), TaskStatus::Failed);
    assert!(
        error_of(&s, "m").contains("room for 7"),
        "{}",
        error_of(&s, "m")
    );
    assert_eq!(s.tasks.len(), 3);
    let (mut s, _) = machine::deploy("s1", &d, 1, now());
    let out = submit(&mut s, 10, result("list", 1, 0, &list(7)));
    assert_eq!(ids(&out.commands), vec!["m-0", "m-1"]);
    assert_eq!(s.tasks.len(), 10);
}

#[test]
fn a_childs_result_ahead_of_a_lost_expansion_waits() {
    let (mut s, _) = machine::deploy("s1", &map_plan(), 1, now());
    // The state that expanded the map was lost; m-0's result arrives first.
    let out = submit(&mut s, 11, result("m-0", 1, 0, "early"));
    assert!(out.ahead);
    assert!(!submit(&mut s, 12, result("zz-0", 1, 0, "stray")).ahead);
}

#[test]
fn a_map_over_a_skipped_list_is_skipped_and_its_dependents_run() {
    let d = deployment(vec![
        task("pre", &[]),
        conditional(
            "list",
            &["pre"],
            serde_json::json!({"when": {"task": "pre", "pointer": "/go", "equals": true}}),
        ),
        mapped("m", &["list"], "list", "/files", 2),
        task("reduce", &["m"]),
    ]);
    let (mut s, _) = machine::deploy("s1", &d, 1, now());
    let out = submit(&mut s, 10, result("pre", 1, 0, r#"{"go": false}"#));
    assert_eq!(status(&s, "list"), TaskStatus::Skipped);
    assert_eq!(status(&s, "m"), TaskStatus::Skipped);
    assert!(
        error_of(&s, "m").contains("nothing to map over"),
        "{}",
        error_of(&s, "m")
    );
    assert_eq!(ids(&out.commands), vec!["reduce"]);
}

/// A deployment whose task `part` is the sub-manager `lead`'s, after `a`.
fn sub_manager_plan() -> SwarmDeployment {
    let mut d = deployment(vec![
        task("a", &[]),
        TaskDefinition {
            assigned_to: "lead".into(),
            ..task("part", &["a"])
        },
    ]);
    d.plan.sub_managers = vec![swarm_common::hierarchy::SubManagerPlan {
        name: "lead".into(),
        role: "leads the part".into(),
        plan: Some(Box::new(d.plan.clone())),
    }];
    d.plan.sub_managers[0].plan.as_mut().unwrap().tasks = vec![task("x", &[])];
    d
}

#[test]
fn a_sub_managers_task_goes_to_the_sub_manager_pool_with_its_child_swarm() {
    let (mut state, _) = machine::deploy("s1", &sub_manager_plan(), 1, now());
    let applied = submit(&mut state, 2, result("a", 1, 0, "alpha"));
    let [
        Command::Assign {
            pool, assignment, ..
        },
    ] = applied.commands.as_slice()
    else {
        panic!("one assignment: {:?}", applied.commands);
    };
    assert_eq!(pool, swarm_common::hierarchy::SUB_MANAGER_POOL);
    let child = assignment.child.as_ref().expect("the child swarm to run");
    assert_eq!(child.sub_manager, "lead");
    assert_eq!(child.depth, 1);
    assert_eq!(child.plan.as_ref().unwrap().tasks[0].task_id, "x");
    assert_eq!(assignment.persona.role, "leads the part");
    assert_eq!(
        assignment.context[0].task_id, "a",
        "the part gets a's result"
    );
    let part = state.task("part").unwrap();
    assert_eq!(
        state.child_of(part).unwrap(),
        swarm_common::hierarchy::child_swarm_id("s1", "part", 1, 0)
    );
    // The child's answer is a result like any other.
    submit(&mut state, 3, result("part", 1, 0, "the part is done"));
    assert_eq!(status(&state, "part"), TaskStatus::Completed);
    assert_eq!(state.status, SwarmStatus::Completed);
}

#[test]
fn a_child_swarms_first_tasks_get_what_its_parent_task_was_given() {
    let mut d = deployment(vec![task("x", &[]), task("y", &["x"])]);
    let given = swarm_common::ContextRef {
        task_id: "a".into(),
        title: "title a".into(),
        result_seq: 7,
        result: None,
    };
    d.parent = Some(swarm_common::hierarchy::ParentTask {
        swarm_id: "parent".into(),
        task_id: "part".into(),
        attempt: 1,
        revision: 0,
        depth: 1,
        max_result_bytes: 1000,
        context: vec![given.clone()],
    });
    let (mut state, cmds) = machine::deploy("child", &d, 1, now());
    let Command::Assign { assignment, .. } = &cmds[0] else {
        panic!("{cmds:?}");
    };
    assert_eq!(assignment.context, vec![given]);
    assert_eq!(state.depth(), 1);
    let applied = submit(&mut state, 2, result("x", 1, 0, "ex"));
    let Command::Assign { assignment, .. } = &applied.commands[0] else {
        panic!("{:?}", applied.commands);
    };
    let from: Vec<&str> = assignment
        .context
        .iter()
        .map(|c| c.task_id.as_str())
        .collect();
    assert_eq!(from, ["x"], "a later task gets only its dependencies'");
}

#[test]
fn a_child_swarm_the_boss_could_not_plan_fails_with_the_reason_and_reports() {
    let mut d = deployment(vec![]);
    d.plan.workers.clear();
    d.failure = Some("planning failed: the model gave no plan".into());
    let (state, cmds) = machine::deploy("child", &d, 1, now());
    assert_eq!(state.status, SwarmStatus::Failed);
    assert_eq!(
        state.cancel_reason.as_deref(),
        Some("planning failed: the model gave no plan")
    );
    assert_eq!(cmds, vec![Command::Finalize]);
}

#[test]
fn a_plan_nested_deeper_than_the_limit_fails_the_swarm_at_deployment() {
    let mut d = sub_manager_plan();
    d.limits.max_swarm_depth = 1;
    d.parent = Some(swarm_common::hierarchy::ParentTask {
        swarm_id: "parent".into(),
        task_id: "part".into(),
        attempt: 1,
        revision: 0,
        depth: 1,
        max_result_bytes: 1000,
        context: vec![],
    });
    let (state, cmds) = machine::deploy("child", &d, 1, now());
    assert_eq!(state.status, SwarmStatus::Failed);
    assert!(
        state
            .cancel_reason
            .as_deref()
            .unwrap()
            .contains("nest 1 deep"),
        "{:?}",
        state.cancel_reason
    );
    assert_eq!(cmds, vec![Command::Finalize]);
}

/// A result that failed with `why` (given up: not worth another attempt).
fn failure(task_id: &str, why: &str) -> ResultSubmission {
    ResultSubmission {
        status: TaskStatus::Failed,
        result: String::new(),
        error: Some(ErrorBody::new(ErrorCode::GaveUp, why)),
        ..result(task_id, 1, 0, "")
    }
}

/// `t` (with fallback `f`), then `d` after `t`; one try each, no revisions.
fn fallback_plan() -> SwarmDeployment {
    let mut d = deployment(vec![
        TaskDefinition {
            on_failure: Some("f".into()),
            ..task("t", &[])
        },
        task("f", &[]),
        task("d", &["t"]),
    ]);
    d.limits.max_revisions = 0;
    d.limits.max_attempts = 1;
    d
}

#[test]
fn a_fallback_is_held_and_runs_in_place_of_its_task_when_it_fails() {
    let (mut state, cmds) = machine::deploy("s1", &fallback_plan(), 1, now());
    assert_eq!(assigned(&cmds), vec![("t".into(), 1, 0)], "f is held");
    assert_eq!(state.task("f").unwrap().fallback_for.as_deref(), Some("t"));

    let applied = submit(&mut state, 2, failure("t", "the API is down"));
    assert_eq!(assigned(&applied.commands), vec![("f".into(), 1, 0)]);
    assert_eq!(status(&state, "t"), TaskStatus::Failed);
    assert_eq!(status(&state, "d"), TaskStatus::Pending, "d waits for f");

    let applied = submit(&mut state, 3, result("f", 1, 0, "from the mirror"));
    let [Command::Assign { assignment, .. }] = applied.commands.as_slice() else {
        panic!("d is assigned: {:?}", applied.commands);
    };
    assert_eq!(assignment.task_id, "d");
    assert_eq!(assignment.context.len(), 1);
    assert_eq!(
        assignment.context[0].task_id, "f",
        "d gets f's result for t's"
    );

    submit(&mut state, 4, result("d", 1, 0, "done"));
    assert_eq!(
        state.status,
        SwarmStatus::Completed,
        "a recovered failure does not fail the mission"
    );
    assert!(
        state
            .task("t")
            .unwrap()
            .error
            .as_deref()
            .unwrap()
            .contains("the API is down")
    );
}

#[test]
fn a_fallback_is_skipped_when_its_task_completes() {
    let (mut state, _) = machine::deploy("s1", &fallback_plan(), 1, now());
    let applied = submit(&mut state, 2, result("t", 1, 0, "fine"));
    assert_eq!(assigned(&applied.commands), vec![("d".into(), 1, 0)]);
    let f = state.task("f").unwrap();
    assert_eq!(f.status, TaskStatus::Skipped);
    assert_eq!(
        f.error.as_deref(),
        Some("not needed: t, whose fallback it is, completed")
    );
    submit(&mut state, 3, result("d", 1, 0, "done"));
    assert_eq!(state.status, SwarmStatus::Completed);
}

#[test]
fn when_the_fallback_fails_too_the_dependents_are_cancelled_and_the_mission_fails() {
    let (mut state, _) = machine::deploy("s1", &fallback_plan(), 1, now());
    submit(&mut state, 2, failure("t", "down"));
    let applied = submit(&mut state, 3, failure("f", "the mirror is down too"));
    assert_eq!(assigned(&applied.commands), vec![]);
    assert_eq!(status(&state, "d"), TaskStatus::Cancelled);
    assert_eq!(state.status, SwarmStatus::Failed);
}

#[test]
fn the_fallback_of_a_task_cancelled_with_its_dependency_is_cancelled_too() {
    let mut d = deployment(vec![
        task("a", &[]),
        TaskDefinition {
            on_failure: Some("f".into()),
            ..task("t", &["a"])
        },
        task("f", &[]),
    ]);
    d.limits.max_revisions = 0;
    d.limits.max_attempts = 1;
    let (mut state, _) = machine::deploy("s1", &d, 1, now());
    submit(&mut state, 2, failure("a", "no"));
    assert_eq!(status(&state, "t"), TaskStatus::Cancelled);
    assert_eq!(status(&state, "f"), TaskStatus::Cancelled);
    assert_eq!(state.status, SwarmStatus::Failed);
}

// ------------------------------------------------------------ collaborators

/// A deployment of `a` (persona `w`, who may ask `helper` and `ghost`, the
/// latter no persona of the plan) and `helper` (persona `h`, pool `help`).
fn asking_deployment() -> SwarmDeployment {
    let mut d = deployment(vec![task("a", &[])]);
    d.plan.workers[0].collaborators = vec!["h".into(), "ghost".into()];
    d.plan.workers.push(swarm_common::WorkerDeploymentPlan {
        name: "h".into(),
        role: "helps".into(),
        system_prompt: "p".into(),
        tools: vec![],
        collaborators: vec![],
        pool: "help".into(),
        a2a_url: None,
        a2a_credential: None,
        skill: None,
    });
    d
}

fn ask(task_id: &str, attempt: u32, revision: u32, n: u32, who: &str) -> Event {
    Event::Ask {
        request: Box::new(swarm_common::CollaborationRequest {
            task_id: task_id.into(),
            attempt,
            revision,
            ask: n,
            collaborator: who.into(),
            request: format!("help {task_id} with ask {n}"),
            token: String::new(),
        }),
    }
}

#[test]
fn an_assignment_names_its_personas_collaborators_that_are_in_the_plan() {
    let (_, cmds) = machine::deploy("s1", &asking_deployment(), 1, now());
    let Command::Assign { assignment, .. } = &cmds[0] else {
        panic!("{cmds:?}")
    };
    assert_eq!(
        assignment.collaborators,
        vec![swarm_common::collaborate::Collaborator {
            name: "h".into(),
            role: "helps".into()
        }]
    );
}

#[test]
fn an_accepted_ask_adds_a_task_for_the_collaborator_asked_by_the_asking_task() {
    let (mut s, _) = machine::deploy("s1", &asking_deployment(), 1, now());
    let out = machine::apply(&mut s, 5, &ask("a", 1, 0, 1, "h"), now());
    assert!(out.changed);
    let [
        Command::Assign {
            pool,
            msg_id,
            assignment,
        },
    ] = out.commands.as_slice()
    else {
        panic!("{:?}", out.commands)
    };
    assert_eq!(
        (pool.as_str(), msg_id.as_str()),
        ("help", "s1.a-ask1.a1.r0")
    );
    assert_eq!(assignment.persona.name, "h");
    assert_eq!(assignment.description, "help a with ask 1");
    let helper = s.task("a-ask1").unwrap();
    assert_eq!(helper.asked_by.as_deref(), Some("a"));
    assert_eq!(helper.status, TaskStatus::Assigned);
    let asks = &s.task("a").unwrap().asks;
    assert_eq!(asks.len(), 1);
    assert_eq!(asks[0].task_id.as_deref(), Some("a-ask1"));

    // The helper's result completes it; the swarm waits for the asker.
    let out = submit(&mut s, 6, result("a-ask1", 1, 0, "the answer"));
    assert!(out.changed && out.commands.is_empty(), "{:?}", out.commands);
    assert_eq!(s.status, SwarmStatus::Running);
    assert_eq!(
        swarm_common::collaborate::ask_status(&s, "a", 1, 0, 1),
        swarm_common::collaborate::AskStatus::Answered {
            task_id: "a-ask1".into(),
            result_seq: 6
        }
    );
    let out = submit(&mut s, 7, result("a", 1, 0, "A"));
    assert_eq!(out.commands, vec![Command::Finalize]);
    assert_eq!(s.status, SwarmStatus::Completed);
}

#[test]
fn a_repeated_ask_changes_nothing_and_a_stale_one_neither() {
    let (mut s, _) = machine::deploy("s1", &asking_deployment(), 1, now());
    assert!(machine::apply(&mut s, 5, &ask("a", 1, 0, 1, "h"), now()).changed);
    let before = s.clone();
    let again = machine::apply(&mut s, 5, &ask("a", 1, 0, 1, "h"), now());
    assert!(!again.changed);
    assert_eq!(s, before);
    // What is owed is re-sent, the helper's assignment too (under its own id).
    assert_eq!(
        assigned(&again.commands),
        vec![("a".into(), 1, 0), ("a-ask1".into(), 1, 0)]
    );
    // The same ask from a later delivery, with another seq: still once.
    assert!(!machine::apply(&mut s, 9, &ask("a", 1, 0, 1, "h"), now()).changed);
    assert_eq!(s.tasks.len(), 2);
    // An earlier revision's ask counts for nothing.
    s.tasks[0].revision = 1;
    assert!(!machine::apply(&mut s, 10, &ask("a", 1, 0, 2, "h"), now()).changed);
    // A later attempt's is ahead of the state: it waits.
    assert!(machine::apply(&mut s, 11, &ask("a", 2, 1, 1, "h"), now()).ahead);
}

#[test]
fn an_ask_of_someone_not_a_collaborator_is_refused_with_the_reason() {
    let mut d = asking_deployment();
    d.plan.workers[1].collaborators = vec![];
    let (mut s, _) = machine::deploy("s1", &d, 1, now());
    // "w" is a persona of the plan, but not among w's own collaborators.
    let out = machine::apply(&mut s, 5, &ask("a", 1, 0, 1, "w"), now());
    assert!(out.changed && out.commands.is_empty());
    let out = machine::apply(&mut s, 6, &ask("a", 1, 0, 2, "ghost"), now());
    assert!(out.changed && out.commands.is_empty());
    assert_eq!(s.tasks.len(), 1, "no task was added");
    let asks = &s.task("a").unwrap().asks;
    assert!(
        asks[0]
            .refused
            .as_deref()
            .unwrap()
            .contains("not a collaborator")
    );
    assert!(
        asks[1]
            .refused
            .as_deref()
            .unwrap()
            .contains("not a persona of the plan")
    );
    use swarm_common::collaborate::{AskStatus, ask_status};
    assert!(
        matches!(ask_status(&s, "a", 1, 0, 1), AskStatus::Unanswered(w) if w.contains("not a collaborator"))
    );
}

#[test]
fn asks_beyond_the_bound_are_not_recorded_and_read_as_refused() {
    let mut d = asking_deployment();
    d.limits.max_collaborator_asks = 2;
    let (mut s, _) = machine::deploy("s1", &d, 1, now());
    assert!(machine::apply(&mut s, 5, &ask("a", 1, 0, 1, "h"), now()).changed);
    assert!(machine::apply(&mut s, 6, &ask("a", 1, 0, 2, "h"), now()).changed);
    let over = machine::apply(&mut s, 7, &ask("a", 1, 0, 3, "h"), now());
    assert!(!over.changed);
    assert_eq!(s.tasks.len(), 3, "a and its two helpers");
    use swarm_common::collaborate::{AskStatus, ask_status};
    assert!(
        matches!(ask_status(&s, "a", 1, 0, 3), AskStatus::Unanswered(w) if w.contains("limit"))
    );
}

#[test]
fn a_helper_that_fails_fails_the_mission_and_tells_the_asker_why() {
    let mut d = asking_deployment();
    d.limits.max_revisions = 0;
    let (mut s, _) = machine::deploy("s1", &d, 1, now());
    machine::apply(&mut s, 5, &ask("a", 1, 0, 1, "h"), now());
    let mut failed = result("a-ask1", 1, 0, "");
    failed.status = TaskStatus::Failed;
    failed.error = Some(ErrorBody::new(ErrorCode::GaveUp, "too slow"));
    submit(&mut s, 6, failed);
    assert_eq!(status(&s, "a-ask1"), TaskStatus::Failed);
    use swarm_common::collaborate::{AskStatus, ask_status};
    assert!(
        matches!(ask_status(&s, "a", 1, 0, 1), AskStatus::Unanswered(w) if w.contains("too slow"))
    );
    let out = submit(&mut s, 7, result("a", 1, 0, "A without help"));
    assert_eq!(out.commands, vec![Command::Finalize]);
    assert_eq!(s.status, SwarmStatus::Failed, "a task failed");
}

// ------------------------------------------------------------ replanning

/// `t` then `d` after it, in a swarm whose graph the manager's model may
/// grow; one try each, no revisions.
fn replanning() -> Indexed {
    let mut d = deployment(vec![task("t", &[]), task("d", &["t"])]);
    d.limits.max_revisions = 0;
    d.limits.max_attempts = 1;
    let (mut state, _) = machine::deploy("s1", &d, 1, now());
    state.replan = true;
    state
}

/// The failing result of `t`, sent with a replan on its way.
fn failing_with_replan(state: &mut Indexed, seq: u64) -> machine::Applied {
    machine::apply(
        state,
        seq,
        &Event::Result {
            seq,
            submission: Box::new(failure("t", "the source is gone")),
            review: vec![],
            replan: true,
        },
        now(),
    )
}

fn replan_event(tasks: Vec<TaskDefinition>, replaces: Option<&str>) -> Event {
    Event::Replan {
        replan: Box::new(swarm_common::replan::Replan {
            task_id: "t".into(),
            attempt: 1,
            revision: 0,
            tasks,
            replaces: replaces.map(str::to_owned),
            reason: "try the archive".into(),
            model: "mock".into(),
            metrics: [("input_tokens".to_string(), 10.0)].into(),
            token: String::new(),
        }),
    }
}

#[test]
fn a_replan_adds_tasks_and_the_one_it_names_runs_in_the_failed_tasks_place() {
    let mut state = replanning();
    let applied = failing_with_replan(&mut state, 2);
    assert!(applied.changed);
    assert_eq!(status(&state, "t"), TaskStatus::Failed);
    assert!(state.task("t").unwrap().replanning);
    assert_eq!(
        status(&state, "d"),
        TaskStatus::Pending,
        "d waits for the replan"
    );
    assert_eq!(state.status, SwarmStatus::Running);

    let applied = machine::apply(
        &mut state,
        3,
        &replan_event(
            vec![task("archive", &[]), task("check", &["archive"])],
            Some("check"),
        ),
        now(),
    );
    assert_eq!(assigned(&applied.commands), vec![("archive".into(), 1, 0)]);
    assert_eq!(state.changes.len(), 1);
    assert_eq!(state.changes[0].added, vec!["archive", "check"]);
    assert_eq!(state.changes[0].replaces.as_deref(), Some("check"));
    assert_eq!(
        state.metrics["input_tokens"], 10.0,
        "the model's cost counts"
    );

    let applied = submit(&mut state, 4, result("archive", 1, 0, "found it"));
    assert_eq!(assigned(&applied.commands), vec![("check".into(), 1, 0)]);
    let applied = submit(&mut state, 5, result("check", 1, 0, "checked"));
    let [Command::Assign { assignment, .. }] = applied.commands.as_slice() else {
        panic!("d runs on check's result: {:?}", applied.commands);
    };
    assert_eq!(assignment.task_id, "d");
    assert_eq!(assignment.context[0].task_id, "check");
    submit(&mut state, 6, result("d", 1, 0, "done"));
    assert_eq!(state.status, SwarmStatus::Completed);
    assert_eq!(
        status(&state, "t"),
        TaskStatus::Failed,
        "the failure stays on record"
    );
}

#[test]
fn a_replan_with_no_tasks_or_refused_tasks_lets_the_failure_take_its_course() {
    for (tasks, refused) in [
        (vec![], false),
        (
            vec![TaskDefinition {
                assigned_to: "ghost".into(),
                ..task("x", &[])
            }],
            true,
        ),
    ] {
        let mut state = replanning();
        failing_with_replan(&mut state, 2);
        machine::apply(&mut state, 3, &replan_event(tasks, None), now());
        assert_eq!(status(&state, "d"), TaskStatus::Cancelled);
        assert_eq!(state.status, SwarmStatus::Failed);
        assert_eq!(
            state.changes[0].refused.is_some(),
            refused,
            "{:?}",
            state.changes
        );
        assert!(state.task("x").is_none());
    }
}

#[test]
fn a_replan_ahead_of_its_result_waits_and_a_second_copy_changes_nothing() {
    let mut state = replanning();
    let early = machine::apply(
        &mut state,
        2,
        &replan_event(vec![task("x", &[])], Some("x")),
        now(),
    );
    assert!(early.ahead, "the result it answers is not applied yet");
    failing_with_replan(&mut state, 3);
    let once = machine::apply(
        &mut state,
        4,
        &replan_event(vec![task("x", &[])], Some("x")),
        now(),
    );
    assert!(once.changed);
    let twice = machine::apply(
        &mut state,
        5,
        &replan_event(vec![task("x", &[])], Some("x")),
        now(),
    );
    assert!(!twice.changed);
    assert_eq!(state.tasks.len(), 3);
}

#[test]
fn a_result_sent_with_a_replan_holds_nothing_when_the_swarm_may_not_grow() {
    let mut state = replanning();
    state.replan = false;
    failing_with_replan(&mut state, 2);
    assert!(!state.task("t").unwrap().replanning);
    assert_eq!(state.status, SwarmStatus::Failed);
}

#[test]
fn the_review_of_a_finished_mission_may_add_tasks_before_it_completes() {
    let mut d = deployment(vec![task("t", &[])]);
    d.plan.success_criteria = vec!["the answer is checked".into()];
    let (mut state, _) = machine::deploy("s1", &d, 1, now());
    state.replan = true;
    let last = |state: &mut Indexed, seq, id: &str| {
        machine::apply(
            state,
            seq,
            &Event::Result {
                seq,
                submission: Box::new(result(id, 1, 0, "done")),
                review: vec![],
                replan: true,
            },
            now(),
        )
    };
    last(&mut state, 2, "t");
    assert_eq!(status(&state, "t"), TaskStatus::Completed);
    assert_eq!(
        state.status,
        SwarmStatus::Running,
        "the end waits for the review"
    );

    let mut add = replan_event(vec![task("check", &["t"])], Some("check"));
    if let Event::Replan { replan } = &mut add {
        replan.task_id = "t".into();
    }
    let applied = machine::apply(&mut state, 3, &add, now());
    assert_eq!(assigned(&applied.commands), vec![("check".into(), 1, 0)]);
    assert!(state.changes[0].review);
    assert_eq!(
        state.changes[0].replaces, None,
        "nothing failed to stand in for"
    );

    // The last task again: a second review, which adds nothing.
    last(&mut state, 4, "check");
    assert_eq!(state.status, SwarmStatus::Running);
    let mut none = replan_event(vec![], None);
    if let Event::Replan { replan } = &mut none {
        replan.task_id = "check".into();
    }
    machine::apply(&mut state, 5, &none, now());
    assert_eq!(state.status, SwarmStatus::Completed);
    assert_eq!(state.changes.len(), 2);
}

#[test]
fn with_no_replans_left_a_finished_mission_completes_at_once() {
    let (mut state, _) = machine::deploy("s1", &deployment(vec![task("t", &[])]), 1, now());
    state.replan = true;
    state.limits.max_replans = 0;
    machine::apply(
        &mut state,
        2,
        &Event::Result {
            seq: 2,
            submission: Box::new(result("t", 1, 0, "done")),
            review: vec![],
            replan: true,
        },
        now(),
    );
    assert_eq!(state.status, SwarmStatus::Completed);
}

#[test]
fn a_child_ends_once_for_its_map_however_often_its_result_comes() {
    let (mut s, _) = machine::deploy("s1", &map_plan(), 1, now());
    submit(&mut s, 10, result("list", 1, 0, &list(3)));
    submit(&mut s, 11, result("m-0", 1, 0, "\"r0\""));
    // The same result again, under a later sequence: the map still waits
    // for its other two children.
    assert!(!submit(&mut s, 12, result("m-0", 1, 0, "\"r0\"")).changed);
    submit(&mut s, 13, result("m-1", 1, 0, "\"r1\""));
    assert_eq!(status(&s, "m"), TaskStatus::InProgress);
    let progress = s.task("m").unwrap().map.as_ref().unwrap().progress;
    assert_eq!(
        progress,
        Some(swarm_common::map::MapProgress {
            started: 3,
            completed: 2
        })
    );
    submit(&mut s, 14, result("m-2", 1, 0, "\"r2\""));
    assert_eq!(status(&s, "m"), TaskStatus::Completed);
}

#[test]
fn a_map_stored_before_its_progress_was_kept_counts_its_children_again() {
    let (mut s, _) = machine::deploy("s1", &map_plan(), 1, now());
    submit(&mut s, 10, result("list", 1, 0, &list(5)));
    submit(&mut s, 11, result("m-0", 1, 0, "\"r0\""));
    // As an older build stored it: no progress.
    let m = s.position("m").unwrap();
    s.tasks[m].map.as_mut().unwrap().progress = None;
    let out = submit(&mut s, 12, result("m-1", 1, 0, "\"r1\""));
    assert_eq!(
        ids(&out.commands),
        vec!["m-3"],
        "two out at a time, in order"
    );
    for (seq, k) in [(13, 2), (14, 3), (15, 4)] {
        submit(&mut s, seq, result(&format!("m-{k}"), 1, 0, "\"r\""));
    }
    assert_eq!(status(&s, "m"), TaskStatus::Completed);
}

#[test]
fn a_large_swarms_report_names_map_children_through_their_map() {
    let n = swarm_manager::report::LIST_EVERY_CHILD_UP_TO;
    let (mut s, _) = machine::deploy("s1", &map_plan(), 1, now());
    submit(&mut s, 10, result("list", 1, 0, &list(n)));
    let mut results = std::collections::HashMap::new();
    for k in 0..n {
        let id = format!("m-{k}");
        submit(&mut s, 11 + k as u64, result(&id, 1, 0, &format!("{k}")));
        results.insert(id, k.to_string());
    }
    assert_eq!(status(&s, "m"), TaskStatus::Completed);
    assert!(s.tasks.len() > n);
    let report = swarm_manager::report::build(&s, &results, 1 << 20, now());
    let ids: Vec<&str> = report
        .task_results
        .iter()
        .map(|t| t.task_id.as_str())
        .collect();
    assert_eq!(ids, vec!["list", "m", "reduce"]);
    let items: Vec<usize> = serde_json::from_str(&report.task_results[1].result).unwrap();
    assert_eq!(items, (0..n).collect::<Vec<_>>());
}
