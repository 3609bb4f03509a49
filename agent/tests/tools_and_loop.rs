//! The optional tools (write_file, http_fetch, shell with approvals,
//! memory), the synthetic tools of the agent loop, and planning through a
//! provider, against the scripted local server.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod support;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;
use support::{Reply, Server, openai_calls, openai_text, task};
use swarm_agent::tools::{
    AllowAll, ApprovalDecision, ApprovalRequest, Approver, FetchConfig, InMemoryStore, ShellConfig,
    ToolContext,
};
use swarm_agent::{
    AgentEvent, OpenAiProvider, RunOptions, SyntheticTools, ToolError, ToolRegistry, ToolsConfig,
    run_agent,
};
use swarm_common::{Limits, TaskStatus};

/// Approves or denies everything, and remembers what it was asked.
struct Recording {
    approve: bool,
    seen: Mutex<Vec<ApprovalRequest>>,
}

impl Recording {
    fn new(approve: bool) -> Arc<Recording> {
        Arc::new(Recording {
            approve,
            seen: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl Approver for Recording {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision {
        self.seen.lock().unwrap().push(request);
        if self.approve {
            ApprovalDecision::Approved
        } else {
            ApprovalDecision::denied("the operator said no")
        }
    }
}

fn all_tools() -> ToolsConfig {
    ToolsConfig {
        write_file: true,
        http_fetch: Some(FetchConfig {
            allowed_hosts: vec!["*".into()],
            ..FetchConfig::default()
        }),
        shell: Some(ShellConfig::default()),
        memory: Some(Arc::new(InMemoryStore::new())),
    }
}

#[tokio::test]
async fn optional_tools_appear_only_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let plain = ToolRegistry::with_config(dir.path(), &ToolsConfig::default());
    assert_eq!(plain.names(), ToolRegistry::builtin(dir.path()).names());
    let full = ToolRegistry::with_config(dir.path(), &all_tools());
    for name in ["write_file", "http_fetch", "shell", "memory"] {
        assert!(full.names().iter().any(|n| n == name), "{name}");
    }
    let shell = full.get("shell").unwrap().spec();
    assert!(shell.annotations.destructive && !shell.annotations.read_only);
    let write = full.get("write_file").unwrap().spec();
    assert_eq!(
        (
            write.annotations.read_only,
            write.annotations.destructive,
            write.annotations.idempotent
        ),
        (false, false, true)
    );
    assert_eq!(write.parameters["required"], json!(["path", "content"]));
}

#[tokio::test]
async fn write_file_refuses_path_traversal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ws");
    std::fs::create_dir(&root).unwrap();
    let tools = ToolRegistry::with_config(&root, &all_tools());
    let out = tools
        .call("write_file", json!({"path": "a/b.txt", "content": "hi"}))
        .await
        .unwrap();
    assert_eq!(out, "wrote 2 bytes to a/b.txt");
    for path in ["../escape.txt", "a/../../escape.txt", "/etc/passwd"] {
        let e = tools
            .call("write_file", json!({"path": path, "content": "x"}))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, ToolError::Refused(m) if m.contains("outside the workspace")),
            "{path}: {e}"
        );
    }
    assert!(!dir.path().join("escape.txt").exists());
}

#[tokio::test]
async fn http_fetch_refuses_loopback_unless_allowed() {
    let server = Server::start(vec![Reply::ok(json!({"hello": "world"}))]).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}/data.json", server.url);

    let tools = ToolRegistry::with_config(dir.path(), &all_tools());
    let e = tools
        .call("http_fetch", json!({"url": url}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("127.0.0.1")),
        "{e}"
    );
    let localhost = url.replace("127.0.0.1", "localhost");
    let e = tools
        .call("http_fetch", json!({"url": localhost}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("internal")),
        "{e}"
    );
    for bad in ["file:///etc/passwd", "ftp://example.com/x"] {
        let e = tools
            .call("http_fetch", json!({"url": bad}))
            .await
            .unwrap_err();
        assert!(matches!(e, ToolError::Refused(_)), "{bad}: {e}");
    }
    assert!(server.requests().is_empty());

    // A host outside the allowlist is refused before any lookup.
    let listed = ToolsConfig {
        http_fetch: Some(FetchConfig {
            allowed_hosts: vec!["docs.rs".into()],
            ..FetchConfig::default()
        }),
        ..ToolsConfig::default()
    };
    let tools = ToolRegistry::with_config(dir.path(), &listed);
    let e = tools
        .call("http_fetch", json!({"url": "http://example.com/"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("allowlist")),
        "{e}"
    );

    // Allowed explicitly: the fetch happens, size-limited.
    let private = ToolsConfig {
        http_fetch: Some(FetchConfig {
            allowed_hosts: vec!["127.0.0.1".into()],
            allow_private: true,
            max_bytes: 8,
            ..FetchConfig::default()
        }),
        ..ToolsConfig::default()
    };
    let tools = ToolRegistry::with_config(dir.path(), &private);
    let out = tools.call("http_fetch", json!({"url": url})).await.unwrap();
    assert!(
        out.starts_with("HTTP 200 OK\ncontent-type: application/json\n\n{\"hello\""),
        "{out}"
    );
    assert!(out.ends_with("[http_fetch: cut after 8 bytes]"), "{out}");
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.requests()[0].path, "/data.json");
}

#[cfg(unix)]
#[tokio::test]
async fn shell_needs_approval_for_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let config = all_tools();
    let command = json!({"command": "echo made > made.txt; echo ok"});

    // The default approver denies.
    let tools = ToolRegistry::with_config(dir.path(), &config);
    let e = tools.call("shell", command.clone()).await.unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("no approver")),
        "{e}"
    );
    assert!(!dir.path().join("made.txt").exists());

    // A denying approver is asked, with the call's context.
    let deny = Recording::new(false);
    let tools = ToolRegistry::with_config(dir.path(), &config).with_approver(deny.clone());
    let ctx = ToolContext {
        swarm_id: Some("s1".into()),
        task_id: Some("t9".into()),
    };
    let e = tools
        .call_in(&ctx, "shell", command.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("the operator said no")),
        "{e}"
    );
    let seen = deny.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].tool, "shell");
    assert_eq!(seen[0].arguments, command);
    assert_eq!(seen[0].task_id.as_deref(), Some("t9"));
    assert_eq!(seen[0].swarm_id.as_deref(), Some("s1"));
    assert!(!seen[0].id.is_empty());
    assert!(!dir.path().join("made.txt").exists());

    // Non-destructive tools are not put to the approver.
    tools.call("echo", json!({"text": "x"})).await.unwrap();
    assert_eq!(deny.seen.lock().unwrap().len(), 1);

    // An approving approver lets it run, in the workspace.
    let tools = ToolRegistry::with_config(dir.path(), &config).with_approver(Arc::new(AllowAll));
    let out = tools.call("shell", command).await.unwrap();
    assert_eq!(out, "exit status: 0\nstdout:\nok\n\nstderr:\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
        "made\n"
    );
    let e = tools
        .call("shell", json!({"command": "echo bad >&2; exit 4"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Failed(m) if m.contains("exit status: 4") && m.contains("bad")),
        "{e}"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_denied_call_goes_back_to_the_model_and_fails_the_attempt() {
    let server = Server::start(vec![
        Reply::ok(openai_calls(
            &[("c1", "shell", json!({"command": "rm -rf ."}))],
            5,
            5,
        )),
        Reply::ok(openai_text("I was not allowed to clean up.", 5, 5)),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "keep").unwrap();
    let approver = Recording::new(false);
    let tools = ToolRegistry::with_config(dir.path(), &all_tools()).with_approver(approver.clone());
    let provider = OpenAiProvider::new(&server.openai("m")).unwrap();
    let options = RunOptions {
        swarm_id: Some("swarm-1".into()),
        ..RunOptions::default()
    };
    let run = run_agent(&provider, &tools, &task("clean up", &[]), &options, None).await;
    // The model is told and answers, but its excuse is not a result: the
    // attempt fails with the denial as its reason.
    assert_eq!(run.outcome.status, TaskStatus::Failed);
    assert_eq!(run.outcome.result, "");
    assert_eq!(
        run.outcome.error.as_ref().unwrap().message,
        "tool \"shell\" failed: refused: the call of shell was denied: the operator said no (step 1)"
    );
    assert!(dir.path().join("keep.txt").exists());
    assert_eq!(
        approver.seen.lock().unwrap()[0].swarm_id.as_deref(),
        Some("swarm-1")
    );
    let second = server.requests()[1].body["messages"].clone();
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], "c1");
    assert_eq!(
        second[3]["content"],
        "ERROR: refused: the call of shell was denied: the operator said no"
    );
    assert!(run.outcome.steps[0].is_error);
}

#[tokio::test]
async fn memory_notes_from_one_task_are_read_by_the_next() {
    let store = Arc::new(InMemoryStore::new());
    let dir = tempfile::tempdir().unwrap();
    let config = ToolsConfig {
        memory: Some(store.clone()),
        ..ToolsConfig::default()
    };
    let tools = ToolRegistry::with_config(dir.path(), &config);
    let server = Server::start(vec![
        Reply::ok(openai_calls(
            &[(
                "c1",
                "memory",
                json!({"action": "put", "key": "answer", "value": "42"}),
            )],
            1,
            1,
        )),
        Reply::ok(openai_text("noted", 1, 1)),
        Reply::ok(openai_calls(
            &[("c2", "memory", json!({"action": "get", "key": "answer"}))],
            1,
            1,
        )),
        Reply::ok(openai_text("it is 42", 1, 1)),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("m")).unwrap();
    let options = RunOptions {
        swarm_id: Some("s1".into()),
        ..RunOptions::default()
    };
    let first = run_agent(&provider, &tools, &task("remember 42", &[]), &options, None).await;
    assert_eq!(first.outcome.status, TaskStatus::Completed);
    let second = run_agent(&provider, &tools, &task("recall", &[]), &options, None).await;
    assert_eq!(second.outcome.result, "it is 42");
    let requests = server.requests();
    assert_eq!(requests[3].body["messages"][3]["content"], "42");
}

#[tokio::test]
async fn synthetic_tools_report_progress_request_input_and_return_results() {
    let server = Server::start(vec![
        Reply::ok(openai_calls(
            &[(
                "p1",
                "report_progress",
                json!({"message": "read the brief", "percentage": 30}),
            )],
            1,
            1,
        )),
        Reply::ok(openai_calls(
            &[("q1", "request_input", json!({"question": "Which region?"}))],
            1,
            1,
        )),
    ])
    .await;
    let (_dir, tools) = support::workspace();
    let provider = OpenAiProvider::new(&server.openai("m")).unwrap();
    let options = RunOptions {
        synthetic: SyntheticTools {
            request_input: true,
            ..SyntheticTools::default()
        },
        ..RunOptions::default()
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let run = run_agent(
        &provider,
        &tools,
        &task("write the report", &[]),
        &options,
        Some(&tx),
    )
    .await;
    drop(tx);
    assert_eq!(run.outcome.status, TaskStatus::InputRequired);
    assert_eq!(run.question.as_deref(), Some("Which region?"));
    assert!(run.outcome.error.is_none());
    let mut progress = Vec::new();
    while let Some(e) = rx.recv().await {
        if let AgentEvent::Progress {
            message,
            percentage,
        } = e
        {
            progress.push((message, percentage));
        }
    }
    assert_eq!(progress, [("read the brief".to_string(), Some(30))]);
    let requests = server.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"request_input"));
    assert_eq!(
        requests[1].body["messages"][3],
        json!({"role": "tool", "tool_call_id": "p1", "content": "progress reported: read the brief"})
    );

    // Without request_input offered, calling it is refused and the model goes on.
    let server = Server::start(vec![
        Reply::ok(openai_calls(
            &[("q1", "request_input", json!({"question": "?"}))],
            1,
            1,
        )),
        Reply::ok(openai_calls(
            &[
                ("r1", "return_result", json!({"result": "the report"})),
                ("e1", "echo", json!({"text": "late"})),
            ],
            1,
            1,
        )),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("m")).unwrap();
    let run = run_agent(
        &provider,
        &tools,
        &task("write", &[]),
        &RunOptions::default(),
        None,
    )
    .await;
    assert_eq!(run.outcome.status, TaskStatus::Completed);
    assert_eq!(run.outcome.result, "the report");
    let second = server.requests()[1].body["messages"].clone();
    assert!(
        second[3]["content"]
            .as_str()
            .unwrap()
            .starts_with("ERROR: refused"),
        "{}",
        second[3]
    );
}

fn plan_json(tool: &str, assigned_to: &str) -> String {
    json!({
        "manager_directive": "Count the words of README.md and report them.",
        "workers": [{"name": "analyst", "role": "text analyst", "system_prompt": "You count.", "tools": [tool]}],
        "tasks": [
            {"task_id": "t1", "title": "Read", "description": "Read README.md", "assigned_to": "analyst"},
            {"task_id": "t2", "title": "Count", "description": "Count its words", "assigned_to": assigned_to, "dependencies": ["t1"]}
        ],
        "success_criteria": ["a word count"]
    })
    .to_string()
}

#[tokio::test]
async fn a_plan_that_fails_validation_is_corrected_on_the_next_reply() {
    let server = Server::start(vec![
        Reply::ok(openai_text(
            &format!(
                "Here is the plan:\n```json\n{}\n```",
                plan_json("count", "writer")
            ),
            100,
            50,
        )),
        Reply::ok(openai_text(&plan_json("teleport", "analyst"), 100, 50)),
        Reply::ok(openai_text(&plan_json("count", "analyst"), 100, 50)),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("gpt-4o")).unwrap();
    let tools = ToolRegistry::builtin(".").names();
    let plan = swarm_agent::planner::plan_with_provider(
        &provider,
        "Count the words in README.md",
        &tools,
        &Limits::default(),
        3,
    )
    .await
    .unwrap();
    assert_eq!(plan.planner, "openai:gpt-4o");
    assert_eq!(plan.tasks.len(), 2);
    assert_eq!(plan.workers[0].tools, ["count"]);
    swarm_common::validate::validate_plan(&plan, &Limits::default()).unwrap();

    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let system = requests[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("\"manager_directive\"") && system.contains("read_file"),
        "{system}"
    );
    assert!(requests[0].body.get("tools").is_none());
    let second = requests[1].body["messages"].as_array().unwrap();
    let feedback = second.last().unwrap()["content"].as_str().unwrap();
    assert!(
        feedback.contains("\"writer\", which is not one of the plan's workers"),
        "{feedback}"
    );
    let third = requests[2].body["messages"].as_array().unwrap();
    let feedback = third.last().unwrap()["content"].as_str().unwrap();
    assert!(feedback.contains("\"teleport\""), "{feedback}");
    assert!(feedback.contains("do not exist"), "{feedback}");
}

#[tokio::test]
async fn planning_gives_up_with_a_clear_error() {
    let server = Server::start(vec![
        Reply::ok(openai_text("I would rather not.", 1, 1)),
        Reply::ok(openai_text("{\"workers\": []}", 1, 1)),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("m")).unwrap();
    let e = swarm_agent::planner::plan_with_provider(&provider, "x", &[], &Limits::default(), 2)
        .await
        .unwrap_err();
    assert_eq!(e.code, swarm_common::ErrorCode::ValidationFailed);
    assert!(
        e.message.contains("no valid plan in 2 attempts"),
        "{}",
        e.message
    );
    assert!(e.message.contains("manager_directive"), "{}", e.message);
}

#[tokio::test]
async fn a_model_reviews_results_and_summarizes_the_mission() {
    use swarm_agent::review::{ReviewRequest, review_with_provider, summarize_with_provider};
    let server = Server::start(vec![
        Reply::ok(openai_text("Looks fine to me!", 10, 5)),
        Reply::ok(openai_text(
            "```json\n{\"approved\": false, \"feedback\": \"Give the count as a number.\"}\n```",
            10,
            5,
        )),
        Reply::ok(openai_text("{\"approved\": true}", 10, 5)),
        Reply::ok(openai_text(
            "{\"summary\": \"Both tasks completed.\", \"insights\": [\"README.md has 120 words\"]}",
            20,
            10,
        )),
    ])
    .await;
    let provider = OpenAiProvider::new(&server.openai("gpt-4o-mini")).unwrap();
    let request = ReviewRequest {
        directive: "Count the words of README.md".into(),
        task_title: "Count".into(),
        task_description: "Count the words of README.md".into(),
        result: "many words".into(),
        criteria: vec!["t1 completes with a non-empty result".into()],
    };
    let verdict = review_with_provider(&provider, &request).await.unwrap();
    assert!(!verdict.approved);
    assert_eq!(verdict.feedback, "Give the count as a number.");
    assert_eq!(verdict.usage.input_tokens, 20, "both replies are counted");
    assert!(verdict.cost_usd > 0.0);
    let verdict = review_with_provider(&provider, &request).await.unwrap();
    assert!(verdict.approved && verdict.feedback.is_empty());
    let requests = server.requests();
    let first = requests[0].body["messages"].as_array().unwrap();
    assert!(
        first[0]["content"]
            .as_str()
            .unwrap()
            .contains("- t1 completes with a non-empty result")
    );
    assert!(
        first[1]["content"]
            .as_str()
            .unwrap()
            .contains("=== RESULT ===\nmany words")
    );
    let retry = requests[1].body["messages"].as_array().unwrap();
    assert!(
        retry[3]["content"]
            .as_str()
            .unwrap()
            .contains("cannot be read"),
        "{}",
        retry[3]
    );

    let outcome = swarm_common::TaskOutcome {
        skills: Default::default(),
        child_swarm: None,
        task_id: "t1".into(),
        title: "Count".into(),
        description: "Count".into(),
        assigned_to: "analyst".into(),
        dependencies: vec![],
        status: TaskStatus::Completed,
        result: "120".into(),
        result_truncated: false,
        result_seq: None,
        attempts: 1,
        revisions: 1,
        assigned_at: None,
        started_at: None,
        completed_at: None,
        error: None,
        gate_verdicts: vec![],
        provider: "openai:gpt-4o-mini".into(),
        asked_by: None,
    };
    let summary = summarize_with_provider(&provider, "Count the words", &[outcome])
        .await
        .unwrap();
    assert_eq!(summary.summary, "Both tasks completed.");
    assert_eq!(summary.insights, ["README.md has 120 words"]);
    let last = &server.requests()[3].body["messages"][1]["content"];
    assert!(
        last.as_str()
            .unwrap()
            .contains("=== TASK t1 (Completed): Count ===\n120"),
        "{last}"
    );
}

#[tokio::test]
async fn http_fetch_checks_every_redirect_hop() {
    let server = Server::start(vec![
        Reply::json(302, vec![("location", "/moved".into())], json!({})),
        Reply::ok(json!("here")),
        Reply::json(
            302,
            vec![("location", "http://localhost:9/elsewhere".to_string())],
            json!({}),
        ),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = ToolsConfig {
        http_fetch: Some(FetchConfig {
            allowed_hosts: vec!["127.0.0.1".into()],
            allow_private: true,
            ..FetchConfig::default()
        }),
        ..ToolsConfig::default()
    };
    let tools = ToolRegistry::with_config(dir.path(), &config);
    let out = tools
        .call(
            "http_fetch",
            json!({"url": format!("{}/start", server.url)}),
        )
        .await
        .unwrap();
    assert!(out.ends_with("\n\n\"here\""), "{out}");
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/start", "/moved"]);
    // A redirect to a host outside the allowlist is refused, not followed.
    let e = tools
        .call(
            "http_fetch",
            json!({"url": format!("{}/again", server.url)}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ToolError::Refused(m) if m.contains("\"localhost\"")),
        "{e}"
    );
    assert_eq!(server.requests().len(), 3);
}
