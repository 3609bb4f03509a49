//! `swarm mcp` driven by the Python `mcp` SDK's client
//! (`tests/python/mcp_client.py`): over stdio, a mission submitted with
//! wait comes back with its report after progress notifications, its
//! report resources read as JSON and HTML, the swarm is listed and got, a
//! slow one is cancelled, a wrong argument is a tool error naming it; over
//! streamable HTTP, the tools answer with the bearer token and a request
//! without it is refused.
//!
//! They need `mcp` in `.python` (as `.ci/run` installs it); without it the
//! tests say so and pass, unless `CI` is set, when they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use common::repo;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use swarm_testkit::Cluster;

fn swarm_bin() -> PathBuf {
    swarm_testkit::bin_dir().join(format!("swarm{}", std::env::consts::EXE_SUFFIX))
}

/// Runs the client script with `args` and returns what it printed.
async fn drive(python: &std::ffi::OsStr, args: &[&str]) -> Value {
    let script = repo().join("tests/python/mcp_client.py");
    let mut cmd = tokio::process::Command::new("python3");
    cmd.env("PYTHONPATH", python).arg(script).args(args);
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .expect("the client finishes")
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "the client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `.python` as the PYTHONPATH, if the MCP client can run (common::python_path).
fn python_path() -> Option<std::ffi::OsString> {
    common::python_path(
        "the MCP client",
        "mcp.client.stdio, mcp.client.streamable_http, httpx2",
        "pip install --target .python mcp==2.3.0",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_submits_waits_reads_the_report_lists_and_cancels() {
    let Some(python) = python_path() else { return };
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .start()
        .await
        .expect("the cluster starts");
    let plan = common::plan(vec![
        common::task("a", &common::echo("alpha"), &[]),
        common::task("b", &common::echo("beta"), &["a"]),
    ]);
    let slow = common::plan(vec![common::task("slow", &common::sleep(30_000), &[])]);
    let dir = tempfile::tempdir().unwrap();
    let mission = dir.path().join("mission.json");
    std::fs::write(
        &mission,
        serde_json::to_vec(&json!({
            "mission": "two echoes",
            "plan": plan,
            "slow_mission": "a slow one",
            "slow_plan": slow,
        }))
        .unwrap(),
    )
    .unwrap();
    let bin = swarm_bin();
    let url = cluster.local().url();
    let seen = drive(
        &python,
        &[
            "stdio",
            bin.to_str().unwrap(),
            &url,
            mission.to_str().unwrap(),
        ],
    )
    .await;

    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for tool in [
        "submit_mission",
        "get_swarm",
        "list_swarms",
        "cancel_swarm",
        "list_approvals",
        "approve",
        "deny",
        "answer",
    ] {
        assert!(tools.contains(&tool), "{tool} in {tools:?}");
    }
    assert_eq!(seen["hints"]["list_swarms"], true);
    assert_eq!(seen["hints"]["cancel_swarm"], false);

    assert_eq!(seen["submitted_error"], false, "{seen:#}");
    let submitted = &seen["submitted"];
    assert_eq!(submitted["status"], "Completed", "{seen:#}");
    let results: Vec<&str> = submitted["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["alpha", "beta"]);
    let progress = seen["progress"].as_array().unwrap();
    assert!(
        progress.len() >= 3,
        "deployed, results and the report were notified: {progress:?}"
    );
    let last = progress.last().unwrap();
    assert_eq!(last[0], 2.0, "both tasks done: {last}");
    assert_eq!(last[1], 2.0, "of two: {last}");

    let swarm_id = submitted["swarm_id"].as_str().unwrap();
    assert_eq!(seen["report_json"]["mission"], "two echoes");
    assert_eq!(seen["report_json"]["overall_status"], "Completed");
    assert_eq!(seen["report_html_type"], "text/html", "{seen:#}");
    assert!(
        seen["report_html_start"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("<!doctype html"),
        "{}",
        seen["report_html_start"]
    );
    let resources: Vec<&str> = seen["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(resources.contains(&format!("swarm://swarms/{swarm_id}/report.json").as_str()));
    assert!(resources.contains(&format!("swarm://swarms/{swarm_id}/state.json").as_str()));
    assert_eq!(seen["get_swarm"]["status"], "Completed");
    assert_eq!(seen["get_swarm"]["tasks"].as_array().unwrap().len(), 2);
    assert!(
        seen["listed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == swarm_id)
    );

    assert_eq!(seen["cancel_error"], false, "{}", seen["cancel"]);
    assert_eq!(seen["slow_status"], "Cancelled", "{seen:#}");
    let slow_id = seen["slow_id"].as_str().unwrap();
    let nc = cluster.client().await;
    let report = common::final_report(&cluster, &nc, slow_id, 30).await;
    assert_eq!(report.overall_status, swarm_common::SwarmStatus::Cancelled);

    assert_eq!(seen["wrong_error"], true);
    assert!(
        seen["wrong"].as_str().unwrap().contains("swarm"),
        "{}",
        seen["wrong"]
    );
    assert_eq!(seen["missing_error"], true);
    assert!(
        seen["missing"]
            .as_str()
            .unwrap()
            .contains("no swarm no-such-swarm"),
        "{}",
        seen["missing"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_token_is_required() {
    let Some(python) = python_path() else { return };
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .start()
        .await
        .expect("the cluster starts");
    let token = "mcp-http-token-0123456789";
    let mut server = tokio::process::Command::new(swarm_bin())
        .args(["-s", &cluster.local().url(), "mcp", "--http", "127.0.0.1:0"])
        .env("SWARM_MCP_HTTP_TOKEN", token)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(server.stdout.take().unwrap()));
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the server says where it listens")
        .unwrap()
        .unwrap();
    let url = line
        .strip_prefix("MCP server at ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    let seen = drive(&python, &["http", &url, token]).await;
    assert!(
        seen["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "submit_mission"),
        "{seen}"
    );
    assert!(seen["listed"].is_array());
    assert_eq!(seen["without_token"], 401);

    // A public address needs a token.
    let refused = Command::new(swarm_bin())
        .args(["-s", &cluster.local().url(), "mcp", "--http", "0.0.0.0:0"])
        .env_remove("SWARM_MCP_HTTP_TOKEN")
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--token"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    server.kill().await.ok();
}
