//! Real agents end to end: the boss, manager and worker binaries talk to a
//! scripted language model ([`MockLlm`]) over the OpenAI and Anthropic wire
//! formats. Model planning with corrections, tool calls over several steps,
//! a gate's reason sent back, manager review with a revision, the model's
//! summary, a whole mission on Anthropic, budgets, approvals, input requests
//! and provider faults, each asserted on the final report and on what the
//! model was sent.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use serde_json::{Value, json};
use swarm_client::client::Update;
use swarm_common::{FinalReport, SwarmStatus, TaskStatus};
use swarm_testkit::{Cluster, Match, MockLlm, Recorded, Reply, Rule};

const MODEL: &str = "gpt-4o-mini";
/// The persona prompt of `common::plan`'s worker, which only the worker's
/// requests carry.
const PERSONA: &str = "You test Swarm.";
/// What the boss's planning prompt says.
const PLANNER: &str = "You are the planner of a Swarm";
/// What the manager's review prompt says.
const REVIEWER: &str = "reviewing a worker's result";
/// What the manager's summary prompt says.
const SUMMARIZER: &str = "final report of a Swarm mission";
/// Every wait in this file ends within this.
const WAIT: Duration = Duration::from_secs(60);

/// Which roles use the mock as their provider.
#[derive(Clone, Copy)]
enum Roles {
    Boss,
    Manager,
    Worker,
}

impl Roles {
    fn prefix(self) -> &'static str {
        match self {
            Roles::Boss => "BOSS",
            Roles::Manager => "MANAGER",
            Roles::Worker => "WORKER",
        }
    }
}

/// A cluster of one boss, one manager and one worker in which `roles` ask
/// `llm` over the OpenAI wire format (the others stay offline), with
/// `extra` environment. [`cluster_with`] takes the provider's environment;
/// with no `roles` it applies to every role.
async fn cluster(
    llm: &MockLlm,
    roles: &[Roles],
    extra: &[(&str, &str)],
    workspace: &std::path::Path,
) -> Cluster {
    cluster_with(llm.openai_env(MODEL), roles, extra, workspace).await
}

async fn cluster_with(
    provider_env: Vec<(String, String)>,
    roles: &[Roles],
    extra: &[(&str, &str)],
    workspace: &std::path::Path,
) -> Cluster {
    let mut builder = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .workspace(workspace);
    let mut kind = String::new();
    for (k, v) in provider_env {
        // With no roles named, `SWARM_PROVIDER` stays as it is: every role.
        if k == "SWARM_PROVIDER" && !roles.is_empty() {
            kind = v;
        } else {
            builder = builder.env(k, v);
        }
    }
    for role in roles {
        builder = builder.env(format!("SWARM_{}_PROVIDER", role.prefix()), kind.clone());
    }
    for (k, v) in extra {
        builder = builder.env(*k, *v);
    }
    builder.start().await.expect("the cluster starts")
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("notes.txt"),
        "alpha beta gamma delta epsilon\n",
    )
    .unwrap();
    dir
}

/// Submits a mission given as JSON (so fields the typed request may not
/// have yet, such as budgets, travel as they are) and returns the swarm id.
async fn submit_json(nc: &async_nats::Client, mission: &Value) -> String {
    let reply = common::raw_request(nc, None, serde_json::to_vec(mission).unwrap()).await;
    let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
    reply["swarm_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the mission was refused: {reply}"))
        .to_string()
}

/// A mission with the explicit plan of `common::plan` (persona `w`,
/// [`PERSONA`], every tool) and these tasks.
fn planned(text: &str, tasks: Vec<swarm_common::TaskDefinition>) -> Value {
    json!({"mission": text, "plan": serde_json::to_value(common::plan(tasks)).unwrap()})
}

/// The swarm's final report; on failure, the logs and what the model saw.
async fn report(
    cluster: &Cluster,
    llm: &MockLlm,
    nc: &async_nats::Client,
    id: &str,
) -> FinalReport {
    match swarm_client::client::watch(nc, id, WAIT, |_| {}).await {
        Ok(r) => r,
        Err(e) => panic!(
            "{e:#}\n--- model requests ---\n{}\n{}",
            llm.describe_requests(),
            cluster.log_tails()
        ),
    }
}

fn worker_rule(name: &str) -> Rule {
    Rule::new(name, Match::new().system_contains(PERSONA))
}

fn only_task(report: &FinalReport) -> &swarm_common::TaskOutcome {
    assert_eq!(report.task_results.len(), 1, "{report:#?}");
    &report.task_results[0]
}

/// Everything a report says about why it ended: summary, insights and
/// every task's error, lower-cased.
fn reasons(report: &FinalReport) -> String {
    let mut out = report.summary.clone();
    for i in &report.insights {
        out.push('\n');
        out.push_str(i);
    }
    for t in &report.task_results {
        if let Some(e) = &t.error {
            out.push('\n');
            out.push_str(e);
        }
    }
    out.to_lowercase()
}

// ---------------------------------------------------------------- the boss

fn model_plan(tools: &[&str]) -> Value {
    json!({
        "manager_directive": "Compute the product and accept a numeric result.",
        "workers": [{"name": "calculator", "role": "arithmetic", "system_prompt": "You compute.",
                     "tools": tools}],
        "tasks": [{"task_id": "product", "title": "Multiply",
                   "description": common::tool("calc", json!({"expression": "6*7"})),
                   "assigned_to": "calculator"}],
        "success_criteria": ["the product is computed"]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_fails_validation_is_corrected_on_the_next_reply() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("planner", Match::new().system_contains(PLANNER))
            .reply(Reply::json_text(&model_plan(&["teleport"])))
            .reply(Reply::text(format!(
                "Here is the corrected plan:\n```json\n{}\n```",
                model_plan(&["calc"])
            ))),
    );
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Boss], &[], ws.path()).await;
    let nc = cluster.client().await;
    let id = submit_json(&nc, &json!({"mission": "What is six times seven?"})).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let t = only_task(&report);
    assert_eq!(t.task_id, "product");
    assert!(t.result.contains("42"), "{}", t.result);

    let asked = llm.requests_for("planner");
    assert_eq!(asked.len(), 2, "{}", llm.describe_requests());
    assert!(
        asked[0]
            .last_user_text()
            .contains("What is six times seven?")
    );
    assert!(
        asked[0].system().contains("calc"),
        "the prompt lists the tools"
    );
    // The second request carries the refused plan and why it was refused.
    let correction = asked[1].last_user_text();
    assert!(
        correction.contains("teleport") && correction.contains("cannot be used"),
        "{correction}"
    );
    assert!(
        asked[1].contains("\"teleport\""),
        "the refused reply is sent back"
    );
    // The boss records the plan right after it deploys the swarm, so a
    // swarm of one quick task may report before that write lands.
    let deadline = tokio::time::Instant::now() + WAIT;
    let plan = loop {
        let record = swarm_client::client::mission(&nc, &id)
            .await
            .unwrap()
            .unwrap();
        if let Some(plan) = record.plan {
            break plan;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the plan is recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(plan.planner, format!("openai:{MODEL}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_never_validates_fails_the_mission_with_a_clear_error() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("planner", Match::new().system_contains(PLANNER))
            .then_always(Reply::text("I would rather write a poem.")),
    );
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Boss], &[], ws.path()).await;
    let nc = cluster.client().await;
    let id = submit_json(&nc, &json!({"mission": "Plan something"})).await;
    let err = swarm_client::client::watch(&nc, &id, WAIT, |_| {})
        .await
        .expect_err("the mission fails before it starts");
    let text = format!("{err:#}");
    assert!(
        text.contains("the mission failed before it started") && text.contains("plan"),
        "{text}\n{}",
        cluster.log_tails()
    );
    let asked = llm.requests_for("planner").len();
    assert!(
        (2..=10).contains(&asked),
        "bounded corrections, {asked} asked"
    );
    // Nothing was deployed.
    assert!(
        common::messages::<FinalReport>(&nc, &swarm_common::subjects::report(&id))
            .await
            .is_empty()
    );
}

// ---------------------------------------------------------------- the worker

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_calls_tools_over_several_steps_and_gets_each_result_back() {
    let llm = MockLlm::start().await;
    llm.add(
        worker_rule("worker")
            .reply(Reply::tool_call("read_file", json!({"path": "notes.txt"})).usage(100, 10))
            .reply(
                Reply::tool_calls(vec![
                    (
                        "count".into(),
                        json!({"text": "alpha beta gamma delta epsilon"}),
                    ),
                    ("calc".into(), json!({"expression": "6*7"})),
                ])
                .usage(200, 20),
            )
            .reply(Reply::text("5 words; 6*7 = 42").usage(300, 30)),
    );
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Worker], &[], ws.path()).await;
    let nc = cluster.client().await;
    let mission = planned(
        "Read and compute",
        vec![common::task(
            "t1",
            "Read notes.txt, count its words and compute 6*7",
            &[],
        )],
    );
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let t = only_task(&report);
    assert_eq!(t.result, "5 words; 6*7 = 42");

    let asked = llm.requests_for("worker");
    assert_eq!(asked.len(), 3, "{}", llm.describe_requests());
    for r in &asked {
        assert_eq!(r.path, "/v1/chat/completions");
        assert_eq!(r.headers["authorization"], "Bearer test");
        assert_eq!(r.body["model"], MODEL);
    }
    assert!(asked[0].system().contains(PERSONA));
    assert!(
        asked[0]
            .last_user_text()
            .contains("Read notes.txt, count its words")
    );
    let offered = asked[0].tool_names();
    for tool in ["read_file", "count", "calc", "return_result"] {
        assert!(
            offered.iter().any(|t| t == tool),
            "{tool} offered: {offered:?}"
        );
    }
    assert!(asked[0].tool_results().is_empty());
    // Each step's results come back in the next request, tied to the calls.
    let first = asked[1].tool_results();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].1, "alpha beta gamma delta epsilon\n");
    assert_eq!(
        asked[1].tool_calls()[0],
        (first[0].0.clone(), "read_file".into())
    );
    let second = asked[2].tool_results();
    assert_eq!(second.len(), 3, "{second:?}");
    assert!(second[1].1.contains("\"words\":5"), "{second:?}");
    assert!(second[2].1.contains("42"), "{second:?}");
    let calls: Vec<String> = asked[2].tool_calls().into_iter().map(|c| c.1).collect();
    assert_eq!(calls, ["read_file", "count", "calc"]);

    // Token usage reaches the report.
    assert_eq!(
        report.metrics.get("input_tokens"),
        Some(&600.0),
        "{:?}",
        report.metrics
    );
    assert_eq!(
        report.metrics.get("output_tokens"),
        Some(&60.0),
        "{:?}",
        report.metrics
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_worker_uses_tools_over_the_messages_api() {
    let llm = MockLlm::start().await;
    llm.add(
        worker_rule("worker")
            .reply(Reply::tool_call(
                "calc",
                json!({"expression": "(17 * 23) + 2^10"}),
            ))
            .reply(Reply::text("1415")),
    );
    let ws = workspace();
    let cluster = cluster_with(
        llm.anthropic_env("claude-sonnet-4-5"),
        &[Roles::Worker],
        &[],
        ws.path(),
    )
    .await;
    let nc = cluster.client().await;
    let mission = planned(
        "Arithmetic",
        vec![common::task("t1", "Compute (17 * 23) + 2^10", &[])],
    );
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(only_task(&report).result, "1415");
    let asked = llm.requests_for("worker");
    assert_eq!(asked.len(), 2, "{}", llm.describe_requests());
    assert_eq!(asked[0].path, "/v1/messages");
    assert_eq!(asked[0].headers["x-api-key"], "test");
    assert!(asked[0].headers.contains_key("anthropic-version"));
    assert!(asked[0].body["system"].as_str().unwrap().contains(PERSONA));
    let results = asked[1].tool_results();
    assert_eq!(results.len(), 1);
    assert!(results[0].1.contains("1415"), "{results:?}");
    assert_eq!(asked[1].tool_calls()[0].0, results[0].0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_gate_sends_its_reason_to_the_model_which_corrects_the_result() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new(
            "corrected",
            Match::new()
                .system_contains(PERSONA)
                .last_user_contains("did not pass these quality checks"),
        )
        .then_always(Reply::text("42")),
    );
    llm.add(worker_rule("worker").then_always(Reply::text("forty-two")));
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Worker], &[], ws.path()).await;
    let nc = cluster.client().await;
    let mut mission = planned(
        "Gated",
        vec![common::task("t1", "What is six times seven?", &[])],
    );
    mission["plan"]["tasks"][0]["gates"] = json!([
        {"kind": "regex", "pattern": "^[0-9]+$", "description": "digits only"}
    ]);
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let t = only_task(&report);
    assert_eq!(t.result, "42");
    assert_eq!(
        llm.requests_for("worker").len(),
        1,
        "{}",
        llm.describe_requests()
    );
    let corrected = llm.requests_for("corrected");
    assert_eq!(corrected.len(), 1, "{}", llm.describe_requests());
    let feedback = corrected[0].last_user_text();
    assert!(
        feedback.contains("^[0-9]+$") && feedback.contains("digits only"),
        "the gate's reason is sent back: {feedback}"
    );
    // The refused answer is in the conversation too.
    assert!(corrected[0].contains("forty-two"));
    assert!(
        t.gate_verdicts
            .iter()
            .any(|v| v.gate.starts_with("regex") && v.passed),
        "the manager's gates passed the corrected result: {:?}",
        t.gate_verdicts
    );
}

// ---------------------------------------------------------------- the manager

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_review_asks_for_one_revision_with_the_feedback_in_the_workers_next_request() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("reviewer", Match::new().system_contains(REVIEWER))
            .reply(Reply::json_text(
                &json!({"approved": false, "feedback": "Say it in French."}),
            ))
            .then_always(Reply::json_text(&json!({"approved": true, "feedback": ""}))),
    );
    llm.add(
        Rule::new("summarizer", Match::new().system_contains(SUMMARIZER)).then_always(
            Reply::json_text(&json!({
                "summary": "MOCK SUMMARY: the greeting was written in French.",
                "insights": ["One revision was needed."]
            })),
        ),
    );
    // The revised run is told the feedback; rules are tried in order.
    llm.add(
        Rule::new(
            "revised",
            Match::new()
                .system_contains(PERSONA)
                .last_user_contains("Say it in French."),
        )
        .then_always(Reply::text("bonjour")),
    );
    llm.add(worker_rule("worker").then_always(Reply::text("hello")));
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Manager, Roles::Worker], &[], ws.path()).await;
    let nc = cluster.client().await;
    let mission = planned("Greet", vec![common::task("t1", "Write a greeting", &[])]);
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let t = only_task(&report);
    assert_eq!(t.result, "bonjour");
    assert_eq!(t.revisions, 1, "{t:#?}");

    assert_eq!(
        llm.requests_for("worker").len(),
        1,
        "{}",
        llm.describe_requests()
    );
    assert_eq!(llm.requests_for("revised").len(), 1);
    let reviews = llm.requests_for("reviewer");
    assert_eq!(reviews.len(), 2, "{}", llm.describe_requests());
    assert!(reviews[0].last_user_text().contains("hello"));
    assert!(reviews[0].last_user_text().contains("Write a greeting"));
    assert!(reviews[1].last_user_text().contains("bonjour"));

    assert_eq!(
        report.summary,
        "MOCK SUMMARY: the greeting was written in French."
    );
    assert_eq!(report.insights, ["One revision was needed."]);
    let summarized = llm.requests_for("summarizer");
    assert_eq!(summarized.len(), 1);
    assert!(summarized[0].last_user_text().contains("bonjour"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_slower_than_the_ack_waits_keeps_its_event_and_its_assignment_and_runs_once() {
    let llm = MockLlm::start().await;
    // The model takes 4.5 s to review; the manager's ack_wait is 2 s and the
    // workers' 3 s, so only the manager's progress acks keep the result from
    // being delivered (and reviewed) again, and the assignment it answers
    // from coming back to a worker.
    llm.add(
        Rule::new("reviewer", Match::new().system_contains(REVIEWER)).then_always(
            Reply::json_text(&json!({"approved": true, "feedback": ""}))
                .after(Duration::from_millis(4500)),
        ),
    );
    let ws = workspace();
    let cluster = cluster(
        &llm,
        &[Roles::Manager],
        &[
            ("SWARM_MANAGER_ACK_WAIT", "2"),
            ("SWARM_WORKER_ACK_WAIT", "3"),
        ],
        ws.path(),
    )
    .await;
    let nc = cluster.client().await;
    let mission = planned(
        "Slow review",
        vec![common::task("t1", &common::echo("ping"), &[])],
    );
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(
        llm.requests_for("reviewer").len(),
        1,
        "{}",
        llm.describe_requests()
    );
    // The manager logs every event it gets a second time.
    let log = std::fs::read_to_string(cluster.dir().join("logs").join("manager-1.log")).unwrap();
    assert!(
        !log.contains("taking over a redelivered event"),
        "an event was redelivered mid-review:\n{log}"
    );
    let info = common::no_assignment_pending(&nc, "general", Duration::from_secs(5)).await;
    assert_eq!(
        info.delivered.consumer_sequence, 1,
        "the assignment came back mid-review: {info:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_the_model_cannot_give_falls_back_to_the_deterministic_one() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("reviewer", Match::new().system_contains(REVIEWER))
            .then_always(Reply::json_text(&json!({"approved": true}))),
    );
    // No summarizer rule: the fallback's 400 answers the summary request.
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Manager], &[], ws.path()).await;
    let nc = cluster.client().await;
    let mission = planned("Echo", vec![common::task("t1", &common::echo("ping"), &[])]);
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert!(only_task(&report).result.contains("ping"));
    assert!(!report.summary.trim().is_empty());
    assert_eq!(
        llm.requests_for("reviewer").len(),
        1,
        "{}",
        llm.describe_requests()
    );
    assert!(
        llm.requests()
            .iter()
            .any(|r| r.system().contains(SUMMARIZER)),
        "the summary was asked for: {}",
        llm.describe_requests()
    );
}

// ---------------------------------------------------------------- budgets

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_over_its_token_budget_ends_failed_naming_the_budget() {
    // One call of 120 tokens is past 100.
    over_budget("max_tokens", json!(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_over_its_cost_budget_ends_failed_naming_the_budget() {
    // gpt-4o-mini costs $0.15 and $0.60 per million tokens: one call of
    // 80 + 40 tokens costs $0.000036.
    over_budget("max_cost_usd", json!(0.00002)).await;
}

/// A mission with `field: limit` whose worker's model reports 80 input and
/// 40 output tokens a call ends Failed, naming the budget.
async fn over_budget(field: &str, limit: Value) {
    let llm = MockLlm::start().await;
    llm.add(
        worker_rule("worker")
            .reply(Reply::tool_call("calc", json!({"expression": "1+1"})).usage(80, 40))
            .then_always(Reply::text("done").usage(80, 40)),
    );
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Worker], &[], ws.path()).await;
    let nc = cluster.client().await;
    let mut mission = planned(
        "Spend tokens",
        vec![
            common::task("t1", "Add one and one", &[]),
            common::task("t2", "Add two and two", &["t1"]),
        ],
    );
    mission[field] = limit;
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Failed, "{report:#?}");
    assert!(reasons(&report).contains("budget"), "{report:#?}");
    assert!(
        report
            .task_results
            .iter()
            .any(|t| t.status != TaskStatus::Completed),
        "{report:#?}"
    );
    // The budget stopped the spending: at most one call past it.
    assert!(
        llm.requests_for("worker").len() <= 3,
        "{}",
        llm.describe_requests()
    );
}

// ---------------------------------------------------------------- approvals

/// Waits for an approval request that `found` accepts (pending ones only
/// unless `all`), failing with `what` after [`WAIT`].
async fn approval_where(
    nc: &async_nats::Client,
    all: bool,
    what: &str,
    found: impl Fn(&swarm_common::approval::ApprovalRecord) -> bool,
) -> swarm_common::approval::ApprovalRecord {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let listed = swarm_client::client::approvals(nc, all).await.unwrap();
        if let Some(r) = listed.into_iter().find(&found) {
            return r;
        }
        assert!(tokio::time::Instant::now() < deadline, "no {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for a pending approval whose arguments mention `marker`.
async fn pending_approval(
    nc: &async_nats::Client,
    marker: &str,
) -> swarm_common::approval::ApprovalRecord {
    approval_where(
        nc,
        false,
        &format!("pending approval mentioning {marker}"),
        |r| r.arguments.to_string().contains(marker),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_call_waits_for_approval_and_a_denied_one_tells_the_model() {
    let llm = MockLlm::start().await;
    // Markers only the task descriptions carry: task b's request also quotes
    // task a's result.
    for (task, word) in [
        ("FIRST-SHELL", "ran-approved"),
        ("SECOND-SHELL", "ran-denied"),
    ] {
        llm.add(
            Rule::new(
                task,
                Match::new()
                    .system_contains(PERSONA)
                    .last_user_contains(task),
            )
            .reply(Reply::tool_call(
                "shell",
                json!({"command": format!("echo {word}")}),
            ))
            .then_always(Reply::text(format!("{word}: done"))),
        );
    }
    let ws = workspace();
    let cluster = cluster(
        &llm,
        &[Roles::Worker],
        &[("SWARM_TOOL_SHELL", "true")],
        ws.path(),
    )
    .await;
    let nc = cluster.client().await;
    let mission = planned(
        "Use the shell",
        vec![
            common::task("a", "FIRST-SHELL: print a word with the shell", &[]),
            common::task(
                "b",
                "SECOND-SHELL: print another word with the shell",
                &["a"],
            ),
        ],
    );
    let id = submit_json(&nc, &mission).await;

    let first = pending_approval(&nc, "ran-approved").await;
    assert_eq!(first.tool, "shell");
    assert_eq!(first.swarm_id.as_deref(), Some(id.as_str()));
    assert_eq!(first.task_id.as_deref(), Some("a"));
    // The worker waits: the model is not asked again until the decision.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        llm.requests_for("FIRST-SHELL").len(),
        1,
        "{}",
        llm.describe_requests()
    );
    swarm_client::client::decide(&nc, &first.approval_id, true, "tester", None)
        .await
        .unwrap();

    let second = pending_approval(&nc, "ran-denied").await;
    swarm_client::client::decide(
        &nc,
        &second.approval_id,
        false,
        "tester",
        Some("not today".into()),
    )
    .await
    .unwrap();
    let report = report(&cluster, &llm, &nc, &id).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");

    let a = llm.requests_for("FIRST-SHELL");
    assert_eq!(a.len(), 2, "{}", llm.describe_requests());
    let out = &a[1].tool_results()[0].1;
    assert!(
        out.contains("ran-approved"),
        "the approved command ran: {out}"
    );
    let b = llm.requests_for("SECOND-SHELL");
    // The denial goes back to the model, and its answer does not make the
    // refused call good: that attempt fails, and the manager's revision
    // asks again with the failure as feedback (where this model answers
    // without the shell).
    assert_eq!(b.len(), 3, "{}", llm.describe_requests());
    let out = &b[1].tool_results()[0].1;
    assert!(
        out.contains("denied") && out.contains("not today") && !out.contains("ran-denied\n"),
        "the model is told of the denial: {out}"
    );
    let feedback = b[2].last_user_text();
    assert!(
        feedback.contains("The previous version failed (tool_failed)")
            && feedback.contains("not today"),
        "{feedback}"
    );
    let task_b = report
        .task_results
        .iter()
        .find(|t| t.task_id == "b")
        .unwrap();
    assert_eq!(task_b.revisions, 1);
}

/// The approval request `approval_id` once it is no longer pending.
async fn decided_approval(
    nc: &async_nats::Client,
    approval_id: &str,
) -> swarm_common::approval::ApprovalRecord {
    approval_where(nc, true, &format!("decision on {approval_id}"), |r| {
        r.approval_id == approval_id && r.status != swarm_common::approval::ApprovalStatus::Pending
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swarm_that_ends_closes_its_pending_approvals() {
    use swarm_common::approval::ApprovalStatus;
    let llm = MockLlm::start().await;
    llm.add(worker_rule("shell").then_always(Reply::tool_call(
        "shell",
        json!({"command": "echo never-run"}),
    )));
    let ws = workspace();
    let cluster = cluster(
        &llm,
        &[Roles::Worker],
        &[("SWARM_TOOL_SHELL", "true")],
        ws.path(),
    )
    .await;
    let nc = cluster.client().await;

    // Cancelled by a person while the call waits.
    let id = submit_json(
        &nc,
        &planned("Use the shell", vec![common::task("a", "clean up", &[])]),
    )
    .await;
    let pending = pending_approval(&nc, "never-run").await;
    swarm_client::client::cancel(&nc, &id, "changed plans")
        .await
        .unwrap();
    let cancelled = report(&cluster, &llm, &nc, &id).await;
    assert_eq!(cancelled.overall_status, SwarmStatus::Cancelled);
    let closed = decided_approval(&nc, &pending.approval_id).await;
    assert_eq!(closed.status, ApprovalStatus::Expired);
    assert_eq!(
        closed.reason.as_deref(),
        Some("the swarm was cancelled: changed plans")
    );
    let refused = swarm_client::client::decide(&nc, &pending.approval_id, true, "tester", None)
        .await
        .unwrap_err();
    assert!(format!("{refused:#}").contains("Expired"), "{refused:#}");

    // Ended by its deadline while the call waits: the manager tells the
    // workers, which close it the same way.
    let mut mission = planned("Use the shell", vec![common::task("b", "clean up", &[])]);
    mission["max_execution_seconds"] = json!(3);
    let id = submit_json(&nc, &mission).await;
    let pending = loop {
        let r = pending_approval(&nc, "never-run").await;
        if r.swarm_id.as_deref() == Some(id.as_str()) {
            break r;
        }
    };
    let timed_out = report(&cluster, &llm, &nc, &id).await;
    assert_eq!(timed_out.overall_status, SwarmStatus::TimedOut);
    let closed = decided_approval(&nc, &pending.approval_id).await;
    assert_eq!(closed.status, ApprovalStatus::Expired);
    assert_eq!(closed.reason.as_deref(), Some("the swarm ended: TimedOut"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_closes_the_question_a_task_waits_on() {
    let llm = MockLlm::start().await;
    llm.add(worker_rule("asking").then_always(Reply::tool_call(
        "request_input",
        json!({"question": "Which colour?"}),
    )));
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Worker], &[], ws.path()).await;
    let nc = cluster.client().await;
    let id = submit_json(
        &nc,
        &planned("Paint", vec![common::task("paint", "Paint the shed", &[])]),
    )
    .await;
    let js = async_nats::jetstream::new(nc.clone());
    let inputs = js
        .get_key_value(swarm_common::subjects::INPUTS_BUCKET)
        .await
        .unwrap();
    let key = format!("{id}.paint");
    let question = |closed: bool| {
        let inputs = inputs.clone();
        let key = key.clone();
        async move {
            let Some(bytes) = inputs.get(&key).await.map_err(|e| e.to_string())? else {
                return Err("no question yet".to_string());
            };
            let r: swarm_common::approval::InputRecord =
                swarm_common::Codec::MsgPack.decode(&bytes).unwrap();
            if r.closed.is_some() == closed {
                Ok(r)
            } else {
                Err(format!("closed: {:?}", r.closed))
            }
        }
    };
    common::eventually(WAIT, Duration::from_millis(100), "the question", || {
        question(false)
    })
    .await;
    swarm_client::client::cancel(&nc, &id, "no paint left")
        .await
        .unwrap();
    let closed = common::eventually(
        WAIT,
        Duration::from_millis(100),
        "the closed question",
        || question(true),
    )
    .await;
    assert_eq!(
        closed.closed.as_deref(),
        Some("the swarm was cancelled: no paint left")
    );
    assert_eq!(closed.answer, None);
    let report = report(&cluster, &llm, &nc, &id).await;
    assert_eq!(report.overall_status, SwarmStatus::Cancelled);
}

// ---------------------------------------------------------------- input requests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_request_parks_the_task_until_a_person_answers() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new(
            "answered",
            Match::new()
                .system_contains(PERSONA)
                .last_user_contains("A person answered"),
        )
        .then_always(Reply::text("painted it blue")),
    );
    llm.add(worker_rule("asking").then_always(Reply::tool_call(
        "request_input",
        json!({"question": "Which colour should the shed be?"}),
    )));
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Worker], &[], ws.path()).await;
    let nc = cluster.client().await;
    let mission = planned("Paint", vec![common::task("paint", "Paint the shed", &[])]);
    let id = submit_json(&nc, &mission).await;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = {
        let nc = nc.clone();
        let id = id.clone();
        tokio::spawn(async move {
            swarm_client::client::watch(&nc, &id, WAIT, move |u| {
                let _ = tx.send(u.clone());
            })
            .await
        })
    };
    let parked = tokio::time::timeout(WAIT, async {
        while let Some(u) = rx.recv().await {
            if let Update::Progress(p) = u
                && p.status == TaskStatus::InputRequired
            {
                return p;
            }
        }
        panic!("the watch ended before the task asked for input");
    })
    .await
    .unwrap_or_else(|_| panic!("no InputRequired progress\n{}", cluster.log_tails()));
    assert_eq!(parked.task_id, "paint");
    assert!(
        parked.message.contains("Which colour should the shed be?"),
        "{parked:?}"
    );
    assert_eq!(
        llm.requests_for("asking").len(),
        1,
        "the task waits without asking again"
    );

    swarm_client::client::answer(&nc, &id, "paint", "blue", "tester")
        .await
        .unwrap();
    let report = watcher.await.unwrap().unwrap_or_else(|e| {
        panic!(
            "{e:#}\n{}\n{}",
            llm.describe_requests(),
            cluster.log_tails()
        )
    });
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(only_task(&report).result, "painted it blue");
    let resumed = llm.requests_for("answered");
    assert_eq!(resumed.len(), 1, "{}", llm.describe_requests());
    let text = resumed[0].last_user_text();
    assert!(
        text.contains("blue") && text.contains("Which colour"),
        "{text}"
    );
}

// ---------------------------------------------------------------- every role

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_mission_on_anthropic_is_planned_worked_reviewed_and_summarized() {
    const COUNTER: &str = "You count words.";
    let llm = MockLlm::start().await;
    let plan = json!({
        "manager_directive": "Count the words and accept an exact count.",
        "workers": [{"name": "counter", "role": "word counter", "system_prompt": COUNTER,
                     "tools": ["read_file", "count"]}],
        "tasks": [{"task_id": "words", "title": "Count words",
                   "description": "Count the words in notes.txt", "assigned_to": "counter"}]
    });
    llm.add(
        Rule::new("planner", Match::new().system_contains(PLANNER)).reply(Reply::json_text(&plan)),
    );
    llm.add(
        Rule::new("reviewer", Match::new().system_contains(REVIEWER))
            .then_always(Reply::json_text(&json!({"approved": true}))),
    );
    llm.add(
        Rule::new("summarizer", Match::new().system_contains(SUMMARIZER)).then_always(
            Reply::json_text(&json!({"summary": "MOCK: notes.txt has 5 words.", "insights": []})),
        ),
    );
    llm.add(
        Rule::new("worker", Match::new().system_contains(COUNTER))
            .reply(Reply::tool_call("read_file", json!({"path": "notes.txt"})))
            .reply(Reply::text("5 words")),
    );
    let ws = workspace();
    let model = "claude-sonnet-4-5";
    let cluster = cluster_with(llm.anthropic_env(model), &[], &[], ws.path()).await;
    let nc = cluster.client().await;
    let id = submit_json(&nc, &json!({"mission": "How many words are in notes.txt?"})).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let t = only_task(&report);
    assert_eq!(t.result, "5 words");
    assert_eq!(t.provider, format!("anthropic:{model}"));
    assert_eq!(report.summary, "MOCK: notes.txt has 5 words.");
    for (rule, calls) in [
        ("planner", 1),
        ("worker", 2),
        ("reviewer", 1),
        ("summarizer", 1),
    ] {
        assert_eq!(
            llm.requests_for(rule).len(),
            calls,
            "{rule}: {}",
            llm.describe_requests()
        );
    }
    for r in llm.requests() {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.body["model"], model);
        assert!(
            r.body["system"].is_string(),
            "the system prompt is `system`"
        );
    }
    let worker = llm.requests_for("worker");
    assert_eq!(
        worker[1].tool_results()[0].1,
        "alpha beta gamma delta epsilon\n"
    );
    let offered = worker[0].tool_names();
    assert!(
        offered.contains(&"read_file".to_string()) && !offered.contains(&"calc".to_string()),
        "the persona's tools only: {offered:?}"
    );
}

// ---------------------------------------------------------------- provider faults

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_server_errors_are_retried_honouring_retry_after() {
    let llm = MockLlm::start().await;
    llm.add(worker_rule("worker").replies([
        Reply::rate_limited(1),
        Reply::status(500, "the mock is overloaded"),
        Reply::text("recovered"),
    ]));
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Worker], &[], ws.path()).await;
    let nc = cluster.client().await;
    let mission = planned("Retry", vec![common::task("t1", "Say something", &[])]);
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(only_task(&report).result, "recovered");
    let asked: Vec<Recorded> = llm.requests_for("worker");
    assert_eq!(asked.len(), 3, "{}", llm.describe_requests());
    let waited = asked[1].at.duration_since(asked[0].at);
    assert!(
        waited >= Duration::from_millis(900),
        "Retry-After: 1 honoured, waited {waited:?}"
    );
    // The retries send the same request.
    assert_eq!(asked[0].body, asked[1].body);
    assert_eq!(asked[1].body, asked[2].body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_reply_fails_the_task_with_a_clear_error() {
    let llm = MockLlm::start().await;
    llm.add(worker_rule("worker").then_always(Reply::malformed()));
    let ws = workspace();
    let cluster = cluster(&llm, &[Roles::Worker], &[], ws.path()).await;
    let nc = cluster.client().await;
    let mission = planned("Break", vec![common::task("t1", "Say something", &[])]);
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Failed, "{report:#?}");
    let t = only_task(&report);
    assert_eq!(t.status, TaskStatus::Failed);
    let error = t.error.clone().unwrap_or_default();
    assert!(
        error.contains("not JSON") || error.contains("invalid response"),
        "{error}"
    );
    assert!(
        llm.requests_for("worker").len() <= 10,
        "{}",
        llm.describe_requests()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_never_answers_times_out_instead_of_hanging() {
    let llm = MockLlm::start().await;
    llm.add(worker_rule("worker").then_always(Reply::Hang));
    let ws = workspace();
    let cluster = cluster(
        &llm,
        &[Roles::Worker],
        &[
            ("SWARM_PROVIDER_TIMEOUT", "1"),
            ("SWARM_PROVIDER_MAX_RETRIES", "1"),
        ],
        ws.path(),
    )
    .await;
    let nc = cluster.client().await;
    let mission = planned("Wait", vec![common::task("t1", "Say something", &[])]);
    let id = submit_json(&nc, &mission).await;
    let report = report(&cluster, &llm, &nc, &id).await;

    assert_eq!(report.overall_status, SwarmStatus::Failed, "{report:#?}");
    let error = only_task(&report).error.clone().unwrap_or_default();
    assert!(error.contains("timed out"), "{error}");
}
