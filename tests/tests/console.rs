//! The web console in real headless Chromium (Debian's `chromium`, driven
//! by npm's `playwright-core` from `tests/browser/console.mjs`): a person
//! signs in with a token, submits a mission from the form, watches its
//! tasks turn completed in the graph without reloading, approves a pending
//! shell call from the page and opens the report. Screenshots are kept in
//! `target/console-screenshots/`.
//!
//! Also, without a browser: the console's pages refuse a caller without a
//! token, a form posted from another origin, and another caller's swarm,
//! and escape what a mission says.
//!
//! The browser test needs `/usr/bin/chromium` (or `CHROMIUM`) and
//! `tests/browser/node_modules` (`npm ci --prefix tests/browser`), as
//! `.ci/run` installs them; without them it says so and passes, unless
//! `CI` is set, when it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use common::repo;

use std::path::PathBuf;
use std::time::Duration;

use swarm_common::{SwarmStatus, approval::ApprovalStatus};
use swarm_testkit::Cluster;

const TOKEN: &str = "console-test-token-0123456789";
const OTHER: &str = "other-caller-token-0123456789";

async fn console_cluster() -> Cluster {
    Cluster::builder()
        .managers(1)
        .workers(2)
        .gateway()
        .env(
            "SWARM_GATEWAY_TOKENS",
            format!("tester:{TOKEN},other:{OTHER}"),
        )
        .env("SWARM_TOOL_SHELL", "true")
        .start()
        .await
        .expect("the cluster starts")
}

/// Chromium and playwright-core, if both are here.
fn browser() -> Option<(PathBuf, PathBuf)> {
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let modules = repo().join("tests/browser/node_modules/playwright-core");
    let node = std::process::Command::new("node").arg("--version").output();
    let missing = match (chromium.exists(), modules.exists(), node) {
        (false, ..) => Some(format!("no Chromium at {}", chromium.display())),
        (_, false, _) => Some("no playwright-core in tests/browser/node_modules".into()),
        (_, _, Err(e)) => Some(format!("no node: {e}")),
        _ => None,
    };
    match missing {
        None => Some((chromium, repo().join("tests/browser/console.mjs"))),
        Some(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set, so the browser test must run, but: {why}; install with \
                 `apt-get install chromium` and `npm ci --prefix tests/browser`"
            );
            eprintln!("skipped: {why}");
            None
        }
    }
}

fn approval_plan() -> swarm_common::mission::MissionRequest {
    let shell =
        serde_json::json!({"tool": "shell", "arguments": {"command": "echo console-approved"}})
            .to_string();
    common::mission(
        "Console test <img src=x onerror=alert(1)> & friends",
        vec![
            common::task("a", &common::echo("alpha"), &[]),
            common::task("b", &shell, &["a"]),
            common::task("c", &common::sleep(300), &["a"]),
            common::task("d", &common::echo("delta"), &["b", "c"]),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_runs_and_approves_a_mission_in_chromium() {
    let Some((chromium, script)) = browser() else {
        return;
    };
    let cluster = console_cluster().await;
    let url = cluster.local().gateway_url().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mission_file = dir.path().join("mission.json");
    std::fs::write(
        &mission_file,
        serde_json::to_string_pretty(&approval_plan()).unwrap(),
    )
    .unwrap();
    let shots = repo().join("target/console-screenshots");
    let mut cmd = tokio::process::Command::new("node");
    cmd.env("CHROMIUM", &chromium)
        .env("NODE_PATH", repo().join("tests/browser/node_modules"))
        .current_dir(repo().join("tests/browser"))
        .arg(&script)
        .arg(&url)
        .arg(TOKEN)
        .arg(&mission_file)
        .arg(&shots);
    let out = tokio::time::timeout(Duration::from_secs(240), cmd.output())
        .await
        .expect("the browser script finishes")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("done"),
        "the browser script failed ({}; screenshots in {}):\n{stdout}\n{}\n{}",
        out.status,
        shots.display(),
        String::from_utf8_lossy(&out.stderr),
        cluster.log_tails()
    );
    // What the page did went through the system: the swarm completed, and
    // the approval was decided by the signed-in person through the desk.
    let swarm_id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("swarm: "))
        .expect("the script names the swarm")
        .to_owned();
    let nc = cluster.client().await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 30).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let approvals = swarm_client::client::approvals(&nc, true).await.unwrap();
    let decided = approvals
        .iter()
        .find(|a| a.swarm_id.as_deref() == Some(swarm_id.as_str()))
        .expect("the shell call asked for approval");
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(
        decided.decided_by.as_deref(),
        Some("console:tester (gateway)"),
        "the desk names the person and the NATS user it came through"
    );
    assert_eq!(decided.reason.as_deref(), Some("looks safe"));
    for shot in ["1-form", "2-waiting", "3-swarm", "6-report"] {
        assert!(shots.join(format!("{shot}.png")).exists(), "no {shot}.png");
    }
}

/// An HTTP client that keeps no cookies and follows no redirects.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_checks_who_asks_and_escapes_what_missions_say() {
    let cluster = console_cluster().await;
    let url = cluster.local().gateway_url().unwrap();
    let http = http();

    // No token: pages go to sign in, streams and fragments are refused.
    let r = http.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert!(
        r.headers()["location"]
            .to_str()
            .unwrap()
            .starts_with("/login")
    );
    let r = http
        .get(format!("{url}/events/swarms"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // POST / is still JSON-RPC, not the console.
    let rpc = r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#;
    let r = http.post(format!("{url}/")).body(rpc).send().await.unwrap();
    assert_eq!(r.status(), 401);

    // Signing in sets an HttpOnly, SameSite=Strict cookie.
    let r = http
        .post(format!("{url}/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}&next=%2F"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let cookie = cookie.split(';').next().unwrap().to_owned();

    // A form with the cookie from another origin is refused; from this
    // origin it starts a mission.
    let mission = serde_json::to_string(&common::mission(
        "<script>alert('x')</script> mission",
        vec![common::task("a", &common::echo("<b>bold</b>"), &[])],
    ))
    .unwrap();
    let body = format!("plan={}", urlencode(&mission));
    let r = http
        .post(format!("{url}/missions"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400, "a cross-origin form was taken");
    let r = http
        .post(format!("{url}/missions"))
        .header("cookie", &cookie)
        .header("origin", &url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    let swarm_id = to
        .strip_prefix("/swarms/")
        .expect("sent to the swarm")
        .to_owned();
    let nc = cluster.client().await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 30).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);

    // The page escapes the mission and the output, and carries a strict CSP.
    let r = http
        .get(format!("{url}{to}"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    let page = r.text().await.unwrap();
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(page.contains("&lt;script&gt;alert"));
    let r = http
        .get(format!("{url}/swarms/{swarm_id}/tasks/a?fragment=1"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    let detail = r.text().await.unwrap();
    assert!(
        detail.contains("&lt;b&gt;bold") && !detail.contains("<b>bold"),
        "{detail}"
    );

    // Another caller does not see it.
    let r = http
        .get(format!("{url}/swarms/{swarm_id}"))
        .header("authorization", format!("Bearer {OTHER}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let list = http
        .get(format!("{url}/"))
        .header("authorization", format!("Bearer {OTHER}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!list.contains(&swarm_id));
}

fn urlencode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}
