//! The `swarm` binary against real clusters: `list` over many swarms with
//! its filters (and the bounded cost of a page), errors for unknown and
//! finished swarms, approvals and questions of ended swarms, the exit codes
//! of following a mission, plain progress lines when stdout is not a
//! terminal, global connection flags, and `swarm demo` run from a folder
//! outside the repository, and `swarm inspect` reading stored messages and
//! values whatever their codec.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use swarm_common::{
    Codec,
    approval::{ApprovalRecord, ApprovalStatus, InputRecord},
    mission::MissionRequest,
    subjects,
};
use swarm_testkit::{Cluster, NatsServer};

/// The `swarm` binary beside the role binaries (the test kit builds it
/// with them when it is missing or older than its sources).
fn swarm_bin() -> PathBuf {
    let bin = swarm_testkit::bin_dir().join(format!("swarm{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.is_file(), "no swarm binary at {}", bin.display());
    bin
}

/// What one run of `swarm` did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", self.stdout, self.stderr))
    }
}

/// Runs `swarm args...` in `dir` (stdout and stderr piped, so not a
/// terminal), with `NATS_URL` and `NO_COLOR` unset.
async fn swarm_in(dir: &Path, args: &[&str]) -> Run {
    let started = Instant::now();
    let out = tokio::process::Command::new(swarm_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("NATS_URL")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("swarm runs");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    };
    assert!(
        !run.stdout.contains('\u{1b}') && !run.stderr.contains('\u{1b}'),
        "ANSI codes in output that is not a terminal: {run:?}"
    );
    run
}

/// Runs `swarm` with `args`, naming the server last with `-s`: connection
/// flags are accepted after the subcommand.
async fn swarm(url: &str, args: &[&str]) -> Run {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-s", url]);
    swarm_in(&std::env::temp_dir(), &all).await
}

fn assert_code(run: &Run, code: i32) {
    assert_eq!(run.code, code, "{run:#?}");
}

/// Submits a mission and returns its swarm id.
async fn submit(nc: &async_nats::Client, request: &MissionRequest) -> String {
    common::submit(nc, request).await
}

fn echo_mission(text: &str) -> MissionRequest {
    common::mission(
        &format!("echo {text}\nsecond line"),
        vec![common::task("say", &common::echo(text), &[])],
    )
}

/// A mission whose only task returns nothing: review refuses it until the
/// revisions run out, and the swarm fails.
fn failing_mission(n: usize) -> MissionRequest {
    common::mission(
        &format!("fail {n}"),
        vec![common::task("empty", &common::echo(""), &[])],
    )
}

fn sleeping_mission(text: &str, ms: u64) -> MissionRequest {
    common::mission(text, vec![common::task("nap", &common::sleep(ms), &[])])
}

/// Waits until the boss has recorded the swarm's final report.
async fn settled(nc: &async_nats::Client, swarm_id: &str) {
    swarm_client::client::wait_for_rendering(nc, swarm_id, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
}

/// Waits until the swarm's state says a worker runs its task.
async fn running(nc: &async_nats::Client, swarm_id: &str) {
    common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(50),
        "the task started",
        || async {
            match swarm_client::client::state(nc, swarm_id).await.unwrap() {
                Some(s)
                    if s.tasks
                        .iter()
                        .any(|t| t.status.is_terminal() || t.attempt > 0) =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

fn ids(rows: &serde_json::Value) -> Vec<String> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r["swarm_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages_the_newest_swarms_filters_them_and_reads_little() {
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(2)
        .start()
        .await
        .unwrap();
    let url = cluster.url();
    let nc = cluster.client().await;

    // In submission order (newest last): 50 completed, 3 failed,
    // 2 cancelled, 1 running.
    let mut order = Vec::new();
    let mut completed = Vec::new();
    for i in 0..50 {
        let id = submit(&nc, &echo_mission(&format!("swarm {i}"))).await;
        completed.push(id.clone());
        order.push(id);
    }
    let mut failed = Vec::new();
    for i in 0..3 {
        let id = submit(&nc, &failing_mission(i)).await;
        failed.push(id.clone());
        order.push(id);
    }
    let mut cancelled = Vec::new();
    for i in 0..2 {
        let id = submit(&nc, &sleeping_mission(&format!("nap {i}"), 60_000)).await;
        cancelled.push(id.clone());
        order.push(id);
    }
    let still = submit(&nc, &sleeping_mission("keeps running", 60_000)).await;
    order.push(still.clone());
    for id in &cancelled {
        running(&nc, id).await;
        let run = swarm(&url, &["cancel", id]).await;
        assert_code(&run, 0);
    }
    for id in completed.iter().chain(&failed).chain(&cancelled) {
        settled(&nc, id).await;
    }
    running(&nc, &still).await;
    let newest_first: Vec<String> = order.iter().rev().cloned().collect();

    // The default page: 20 rows, newest first, as a table.
    let run = swarm(&url, &["list"]).await;
    assert_code(&run, 0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 21, "{}", run.stdout);
    assert!(
        lines[0].starts_with("SWARM ") && lines[0].contains("MISSION"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with(&still) && lines[1].contains("Running"));
    assert!(lines[1].contains("0/1"), "{}", lines[1]);
    assert!(lines[1].contains("keeps running"), "{}", lines[1]);

    // Every swarm, newest first, as JSON; `ls` is `list`.
    let run = swarm(&url, &["ls", "--limit", "100", "--json"]).await;
    assert_code(&run, 0);
    let all = run.json();
    assert_eq!(ids(&all), newest_first);
    let first_completed = &all[newest_first.len() - 1];
    assert_eq!(first_completed["status"], "Completed");
    assert_eq!(first_completed["tasks_done"], 1);
    assert_eq!(first_completed["tasks_total"], 1);
    assert_eq!(first_completed["tasks_failed"], 0);
    assert_eq!(first_completed["mission"], "echo swarm 0\nsecond line");
    assert!(first_completed["ended_at"].is_string());
    assert!(
        all[0]["ended_at"].is_null(),
        "the running swarm has not ended"
    );

    // --limit
    let run = swarm(&url, &["list", "--limit", "5", "--json"]).await;
    assert_eq!(ids(&run.json()), newest_first[..5]);

    // --status, repeated or as a list.
    let run = swarm(&url, &["list", "--status", "failed", "--json"]).await;
    let mut expected: Vec<String> = failed.iter().rev().cloned().collect();
    assert_eq!(ids(&run.json()), expected);
    for row in run.json().as_array().unwrap() {
        assert_eq!(row["tasks_failed"], 1, "{row}");
    }
    let run = swarm(
        &url,
        &[
            "list",
            "--status",
            "cancelled,failed",
            "--status",
            "timedout",
            "--json",
        ],
    )
    .await;
    expected = cancelled
        .iter()
        .rev()
        .chain(failed.iter().rev())
        .cloned()
        .collect();
    assert_eq!(ids(&run.json()), expected);
    let run = swarm(&url, &["list", "--status", "running", "--json"]).await;
    assert_eq!(ids(&run.json()), vec![still.clone()]);
    let run = swarm(
        &url,
        &["list", "--status", "completed", "--limit", "3", "--json"],
    )
    .await;
    let newest_completed: Vec<String> = completed.iter().rev().take(3).cloned().collect();
    assert_eq!(ids(&run.json()), newest_completed);
    let run = swarm(&url, &["list", "--status", "done"]).await;
    assert_code(&run, 2);

    // --since: a gap, then six more swarms; a span reaching into the gap
    // shows only those.
    let before_gap = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut late = Vec::new();
    for i in 0..6 {
        let id = submit(&nc, &echo_mission(&format!("late {i}"))).await;
        late.push(id);
    }
    for id in &late {
        settled(&nc, id).await;
    }
    // From about 1.5 s into the gap: every earlier swarm is older, every
    // later one newer, however long the submissions took.
    let since = before_gap.elapsed().as_secs().saturating_sub(2).max(1);
    let run = swarm(&url, &["list", "--since", &format!("{since}s"), "--json"]).await;
    assert_code(&run, 0);
    let late_newest_first: Vec<String> = late.iter().rev().cloned().collect();
    assert_eq!(ids(&run.json()), late_newest_first);
    let run = swarm(&url, &["list", "--since", "1h", "--limit", "100", "--json"]).await;
    assert_eq!(ids(&run.json()).len(), order.len() + late.len());

    // A page of 5 reads one window at the end of the bucket's stream: not
    // the 62 swarms' records, and one state per row.
    let query = swarm_client::list::Query {
        statuses: Vec::new(),
        since: None,
        limit: 5,
    };
    let listing = swarm_client::list::list(&nc, &query, chrono::Utc::now())
        .await
        .unwrap();
    let page: Vec<String> = listing.rows.iter().map(|r| r.swarm_id.clone()).collect();
    assert_eq!(page, late_newest_first[..5]);
    assert_eq!(listing.cost.windows, 1, "{:?}", listing.cost);
    assert!(listing.cost.messages_read <= 32, "{:?}", listing.cost);
    assert_eq!(listing.cost.state_reads, 5, "{:?}", listing.cost);

    // Following a finished swarm replays it in plain lines (stdout is not
    // a terminal) and exits with its outcome.
    let run = swarm(&url, &["watch", &completed[0]]).await;
    assert_code(&run, 0);
    assert!(
        run.stdout.contains("  deployed: 1 task (say)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("[say] Completed: result submitted"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("overall status: Completed"),
        "{}",
        run.stdout
    );
    assert_code(&swarm(&url, &["watch", &failed[0]]).await, 3);
    assert_code(&swarm(&url, &["watch", &cancelled[0]]).await, 4);
    let run = swarm(&url, &["watch", &completed[1], "--json"]).await;
    assert_code(&run, 0);
    let lines: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "deployed");
    assert_eq!(lines.last().unwrap()["type"], "report");
    assert_eq!(lines.last().unwrap()["overall_status"], "Completed");
    // A wait that ends before the report: 7.
    let run = swarm(&url, &["watch", &still, "--timeout", "1"]).await;
    assert_code(&run, 7);

    // Status and report of a known swarm.
    let run = swarm(&url, &["status", &failed[0]]).await;
    assert_code(&run, 0);
    assert!(run.stdout.contains("TASK   TITLE"), "{}", run.stdout);
    let run = swarm(&url, &["status", &failed[0], "--json"]).await;
    assert_eq!(run.json()["status"], "Failed");
    let run = swarm(&url, &["report", &completed[0], "--json"]).await;
    assert_code(&run, 0);
    assert_eq!(run.json()["overall_status"], "Completed");
    assert_eq!(run.json()["task_results"][0]["task_id"], "say");
    let run = swarm(&url, &["report", &still, "--json"]).await;
    assert_code(&run, 1);
    assert!(
        run.stderr.contains("no final report yet (Running)"),
        "{run:?}"
    );

    // Cancelling a finished swarm sends nothing and says why.
    let run = swarm(&url, &["cancel", &completed[0]]).await;
    assert_code(&run, 1);
    assert!(
        run.stderr
            .contains(&format!("swarm {} has finished (Completed)", completed[0])),
        "{run:?}"
    );
    let controls =
        common::messages::<swarm_common::Control>(&nc, &subjects::control(&completed[0])).await;
    assert!(controls.is_empty(), "{controls:?}");

    assert_code(&swarm(&url, &["cancel", &still]).await, 0);
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_swarms_are_errors_at_once() {
    let cluster = common::one_of_each().await;
    let url = cluster.url();
    let unknown = "6f1c2a8e-0000-4000-8000-000000000000";
    for args in [
        vec!["cancel", unknown],
        vec!["watch", unknown],
        vec!["status", unknown],
        vec!["report", unknown],
        vec!["report", unknown, "--json"],
        vec!["status", "not a swarm id"],
    ] {
        let run = swarm(&url, &args).await;
        assert_code(&run, 1);
        let id = args[1];
        assert!(
            run.stderr.contains(&format!("no such swarm {id}")),
            "{args:?}: {run:?}"
        );
        assert!(
            run.took < Duration::from_secs(5),
            "{args:?} took {:?}",
            run.took
        );
    }
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_swarm_takes_no_decision_or_answer() {
    let cluster = common::one_of_each().await;
    let url = cluster.url();
    let nc = cluster.client().await;
    let done = submit(&nc, &echo_mission("done")).await;
    settled(&nc, &done).await;
    let live = submit(&nc, &sleeping_mission("live", 60_000)).await;
    running(&nc, &live).await;

    // Records as a worker stores them while a call or a question waits.
    let js = async_nats::jetstream::new(nc.clone());
    let approvals = js.get_key_value(subjects::APPROVALS_BUCKET).await.unwrap();
    let now = chrono::Utc::now();
    let approval = |id: &str, swarm: &str| ApprovalRecord {
        approval_id: id.into(),
        swarm_id: Some(swarm.into()),
        task_id: Some("t".into()),
        tool: "shell".into(),
        arguments: serde_json::json!({"command": "ls"}),
        requested_by: "worker-1".into(),
        requested_at: now,
        expires_at: now + chrono::TimeDelta::minutes(5),
        status: ApprovalStatus::Pending,
        decided_by: None,
        reason: None,
    };
    for (id, swarm) in [("ask-ended", &done), ("ask-live", &live)] {
        let bytes = Codec::MsgPack.encode(&approval(id, swarm)).unwrap();
        approvals.put(id, Bytes::from(bytes)).await.unwrap();
    }

    // Pending approvals of ended swarms are hidden unless --all.
    let run = swarm(&url, &["approvals", "--json"]).await;
    assert_code(&run, 0);
    let listed: Vec<String> = run
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["approval_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, ["ask-live"]);
    let run = swarm(&url, &["approvals", "--all", "--json"]).await;
    assert_eq!(run.json().as_array().unwrap().len(), 2);
    let run = swarm(&url, &["approvals"]).await;
    assert!(run.stdout.starts_with("APPROVAL "), "{}", run.stdout);
    assert!(run.stdout.contains("ask-live") && !run.stdout.contains("ask-ended"));

    // Deciding one of an ended swarm closes it instead.
    let run = swarm(&url, &["approve", "ask-ended"]).await;
    assert_code(&run, 1);
    assert!(run.stderr.contains("has ended (Completed)"), "{run:?}");
    let stored: ApprovalRecord = Codec::MsgPack
        .decode(&approvals.get("ask-ended").await.unwrap().unwrap())
        .unwrap();
    assert_eq!(stored.status, ApprovalStatus::Expired);
    assert_eq!(stored.reason.as_deref(), Some("the swarm ended: Completed"));
    let run = swarm(&url, &["deny", "ask-live", "--reason", "not now"]).await;
    assert_code(&run, 0);
    let stored: ApprovalRecord = Codec::MsgPack
        .decode(&approvals.get("ask-live").await.unwrap().unwrap())
        .unwrap();
    assert_eq!(stored.status, ApprovalStatus::Denied);

    // A question of an ended swarm is closed, then refused as closed.
    let inputs = js.get_key_value(subjects::INPUTS_BUCKET).await.unwrap();
    let key = format!("{done}.say");
    let question = InputRecord {
        swarm_id: done.clone(),
        task_id: "say".into(),
        question: "which file?".into(),
        asked_by: "worker-1".into(),
        asked_at: now,
        answer: None,
        answered_by: None,
        answered_at: None,
        closed: None,
    };
    inputs
        .put(&key, Bytes::from(Codec::MsgPack.encode(&question).unwrap()))
        .await
        .unwrap();
    let run = swarm(&url, &["answer", &done, "say", "README.md"]).await;
    assert_code(&run, 1);
    assert!(run.stderr.contains("has ended (Completed)"), "{run:?}");
    let stored: InputRecord = Codec::MsgPack
        .decode(&inputs.get(&key).await.unwrap().unwrap())
        .unwrap();
    assert_eq!(stored.closed.as_deref(), Some("the swarm ended: Completed"));
    assert_eq!(stored.answer, None);
    let run = swarm(&url, &["answer", &done, "say", "README.md"]).await;
    assert_code(&run, 1);
    assert!(
        run.stderr.contains("is closed: the swarm ended: Completed"),
        "{run:?}"
    );

    assert_code(&swarm(&url, &["cancel", &live]).await, 0);
    cluster.stop(Duration::from_secs(5)).await;
}

/// `swarm inspect` shows any stored message or value as JSON: the state,
/// a message of the A2AP or WORK stream by its sequence (MessagePack or
/// JSON, by its `Content-Type`), a bucket's value by its bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_decodes_stored_messages_and_values_to_json() {
    let cluster = common::one_of_each().await;
    let url = cluster.url();
    let nc = cluster.client().await;
    let js = async_nats::jetstream::new(nc.clone());
    let done = submit(&nc, &echo_mission("inspected")).await;
    settled(&nc, &done).await;

    // The state, as the client library reads it.
    let run = swarm(&url, &["inspect", "state", &done]).await;
    assert_code(&run, 0);
    let state = swarm_client::client::state(&nc, &done)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.json(), serde_json::to_value(&state).unwrap());
    assert_eq!(run.json()["status"], "Completed");
    assert!(
        run.stderr.contains(&format!("swarms/{done} revision "))
            && run.stderr.contains("SwarmState (application/msgpack)"),
        "{run:?}"
    );

    // The final report, by its sequence in the A2AP stream.
    let a2ap = js.get_stream(subjects::A2AP_STREAM).await.unwrap();
    let report_subject = swarm_runtime::wire::stored_subject(&a2ap, &subjects::report(&done));
    let report = a2ap
        .get_last_raw_message_by_subject(&report_subject)
        .await
        .unwrap();
    let run = swarm(&url, &["inspect", "msg", &report.sequence.to_string()]).await;
    assert_code(&run, 0);
    let json = run.json();
    assert_eq!(json["message_type"], "FinalReport");
    assert_eq!(json["swarm_id"], done.as_str());
    assert_eq!(json["overall_status"], "Completed");
    assert_eq!(json["task_results"][0]["result"], "inspected");
    assert!(
        run.stderr
            .contains(&format!("A2AP #{} {report_subject}", report.sequence)),
        "{run:?}"
    );

    // A message stored as JSON is read as JSON.
    let progress = swarm_common::Envelope::new(
        "a-peer",
        "watchers",
        done.as_str(),
        "say",
        swarm_common::ProgressUpdate {
            task_id: "say".into(),
            status: swarm_common::TaskStatus::InProgress,
            progress_percentage: 50,
            message: "half way, in JSON".into(),
            attempt: 1,
            revision: 0,
            metrics: Default::default(),
        },
    );
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Content-Type", "application/json");
    let ack = js
        .publish_with_headers(
            subjects::progress(&done, "say"),
            headers,
            Bytes::from(progress.encode(Codec::Json).unwrap()),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let run = swarm(&url, &["inspect", "msg", &ack.sequence.to_string()]).await;
    assert_code(&run, 0);
    assert_eq!(run.json(), serde_json::to_value(&progress).unwrap());
    assert!(
        run.stderr.contains("ProgressUpdate (application/json)"),
        "{run:?}"
    );

    // An assignment waits in the WORK stream while its task runs.
    let live = submit(&nc, &sleeping_mission("inspect live", 60_000)).await;
    running(&nc, &live).await;
    let work = js.get_stream(subjects::WORK_STREAM).await.unwrap();
    let assignment = work
        .get_last_raw_message_by_subject(&subjects::work("general", &live, "nap"))
        .await
        .unwrap();
    let seq = assignment.sequence.to_string();
    let run = swarm(&url, &["inspect", "msg", &seq, "--stream", "WORK"]).await;
    assert_code(&run, 0);
    assert_eq!(run.json()["message_type"], "TaskAssignment");
    assert_eq!(run.json()["task_id"], "nap");
    assert_code(&swarm(&url, &["cancel", &live]).await, 0);

    // Bucket values by their bucket: a mission record, an approval, a note.
    let run = swarm(&url, &["inspect", "kv", "missions", &done]).await;
    assert_code(&run, 0);
    assert_eq!(run.json()["swarm_id"], done.as_str());
    assert!(run.stderr.contains("MissionRecord"), "{run:?}");
    let approvals = js.get_key_value(subjects::APPROVALS_BUCKET).await.unwrap();
    let now = chrono::Utc::now();
    let record = ApprovalRecord {
        approval_id: "inspect-me".into(),
        swarm_id: Some(done.clone()),
        task_id: Some("say".into()),
        tool: "shell".into(),
        arguments: serde_json::json!({"command": "ls"}),
        requested_by: "worker-1".into(),
        requested_at: now,
        expires_at: now + chrono::TimeDelta::minutes(5),
        status: ApprovalStatus::Pending,
        decided_by: None,
        reason: None,
    };
    approvals
        .put(
            "inspect-me",
            Bytes::from(Codec::MsgPack.encode(&record).unwrap()),
        )
        .await
        .unwrap();
    let run = swarm(&url, &["inspect", "kv", "approvals", "inspect-me"]).await;
    assert_code(&run, 0);
    assert_eq!(run.json(), serde_json::to_value(&record).unwrap());
    let memory = js.get_key_value(subjects::MEMORY_BUCKET).await.unwrap();
    memory
        .put("shared.inspect-note", Bytes::from_static(b"plain text"))
        .await
        .unwrap();
    let run = swarm(&url, &["inspect", "kv", "memory", "shared.inspect-note"]).await;
    assert_code(&run, 0);
    assert_eq!(run.json(), "plain text");
    assert!(run.stderr.contains("text (text/plain)"), "{run:?}");

    // What is not there is an error that says so.
    for args in [
        vec!["inspect", "kv", "swarms", "no-such-swarm"],
        vec!["inspect", "msg", "999999"],
        vec!["inspect", "kv", "no bucket", "k"],
        vec!["inspect", "state", "not a swarm id"],
    ] {
        let run = swarm(&url, &args).await;
        assert_code(&run, 1);
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
    }
    approvals.delete("inspect-me").await.unwrap();
    let run = swarm(&url, &["inspect", "kv", "approvals", "inspect-me"]).await;
    assert_code(&run, 1);
    assert!(run.stderr.contains("was removed"), "{run:?}");
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mission_wait_exits_with_the_missions_outcome() {
    let cluster = common::one_of_each().await;
    let url = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, request: &MissionRequest| {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_vec(request).unwrap()).unwrap();
        path.display().to_string()
    };

    // Completed: 0, in plain lines, with the report's path.
    let run = swarm(&url, &["mission", "1. Compute 6 * 7", "--wait"]).await;
    assert_code(&run, 0);
    assert!(
        run.stdout.contains("overall status: Completed"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("HTML report: "), "{}", run.stdout);

    // With --json every line is a JSON object: the reply, the updates, the report.
    let echo = file("echo.json", &echo_mission("json"));
    let run = swarm(&url, &["mission", "--file", &echo, "--wait", "--json"]).await;
    assert_code(&run, 0);
    let lines: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines[0]["status"], "accepted");
    assert_eq!(lines.last().unwrap()["type"], "report");

    // Failed: 3.
    let fails = file("fail.json", &failing_mission(0));
    assert_code(
        &swarm(&url, &["mission", "--file", &fails, "--wait"]).await,
        3,
    );

    // Timed out: 5.
    let mut slow = sleeping_mission("too slow", 20_000);
    slow.max_execution_seconds = Some(1);
    let slow = file("slow.json", &slow);
    assert_code(
        &swarm(&url, &["mission", "--file", &slow, "--wait"]).await,
        5,
    );

    // The wait ends first: 7.
    let nap = file("nap.json", &sleeping_mission("nap", 60_000));
    let run = swarm(
        &url,
        &["mission", "--file", &nap, "--wait", "--timeout", "1"],
    )
    .await;
    assert_code(&run, 7);
    let napping = run.stdout.lines().next().unwrap().to_string();

    // Cancelled: 4 (watched while another process cancels it).
    let watcher = tokio::spawn({
        let url = url.clone();
        let id = napping.clone();
        async move { swarm(&url, &["watch", &id]).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_code(&swarm(&url, &["cancel", &napping]).await, 0);
    assert_code(&watcher.await.unwrap(), 4);

    // A refused mission: 1.
    let run = swarm(&url, &["mission", "   "]).await;
    assert_code(&run, 1);
    assert!(run.stderr.contains("mission refused"), "{run:?}");
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_system_is_exit_6_and_flags_go_anywhere() {
    let tmp = std::env::temp_dir();
    // Nothing listens: before or after the subcommand, long or short.
    for args in [
        vec![
            "--nats-url",
            "nats://127.0.0.1:1",
            "--connect-timeout",
            "1",
            "list",
        ],
        vec!["list", "-s", "nats://127.0.0.1:1", "--connect-timeout", "1"],
        vec!["mission", "x", "--nats-url", "nats://127.0.0.1:1", "--wait"],
    ] {
        let run = swarm_in(&tmp, &args).await;
        assert_code(&run, 6);
        assert!(run.stderr.contains("cannot connect to NATS"), "{run:?}");
    }
    // The default server, when nothing listens there, gets a hint.
    let default = std::net::SocketAddr::from(([127, 0, 0, 1], 4222));
    if std::net::TcpStream::connect_timeout(&default, Duration::from_millis(300)).is_err() {
        let run = swarm_in(&tmp, &["list"]).await;
        assert_code(&run, 6);
        assert!(
            run.stderr.contains(
                "no NATS server at nats://127.0.0.1:4222; start a local one with `swarm up`"
            ),
            "{run:?}"
        );
    }
    // A server with no boss: the mission finds no one to take it.
    let nats = NatsServer::start().unwrap();
    let run = swarm(&nats.url(), &["mission", "count the words in README.md"]).await;
    assert_code(&run, 6);
    assert!(run.stderr.contains("no boss answered"), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_completes_every_task_from_any_folder() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let run = swarm_in(
        dir.path(),
        &[
            "demo",
            "--data-dir",
            data.to_str().unwrap(),
            "--managers",
            "1",
            "--workers",
            "1",
            "--nats-cpus",
            "shared",
        ],
    )
    .await;
    assert_code(&run, 0);
    assert!(
        run.stdout.contains("sample files written for the demo"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("overall status: Completed"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("A2A agent: http://127.0.0.1:"),
        "the demo prints its A2A gateway:\n{}",
        run.stdout
    );
    assert!(!run.stdout.contains(" Failed"), "{}", run.stdout);
    let lines: Vec<&str> = run.stdout.lines().collect();
    let html = lines
        .iter()
        .find_map(|l| l.strip_prefix("HTML report: "))
        .unwrap_or_else(|| panic!("no report path:\n{}", run.stdout));
    assert!(Path::new(html).is_file(), "{html}");
    // The last lines say how to keep a cluster, not where the stopped one was.
    let tail = lines[lines.len() - 2..].join("\n");
    assert!(
        tail.contains("swarm up") && tail.contains("--wait"),
        "{tail}"
    );
    assert!(!run.stdout.contains("swarm report"), "{}", run.stdout);
    assert!(data.join("demo/workspace/notes").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_lists_every_replica_and_names_a_silent_role() {
    let mut cluster = common::one_of_each().await;
    let url = cluster.url();
    let run = swarm(&url, &["hello", "--json"]).await;
    assert_code(&run, 0);
    let roles: Vec<String> = run
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            assert_eq!(h["protocol_versions"][0], "1.0", "{h}");
            h["role"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(roles, ["boss", "manager", "worker"]);
    let run = swarm(&url, &["hello", "--role", "manager"]).await;
    assert_code(&run, 0);
    assert!(
        run.stdout.starts_with("manager ") && run.stdout.contains("manager-1"),
        "{run:?}"
    );
    // No worker runs: the command says which role stayed silent (exit 6).
    cluster.local_mut().workers[0].kill();
    let run = swarm(&url, &["hello", "--wait-ms", "300"]).await;
    assert_code(&run, 6);
    assert!(run.stderr.contains("no worker answered"), "{run:?}");
    assert!(run.stdout.contains("boss") && run.stdout.contains("manager"));
}

/// Every running replica publishes its agent card: `swarm agents` lists the
/// boss, the manager, each worker with its pool, skills and tools, and the
/// gateway with its URL; managers, workers and the gateway answer
/// `$SRV.INFO` with the card as metadata; a replica that stops takes its card with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_lists_every_running_replica_from_its_card() {
    let mut cluster = Cluster::builder()
        .managers(1)
        .workers(1)
        .gateway()
        .start()
        .await
        .unwrap();
    cluster
        .local_mut()
        .spawn_worker(&["--pool", "gpu", "--skills", "render,upscale"])
        .unwrap();
    let url = cluster.url();
    let cards = common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(200),
        "every replica's card",
        || async {
            let run = swarm(&url, &["agents", "--json"]).await;
            let cards = run.json();
            let cards = cards.as_array().cloned().unwrap_or_default();
            if cards.len() == 5 {
                Ok(cards)
            } else {
                Err(format!("{} cards: {run:?}", cards.len()))
            }
        },
    )
    .await;
    let roles: Vec<&str> = cards.iter().map(|c| c["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["boss", "gateway", "manager", "worker", "worker"]);
    let gpu = cards
        .iter()
        .find(|c| c["pool"] == "gpu")
        .expect("the gpu worker's card");
    let skills: Vec<&str> = gpu["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(&skills[..2], ["render", "upscale"], "{gpu}");
    assert!(
        skills.contains(&"calc") && gpu["tools"].as_array().unwrap().len() > 3,
        "{gpu}"
    );
    assert_eq!(gpu["protocol_versions"][0], "1.0");
    let gateway = &cards[1];
    assert_eq!(
        gateway["url"].as_str(),
        cluster.gateway_url().as_deref(),
        "{gateway}"
    );
    assert!(
        gateway["skills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s == "mission")
    );
    // The gateway's A2A card offers what the running pools offer.
    let a2a_card = common::eventually(
        Duration::from_secs(20),
        Duration::from_millis(200),
        "the A2A card lists the gpu pool's skill",
        || async {
            let card: serde_json::Value = reqwest::get(format!(
                "{}/.well-known/agent-card.json",
                cluster.gateway_url().unwrap()
            ))
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
            let offered = card["skills"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["id"] == "render" && s["tags"][0] == "gpu")
            });
            if offered {
                Ok(card)
            } else {
                Err(card.to_string())
            }
        },
    )
    .await;
    assert!(
        a2a_card["skills"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == "calculator"),
        "{a2a_card}"
    );

    // The roles are NATS services, their cards the metadata.
    let nc = cluster.client().await;
    for role in ["manager", "worker", "gateway"] {
        let info = nc
            .request(format!("$SRV.INFO.{role}"), bytes::Bytes::new())
            .await
            .unwrap();
        let info: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
        assert_eq!(info["metadata"]["role"], role, "{info}");
        assert_eq!(info["metadata"]["protocol_versions"], "1.0", "{info}");
    }

    // A persona that asks for a skill runs in the pool that offers it; one
    // that asks for a skill no pool offers fails the mission, saying so.
    let mut mission = common::mission(
        "render",
        vec![common::task("frame", &common::echo("rendered"), &[])],
    );
    mission.plan.as_mut().unwrap().workers[0].skill = Some("render".into());
    let id = submit(&nc, &mission).await;
    let report = common::final_report(&cluster, &nc, &id, 30).await;
    assert_eq!(
        report.overall_status,
        swarm_common::SwarmStatus::Completed,
        "{report:#?}"
    );
    let state = common::state(&nc, &id).await;
    assert_eq!(state.tasks[0].pool, "gpu", "routed by skill");
    assert_eq!(state.workers[0].pool, "gpu");
    let mut mission = common::mission("fly", vec![common::task("up", &common::echo("up"), &[])]);
    mission.plan.as_mut().unwrap().workers[0].skill = Some("fly".into());
    let id = submit(&nc, &mission).await;
    // It fails in planning: the record says why, and `swarm status` too.
    let why = common::eventually(
        Duration::from_secs(20),
        Duration::from_millis(100),
        "the mission fails for want of the skill",
        || async {
            let record = swarm_client::client::mission(&nc, &id)
                .await
                .map_err(|e| format!("{e:#}"))?
                .ok_or("no record")?;
            let text = serde_json::to_string(&record).unwrap();
            if text.contains("no running worker pool") {
                Ok(text)
            } else {
                Err(text)
            }
        },
    )
    .await;
    assert!(why.contains(r#"skill \"fly\""#), "{why}");

    let run = swarm(&url, &["agents", "--role", "worker"]).await;
    assert_code(&run, 0);
    assert!(run.stdout.starts_with("ROLE"), "{run:?}");
    assert!(
        run.stdout.contains("gpu") && run.stdout.contains("render,upscale"),
        "{run:?}"
    );

    // A worker that stops removes its card; the rest stay.
    cluster.local_mut().workers[1].terminate(Duration::from_secs(10));
    common::eventually(
        Duration::from_secs(15),
        Duration::from_millis(200),
        "the stopped worker's card is gone",
        || async {
            let run = swarm(&url, &["agents", "--role", "worker", "--json"]).await;
            match run.json().as_array().map(Vec::len) {
                Some(1) => Ok(()),
                other => Err(format!("{other:?}: {run:?}")),
            }
        },
    )
    .await;
    let run = swarm(&url, &["agents", "--role", "gateway"]).await;
    assert_code(&run, 0);
    cluster
        .local_mut()
        .gateway
        .as_mut()
        .unwrap()
        .terminate(Duration::from_secs(10));
    common::eventually(
        Duration::from_secs(15),
        Duration::from_millis(200),
        "no gateway runs",
        || async {
            let run = swarm(&url, &["agents", "--role", "gateway"]).await;
            if run.code == 6 && run.stderr.contains("no running gateway") {
                Ok(())
            } else {
                Err(format!("{run:?}"))
            }
        },
    )
    .await;
}
