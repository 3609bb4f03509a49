//! Tests of the agent loop with the offline provider and scripted providers.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::budget::Budget;
use crate::offline::OfflineProvider;
use crate::provider::CompletionResponse;
use crate::task::ContextItem;

fn persona(tools: &[&str]) -> WorkerDeploymentPlan {
    WorkerDeploymentPlan {
        name: "tester".into(),
        role: "Tests things".into(),
        system_prompt: "You test.".into(),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        collaborators: vec![],
        pool: "general".into(),
        a2a_url: None,
        a2a_credential: None,
        skill: None,
    }
}

fn task(description: &str) -> AgentTask {
    AgentTask {
        task_id: "t1".into(),
        title: "A task".into(),
        description: description.into(),
        persona: persona(&[]),
        context: vec![],
        feedback: vec![],
        max_steps: 8,
        max_result_bytes: 64 * 1024,
    }
}

fn workspace() -> (tempfile::TempDir, ToolRegistry) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("notes.txt"),
        "the quick brown fox\njumps over the lazy dog\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(dir.path().join("docs/a.md"), "# A\nTODO: write\n").unwrap();
    let tools = ToolRegistry::builtin(dir.path());
    (dir, tools)
}

/// A provider that plays back replies and records what it was asked.
struct Scripted {
    replies: Mutex<Vec<Result<CompletionResponse, ProviderError>>>,
    requests: Mutex<Vec<CompletionRequest>>,
}

impl Scripted {
    fn new(mut replies: Vec<Result<CompletionResponse, ProviderError>>) -> Self {
        replies.reverse();
        Scripted {
            replies: Mutex::new(replies),
            requests: Mutex::new(Vec::new()),
        }
    }

    fn calls(calls: &[(&str, serde_json::Value)]) -> Result<CompletionResponse, ProviderError> {
        Ok(CompletionResponse {
            content: String::new(),
            tool_calls: calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| ToolCall {
                    id: format!("c{i}"),
                    name: name.to_string(),
                    arguments: args.clone(),
                })
                .collect(),
            usage: Usage {
                input_tokens: 10,
                output_tokens: 2,
            },
            finish_reason: None,
        })
    }

    fn answer(text: &str) -> Result<CompletionResponse, ProviderError> {
        Ok(CompletionResponse {
            content: text.into(),
            tool_calls: vec![],
            usage: Usage {
                input_tokens: 20,
                output_tokens: 5,
            },
            finish_reason: None,
        })
    }
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn complete(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        self.requests.lock().unwrap().push(request);
        self.replies
            .lock()
            .unwrap()
            .pop()
            .unwrap_or_else(|| Err(ProviderError::InvalidResponse("script ended".into())))
    }
}

fn metric(outcome: &AgentOutcome, name: &str) -> f64 {
    outcome.metrics[name]
}

#[tokio::test]
async fn offline_counts_the_words_of_a_real_file() {
    let (_dir, tools) = workspace();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let outcome = run_task(
        &OfflineProvider::new(),
        &tools,
        &task("count the words in notes.txt"),
        Some(&tx),
    )
    .await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{:?}", outcome.error);
    assert_eq!(
        outcome.result,
        "[offline provider] count of notes.txt: 9 words, 2 lines, 44 characters, 44 bytes"
    );
    assert_eq!(outcome.provider, "offline");
    assert_eq!(outcome.steps.len(), 2);
    assert_eq!(outcome.steps[0].tool.as_deref(), Some("count"));
    assert_eq!(
        outcome.steps[0].arguments.as_deref(),
        Some(r#"{"path":"notes.txt"}"#)
    );
    assert_eq!(outcome.steps[1].tool, None);
    assert_eq!(metric(&outcome, "steps"), 2.0);
    assert_eq!(metric(&outcome, "tool_calls"), 1.0);
    assert_eq!(metric(&outcome, "tool_errors"), 0.0);
    assert_eq!(metric(&outcome, "input_tokens"), 0.0);
    assert_eq!(metric(&outcome, "output_tokens"), 0.0);
    assert!(outcome.metrics.contains_key("elapsed_ms"));
    let mut sent = Vec::new();
    while let Ok(step) = rx.try_recv() {
        sent.push(step);
    }
    assert_eq!(sent, outcome.steps);
}

#[tokio::test]
async fn offline_takes_one_step_per_request() {
    let (_dir, tools) = workspace();
    let outcome = run_task(
        &OfflineProvider::new(),
        &tools,
        &task("Count the words in notes.txt and compute 17*23+4^3. Then search for TODO in docs."),
        None,
    )
    .await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{:?}", outcome.error);
    let tools_called: Vec<_> = outcome
        .steps
        .iter()
        .filter_map(|s| s.tool.clone())
        .collect();
    assert_eq!(tools_called, ["count", "calc", "grep"]);
    assert_eq!(metric(&outcome, "steps"), 4.0);
    assert_eq!(
        outcome.result,
        "[offline provider] Results of 3 tool calls:\n\
         - count of notes.txt: 9 words, 2 lines, 44 characters, 44 bytes\n\
         - 17*23+4^3 = 455\n\
         - search for /TODO/ in docs:\ndocs/a.md:2: TODO: write"
    );
}

#[tokio::test]
async fn offline_works_on_the_context_when_the_task_refers_to_it() {
    let (_dir, tools) = workspace();
    let mut t = task("Count the words of the previous result, then give its checksum");
    t.context = vec![ContextItem {
        task_id: "t0".into(),
        title: "Earlier".into(),
        result: "one two three".into(),
    }];
    let outcome = run_task(&OfflineProvider::new(), &tools, &t, None).await;
    assert_eq!(outcome.status, TaskStatus::Completed);
    assert!(
        outcome.result.contains(
            "count of the results of earlier tasks: 3 words, 1 lines, 13 characters, 13 bytes"
        ),
        "{}",
        outcome.result
    );
    assert!(
        outcome
            .result
            .contains("sha256 of the results of earlier tasks: ")
    );
}

#[tokio::test]
async fn offline_gives_up_when_nothing_matches() {
    let (_dir, tools) = workspace();
    let outcome = run_task(
        &OfflineProvider::new(),
        &tools,
        &task("write a sonnet about rust"),
        None,
    )
    .await;
    assert_eq!(outcome.status, TaskStatus::Failed);
    assert_eq!(outcome.result, "");
    let error = outcome.error.clone().unwrap();
    assert_eq!(error.code, ErrorCode::GaveUp);
    assert!(!error.retriable);
    assert!(
        error.message.starts_with(
            "the agent gave up: [offline provider] no tool matched this request offline"
        ),
        "{}",
        error.message
    );
    assert!(error.message.contains("not a language model"));
    // It did no make-believe work on the way.
    assert_eq!(metric(&outcome, "tool_calls"), 1.0);
    assert_eq!(outcome.steps[0].tool.as_deref(), Some(GIVE_UP));
}

#[tokio::test]
async fn offline_gives_up_on_a_request_it_can_only_half_do() {
    let (_dir, tools) = workspace();
    let mut t = task("count the words in notes.txt and compute 6*7");
    t.persona = persona(&["count"]);
    let outcome = run_task(&OfflineProvider::new(), &tools, &t, None).await;
    assert_eq!(outcome.status, TaskStatus::Failed);
    let error = outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::GaveUp);
    assert!(
        error.message.contains("`calc`") && error.message.contains("not offered"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn a_refused_path_fails_the_task_with_the_tools_reason() {
    let (_dir, tools) = workspace();
    let outcome = run_task(
        &OfflineProvider::new(),
        &tools,
        &task("read ../../etc/passwd"),
        None,
    )
    .await;
    assert_eq!(outcome.status, TaskStatus::Failed);
    assert_eq!(
        metric(&outcome, "tool_errors"),
        2.0,
        "the read, then giving up"
    );
    assert!(outcome.steps[0].is_error);
    let error = outcome.error.clone().unwrap();
    assert_eq!(error.code, ErrorCode::GaveUp);
    assert!(
        error
            .message
            .contains("`read_file` on ../../etc/passwd failed: refused:"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn a_missing_file_fails_the_task() {
    let (_dir, tools) = workspace();
    let outcome = run_task(
        &OfflineProvider::new(),
        &tools,
        &task("Count the words in NOPE.md"),
        None,
    )
    .await;
    assert_eq!(outcome.status, TaskStatus::Failed);
    let error = outcome.error.unwrap();
    assert!(
        error.message.contains("`count` on NOPE.md failed: NOPE.md"),
        "{}",
        error.message
    );
}

#[tokio::test]
async fn feedback_with_a_byte_limit_condenses_the_result() {
    let (_dir, tools) = workspace();
    let mut t = task("read notes.txt");
    let full = run_task(&OfflineProvider::new(), &tools, &t, None).await;
    assert!(full.result.len() > 60);
    t.feedback = vec!["The result is too long; keep it to at most 60 bytes.".into()];
    let outcome = run_task(&OfflineProvider::new(), &tools, &t, None).await;
    assert_eq!(outcome.status, TaskStatus::Completed);
    assert!(outcome.result.len() <= 60, "{}", outcome.result);
    assert!(
        outcome
            .result
            .ends_with("[condensed to at most 60 bytes per reviewer feedback]")
    );
    let again = run_task(&OfflineProvider::new(), &tools, &t, None).await;
    assert_eq!(again.result, outcome.result);
}

#[tokio::test]
async fn hitting_max_steps_fails_with_limit_exceeded() {
    let (_dir, tools) = workspace();
    let mut t = task("count the words in notes.txt");
    t.max_steps = 1;
    let outcome = run_task(&OfflineProvider::new(), &tools, &t, None).await;
    assert_eq!(outcome.status, TaskStatus::Failed);
    assert!(outcome.result.is_empty());
    let error = outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::LimitExceeded);
    assert!(!error.retriable);
    assert!(error.message.contains("1 steps"), "{}", error.message);
    assert_eq!(outcome.steps.len(), 1);
}

#[tokio::test]
async fn explicit_calls_run_the_tool_without_the_provider() {
    let (_dir, tools) = workspace();
    let never = Scripted::new(vec![]);
    let outcome = run_task(
        &never,
        &tools,
        &task(r#" {"tool": "calc", "arguments": {"expression": "2 + 2 * 10"}} "#),
        None,
    )
    .await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.result, "22");
    assert_eq!(outcome.provider, EXPLICIT_PROVIDER);
    assert_eq!(outcome.steps.len(), 1);
    assert_eq!(metric(&outcome, "steps"), 1.0);
    assert!(never.requests.lock().unwrap().is_empty());

    let listed = run_task(&never, &tools, &task(r#"{"tool": "list_files"}"#), None).await;
    assert_eq!(listed.result, "docs/\nnotes.txt");
}

#[tokio::test]
async fn explicit_calls_fail_clearly() {
    let (_dir, tools) = workspace();
    let p = OfflineProvider::new();
    let cases = [
        (
            r#"{"tool": "rm", "arguments": {}}"#,
            ErrorCode::ValidationFailed,
            "unknown tool",
        ),
        (
            r#"{"tool": "calc", "arguments": {"expr": "1"}}"#,
            ErrorCode::ValidationFailed,
            "invalid arguments",
        ),
        (
            r#"{"tool": "calc", "arguments": {"expression": "1/0"}}"#,
            ErrorCode::ToolFailed,
            "division by zero",
        ),
        (
            r#"{"tool": "read_file", "arguments": {"path": "../x"}}"#,
            ErrorCode::ToolFailed,
            "outside the workspace",
        ),
    ];
    for (description, code, words) in cases {
        let outcome = run_task(&p, &tools, &task(description), None).await;
        assert_eq!(outcome.status, TaskStatus::Failed, "{description}");
        let error = outcome.error.unwrap();
        assert_eq!(error.code, code, "{description}");
        assert!(
            error.message.contains(words),
            "{description}: {}",
            error.message
        );
        assert!(outcome.steps[0].is_error);
    }
    let mut t = task(r#"{"tool": "read_file", "arguments": {"path": "notes.txt"}}"#);
    t.persona = persona(&["calc"]);
    let outcome = run_task(&p, &tools, &t, None).await;
    let error = outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::AuthorizationDenied);
    assert!(
        error.message.contains("may not call tool \"read_file\""),
        "{}",
        error.message
    );
}

#[test]
fn only_tool_and_arguments_make_an_explicit_call() {
    assert_eq!(
        ExplicitCall::parse(r#"{"tool":"echo","arguments":{"text":"x"}}"#),
        Some(ExplicitCall {
            tool: "echo".into(),
            arguments: json!({"text": "x"})
        })
    );
    assert_eq!(
        ExplicitCall::parse(r#"{"tool":"echo"}"#).unwrap().arguments,
        json!({})
    );
    assert_eq!(ExplicitCall::parse(r#"{"tool":"echo","note":1}"#), None);
    assert_eq!(ExplicitCall::parse(r#"{"tool":5}"#), None);
    assert_eq!(ExplicitCall::parse("count {the} words"), None);
    assert_eq!(ExplicitCall::parse("[1]"), None);
}

#[tokio::test]
async fn tool_errors_are_fed_back_and_the_loop_goes_on() {
    let (_dir, tools) = workspace();
    let provider = Scripted::new(vec![
        Scripted::calls(&[
            ("calc", json!({"expression": "1/0"})),
            ("read_file", json!({"path": "notes.txt"})),
            ("echo", json!({"text": "hi"})),
        ]),
        Scripted::answer("done"),
    ]);
    let mut t = task("anything");
    t.persona = persona(&["calc", "echo"]);
    let outcome = run_task(&provider, &tools, &t, None).await;
    // The loop went on after the errors, but an answer does not make them
    // good: the first call that failed is the task's failure.
    assert_eq!(outcome.status, TaskStatus::Failed);
    assert_eq!(outcome.result, "");
    let error = outcome.error.clone().unwrap();
    assert_eq!(error.code, ErrorCode::ToolFailed);
    assert!(
        error
            .message
            .starts_with("tool \"calc\" failed: calc: division by zero")
            && error.message.ends_with("(step 1)"),
        "{}",
        error.message
    );
    assert_eq!(outcome.provider, "scripted");
    assert_eq!(metric(&outcome, "tool_calls"), 3.0);
    assert_eq!(metric(&outcome, "tool_errors"), 2.0);
    assert_eq!(metric(&outcome, "input_tokens"), 30.0);
    assert_eq!(metric(&outcome, "output_tokens"), 7.0);
    let requests = provider.requests.lock().unwrap();
    let offered: Vec<_> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        offered,
        [
            "calc",
            "echo",
            "report_progress",
            "return_result",
            "give_up"
        ]
    );
    assert_eq!(
        requests[0].messages[0].content,
        "You test.\n\nYour role: Tests things"
    );
    let results: Vec<_> = requests[1]
        .messages
        .iter()
        .filter(|m| m.role == crate::provider::Role::Tool)
        .map(|m| (m.tool_call_id.clone().unwrap(), m.content.clone()))
        .collect();
    assert_eq!(results.len(), 3);
    assert!(
        results[0]
            .1
            .starts_with("ERROR: failed: calc: division by zero"),
        "{results:?}"
    );
    assert!(results[1].1.starts_with("ERROR: refused:"), "{results:?}");
    assert_eq!(results[2], ("c2".to_string(), "hi".to_string()));
}

#[tokio::test]
async fn a_tool_error_made_good_by_a_later_call_of_the_same_tool_does_not_fail_the_task() {
    let (_dir, tools) = workspace();
    let provider = Scripted::new(vec![
        Scripted::calls(&[("read_file", json!({"path": "nope.txt"}))]),
        Scripted::calls(&[("read_file", json!({"path": "notes.txt"}))]),
        Scripted::answer("the fox"),
    ]);
    let outcome = run_task(&provider, &tools, &task("read the notes"), None).await;
    assert_eq!(outcome.status, TaskStatus::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.result, "the fox");
    assert_eq!(metric(&outcome, "tool_errors"), 1.0);
}

#[tokio::test]
async fn an_agent_that_gives_up_fails_the_task_with_its_reason() {
    let (_dir, tools) = workspace();
    let provider = Scripted::new(vec![Scripted::calls(&[(
        GIVE_UP,
        json!({"reason": "the repository has no such report"}),
    )])]);
    let outcome = run_task(&provider, &tools, &task("summarise the report"), None).await;
    assert_eq!(outcome.status, TaskStatus::Failed);
    let error = outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::GaveUp);
    assert_eq!(
        error.message,
        "the agent gave up: the repository has no such report"
    );
}

#[tokio::test]
async fn provider_errors_fail_the_task_with_their_retriability() {
    let (_dir, tools) = workspace();
    let provider = Scripted::new(vec![Err(ProviderError::RateLimited {
        retry_after: Some(Duration::from_millis(1500)),
    })]);
    let outcome = run_task(&provider, &tools, &task("x"), None).await;
    assert_eq!(outcome.status, TaskStatus::Failed);
    let error = outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::Internal);
    assert!(error.retriable);
    assert_eq!(error.details["retry_after_ms"], "1500");
    assert!(error.message.contains("rate limited"));

    let provider = Scripted::new(vec![Err(ProviderError::Refused("bad key".into()))]);
    let error = run_task(&provider, &tools, &task("x"), None)
        .await
        .error
        .unwrap();
    assert!(!error.retriable);
    assert!(error.message.contains("bad key"));

    let provider = Scripted::new(vec![Err(ProviderError::Timeout(Duration::from_secs(30)))]);
    let error = run_task(&provider, &tools, &task("x"), None)
        .await
        .error
        .unwrap();
    assert_eq!(error.code, ErrorCode::Timeout);
    assert!(error.retriable);
}

#[tokio::test]
async fn the_task_message_carries_context_and_labelled_feedback() {
    let (_dir, tools) = workspace();
    let provider = Scripted::new(vec![Scripted::answer("ok")]);
    let mut t = task("summarise");
    t.context = vec![ContextItem {
        task_id: "t0".into(),
        title: "Before".into(),
        result: "earlier text".into(),
    }];
    t.feedback = vec!["too vague".into()];
    run_task(&provider, &tools, &t, None).await;
    let requests = provider.requests.lock().unwrap();
    let user = &requests[0].messages[1].content;
    assert!(
        user.contains("=== TASK t1: A task ===\nsummarise\n"),
        "{user}"
    );
    assert!(user.contains("=== RESULT OF EARLIER TASK t0: Before ===\nearlier text\n"));
    assert!(user.contains("=== REVIEWER FEEDBACK 1 ===\ntoo vague\n"));
}

#[test]
fn observations_are_shortened_on_a_char_boundary() {
    let long = "é".repeat(2000);
    let short = shorten(&long, MAX_OBSERVATION_BYTES);
    assert!(short.len() <= MAX_OBSERVATION_BYTES + 40);
    assert!(short.ends_with("… [4000 bytes in all]"));
    assert_eq!(shorten("abc", 10), "abc");
}

#[tokio::test]
async fn run_task_passes_progress_reports_as_steps_and_gates_explicit_calls() {
    let (_dir, tools) = workspace();
    let provider = Scripted::new(vec![
        Scripted::calls(&[(
            "report_progress",
            json!({"message": "halfway", "percentage": 50}),
        )]),
        Scripted::calls(&[("return_result", json!({"result": "all done"}))]),
    ]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let outcome = run_task(&provider, &tools, &task("anything"), Some(&tx)).await;
    drop(tx);
    assert_eq!(outcome.status, TaskStatus::Completed);
    assert_eq!(outcome.result, "all done");
    let first = rx.recv().await.unwrap();
    assert_eq!(first.tool.as_deref(), Some("report_progress"));
    assert_eq!(first.observation, "progress reported: halfway");
    assert_eq!(
        rx.recv().await.unwrap().tool.as_deref(),
        Some("return_result")
    );
    assert!(rx.recv().await.is_none());

    // Gates judge explicit calls too; nobody can correct them, so a failure fails.
    let options = RunOptions {
        gates: vec![GateSpec::Length {
            min_chars: None,
            max_chars: Some(3),
        }],
        ..RunOptions::default()
    };
    let run = run_agent(
        &OfflineProvider::new(),
        &tools,
        &task(r#"{"tool": "echo", "arguments": {"text": "too long"}}"#),
        &options,
        None,
    )
    .await;
    assert_eq!(run.outcome.status, TaskStatus::Failed);
    let error = run.outcome.error.unwrap();
    assert_eq!(error.code, ErrorCode::ValidationFailed);
    assert!(error.message.contains("at most 3"), "{}", error.message);
    assert_eq!(run.gate_verdicts.len(), 1);
}

#[tokio::test]
async fn the_offline_provider_passes_gates_and_budgets_unchanged() {
    let (_dir, tools) = workspace();
    let options = RunOptions {
        budget: Budget {
            max_tokens: Some(1),
            max_cost_usd: Some(0.0001),
            ..Budget::default()
        },
        gates: vec![GateSpec::Regex {
            pattern: "offline provider".into(),
            forbid: false,
            description: None,
        }],
        ..RunOptions::default()
    };
    // The offline provider uses no tokens and costs nothing: the budget never runs out.
    let run = run_agent(
        &OfflineProvider::new(),
        &tools,
        &task("count the words in notes.txt"),
        &options,
        None,
    )
    .await;
    assert_eq!(
        run.outcome.status,
        TaskStatus::Completed,
        "{:?}",
        run.outcome.error
    );
    assert!(
        run.outcome.result.contains("9 words"),
        "{}",
        run.outcome.result
    );
    assert_eq!(run.outcome.metrics["cost_usd"], 0.0);
    assert!(run.gate_verdicts.iter().all(|v| v.passed));
}

/// Answers asks with their number, name and request, and keeps them.
#[derive(Default)]
struct Helpers {
    asked: Mutex<Vec<(u32, String, String)>>,
}

#[async_trait]
impl Collaborate for Helpers {
    async fn ask(&self, ask: u32, name: &str, request: &str) -> Result<String, ToolError> {
        self.asked
            .lock()
            .unwrap()
            .push((ask, name.to_string(), request.to_string()));
        if request.contains("fail") {
            return Err(ToolError::Failed(format!("{name} did not answer")));
        }
        Ok(format!("{name} answers ask {ask}: {request}"))
    }
}

#[tokio::test]
async fn asks_for_help_go_to_the_collaborators_numbered_and_their_answers_come_back() {
    let (_dir, tools) = workspace();
    let provider = Scripted::new(vec![
        Scripted::calls(&[
            (
                ASK_COLLABORATOR,
                json!({"name": "bea", "request": "six times seven"}),
            ),
            (
                ASK_COLLABORATOR,
                json!({"name": "eve", "request": "anything"}),
            ),
        ]),
        Scripted::calls(&[(
            ASK_COLLABORATOR,
            json!({"name": "bea", "request": "fail please"}),
        )]),
        Scripted::answer("42, says bea"),
    ]);
    let helpers = Arc::new(Helpers::default());
    let options = RunOptions {
        collaboration: Some(Collaboration {
            roster: vec![Collaborator {
                name: "bea".into(),
                role: "arithmetic".into(),
            }],
            asker: helpers.clone(),
        }),
        ..RunOptions::default()
    };
    let run = run_agent(&provider, &tools, &task("multiply"), &options, None).await;
    // An ask that got no answer is the agent's to weigh, not a failed attempt.
    assert_eq!(
        run.outcome.status,
        TaskStatus::Completed,
        "{:?}",
        run.outcome
    );
    assert_eq!(run.outcome.result, "42, says bea");
    assert_eq!(
        *helpers.asked.lock().unwrap(),
        vec![
            (1, "bea".to_string(), "six times seven".to_string()),
            (2, "bea".to_string(), "fail please".to_string())
        ],
        "only listed collaborators are asked, numbered in order"
    );
    let steps = &run.outcome.steps;
    assert_eq!(steps[0].observation, "bea answers ask 1: six times seven");
    assert!(
        steps[1].is_error
            && steps[1]
                .observation
                .contains("not one of your collaborators")
    );
    assert!(steps[2].is_error && steps[2].observation.contains("bea did not answer"));
    let requests = provider.requests.lock().unwrap();
    let spec = requests[0]
        .tools
        .iter()
        .find(|t| t.name == ASK_COLLABORATOR)
        .expect("offered");
    assert!(
        spec.description.contains("bea (arithmetic)"),
        "{}",
        spec.description
    );
    assert_eq!(
        spec.parameters["properties"]["name"]["enum"],
        json!(["bea"])
    );
}

#[tokio::test]
async fn no_collaborators_no_ask_collaborator() {
    let (_dir, tools) = workspace();
    let provider = Scripted::new(vec![
        Scripted::calls(&[(ASK_COLLABORATOR, json!({"name": "bea", "request": "x"}))]),
        Scripted::answer("alone"),
    ]);
    let options = RunOptions {
        collaboration: Some(Collaboration {
            roster: vec![],
            asker: Arc::new(Helpers::default()),
        }),
        ..RunOptions::default()
    };
    let run = run_agent(&provider, &tools, &task("work"), &options, None).await;
    let requests = provider.requests.lock().unwrap();
    assert!(requests[0].tools.iter().all(|t| t.name != ASK_COLLABORATOR));
    // Called anyway, it is refused as a tool not offered.
    assert!(run.outcome.steps[0].is_error, "{:?}", run.outcome.steps);
}
