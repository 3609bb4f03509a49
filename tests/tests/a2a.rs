//! The A2A gateway against the Python `a2a-sdk`'s own client, over both of
//! its bindings (JSON-RPC and HTTP+JSON): the card, missions to their end
//! (completed with artifacts, failed with the reason, cancelled), streams,
//! listing, the spec's errors, a task waiting for a person answered by a
//! message, push notifications to a webhook (across a gateway restart), and
//! callers without a valid token refused (`tests/python/a2a_client.py`
//! holds the client's side).
//!
//! The SDK is installed with `pip install --target .python a2a-sdk` (as
//! `.ci/run` does); without it the tests say so and pass, unless `CI` is
//! set, when they fail.

mod common;

use common::repo;

use std::time::Duration;

use serde_json::json;
use swarm_testkit::{Cluster, Match, MockLlm, Reply, Rule};

/// A caller's token, as the gateway is given it.
const TOKEN: &str = "a2a-test-token-0123456789";

/// Runs the client script; panics with its output and the logs on failure.
async fn run_client(cluster: &Cluster, path: &std::ffi::OsStr, args: &[&str]) {
    let url = cluster.gateway_url().expect("the cluster runs a gateway");
    let script = repo().join("tests/python/a2a_client.py");
    let mut command = tokio::process::Command::new("python3");
    command
        .env("PYTHONPATH", path)
        .arg(&script)
        .arg(&url)
        .args(args)
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .unwrap_or_else(|_| panic!("the A2A client did not finish\n{}", cluster.log_tails()))
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("done"),
        "the A2A client failed ({}):\n{stdout}\n{stderr}\n{}",
        out.status,
        cluster.log_tails()
    );
}

async fn gateway_cluster() -> Cluster {
    Cluster::builder()
        .managers(1)
        .workers(2)
        .gateway()
        .env("SWARM_GATEWAY_TOKENS", format!("tester:{TOKEN}"))
        .start()
        .await
        .expect("the cluster starts")
}

/// `.python` as the PYTHONPATH, if the a2a-sdk client can run (common::python_path).
fn python_path() -> Option<std::ffi::OsString> {
    common::python_path(
        "the a2a-sdk client",
        "a2a.client, httpx",
        "pip install --target .python 'a2a-sdk[http-server]==1.3.0'",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_runs_missions_over_json_rpc() {
    let Some(path) = python_path() else { return };
    let cluster = gateway_cluster().await;
    run_client(&cluster, &path, &[TOKEN, "JSONRPC", "core"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_runs_missions_over_http_json() {
    let Some(path) = python_path() else { return };
    let cluster = gateway_cluster().await;
    run_client(&cluster, &path, &[TOKEN, "HTTP+JSON", "core"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_asks_a_person_is_answered_by_a_message_on_it() {
    let Some(path) = python_path() else { return };
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new(
            "answered",
            Match::new()
                .system_contains("You test Swarm.")
                .last_user_contains("A person answered"),
        )
        .then_always(Reply::text("painted it blue")),
    );
    llm.add(
        Rule::new("asking", Match::new().system_contains("You test Swarm.")).then_always(
            Reply::tool_call(
                "request_input",
                json!({"question": "Which colour should the shed be?"}),
            ),
        ),
    );
    let mut builder = Cluster::builder().managers(1).workers(1).gateway();
    for (k, v) in llm.openai_env("test-model") {
        // Only the worker asks the model; the boss and manager stay offline.
        if k == "SWARM_PROVIDER" {
            builder = builder.env("SWARM_WORKER_PROVIDER", v);
        } else {
            builder = builder.env(k, v);
        }
    }
    // Anonymous callers (loopback): the gateway answers at the desk as
    // its own user, which the boss accepts by default.
    let cluster = builder.start().await.expect("the cluster starts");
    let plan = json!({
        "plan": common::plan(vec![common::task("paint", "Paint the shed", &[])]),
    });
    run_client(
        &cluster,
        &path,
        &["", "HTTP+JSON", "input", &plan.to_string()],
    )
    .await;
}

/// Push notifications, with the SDK's client and a webhook of the script's
/// own: a config given with the message, configs made, read and deleted on
/// a running task, retries of refused deliveries, and an update stored
/// while the gateway was down pushed once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_notifications_reach_a_webhook_across_a_gateway_restart() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let Some(path) = python_path() else { return };
    let mut cluster = Cluster::builder()
        .managers(1)
        .workers(2)
        .gateway()
        .env("SWARM_GATEWAY_TOKENS", format!("tester:{TOKEN}"))
        // The script's webhook is on loopback.
        .env("SWARM_GATEWAY_PUSH_ALLOW_PRIVATE", "true")
        .start()
        .await
        .expect("the cluster starts");
    let url = cluster.gateway_url().unwrap();
    let mut child = tokio::process::Command::new("python3")
        .env("PYTHONPATH", &path)
        .arg(repo().join("tests/python/a2a_client.py"))
        .args([url.as_str(), TOKEN, "JSONRPC", "push"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 runs");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let next = async |lines: &mut tokio::io::Lines<_>, seen: &mut Vec<String>| {
        let line = tokio::time::timeout(Duration::from_secs(180), lines.next_line())
            .await
            .ok()
            .and_then(|l: std::io::Result<Option<String>>| l.ok().flatten());
        if let Some(l) = &line {
            seen.push(l.clone());
        }
        line
    };
    let slow = loop {
        match next(&mut lines, &mut seen).await {
            Some(l) if l.starts_with("restart ") => break l["restart ".len()..].to_owned(),
            Some(l) if l.starts_with("ok: ") => {}
            other => panic!(
                "the script stopped before the restart ({other:?}):\n{}\n{}",
                seen.join("\n"),
                cluster.log_tails()
            ),
        }
    };
    cluster.local_mut().gateway.as_mut().unwrap().kill();
    let nc = cluster.client().await;
    let report = common::final_report(&cluster, &nc, &slow, 60).await;
    assert_eq!(
        report.overall_status,
        swarm_common::SwarmStatus::Completed,
        "{report:?}"
    );
    cluster
        .local_mut()
        .gateway
        .as_mut()
        .unwrap()
        .restart()
        .unwrap();
    stdin.write_all(b"go\n").await.unwrap();
    loop {
        match next(&mut lines, &mut seen).await {
            Some(l) if l == "done" => break,
            Some(l) if l.starts_with("ok: ") => {}
            other => panic!(
                "the script failed after the restart ({other:?}):\n{}\n{}",
                seen.join("\n"),
                cluster.log_tails()
            ),
        }
    }
    assert!(child.wait().await.unwrap().success());
    common::assert_all_running(&mut cluster);
}

/// The gateway's own errors, by plain HTTP: what a client that is not the
/// SDK sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_the_spec_errors_in_each_binding() {
    let cluster = Cluster::builder()
        .managers(1)
        .workers(1)
        .gateway()
        .env("SWARM_GATEWAY_MAX_STREAMS_PER_CALLER", "2")
        .start()
        .await
        .expect("the cluster starts");
    let url = cluster.gateway_url().unwrap();
    let addr = url.trim_start_matches("http://").to_owned();
    let call = |method: &str, path: &str, headers: &[(&str, &str)], body: &str| {
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            request.push_str(&format!("{k}: {v}\r\n"));
        }
        request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        let addr = addr.clone();
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            s.write_all(request.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
            let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
            (status, body.to_owned())
        }
    };
    let v1 = [("A2A-Version", "1.0"), ("Content-Type", "application/json")];
    let rpc = |body: &str| call("POST", "/", &v1, body);

    let (status, body) = rpc("{not json").await;
    assert_eq!(status, 200);
    assert!(body.contains("-32700"), "{body}");
    let (_, body) = rpc(r#"{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}"#).await;
    assert!(
        body.contains("-32601"),
        "a 0.3 method name is not a 1.0 method: {body}"
    );
    let (_, body) =
        rpc(r#"{"jsonrpc":"2.0","id":"a","method":"GetTask","params":{"id":"nope"}}"#).await;
    assert!(
        body.contains("-32001") && body.contains("TASK_NOT_FOUND"),
        "{body}"
    );
    let (_, body) = rpc(r#"{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"url":"https://example.com/a.pdf"}]}}}"#).await;
    assert!(body.contains("-32005"), "{body}");
    let (_, body) = rpc(r#"{"jsonrpc":"2.0","id":3,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[]}}}"#).await;
    assert!(body.contains("-32602"), "{body}");
    let (_, body) = rpc(r#"{"jsonrpc":"2.0","id":4,"method":"CreateTaskPushNotificationConfig","params":{"taskId":"nope","url":"https://example.com/hook"}}"#).await;
    assert!(body.contains("-32001"), "{body}");
    // A webhook on loopback (or any private address) is refused, before
    // any mission is sent.
    for hook in [
        "http://127.0.0.1:9/hook",
        "http://169.254.169.254/x",
        "http://localhost/x",
    ] {
        let (_, body) = rpc(&format!(
            r#"{{"jsonrpc":"2.0","id":6,"method":"SendMessage","params":{{"message":{{"messageId":"m6","role":"ROLE_USER","parts":[{{"text":"Compute 1 + 1"}}]}},"configuration":{{"taskPushNotificationConfig":{{"url":"{hook}"}}}}}}}}"#
        ))
        .await;
        assert!(
            body.contains("-32602") && body.contains("--push-allow-private"),
            "{hook}: {body}"
        );
    }
    let (_, body) = rpc(r#"{"jsonrpc":"2.0","id":7,"method":"ListTasks","params":{}}"#).await;
    assert!(
        body.contains(r#""tasks":[]"#),
        "a refused push config sends no mission: {body}"
    );
    // Deeply nested JSON is refused, and the gateway stays up.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let (_, body) = rpc(&deep).await;
    assert!(body.contains("-32700"), "{}", &body[..body.len().min(300)]);
    // No version header means 0.3, which is not served.
    let (_, body) = call(
        "POST",
        "/",
        &[],
        r#"{"jsonrpc":"2.0","id":5,"method":"GetTask","params":{"id":"x"}}"#,
    )
    .await;
    assert!(
        body.contains("-32009") && body.contains("A2A-Version"),
        "{body}"
    );

    let (status, body) = call("GET", "/tasks/nope", &v1, "").await;
    assert_eq!(status, 404);
    assert!(body.contains("\"reason\":\"TASK_NOT_FOUND\""), "{body}");
    let (status, body) = call("POST", "/tasks/nope:cancel", &v1, "").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = call("GET", "/tasks?status=TASK_STATE_BORED", &v1, "").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = call("GET", "/elsewhere", &v1, "").await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = call("GET", "/.well-known/agent-card.json", &[], "").await;
    assert_eq!(status, 200);
    let card: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(card["supportedInterfaces"][0]["url"], url.as_str());
    assert!(
        card.get("securitySchemes").is_none(),
        "anonymous on loopback: {card}"
    );
    // A caller may hold only so many streams open; closing one frees it.
    let (status, body) = call(
        "POST",
        "/message:send",
        &v1,
        r#"{"message":{"messageId":"nap","role":"ROLE_USER","parts":[{"text":"{\"tool\": \"sleep\", \"arguments\": {\"ms\": 20000}}"}]},"configuration":{"returnImmediately":true}}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let task: serde_json::Value = serde_json::from_str(&body).unwrap();
    let path = format!("/tasks/{}:subscribe", task["task"]["id"].as_str().unwrap());
    let open = |path: String| {
        let addr = addr.clone();
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nA2A-Version: 1.0\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                s.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
            (status, s)
        }
    };
    let (first, held) = open(path.clone()).await;
    let (second, _held) = open(path.clone()).await;
    assert_eq!((first, second), (200, 200));
    let (status, body) = call("GET", &path, &v1, "").await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("TOO_MANY_STREAMS"), "{body}");
    drop(held);
    common::eventually(
        Duration::from_secs(10),
        Duration::from_millis(100),
        "a closed stream frees its place",
        || {
            let path = path.clone();
            async move {
                match open(path).await {
                    (200, _) => Ok(()),
                    (status, _) => Err(format!("{status}")),
                }
            }
        },
    )
    .await;
    let mut cluster = cluster;
    common::assert_all_running(&mut cluster);
}

/// The A2A NATS binding (docs/a2a-nats.md): the card names it, and the
/// client library's caller runs the same methods over NATS request/reply,
/// a stream of a task to its end among them, with the spec's errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nats_binding_serves_the_same_methods() {
    use futures::StreamExt;
    use swarm_client::a2a::{A2aRpcError, NatsA2a};
    let cluster = gateway_cluster().await;
    let card: serde_json::Value = reqwest::get(format!(
        "{}/.well-known/agent-card.json",
        cluster.gateway_url().unwrap()
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let nats = card["supportedInterfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["protocolBinding"] == swarm_gateway::nats::BINDING)
        .unwrap_or_else(|| panic!("the card names the NATS binding: {card}"));
    assert_eq!(
        nats["url"].as_str().unwrap(),
        format!("{}/a2a.rpc", cluster.url())
    );
    let nc = cluster.client().await;
    let a2a = NatsA2a::new(nc.clone(), Some(TOKEN.to_owned()));

    // A mission streamed from its start to its end.
    let events: Vec<serde_json::Value> = a2a
        .stream(
            "SendStreamingMessage",
            serde_json::json!({"message": {"messageId": "nats-1", "role": "ROLE_USER",
                "parts": [{"text": "1. Compute 6 * 7\n2. Checksum the previous result"}]}}),
        )
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert!(events[0].get("task").is_some(), "{events:?}");
    let id = events[0]["task"]["id"].as_str().unwrap().to_owned();
    // The end: a terminal status update, or (a mission that ended before
    // the stream read it) the task alone, ended.
    let last = events.last().unwrap();
    let end = last
        .get("statusUpdate")
        .or_else(|| last.get("task"))
        .map(|e| e["status"]["state"].clone());
    assert_eq!(
        end,
        Some(serde_json::json!("TASK_STATE_COMPLETED")),
        "{events:?}"
    );
    // A running task followed to its end.
    let napping = a2a
        .send_text("nats-0", r#"{"tool": "sleep", "arguments": {"ms": 1500}}"#)
        .await
        .unwrap();
    let followed: Vec<serde_json::Value> = a2a
        .subscribe(napping["id"].as_str().unwrap())
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert_eq!(
        followed.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{followed:?}"
    );
    let done = a2a.get_task(&id).await.unwrap();
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(done["artifacts"].to_string().contains("42"), "{done}");
    let listed = a2a.list_tasks(serde_json::json!({})).await.unwrap();
    assert_eq!(listed["tasks"][1]["id"], id.as_str(), "{listed}");

    // Cancel a running one.
    let slow = a2a
        .send_text("nats-2", r#"{"tool": "sleep", "arguments": {"ms": 30000}}"#)
        .await
        .unwrap();
    let slow = slow["id"].as_str().unwrap();
    let cancelled = a2a.cancel_task(slow).await.unwrap();
    assert_eq!(
        cancelled["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );

    // The spec's errors, as JSON-RPC errors in the reply.
    let code = |e: anyhow::Error| e.downcast_ref::<A2aRpcError>().map(|e| e.code);
    assert_eq!(
        code(a2a.get_task("no-such-task").await.unwrap_err()),
        Some(-32001)
    );
    let anonymous = NatsA2a::new(nc.clone(), None);
    let refused = anonymous.get_task(&id).await.unwrap_err();
    assert!(
        refused.to_string().contains("authentication")
            || format!("{refused:#}").contains("authentication"),
        "{refused:#}"
    );
    let subscribed_late = a2a.subscribe(&id).await.unwrap().next().await.unwrap();
    assert_eq!(code(subscribed_late.unwrap_err()), Some(-32004));
    // A request that is not JSON-RPC, and one without a version.
    let reply = nc
        .request(swarm_gateway::nats::RPC_SUBJECT, "not json".into())
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&reply.payload).contains("-32700"));
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Authorization", format!("Bearer {TOKEN}").as_str());
    let reply = nc
        .request_with_headers(
            swarm_gateway::nats::RPC_SUBJECT,
            headers,
            r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#.into(),
        )
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&reply.payload).contains("-32009"));
    let mut cluster = cluster;
    common::assert_all_running(&mut cluster);
}
