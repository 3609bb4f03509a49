//! Bad input gets a clear, typed error and loses nothing: the boss answers
//! every malformed mission with an error reply, the manager and the workers
//! record undecodable messages as dead letters, and all of them keep serving.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use async_nats::{HeaderMap, jetstream};
use bytes::Bytes;
use futures::StreamExt;
use swarm_common::{
    Codec, DeadLetter, ErrorCode, SwarmStatus, headers as h,
    mission::{
        MissionErrorReply, MissionRecord, MissionReply, MissionRequest, MissionStatus, swarm_id_for,
    },
    subjects,
};
use swarm_testkit::Cluster;

/// A bad mission: name, headers, body, the error code and service status it must get.
type Case = (
    &'static str,
    Option<HeaderMap>,
    Vec<u8>,
    ErrorCode,
    &'static str,
);

fn ct(content_type: &str) -> HeaderMap {
    let mut m = HeaderMap::new();
    m.insert(h::CONTENT_TYPE, content_type);
    m
}

fn plan_json(tasks: &str) -> Vec<u8> {
    format!(
        r#"{{"mission": "explicit", "plan": {{"workers": [{{"name": "w"}}], "tasks": {tasks}}}}}"#
    )
    .into_bytes()
}

async fn dead_letters(nc: &async_nats::Client, source: &str, at_least: usize) -> Vec<DeadLetter> {
    let js = jetstream::new(nc.clone());
    let stream = js.get_stream(subjects::DEADLETTER_STREAM).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig {
                filter_subject: subjects::deadletter(source),
                ..Default::default()
            })
            .await
            .unwrap();
        let pending = consumer.cached_info().num_pending as usize;
        if pending >= at_least {
            let mut msgs = consumer.messages().await.unwrap();
            let mut out = Vec::new();
            while out.len() < pending {
                let m = msgs.next().await.unwrap().unwrap();
                out.push(Codec::MsgPack.decode::<DeadLetter>(&m.payload).unwrap());
            }
            return out;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no dead letter from {source}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_mission_gets_a_typed_error_and_the_boss_keeps_serving() {
    let mut cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let oversized = vec![b'a'; swarm_common::Limits::default().max_mission_bytes + 1];
    let cases: Vec<Case> = vec![
        (
            "random bytes",
            None,
            vec![0xff, 0x00, 0x81, 0x92, 0xc1, 0xfe, 0x13],
            ErrorCode::DecodeFailed,
            "400",
        ),
        (
            "invalid JSON",
            None,
            b"{\"mission\": \"unterminated".to_vec(),
            ErrorCode::DecodeFailed,
            "400",
        ),
        (
            "wrong field type",
            None,
            br#"{"mission": 42}"#.to_vec(),
            ErrorCode::DecodeFailed,
            "400",
        ),
        (
            "unknown field",
            None,
            br#"{"mision": "typo"}"#.to_vec(),
            ErrorCode::DecodeFailed,
            "400",
        ),
        (
            "unknown protocol version in the body",
            None,
            br#"{"mission": "m", "protocol_version": "9.9"}"#.to_vec(),
            ErrorCode::UnsupportedProtocol,
            "400",
        ),
        (
            "another major protocol version in the body",
            None,
            br#"{"mission": "m", "protocol_version": "99.0"}"#.to_vec(),
            ErrorCode::UnsupportedProtocol,
            "400",
        ),
        (
            "another major protocol version in the header",
            Some({
                let mut m = ct("application/json");
                m.insert(h::PROTOCOL_VERSION, "99.0");
                m
            }),
            br#"{"mission": "m"}"#.to_vec(),
            ErrorCode::UnsupportedProtocol,
            "400",
        ),
        (
            "unknown protocol version in the header",
            Some({
                let mut m = ct("text/plain");
                m.insert(h::PROTOCOL_VERSION, "9.9");
                m
            }),
            b"count the words".to_vec(),
            ErrorCode::UnsupportedProtocol,
            "400",
        ),
        (
            "oversized mission",
            None,
            oversized,
            ErrorCode::PayloadTooLarge,
            "413",
        ),
        (
            "empty mission",
            None,
            b"   \n".to_vec(),
            ErrorCode::ValidationFailed,
            "400",
        ),
        (
            "dependency cycle",
            None,
            plan_json(
                r#"[{"task_id": "a", "title": "a", "description": "x", "assigned_to": "w", "dependencies": ["b"]},
                    {"task_id": "b", "title": "b", "description": "y", "assigned_to": "w", "dependencies": ["a"]}]"#,
            ),
            ErrorCode::ValidationFailed,
            "400",
        ),
        (
            "unknown dependency",
            None,
            plan_json(
                r#"[{"task_id": "a", "title": "a", "description": "x", "assigned_to": "w", "dependencies": ["ghost"]}]"#,
            ),
            ErrorCode::ValidationFailed,
            "400",
        ),
        (
            "unknown worker",
            None,
            plan_json(
                r#"[{"task_id": "a", "title": "a", "description": "x", "assigned_to": "nobody"}]"#,
            ),
            ErrorCode::ValidationFailed,
            "400",
        ),
        (
            "unsupported content type",
            Some(ct("image/png")),
            b"x".to_vec(),
            ErrorCode::ValidationFailed,
            "400",
        ),
    ];
    for (name, headers, body, code, status) in cases {
        let reply = common::raw_request(&nc, headers, body).await;
        let err: MissionErrorReply = Codec::Json
            .decode(&reply.payload)
            .unwrap_or_else(|e| panic!("{name}: reply is not an error reply: {e}"));
        assert_eq!(err.error.code, code, "{name}: {}", err.error.message);
        assert!(
            !err.error.message.is_empty() && !err.error.retriable,
            "{name}"
        );
        let hdrs = reply.headers.expect("error headers");
        assert_eq!(
            hdrs.get(h::SERVICE_ERROR_CODE).map(|v| v.as_str()),
            Some(status),
            "{name}"
        );
        assert!(hdrs.get(h::SERVICE_ERROR).is_some(), "{name}");
    }

    // MessagePack in, MessagePack out: the error reply speaks the request's codec.
    let reply = common::raw_request(&nc, Some(ct("application/msgpack")), vec![0xc1, 0xc1]).await;
    let err: MissionErrorReply = Codec::MsgPack.decode(&reply.payload).unwrap();
    assert_eq!(err.error.code, ErrorCode::DecodeFailed);
    let good = Codec::MsgPack
        .encode(&MissionRequest::text("Compute 1 + 1"))
        .unwrap();
    let reply = common::raw_request(&nc, Some(ct("application/msgpack")), good).await;
    let ok: MissionReply = Codec::MsgPack.decode(&reply.payload).unwrap();
    assert_eq!(ok.status, "accepted");

    // A plain publish with no reply subject: bad ones become dead letters, good ones swarms.
    nc.publish(subjects::MISSIONS, Bytes::from_static(b"{broken"))
        .await
        .unwrap();
    let plain = MissionRequest {
        mission_id: Some("plain-publish".into()),
        ..MissionRequest::text("Compute 2 + 2")
    };
    nc.publish(
        subjects::MISSIONS,
        Bytes::from(Codec::Json.encode(&plain).unwrap()),
    )
    .await
    .unwrap();
    let letters = dead_letters(&nc, "boss", 1).await;
    assert_eq!(letters[0].reason.code, ErrorCode::DecodeFailed);
    assert_eq!(letters[0].payload_preview, "{broken");
    let report =
        common::final_report(&cluster, &nc, &swarm_id_for(Some("plain-publish")), 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);

    // After all that, the boss still serves: a mission is accepted and completes.
    let swarm_id = common::submit(&nc, &MissionRequest::text("Compute 6 * 7")).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    assert!(cluster.bosses[0].is_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_mission_id_makes_one_swarm() {
    let cluster = Cluster::builder()
        .bosses(2)
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let request = MissionRequest {
        mission_id: Some("order-7".into()),
        ..MissionRequest::text("Compute 3 * 3")
    };
    let first = swarm_client::client::submit(&nc, &request, Duration::from_secs(10))
        .await
        .unwrap();
    let second = swarm_client::client::submit(&nc, &request, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(first.swarm_id, second.swarm_id);
    assert_eq!(first.swarm_id, swarm_id_for(Some("order-7")));
    assert!(!first.duplicate);
    assert!(second.duplicate);
    common::final_report(&cluster, &nc, &first.swarm_id, 60).await;
    let third = swarm_client::client::submit(&nc, &request, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(third.duplicate && third.swarm_id == first.swarm_id);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let deployments =
        common::messages::<swarm_common::SwarmDeployment>(&nc, &subjects::deploy(&first.swarm_id))
            .await;
    assert_eq!(deployments.len(), 1, "one deployment for one mission id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_a2ap_subjects_becomes_dead_letters_and_nothing_stops() {
    let mut cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let js = jetstream::new(nc.clone());
    let ghost = "0b7e5a4c-0000-4000-8000-000000000000";
    for (subject, body) in [
        (subjects::result(ghost, "t1"), &b"\xc1 not msgpack"[..]),
        (subjects::work("general", ghost, "t1"), &b"\x00\x01\x02"[..]),
        (
            subjects::deploy(ghost),
            &br#"{"message_type": "Nonsense"}"#[..],
        ),
        (subjects::report(ghost), &b"not a report"[..]),
    ] {
        js.publish(subject, Bytes::copy_from_slice(body))
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let manager = dead_letters(&nc, "manager", 2).await;
    // The worker's report of the garbage assignment carries no token (it
    // could read none), so the manager may set that aside too.
    assert!(
        manager
            .iter()
            .filter(|d| d.subject != subjects::error(ghost))
            .all(|d| d.reason.code == ErrorCode::DecodeFailed && !d.reason.message.is_empty()),
        "{manager:?}"
    );
    let worker = dead_letters(&nc, "worker", 1).await;
    assert_eq!(worker[0].subject, subjects::work("general", ghost, "t1"));
    let boss = dead_letters(&nc, "boss", 1).await;
    assert_eq!(boss[0].subject, subjects::report(ghost));
    // The worker also told the manager, so a real task would fail instead of waiting.
    let errors = common::messages::<swarm_common::ErrorMessage>(&nc, &subjects::error(ghost)).await;
    assert_eq!(errors[0].body.task_id.as_deref(), Some("t1"));

    let swarm_id = common::submit(&nc, &MissionRequest::text("Compute 10 / 4")).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    assert!(
        report.task_results[0].result.contains("2.5"),
        "{}",
        report.task_results[0].result
    );
    common::assert_all_running(&mut cluster);
}

/// A deployment of one echo task as JSON, its envelope naming `version`
/// (in the body and the `A2ap-Version` header), with a field this build
/// does not know.
fn deployment_at_version(swarm_id: &str, version: &str) -> (HeaderMap, Bytes) {
    let now = chrono::Utc::now();
    let body = swarm_common::SwarmDeployment {
        skills_scope: None,
        trace_id: None,
        failure: None,
        parent: None,
        mission: format!("deployed at protocol version {version}"),
        mission_id: None,
        plan: common::plan(vec![common::task("a", &common::echo("minor"), &[])]),
        limits: swarm_common::Limits::default(),
        budget: Default::default(),
        accepted_at: now,
        deadline: now + chrono::Duration::minutes(5),
    };
    let envelope = swarm_common::Envelope::new("boss-test", "manager", swarm_id, swarm_id, body);
    let mut value: serde_json::Value = Codec::Json
        .decode(&Codec::Json.encode(&envelope).unwrap())
        .unwrap();
    value["protocol_version"] = serde_json::json!(version);
    value["added_by_a_newer_minor"] = serde_json::json!({"ignored": true});
    let mut headers = ct("application/json");
    headers.insert(h::PROTOCOL_VERSION, version);
    headers.insert(h::MSG_ID, format!("{swarm_id}.deploy").as_str());
    (headers, Bytes::from(Codec::Json.encode(&value).unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_another_major_version_is_refused_and_dead_lettered_and_a_newer_minor_is_read()
{
    let mut cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let js = jetstream::new(nc.clone());

    // Protocol version 99.0: the manager refuses it, typed, as a dead letter.
    let refused = "0b7e5a4c-0000-4000-8000-000000000099";
    let (headers, payload) = deployment_at_version(refused, "99.0");
    js.publish_with_headers(subjects::deploy(refused), headers, payload)
        .await
        .unwrap()
        .await
        .unwrap();
    let letters = dead_letters(&nc, "manager", 1).await;
    let letter = letters
        .iter()
        .find(|d| d.subject == subjects::deploy(refused))
        .unwrap_or_else(|| panic!("no dead letter for the 99.0 deployment: {letters:?}"));
    assert_eq!(letter.reason.code, ErrorCode::UnsupportedProtocol);
    assert_eq!(letter.reason.code.to_string(), "unsupported_protocol");
    assert!(
        letter.reason.message.contains("99.0") && letter.reason.message.contains("1.0"),
        "{}",
        letter.reason.message
    );

    // The same in the body alone (the header says nothing): refused too.
    let body_only = "0b7e5a4c-0000-4000-8000-000000000098";
    let (_, payload) = deployment_at_version(body_only, "99.0");
    js.publish_with_headers(subjects::deploy(body_only), ct("application/json"), payload)
        .await
        .unwrap()
        .await
        .unwrap();
    let letters = dead_letters(&nc, "manager", 2).await;
    assert!(
        letters
            .iter()
            .any(|d| d.subject == subjects::deploy(body_only)
                && d.reason.code == ErrorCode::UnsupportedProtocol),
        "{letters:?}"
    );

    // Protocol version 1.7, of the current shape plus a field 1.0 does not
    // know: read, deployed, and the swarm completes.
    let newer = "0b7e5a4c-0000-4000-8000-000000000017";
    let (headers, payload) = deployment_at_version(newer, "1.7");
    js.publish_with_headers(subjects::deploy(newer), headers, payload)
        .await
        .unwrap()
        .await
        .unwrap();
    let report = common::final_report(&cluster, &nc, newer, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    assert!(
        report.task_results[0].result.contains("minor"),
        "{}",
        report.task_results[0].result
    );
    common::assert_all_running(&mut cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_for_an_attempt_never_assigned_becomes_a_dead_letter_and_changes_nothing() {
    // A result "ahead" of the state waits for the events before it (a lost
    // state write); one that never catches up is recorded, not waited on
    // for ever. The manager's ack_wait of 1 s makes that 10 s.
    let cluster = Cluster::builder()
        .env("SWARM_MANAGER_ACK_WAIT", "1")
        .bosses(1)
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    // Its persona's pool has no worker: task a stays assigned, attempt 1.
    let mut waiting = common::mission("waits", vec![common::task("a", &common::echo("a"), &[])]);
    waiting.plan.as_mut().unwrap().workers[0].pool = "nobody".into();
    let swarm_id = common::submit(&nc, &waiting).await;
    common::play_worker_result(&nc, &swarm_id, "a", 7, "from nowhere").await;
    let letters = dead_letters(&nc, "manager", 1).await;
    assert_eq!(letters[0].subject, subjects::result(&swarm_id, "a"));
    assert_eq!(letters[0].reason.code, ErrorCode::ValidationFailed);
    assert!(
        letters[0].reason.message.contains("never assigned"),
        "{}",
        letters[0].reason.message
    );
    let state = common::state(&nc, &swarm_id).await;
    let a = state.task("a").unwrap();
    assert_eq!(
        (a.status, a.attempt),
        (swarm_common::TaskStatus::Assigned, 1)
    );
    // The manager goes on serving.
    let other = common::submit(
        &nc,
        &common::mission("after", vec![common::task("b", &common::echo("b"), &[])]),
    )
    .await;
    let report = common::final_report(&cluster, &nc, &other, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_result_is_set_aside_and_the_task_is_unaffected() {
    let cluster = Cluster::builder()
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    // No worker serves the persona's pool: the test plays both the forger
    // and, later, the worker that holds the assignment.
    let mut waiting = common::mission("forged", vec![common::task("a", &common::echo("a"), &[])]);
    waiting.plan.as_mut().unwrap().workers[0].pool = "nobody".into();
    let swarm_id = common::submit(&nc, &waiting).await;
    let real = common::token(&swarm_id, "a", 1, 0);
    let wrong: String = real.chars().rev().collect();
    for token in ["", "0123456789abcdef0123456789abcdef", wrong.as_str()] {
        common::play_forged_result(&nc, &swarm_id, "a", "forged", token).await;
    }
    let letters = dead_letters(&nc, "manager", 3).await;
    for letter in &letters {
        assert_eq!(letter.subject, subjects::result(&swarm_id, "a"));
        assert_eq!(
            letter.reason.code,
            ErrorCode::AuthorizationDenied,
            "{letter:?}"
        );
        assert!(
            letter.reason.message.contains("token"),
            "{}",
            letter.reason.message
        );
    }
    // The first state write may be deferred a moment after the deployment.
    let a = common::eventually(
        Duration::from_secs(10),
        Duration::from_millis(50),
        "the swarm's state stored",
        || async {
            swarm_client::client::state(&nc, &swarm_id)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|s| s.task("a").cloned())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    assert_eq!(
        (a.status, a.attempt),
        (swarm_common::TaskStatus::Assigned, 1)
    );
    // The holder's result, with the assignment's token, counts.
    common::play_worker_result(&nc, &swarm_id, "a", 1, "the real result").await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    assert!(
        report.task_results[0].result.contains("the real result"),
        "{:?}",
        report.task_results[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_acks_its_own_assignment_and_no_subject_it_merely_names() {
    // A worker's result names the ack subject of its assignment, and the
    // manager acks it there. Any other subject named so (an API call, a
    // subject of the sender's choosing, another consumer's ack) gets
    // nothing from the manager.
    let cluster = common::one_of_each().await;
    let nc = cluster.client().await;
    let js = jetstream::new(nc.clone());
    // Its persona's pool has no worker: the test plays one.
    let mut m = common::mission("played", vec![common::task("a", &common::echo("a"), &[])]);
    m.plan.as_mut().unwrap().workers[0].pool = "played".into();
    let swarm_id = common::submit(&nc, &m).await;
    let work = js.get_stream(subjects::WORK_STREAM).await.unwrap();
    let consumer = work
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some(subjects::worker_consumer("played")),
            filter_subject: subjects::work_filter("played"),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(60),
            ..Default::default()
        })
        .await
        .unwrap();
    let assignment = consumer
        .fetch()
        .max_messages(1)
        .expires(Duration::from_secs(10))
        .messages()
        .await
        .unwrap()
        .next()
        .await
        .expect("the assignment")
        .unwrap();
    let mut watched = nc.subscribe("$JS.API.STREAM.DELETE.>").await.unwrap();
    let mut elsewhere = nc.subscribe("swarm.forged.>").await.unwrap();
    let not_ours = "$JS.ACK.A2AP.manager-p0.1.2.3.1764583200000000000.0";
    let mut manager_acks = nc.subscribe(not_ours).await.unwrap();
    for forged in ["$JS.API.STREAM.DELETE.A2AP", "swarm.forged.ack", not_ours] {
        common::play_worker_handover(&nc, &swarm_id, "a", "a", forged).await;
    }
    let own = assignment.reply.clone().unwrap();
    common::play_worker_handover(&nc, &swarm_id, "a", "a", &own).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 30).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    // Acked by the manager, not by this test.
    common::no_assignment_pending(&nc, "played", Duration::from_secs(10)).await;
    for (what, sub) in [
        ("the stream API", &mut watched),
        ("a subject of the sender's choosing", &mut elsewhere),
        ("another consumer's ack", &mut manager_acks),
    ] {
        let got = tokio::time::timeout(Duration::from_millis(300), sub.next()).await;
        assert!(got.is_err(), "the manager published to {what}: {got:?}");
    }
    assert!(js.get_stream(subjects::A2AP_STREAM).await.is_ok());
}

/// Sets the largest message `stream` stores (`-1`: no limit of its own).
async fn set_max_msg_size(js: &jetstream::Context, stream: &str, max: i32) {
    let mut config = js
        .get_stream(stream)
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    config.max_message_size = max;
    js.update_stream(config).await.unwrap();
}

/// Submits `request` and returns the error it is refused with, waiting as
/// long as the boss's retries of a failing store take.
async fn refused(nc: &async_nats::Client, request: &MissionRequest) -> swarm_common::ErrorBody {
    let body = Bytes::from(Codec::Json.encode(request).unwrap());
    let reply = nc
        .request_with_headers(subjects::MISSIONS, ct(swarm_common::codec::JSON), body)
        .await
        .expect("the boss answers");
    match Codec::Json.decode::<MissionErrorReply>(&reply.payload) {
        Ok(refusal) => refusal.error,
        Err(_) => panic!("accepted: {}", String::from_utf8_lossy(&reply.payload)),
    }
}

/// A mission with its own plan and no mission id is deployed while its
/// record is stored, so either may fail alone: the reply says which, and
/// whether to submit again; what runs and what is recorded agree with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_mission_stored_only_half_says_which_half_and_loses_nothing() {
    let mut cluster = common::one_of_each().await;
    // A deployment the stream refuses is retried for up to about 15 s.
    let nc = async_nats::ConnectOptions::new()
        .request_timeout(Some(Duration::from_secs(60)))
        .connect(cluster.url())
        .await
        .unwrap();
    let js = jetstream::new(nc.clone());
    let missions = js.get_key_value(subjects::MISSIONS_BUCKET).await.unwrap();
    let request = common::mission(
        "Echo once",
        vec![common::task("a", &common::echo("half"), &[])],
    );
    let record = |swarm_id: String| {
        let missions = missions.clone();
        async move {
            missions
                .get(&swarm_id)
                .await
                .unwrap()
                .map(|b| Codec::MsgPack.decode::<MissionRecord>(&b).unwrap())
        }
    };

    // The A2AP stream refuses the deployment: nothing runs, the record says
    // the mission failed, and a retry is welcome.
    set_max_msg_size(&js, subjects::A2AP_STREAM, 64).await;
    let error = refused(&nc, &request).await;
    set_max_msg_size(&js, subjects::A2AP_STREAM, -1).await;
    assert_eq!(error.code, ErrorCode::Internal);
    assert!(error.retriable, "{error:?}");
    assert!(error.message.contains("deploying the mission"), "{error:?}");
    let swarm_id = error.details["swarm_id"].clone();
    let stored = record(swarm_id.clone())
        .await
        .expect("the record is stored");
    assert_eq!(stored.status, MissionStatus::Failed);
    assert_eq!(stored.error.as_ref(), Some(&error));
    assert!(
        common::messages::<swarm_common::SwarmDeployment>(&nc, &subjects::deploy(&swarm_id))
            .await
            .is_empty()
    );

    // The missions bucket refuses the record: the deployment is stored, so
    // the mission runs to its report, and the reply says not to submit it again.
    set_max_msg_size(&js, "KV_missions", 64).await;
    let error = refused(&nc, &request).await;
    set_max_msg_size(&js, "KV_missions", -1).await;
    assert_eq!(error.code, ErrorCode::Internal);
    assert!(!error.retriable, "{error:?}");
    assert!(error.message.contains("do not submit"), "{error:?}");
    let swarm_id = error.details["swarm_id"].clone();
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    assert!(record(swarm_id.clone()).await.is_none());
    common::assert_one_report(&nc, &swarm_id).await;

    // Both stores whole again: the next mission is accepted and recorded.
    let swarm_id = common::submit(&nc, &request).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    let stored = record(swarm_id.clone())
        .await
        .expect("the record is stored");
    assert_eq!(stored.plan.map(|p| p.tasks.len()), Some(1));
    assert!(cluster.bosses[0].is_running());
}
