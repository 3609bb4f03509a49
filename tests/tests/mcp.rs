//! MCP servers as workers' tool sources, against real servers: PyPI's
//! `mcp-server-time`, and `tests/python/mcp_tools.py` written with the
//! `mcp` SDK. The current time comes through `mcp__time__get_current_time`
//! both as an explicit tool call and in an agent loop whose scripted model
//! was offered the tool with the server's schema; a destructive tool waits
//! for a person's approval; an error result fails its task with the tool's
//! reason; a killed server is started again and the next call works; a
//! tool that is not read-only is not called twice when its worker dies
//! after the call and the task is replayed.
//!
//! They need `mcp` and `mcp-server-time` in `.python` (as `.ci/run`
//! installs them); without them the tests say so and pass, unless `CI` is
//! set, when they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use common::repo;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use swarm_common::{FinalReport, SwarmStatus, TaskStatus};
use swarm_testkit::{Cluster, Match, MockLlm, Reply, Rule};

const MODEL: &str = "gpt-4o-mini";

/// The worker's `SWARM_MCP_SERVERS`: mcp-server-time as `time`, and the
/// test tools as `tools`. A stdio server gets none of the worker's
/// environment but the basics, so `env` gives it the packages' path.
fn servers(python: &std::ffi::OsStr) -> String {
    let python = python.to_string_lossy();
    let tools = repo().join("tests/python/mcp_tools.py");
    format!(
        "time=env PYTHONPATH={python} python3 -m mcp_server_time --local-timezone UTC;\
         tools=env PYTHONPATH={python} python3 {}",
        tools.display()
    )
}

/// A cluster of one boss, one manager and one worker with the MCP servers;
/// the worker asks `llm` if given, the others plan and review offline.
async fn cluster(python: &std::ffi::OsStr, llm: Option<&MockLlm>, workspace: &Path) -> Cluster {
    let mut builder = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .workspace(workspace)
        .env("SWARM_MCP_SERVERS", servers(python))
        .env("SWARM_WORKER_ACK_WAIT", "3")
        .env("SWARM_MCP_TIMEOUT", "20")
        .ready_timeout(Duration::from_secs(60));
    if let Some(llm) = llm {
        for (k, v) in llm.openai_env(MODEL) {
            builder = if k == "SWARM_PROVIDER" {
                builder.env("SWARM_WORKER_PROVIDER", v)
            } else {
                builder.env(k, v)
            };
        }
    }
    builder.start().await.expect("the cluster starts")
}

fn result_of<'a>(report: &'a FinalReport, task: &str) -> &'a swarm_common::TaskOutcome {
    report
        .task_results
        .iter()
        .find(|t| t.task_id == task)
        .unwrap_or_else(|| panic!("no task {task} in {report:#?}"))
}

/// The lines of the test server's call log.
fn calls(workspace: &Path) -> Vec<String> {
    std::fs::read_to_string(workspace.join("calls.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `.python` as the PYTHONPATH, if the MCP servers can run (common::python_path).
fn python_path() -> Option<std::ffi::OsString> {
    common::python_path(
        "the MCP servers",
        "mcp.server.mcpserver, mcp_server_time",
        "pip install --target .python mcp==2.3.0 mcp-server-time==2026.10.19",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_comes_from_mcp_server_time_by_explicit_call_and_in_the_agent_loop() {
    let Some(python) = python_path() else { return };
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("worker", Match::new().system_contains("You test Swarm."))
            .replies([Reply::tool_call(
                "mcp__time__get_current_time",
                json!({"timezone": "UTC"}),
            )])
            .then_always(Reply::text("It is the time the tool said.")),
    );
    let workspace = tempfile::tempdir().unwrap();
    let cluster = cluster(&python, Some(&llm), workspace.path()).await;
    let nc = cluster.client().await;
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();

    let id = common::submit(
        &nc,
        &common::mission(
            "what time is it",
            vec![
                common::task(
                    "explicit",
                    &common::tool("mcp__time__get_current_time", json!({"timezone": "UTC"})),
                    &[],
                ),
                common::task("asked", "Find out the current time in UTC.", &[]),
            ],
        ),
    )
    .await;
    let report = common::final_report(&cluster, &nc, &id, 90).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let explicit = result_of(&report, "explicit");
    assert!(
        explicit.result.contains("\"timezone\"")
            && explicit.result.contains("UTC")
            && explicit.result.contains(&today),
        "the server's answer, with today's date {today}: {}",
        explicit.result
    );

    // The model was offered the tool with the server's own schema, and
    // what it was sent back is the server's answer.
    let requests = llm.requests_for("worker");
    let first = requests.first().expect("the worker asked the model");
    let offered = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__time__get_current_time")
        .unwrap_or_else(|| panic!("not offered: {:?}", first.tool_names()));
    assert_eq!(
        offered["function"]["parameters"]["required"],
        json!(["timezone"]),
        "{offered}"
    );
    assert!(
        first
            .tool_names()
            .contains(&"mcp__time__convert_time".into())
    );
    let results: Vec<String> = requests
        .iter()
        .flat_map(|r| r.tool_results())
        .map(|(_, content)| content)
        .collect();
    assert!(
        results
            .iter()
            .any(|r| r.contains(&today) && r.contains("UTC")),
        "the model saw the server's answer: {results:?}"
    );
    assert_eq!(
        result_of(&report, "asked").result,
        "It is the time the tool said."
    );

    // The worker's card lists the MCP tools, so does the boss's planning:
    // a text mission naming one is planned with it and runs.
    let cards = swarm_client::agents::list(&nc).await.unwrap();
    let worker = cards.iter().find(|c| c.role == "worker").unwrap();
    assert!(
        worker
            .tools
            .contains(&"mcp__tools__delete_notes".to_string()),
        "{:?}",
        worker.tools
    );
    let line = common::tool(
        "mcp__time__convert_time",
        json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
    );
    let text = swarm_common::mission::MissionRequest::text(line);
    let id = common::submit(&nc, &text).await;
    let report = common::final_report(&cluster, &nc, &id, 90).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert!(
        report.task_results[0].result.contains("21:00"),
        "noon UTC is 21:00 in Tokyo: {}",
        report.task_results[0].result
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destructive_tools_wait_for_approval_errors_fail_and_a_killed_server_comes_back() {
    let Some(python) = python_path() else { return };
    let workspace = tempfile::tempdir().unwrap();
    let cluster = cluster(&python, None, workspace.path()).await;
    let nc = cluster.client().await;

    // A destructive tool waits for a person; approved, it runs.
    let id = common::submit(
        &nc,
        &common::mission(
            "clean up",
            vec![
                common::task(
                    "add",
                    &common::tool("mcp__tools__add_note", json!({"text": "keep"})),
                    &[],
                ),
                common::task(
                    "delete",
                    &common::tool("mcp__tools__delete_notes", json!({})),
                    &["add"],
                ),
            ],
        ),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let approval = loop {
        let pending = swarm_client::client::approvals(&nc, false).await.unwrap();
        if let Some(a) = pending
            .into_iter()
            .find(|a| a.tool == "mcp__tools__delete_notes")
        {
            break a;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no approval asked for\n{}",
            cluster.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(approval.swarm_id.as_deref(), Some(id.as_str()));
    assert!(
        !calls(workspace.path())
            .iter()
            .any(|c| c.ends_with("delete_notes")),
        "nothing was deleted before the approval"
    );
    swarm_client::client::decide(&nc, &approval.approval_id, true, "tester", None)
        .await
        .unwrap();
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(result_of(&report, "delete").result, "every note deleted");
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("notes.log")).unwrap(),
        ""
    );

    // An error result is a failed task, with the tool's reason.
    let id = common::submit(
        &nc,
        &common::mission(
            "break",
            vec![common::task(
                "b",
                &common::tool("mcp__tools__broken", json!({})),
                &[],
            )],
        ),
    )
    .await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Failed, "{report:#?}");
    let broken = result_of(&report, "b");
    assert_eq!(broken.status, TaskStatus::Failed);
    let reason = broken.error.as_deref().unwrap_or_default();
    assert!(reason.contains("the disk is on fire"), "{broken:#?}");

    // Kill the server; it is started again and the next call works.
    let pid_of = |report: &FinalReport| -> u32 {
        let text = &result_of(report, "pid").result;
        text.trim()
            .strip_prefix("pid ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a pid: {text}"))
    };
    let pid_mission = || {
        common::mission(
            "pid",
            vec![common::task(
                "pid",
                &common::tool("mcp__tools__server_pid", json!({})),
                &[],
            )],
        )
    };
    let id = common::submit(&nc, &pid_mission()).await;
    let first = pid_of(&common::final_report(&cluster, &nc, &id, 60).await);
    let killed = Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let id = common::submit(&nc, &pid_mission()).await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let second = pid_of(&report);
    assert_ne!(first, second, "a new server process answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_changes_something_is_not_called_again_when_its_task_is_replayed() {
    let Some(python) = python_path() else { return };
    let llm = MockLlm::start().await;
    // The model asks for the note, then answers slowly: the worker is
    // killed in between, after the call was journaled.
    llm.add(
        Rule::new("worker", Match::new().system_contains("You test Swarm."))
            .replies([
                Reply::tool_call("mcp__tools__add_note", json!({"text": "once"})),
                Reply::text("too late").after(Duration::from_secs(30)),
            ])
            .then_always(Reply::text("The note is added.")),
    );
    let workspace = tempfile::tempdir().unwrap();
    let mut cluster = cluster(&python, Some(&llm), workspace.path()).await;
    let nc = cluster.client().await;
    let id = common::submit(
        &nc,
        &common::mission(
            "note",
            vec![common::task("note", "Add the note 'once'.", &[])],
        ),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while llm.requests_for("worker").len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the model was not asked twice\n{}",
            cluster.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The second request follows the tool's result, which was journaled first.
    let worker = &mut cluster.local_mut().workers[0];
    worker.kill();
    worker.restart().unwrap();
    let report = common::final_report(&cluster, &nc, &id, 90).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(result_of(&report, "note").result, "The note is added.");
    let added: Vec<_> = calls(workspace.path())
        .into_iter()
        .filter(|c| c.ends_with("add_note once"))
        .collect();
    assert_eq!(added.len(), 1, "called once, replayed after: {added:?}");
    let last = llm.requests_for("worker").pop().unwrap();
    assert!(
        last.tool_results().iter().any(|(_, c)| c == "noted: once"),
        "the replayed result went to the model: {:?}",
        last.tool_results()
    );
}

/// The test tools served over streamable HTTP by the SDK, killed on drop.
struct HttpTools(std::process::Child);

impl Drop for HttpTools {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_over_streamable_http_serves_its_tools_within_the_time_limit() {
    let Some(python) = python_path() else { return };
    let workspace = tempfile::tempdir().unwrap();
    let port = swarm_testkit::free_port().unwrap();
    let _server = HttpTools(
        Command::new("python3")
            .env("PYTHONPATH", &python)
            .current_dir(workspace.path())
            .arg(repo().join("tests/python/mcp_tools.py"))
            .args(["--http", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the HTTP server did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .workspace(workspace.path())
        .env("SWARM_MCP_URLS", format!("web=http://127.0.0.1:{port}/mcp"))
        .env("SWARM_MCP_TOKEN_WEB", "web-token-0123456789")
        .env("SWARM_MCP_TIMEOUT", "2")
        .start()
        .await
        .expect("the cluster starts");
    let nc = cluster.client().await;
    let id = common::submit(
        &nc,
        &common::mission(
            "over http",
            vec![
                common::task(
                    "note",
                    &common::tool("mcp__web__add_note", json!({"text": "via http"})),
                    &[],
                ),
                common::task(
                    "slow",
                    &common::tool("mcp__web__slow", json!({"seconds": 5})),
                    &[],
                ),
            ],
        ),
    )
    .await;
    let report = common::final_report(&cluster, &nc, &id, 90).await;
    assert_eq!(result_of(&report, "note").result, "noted: via http");
    assert_eq!(result_of(&report, "note").status, TaskStatus::Completed);
    let slow = result_of(&report, "slow");
    assert_eq!(slow.status, TaskStatus::Failed, "{slow:#?}");
    let reason = slow.error.as_deref().unwrap_or_default();
    assert!(reason.contains("gave no answer within 2s"), "{reason}");
    assert_eq!(report.overall_status, SwarmStatus::Failed);
}
