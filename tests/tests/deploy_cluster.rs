//! The whole system as the Kubernetes manifests run it, as local processes:
//! a three-node nats-server cluster from the production config
//! (k8s/base/nats/), and the boss, manager and worker replicas with the
//! replica counts and environment of k8s/base/<role>.yaml (users and
//! passwords of their roles, three replicas per stream and bucket, JSON
//! logs, the health server), and the A2A gateway as k8s/base/gateway.yaml
//! runs it. A client submits a mission as the `client` user; it completes;
//! an A2A caller runs one through the gateway with a push notification
//! webhook, reads and lists it, fetches its report and cancels another;
//! every role answers `/readyz` and `/metrics`; and no node logged a
//! permissions violation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use swarm_common::{SwarmStatus, mission::MissionRequest, subjects};
use swarm_testkit::{ManagedProcess, NatsCluster, bin_dir, free_port, http_get, role};

/// A role's Deployment as the manifest gives it.
struct Manifest {
    replicas: usize,
    /// The literal `value:` entries of the container's env.
    env: Vec<(String, String)>,
}

/// Reads `replicas:` and the `- name:` / `value:` env pairs of
/// k8s/base/<role>.yaml (entries with `valueFrom` are left out: the test
/// supplies the secret and the pod name).
fn manifest(role: &str) -> Manifest {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../k8s/base"))
        .join(format!("{role}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut replicas = None;
    let mut env = Vec::new();
    let mut name: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("replicas:") {
            replicas = Some(n.trim().parse().unwrap());
        } else if let Some(n) = line.strip_prefix("- name:") {
            name = Some(n.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("value:")
            && let Some(n) = name.take()
        {
            env.push((n, v.trim().trim_matches('"').to_owned()));
        } else if !line.starts_with('#') {
            // Anything between a name and its value (valueFrom, ...) unpairs them.
            if !line.is_empty() && !line.starts_with("value") {
                name = None;
            }
        }
    }
    Manifest {
        // A Job has no replicas: it runs once.
        replicas: replicas.unwrap_or(1),
        env,
    }
}

fn env_of<'a>(m: &'a Manifest, key: &str) -> &'a str {
    m.env
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {key} in the manifest"))
}

struct Role {
    process: ManagedProcess,
    health: SocketAddr,
}

/// Waits until every role has logged `<role> ready` since its last start
/// and answers `/readyz`, restarting any that exited, as the kubelet
/// restarts a crashed container: a role whose setup times out while the
/// new cluster settles exits with an error.
async fn wait_ready(roles: &mut [Role], nats: &NatsCluster) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let mut all = true;
        for r in roles.iter_mut() {
            if !r.process.is_running() {
                r.process.restart().unwrap();
                all = false;
                continue;
            }
            let kind = r.process.name().split('-').next().unwrap().to_owned();
            let tail = r.process.log_tail(400);
            let this_run = tail.rsplit("=== swarm: starting").next().unwrap_or("");
            let started = this_run.contains(&format!("{kind} ready"));
            let ready = matches!(http_get(r.health, "/readyz"), Ok((200, _)));
            all &= started && ready;
        }
        if all {
            return;
        }
        if Instant::now() >= deadline {
            let logs: String = roles
                .iter()
                .map(|r| format!("==> {} <==\n{}\n", r.process.name(), r.process.log_tail(30)))
                .collect();
            panic!(
                "the roles did not all start:\n{logs}\n{}",
                nats.log_tails(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_completes_on_a_three_node_cluster_configured_like_the_manifests() {
    let mut nats = NatsCluster::start(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "alpha beta gamma\n").unwrap();

    let bins = bin_dir();
    // The setup Job first: `swarm setup` as admin makes the streams and
    // buckets, which no role may create.
    let setup = manifest("setup-job");
    assert_eq!(env_of(&setup, "NATS_USER"), "admin");
    let out = std::process::Command::new(bins.join("swarm"))
        .arg("setup")
        .env_clear()
        .env("NATS_URL", nats.nodes()[0].url())
        .env("NATS_USER", "admin")
        .env("NATS_PASSWORD", role("admin").password)
        .env("SWARM_REPLICAS", env_of(&setup, "SWARM_REPLICAS"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "swarm setup: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("WORK") && said.contains("KV_approvals"),
        "{said}"
    );
    let mut roles = Vec::new();
    let mut gateways = Vec::new();
    for name in ["boss", "manager", "worker", "gateway"] {
        let m = manifest(name);
        assert_eq!(env_of(&m, "NATS_USER"), name, "each role has its own user");
        assert_eq!(
            env_of(&m, "SWARM_REPLICAS"),
            "3",
            "the base runs a three-node cluster"
        );
        for i in 1..=m.replicas {
            let id = format!("{name}-{i}");
            let port = free_port().unwrap();
            let mut env: Vec<(String, String)> = m
                .env
                .iter()
                .filter(|(k, _)| k != "NATS_URL" && k != "SWARM_HEALTH_PORT")
                .cloned()
                .collect();
            env.extend([
                // One URL, as the pods get the `nats` Service's (the client
                // library does not split a comma-separated list).
                ("NATS_URL".to_owned(), nats.nodes()[0].url()),
                ("NATS_PASSWORD".to_owned(), role(name).password.to_owned()),
                ("SWARM_AGENT_ID".to_owned(), id.clone()),
                ("SWARM_HEALTH_PORT".to_owned(), port.to_string()),
                ("SWARM_HEALTH_ADDR".to_owned(), "127.0.0.1".to_owned()),
            ]);
            if name == "gateway" {
                let listen = SocketAddr::from(([127, 0, 0, 1], free_port().unwrap()));
                env.retain(|(k, _)| k != "SWARM_GATEWAY_LISTEN");
                env.extend([
                    ("SWARM_GATEWAY_LISTEN".to_owned(), listen.to_string()),
                    // The Secret gateway-tokens.
                    (
                        "SWARM_GATEWAY_TOKENS".to_owned(),
                        format!("ops:{A2A_TOKEN}"),
                    ),
                    // The test's webhook is on loopback.
                    (
                        "SWARM_GATEWAY_PUSH_ALLOW_PRIVATE".to_owned(),
                        "true".to_owned(),
                    ),
                ]);
                gateways.push(listen);
            }
            // The pod's volumes, as local directories.
            for (k, v) in env.iter_mut() {
                if k == "SWARM_WORKSPACE" {
                    *v = workspace.display().to_string();
                } else if k == "SWARM_REPORTS_DIR" {
                    *v = dir.path().join("reports").display().to_string();
                }
            }
            let process = ManagedProcess::spawn(
                id.clone(),
                bins.join(name),
                Vec::<String>::new(),
                env,
                dir.path().join("logs").join(format!("{id}.log")),
            )
            .unwrap();
            roles.push(Role {
                process,
                health: SocketAddr::from(([127, 0, 0, 1], port)),
            });
        }
    }
    wait_ready(&mut roles, &nats).await;

    // Streams and buckets have three replicas, as SWARM_REPLICAS says.
    let client = nats.connect("client").await.unwrap();
    let js = async_nats::jetstream::new(client.clone());
    for stream in [subjects::A2AP_STREAM, "KV_swarms", "OBJ_reports"] {
        let info = js.get_stream(stream).await.unwrap().cached_info().clone();
        assert_eq!(info.config.num_replicas, 3, "{stream}");
    }

    // /readyz says the streams are there; the boss service may register a
    // moment later.
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .request("$SRV.PING.boss", bytes::Bytes::new())
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the boss service never answered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A client submits a mission and follows it to its report.
    let reply = swarm_client::client::submit(
        &client,
        &MissionRequest::text("1. Count the words in notes.txt\n2. Compute 6 * 7\n"),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let report =
        swarm_client::client::watch(&client, &reply.swarm_id, Duration::from_secs(90), |_| {})
            .await
            .unwrap_or_else(|e| {
                let logs: String = roles
                    .iter()
                    .map(|r| format!("==> {} <==\n{}\n", r.process.name(), r.process.log_tail(60)))
                    .collect();
                let nats_logs = nats.log_tails(100_000);
                let refused: Vec<&str> = nats_logs
                    .lines()
                    .filter(|l| l.contains("Violation"))
                    .collect();
                panic!("{e:#}\npermission violations: {refused:#?}\n{logs}")
            });
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    swarm_client::client::wait_for_rendering(&client, &reply.swarm_id, Duration::from_secs(30))
        .await
        .unwrap();
    let html =
        swarm_client::client::fetch_report(&client, &reply.swarm_id, &dir.path().join("r.html"))
            .await
            .unwrap();
    assert!(std::fs::read_to_string(html).unwrap().contains("notes.txt"));

    // An A2A caller, through the gateway as user `gateway`, over HTTP and
    // (as user `client`) over the NATS binding.
    a2a_through_the_gateway(&gateways, &client).await;

    // Every role answers /readyz and /metrics; the bosses counted the mission.
    let mut accepted = 0;
    let mut reported = 0;
    for r in &roles {
        let (status, _) = http_get(r.health, "/readyz").unwrap();
        assert_eq!(status, 200, "{}", r.process.name());
        let (status, metrics) = http_get(r.health, "/metrics").unwrap();
        assert_eq!(status, 200);
        let kind = r.process.name().split('-').next().unwrap();
        assert!(
            metrics.contains(&format!("swarm_build_info{{role=\"{kind}\"")),
            "{metrics}"
        );
        let count = |needle: &str| -> u32 {
            metrics
                .lines()
                .find(|l| l.starts_with(needle))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        accepted += count("swarm_missions_intake_total{role=\"boss\",state=\"accepted\"}");
        reported += count("swarm_mission_outcomes_total{role=\"boss\",status=\"completed\"}");
    }
    assert_eq!(
        accepted, 3,
        "one mission of the client, two of the A2A caller"
    );
    assert!(reported >= 1, "the completed mission was reported");

    // The roles did all of this within their permissions.
    let logs = nats.log_tails(100_000);
    let violations: Vec<&str> = logs.lines().filter(|l| l.contains("Violation")).collect();
    assert!(violations.is_empty(), "{violations:#?}");

    // A node dies mid-mission (the roles use node 0, as pods use the
    // Service): with three replicas the cluster elects new leaders and the
    // mission in flight goes on.
    let in_flight = swarm_client::client::submit(
        &client,
        &common::mission(
            "in flight while a node dies",
            vec![
                common::task("one", &common::sleep(1500), &[]),
                common::task("two", &common::sleep(1500), &["one"]),
                common::task("three", &common::echo("three"), &["two"]),
            ],
        ),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    nats.kill(2);
    // Until the streams led by the dead node elect new leaders, JetStream
    // does not answer for them (the boss then refuses a mission as
    // retriable): wait for every stream to have a live leader.
    let deadline = Instant::now() + Duration::from_secs(30);
    for stream in [
        "MISSIONS",
        "A2AP",
        "DEADLETTER",
        "KV_swarms",
        "KV_missions",
        "OBJ_reports",
    ] {
        loop {
            let leader = match js.get_stream(stream).await {
                Ok(mut s) => s
                    .info()
                    .await
                    .ok()
                    .and_then(|i| i.cluster.clone())
                    .and_then(|c| c.leader),
                Err(_) => None,
            };
            if leader.is_some_and(|l| l != "nats-2") {
                break;
            }
            assert!(Instant::now() < deadline, "{stream} has no live leader");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let reply = swarm_client::client::submit(
        &client,
        &MissionRequest::text("Compute 2 + 2"),
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    let report = follow(&client, &reply.swarm_id).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let report = follow(&client, &in_flight.swarm_id).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(common::outcome(&report, "three").result, "three");
    nats.restart(2).unwrap();
}

/// The A2A caller's token, as the Secret gateway-tokens gives it.
const A2A_TOKEN: &str = "deploy-test-a2a-token-0123456789";

/// A mission through each of the gateway replicas: one completes and
/// pushes its end to a webhook; its task is read, listed and its report
/// fetched; another is cancelled.
async fn a2a_through_the_gateway(gateways: &[SocketAddr], nc: &async_nats::Client) {
    use axum::{Router, http::HeaderMap, routing::post};
    use serde_json::{Value, json};
    let pushed = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, Value)>::new()));
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", hook.local_addr().unwrap());
    let sink = pushed.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: axum::Json<Value>| {
            let sink = sink.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                sink.lock().unwrap().push((auth, body.0));
            }
        }),
    );
    tokio::spawn(async move { axum::serve(hook, app).await });
    let http = reqwest::Client::new();
    let rpc = async |gateway: SocketAddr, method: &str, params: Value| -> Value {
        let answer: Value = http
            .post(format!("http://{gateway}/"))
            .bearer_auth(A2A_TOKEN)
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    };
    let message = |id: &str, text: &str| json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}]});
    let first = gateways[0];
    let last = *gateways.last().unwrap();
    // The card, with the running pool's skills (read from the agents bucket).
    let card: Value = http
        .get(format!("http://{first}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(card["skills"].to_string().contains("calculator"), "{card}");
    let sent = rpc(
        first,
        "SendMessage",
        json!({
            "message": message("m-1", "Compute 6 * 7"),
            "configuration": {
                "returnImmediately": true,
                "taskPushNotificationConfig": {
                    "url": hook_url,
                    "authentication": {"scheme": "Bearer", "credentials": "hook-secret"}
                }
            }
        }),
    )
    .await;
    let id = sent["task"]["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let end = loop {
        let found = pushed.lock().unwrap().iter().find_map(|(auth, event)| {
            (event["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED")
                .then(|| (auth.clone(), event.clone()))
        });
        if let Some(end) = found {
            break end;
        }
        assert!(
            Instant::now() < deadline,
            "no push of the end: {:?}",
            pushed.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(end.0, "Bearer hook-secret");
    assert_eq!(end.1["statusUpdate"]["taskId"], id.as_str());
    // Any replica answers for any task.
    let task = rpc(last, "GetTask", json!({"id": id})).await;
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    let listed = rpc(last, "ListTasks", json!({})).await;
    assert_eq!(listed["tasks"][0]["id"], id.as_str(), "{listed}");
    let configs = rpc(
        last,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(configs["configs"][0]["url"], hook_url.as_str(), "{configs}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = http
            .get(format!("http://{last}/reports/{id}.html"))
            .bearer_auth(A2A_TOKEN)
            .send()
            .await
            .unwrap();
        if page.status() == 200 {
            assert!(page.text().await.unwrap().contains("42"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no report page: {}",
            page.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let slow = rpc(
        first,
        "SendMessage",
        json!({
            "message": message("m-2", r#"{"tool": "sleep", "arguments": {"ms": 30000}}"#),
            "configuration": {"returnImmediately": true}
        }),
    )
    .await;
    let slow = slow["task"]["id"].as_str().unwrap().to_owned();
    // Over NATS: the task read, and followed while it is cancelled (a
    // stream is many answers to one request).
    let over_nats = swarm_client::a2a::NatsA2a::new(nc.clone(), Some(A2A_TOKEN.to_owned()));
    let read = over_nats.get_task(&id).await.unwrap();
    assert_eq!(read["status"]["state"], "TASK_STATE_COMPLETED", "{read}");
    let mut events = over_nats.subscribe(&slow).await.unwrap();
    use futures::StreamExt as _;
    let first = events.next().await.unwrap().unwrap();
    assert!(first.get("task").is_some(), "{first}");
    let cancelled = rpc(last, "CancelTask", json!({"id": slow})).await;
    assert_eq!(
        cancelled["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    let rest: Vec<_> = events.collect().await;
    let end = rest.last().unwrap().as_ref().unwrap();
    assert_eq!(
        end["statusUpdate"]["status"]["state"], "TASK_STATE_CANCELED",
        "{rest:?}"
    );
}

/// Follows a swarm to its final report, starting over when following fails
/// while the cluster elects new leaders.
async fn follow(client: &async_nats::Client, swarm_id: &str) -> swarm_common::FinalReport {
    let mut last = None;
    for _ in 0..5 {
        match swarm_client::client::watch(client, swarm_id, Duration::from_secs(60), |_| {}).await {
            Ok(report) => return report,
            Err(e) => {
                eprintln!("following {swarm_id}: {e:#}; again");
                last = Some(e);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    panic!("cannot follow {swarm_id}: {last:?}")
}
