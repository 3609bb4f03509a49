//! Helpers shared by the whole-system tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // each test file uses a subset; tests may panic

use std::time::Duration;

use async_nats::jetstream;
use bytes::Bytes;
use futures::StreamExt;
use swarm_common::{
    Codec, Envelope, FinalReport, Payload, SwarmDeploymentPlan, SwarmState, TaskDefinition,
    TaskOutcome, WorkerDeploymentPlan, mission::MissionRequest, subjects,
};
use swarm_testkit::Cluster;

/// Submits a mission as JSON and returns the swarm id.
pub async fn submit(nc: &async_nats::Client, request: &MissionRequest) -> String {
    swarm_client::client::submit(nc, request, Duration::from_secs(15))
        .await
        .expect("mission accepted")
        .swarm_id
}

/// Follows a swarm to its final report, failing with the logs after `secs`.
pub async fn final_report(
    cluster: &Cluster,
    nc: &async_nats::Client,
    swarm_id: &str,
    secs: u64,
) -> FinalReport {
    match swarm_client::client::watch(nc, swarm_id, Duration::from_secs(secs), |_| {}).await {
        Ok(r) => r,
        Err(e) => panic!("{e:#}\n{}", cluster.log_tails()),
    }
}

/// Every message of type `T` stored on `subject`.
pub async fn messages<T: Payload>(nc: &async_nats::Client, subject: &str) -> Vec<Envelope<T>> {
    // Assignments have a stream of their own.
    let stream = if subject.starts_with("a2ap.work.") {
        subjects::WORK_STREAM
    } else {
        subjects::A2AP_STREAM
    };
    stored(nc, stream, subject)
        .await
        .iter()
        .map(swarm_runtime_decode::<T>)
        .collect()
}

/// The payload of every message stored on `subject` in `stream`.
pub async fn messages_raw(nc: &async_nats::Client, stream: &str, subject: &str) -> Vec<Bytes> {
    stored(nc, stream, subject)
        .await
        .into_iter()
        .map(|m| m.payload.clone())
        .collect()
}

/// Every message published on `subject` and stored in `stream`, oldest
/// first (found where the stream stores it: the A2AP stream puts each
/// swarm's messages under its manager partition).
async fn stored(nc: &async_nats::Client, stream: &str, subject: &str) -> Vec<jetstream::Message> {
    let js = jetstream::new(nc.clone());
    let stream = js.get_stream(stream).await.unwrap();
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: swarm_runtime::wire::stored_subject(&stream, subject),
            ..Default::default()
        })
        .await
        .unwrap();
    let pending = consumer.cached_info().num_pending as usize;
    let mut out = Vec::new();
    if pending == 0 {
        return out;
    }
    let mut msgs = consumer.messages().await.unwrap();
    while out.len() < pending {
        let m = tokio::time::timeout(Duration::from_secs(5), msgs.next())
            .await
            .expect("stored messages arrive")
            .unwrap()
            .unwrap();
        out.push(m);
    }
    out
}

fn swarm_runtime_decode<T: Payload>(m: &jetstream::Message) -> Envelope<T> {
    let codec = Codec::from_content_type(
        m.headers
            .as_ref()
            .and_then(|h| h.get(swarm_common::headers::CONTENT_TYPE))
            .map(|v| v.as_str()),
    )
    .unwrap();
    Envelope::<T>::decode(codec, &m.payload).unwrap()
}

/// The swarm's stored state.
pub async fn state(nc: &async_nats::Client, swarm_id: &str) -> SwarmState {
    swarm_client::client::state(nc, swarm_id)
        .await
        .unwrap()
        .expect("swarm state stored")
}

/// Sends raw bytes as a request and returns the reply.
pub async fn raw_request(
    nc: &async_nats::Client,
    headers: Option<async_nats::HeaderMap>,
    body: Vec<u8>,
) -> async_nats::Message {
    let body = Bytes::from(body);
    let headers = headers.unwrap_or_default();
    tokio::time::timeout(
        Duration::from_secs(10),
        nc.request_with_headers(subjects::MISSIONS, headers, body),
    )
    .await
    .expect("the boss answers in time")
    .expect("the boss answers")
}

/// A task of persona `w` in an explicit plan.
pub fn task(id: &str, description: &str, deps: &[&str]) -> TaskDefinition {
    TaskDefinition {
        estimated_minutes: None,
        on_failure: None,
        task_id: id.into(),
        title: format!("task {id}"),
        description: description.into(),
        assigned_to: "w".into(),
        dependencies: deps.iter().map(|d| d.to_string()).collect(),
        priority: None,
        max_result_bytes: None,
        gates: Vec::new(),
        condition: None,
        map: None,
    }
}

/// An explicit tool call as a task description.
pub fn tool(name: &str, arguments: serde_json::Value) -> String {
    serde_json::json!({"tool": name, "arguments": arguments}).to_string()
}

/// A task description that echoes `text`.
pub fn echo(text: &str) -> String {
    tool("echo", serde_json::json!({"text": text}))
}

/// Submits a completed result for `task_id`'s `attempt` (revision 0) as a
/// worker would: the test plays the worker.
pub async fn play_worker_result(
    nc: &async_nats::Client,
    swarm_id: &str,
    task_id: &str,
    attempt: u32,
    text: &str,
) {
    let env = worker_result(swarm_id, task_id, attempt, text);
    let js = jetstream::new(nc.clone());
    swarm_runtime::wire::publish(&js, subjects::result(swarm_id, task_id), &env, None)
        .await
        .unwrap();
}

/// Submits a completed result for `task_id`'s first attempt that carries
/// `token` instead of its assignment's: a forgery.
pub async fn play_forged_result(
    nc: &async_nats::Client,
    swarm_id: &str,
    task_id: &str,
    text: &str,
    token: &str,
) {
    let mut env = worker_result(swarm_id, task_id, 1, text);
    env.body.token = token.to_owned();
    let js = jetstream::new(nc.clone());
    swarm_runtime::wire::publish(&js, subjects::result(swarm_id, task_id), &env, None)
        .await
        .unwrap();
}

/// Hands a completed result over as a worker does (`wire::hand_over`),
/// naming `ack_subject` as the assignment it answers, under a deduplication
/// id made from it (so results naming different subjects are all stored).
pub async fn play_worker_handover(
    nc: &async_nats::Client,
    swarm_id: &str,
    task_id: &str,
    text: &str,
    ack_subject: &str,
) {
    let env = worker_result(swarm_id, task_id, 1, text);
    let msg_id = format!("{swarm_id}.{task_id}.played.{ack_subject}");
    swarm_runtime::wire::hand_over(
        &jetstream::new(nc.clone()),
        subjects::result(swarm_id, task_id),
        &env,
        &msg_id,
        ack_subject,
    )
    .await
    .unwrap();
}

/// The token the test clusters' managers expect of a result.
pub fn token(swarm_id: &str, task_id: &str, attempt: u32, revision: u32) -> String {
    swarm_manager::token::TokenKey::new(swarm_testkit::TEST_TOKEN_KEY.as_bytes())
        .token(swarm_id, task_id, attempt, revision)
}

/// A completed result for `task_id`'s `attempt` (revision 0), from "test-worker".
fn worker_result(
    swarm_id: &str,
    task_id: &str,
    attempt: u32,
    text: &str,
) -> Envelope<swarm_common::ResultSubmission> {
    let now = chrono::Utc::now();
    let submission = swarm_common::ResultSubmission {
        skills: Default::default(),
        artifacts: Vec::new(),
        token: token(swarm_id, task_id, attempt, 0),
        task_id: task_id.into(),
        status: swarm_common::TaskStatus::Completed,
        result: text.into(),
        attempt,
        revision: 0,
        provider: "offline".into(),
        worker_id: "test-worker".into(),
        started_at: now,
        completed_at: now,
        steps: Vec::new(),
        metrics: Default::default(),
        error: None,
        gate_verdicts: Vec::new(),
    };
    Envelope::new("test-worker", "manager", swarm_id, task_id, submission)
}

/// A task description that waits `ms` milliseconds.
pub fn sleep(ms: u64) -> String {
    tool("sleep", serde_json::json!({"ms": ms}))
}

/// A plan of one persona `w` (pool `general`, every tool) and `tasks`.
pub fn plan(tasks: Vec<TaskDefinition>) -> SwarmDeploymentPlan {
    SwarmDeploymentPlan {
        seed: Default::default(),
        sub_managers: Vec::new(),
        manager_directive: "Run every task; accept only non-empty results.".into(),
        workers: vec![WorkerDeploymentPlan {
            name: "w".into(),
            role: "tester".into(),
            system_prompt: "You test Swarm.".into(),
            tools: vec![],
            collaborators: vec![],
            pool: "general".into(),
            a2a_url: None,
            a2a_credential: None,
            skill: None,
        }],
        tasks,
        success_criteria: vec![],
        planner: String::new(),
    }
}

/// A mission with an explicit plan.
pub fn mission(text: &str, tasks: Vec<TaskDefinition>) -> MissionRequest {
    MissionRequest {
        plan: Some(plan(tasks)),
        ..MissionRequest::text(text)
    }
}

/// Exactly one `FinalReport` was published for the swarm.
pub async fn assert_one_report(nc: &async_nats::Client, swarm_id: &str) {
    // Give a duplicate, if any were sent, time to land before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reports = messages::<FinalReport>(nc, &subjects::report(swarm_id)).await;
    assert_eq!(reports.len(), 1, "exactly one FinalReport for {swarm_id}");
}

/// Every role process of the cluster is still running.
pub fn assert_all_running(cluster: &mut Cluster) {
    let local = cluster.local_mut();
    for p in local
        .managers
        .iter_mut()
        .chain(local.workers.iter_mut())
        .chain(local.bosses.iter_mut())
    {
        assert!(p.is_running(), "{} stopped", p.name());
    }
}

/// The most memory each role process has held so far (its peak resident
/// set, `VmHWM`), printed, and checked against `bound_mib`: the bound a
/// probe must leave every role under (SECURITY.md, "Memory").
#[allow(dead_code)] // not every test binary uses every helper
pub fn assert_peaks_below(cluster: &mut Cluster, probe: &str, bound_mib: u64) {
    let local = cluster.local_mut();
    for p in local
        .bosses
        .iter()
        .chain(local.managers.iter())
        .chain(local.workers.iter())
    {
        let pid = p.pid().expect("a running role has a pid");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let peak_kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmHWM");
        println!("{probe}: {} peaked at {} MiB", p.name(), peak_kb / 1024);
        assert!(
            peak_kb < bound_mib * 1024,
            "{probe}: {} peaked at {peak_kb} kB, over {bound_mib} MiB",
            p.name()
        );
    }
}

/// The report's outcome of task `task_id`.
pub fn outcome<'a>(report: &'a FinalReport, task_id: &str) -> &'a TaskOutcome {
    report
        .task_results
        .iter()
        .find(|t| t.task_id == task_id)
        .unwrap_or_else(|| panic!("no task {task_id} in the report"))
}

/// Asks `check` every `every` until it gives a value; fails saying `what`
/// (and the last answer's reason) after `within`.
pub async fn eventually<T, F, Fut>(within: Duration, every: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(why) => assert!(
                std::time::Instant::now() < deadline,
                "{what} within {within:?}: {why}"
            ),
        }
        tokio::time::sleep(every).await;
    }
}

/// The durable consumer of `pool`'s workers, as the server sees it now.
pub async fn worker_consumer_info(
    nc: &async_nats::Client,
    pool: &str,
) -> jetstream::consumer::Info {
    let stream = jetstream::new(nc.clone())
        .get_stream(subjects::WORK_STREAM)
        .await
        .unwrap();
    let mut consumer: jetstream::consumer::PullConsumer = stream
        .get_consumer(&subjects::worker_consumer(pool))
        .await
        .unwrap();
    consumer.info().await.unwrap().clone()
}

/// Waits until no assignment of `pool` waits for an ack, and returns its
/// consumer's figures then.
pub async fn no_assignment_pending(
    nc: &async_nats::Client,
    pool: &str,
    within: Duration,
) -> jetstream::consumer::Info {
    eventually(
        within,
        Duration::from_millis(50),
        "every assignment acked",
        || async {
            let info = worker_consumer_info(nc, pool).await;
            if info.num_ack_pending == 0 {
                Ok(info)
            } else {
                Err(format!("{info:#?}"))
            }
        },
    )
    .await
}

/// A cluster of one boss, one manager and one worker, started.
pub async fn one_of_each() -> Cluster {
    Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap()
}

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The PYTHONPATH of a Python peer: `.python` (where `.ci/run` installs
/// the packages) first, then the caller's. `None`, after saying why, when
/// `imports` (a Python import statement's list) cannot be imported from it
/// and CI is not set; with CI set a test must run its peer, so it panics
/// naming `install`, the pip command that fixes it.
pub fn python_path(what: &str, imports: &str, install: &str) -> Option<std::ffi::OsString> {
    let path = std::env::join_paths(
        std::iter::once(repo().join(".python"))
            .chain(std::env::var_os("PYTHONPATH").map(std::path::PathBuf::from)),
    )
    .expect("a PYTHONPATH");
    let ready = std::process::Command::new("python3")
        .env("PYTHONPATH", &path)
        .args(["-c", &format!("import {imports}")])
        .output();
    match ready {
        Ok(out) if out.status.success() => Some(path),
        other => {
            let why = match other {
                Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
                Err(e) => e.to_string(),
            };
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set, so {what} must run, but: {why}; install with `{install}`"
            );
            eprintln!("skipped: {what} cannot run ({why}); install with `{install}`");
            None
        }
    }
}

/// The status line and body of `GET /metrics` on 127.0.0.1:`port`.
pub async fn get_metrics(port: u16) -> Option<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .ok()?;
    let mut reply = String::new();
    conn.read_to_string(&mut reply).await.ok()?;
    let (head, body) = reply.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_owned(), body.to_owned()))
}

/// Every series of a Prometheus text body (name and labels, as written)
/// and its value.
pub fn series(body: &str) -> std::collections::BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// `count` consecutive ports of 127.0.0.1 that are free now (the roles bind
/// them moments later; a port taken in between fails the start, naming it).
pub fn free_ports(count: u16) -> u16 {
    loop {
        let first = swarm_testkit::free_port().unwrap();
        let free = (0..count).all(|i| {
            first
                .checked_add(i)
                .is_some_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        });
        if free {
            return first;
        }
    }
}
