//! The production nats.conf's users (k8s/base/nats/accounts.conf): each role
//! can do its part, and is refused what it must not do, with a permissions
//! violation the client sees.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use async_nats::{Client, ConnectOptions, Event};
use bytes::Bytes;
use futures::StreamExt;
use swarm_common::subjects;
use swarm_runtime::Infra;
use swarm_testkit::NatsCluster;

/// A client of one role that records the server's errors.
struct Conn {
    user: &'static str,
    client: Client,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Conn {
    async fn new(nats: &NatsCluster, user: &'static str) -> Conn {
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        let opts = ConnectOptions::new()
            .request_timeout(Some(Duration::from_secs(2)))
            .event_callback(move |event| {
                let sink = sink.clone();
                async move {
                    if let Event::ServerError(e) = event {
                        sink.lock().unwrap().push(e.to_string());
                    }
                }
            });
        let client = nats.connect_with(user, opts).await.unwrap();
        Conn {
            user,
            client,
            errors,
        }
    }

    fn js(&self) -> jetstream::Context {
        jetstream::new(self.client.clone())
    }

    /// Waits (up to 3 s) for a permissions violation naming `subject`.
    async fn expect_violation(&self, subject: &str) {
        for _ in 0..60 {
            let found =
                self.errors.lock().unwrap().iter().any(|e| {
                    e.to_lowercase().contains("permissions violation") && e.contains(subject)
                });
            if found {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{}: no permissions violation for {subject}; errors seen: {:?}",
            self.user,
            self.errors.lock().unwrap()
        );
    }

    /// A plain publish to `subject` is refused.
    async fn refused_publish(&self, subject: &str) {
        self.client
            .publish(subject.to_owned(), Bytes::from_static(b"x"))
            .await
            .unwrap();
        self.client.flush().await.unwrap();
        self.expect_violation(subject).await;
    }

    /// A JetStream publish to `subject` is acknowledged (stored).
    async fn stored(&self, subject: &str) {
        let ack = self
            .js()
            .publish(subject.to_owned(), Bytes::from_static(b"{}"))
            .await
            .unwrap_or_else(|e| panic!("{}: publish to {subject}: {e}", self.user))
            .await;
        assert!(ack.is_ok(), "{}: {subject} not stored: {ack:?}", self.user);
    }

    /// No violation at all so far.
    fn clean(&self) {
        let errors = self.errors.lock().unwrap();
        assert!(errors.is_empty(), "{}: {errors:?}", self.user);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_does_its_part_and_nothing_else() {
    let nats = NatsCluster::start(1).unwrap();
    let admin = Conn::new(&nats, "admin").await;
    let boss = Conn::new(&nats, "boss").await;
    let manager = Conn::new(&nats, "manager").await;
    let worker = Conn::new(&nats, "worker").await;
    let client = Conn::new(&nats, "client").await;
    let approver = Conn::new(&nats, "approver").await;

    // Before the setup, a role cannot make the streams it needs.
    let early = tokio::time::timeout(Duration::from_secs(5), Infra::open(&worker.client, 1)).await;
    assert!(!matches!(early, Ok(Ok(_))), "a worker made the streams");
    worker.expect_violation("$JS.API.STREAM.CREATE.").await;
    worker.errors.lock().unwrap().clear();
    // The admin sets them up (`swarm setup`); then every role binds to them.
    Infra::ensure(&admin.client, 1).await.unwrap();
    admin.clean();
    let infra = Infra::open(&boss.client, 1).await.unwrap();
    for c in [&manager, &worker, &boss] {
        Infra::open(&c.client, 1).await.unwrap();
        c.clean();
    }
    // No role may create, update or delete a stream at run time (a worker
    // once set KV_swarms to keep nothing but a second).
    for c in [&boss, &manager, &worker, &client] {
        for api in [
            "$JS.API.STREAM.UPDATE.KV_swarms",
            "$JS.API.STREAM.UPDATE.A2AP",
            "$JS.API.STREAM.CREATE.EVIL",
            "$JS.API.STREAM.DELETE.WORK",
        ] {
            c.refused_publish(api).await;
        }
    }
    let mut swarms_cfg = worker
        .js()
        .get_stream("KV_swarms")
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .clone();
    swarms_cfg.max_age = Duration::from_secs(1);
    assert!(worker.js().update_stream(swarms_cfg).await.is_err());
    worker
        .expect_violation("$JS.API.STREAM.UPDATE.KV_swarms")
        .await;
    for c in [&boss, &manager, &worker, &client] {
        c.errors.lock().unwrap().clear();
    }

    // The boss serves `boss.missions`; a client submits through it.
    let mut service = boss
        .client
        .queue_subscribe(subjects::MISSIONS, subjects::MISSIONS_QUEUE.into())
        .await
        .unwrap();
    let boss_client = boss.client.clone();
    tokio::spawn(async move {
        while let Some(req) = service.next().await {
            if let Some(reply) = req.reply {
                boss_client
                    .publish(reply, Bytes::from_static(b"{\"status\":\"accepted\"}"))
                    .await
                    .unwrap();
            }
        }
    });
    boss.client.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    boss.clean();
    let answer = client
        .client
        .request(subjects::MISSIONS, Bytes::from_static(b"Count the words"))
        .await
        .unwrap();
    assert_eq!(&answer.payload[..], b"{\"status\":\"accepted\"}");

    // Every role answers its handshake; a client and an approver read it.
    for (c, role) in [(&boss, "boss"), (&manager, "manager"), (&worker, "worker")] {
        swarm_runtime::hello::spawn(&c.client, role, &format!("{role}-1"))
            .await
            .unwrap();
        c.client.flush().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for asker in [&client, &approver] {
        for role in ["boss", "manager", "worker"] {
            let answer = asker
                .client
                .request(subjects::hello(role), Bytes::from_static(b""))
                .await
                .unwrap_or_else(|e| panic!("{} asks {role}: {e}", asker.user));
            let hello: swarm_runtime::hello::Hello =
                serde_json::from_slice(&answer.payload).unwrap();
            assert_eq!(
                hello,
                swarm_runtime::hello::Hello::new(role, &format!("{role}-1"))
            );
        }
        asker.clean();
    }
    for c in [&boss, &manager, &worker] {
        c.clean();
    }

    // The boss records missions, deploys swarms, keeps mission records.
    boss.stored(&subjects::mission_record("s1")).await;
    boss.stored(&subjects::deploy("s1")).await;
    infra
        .missions
        .put("s1", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    boss.clean();

    // The manager keeps swarm state and assigns work.
    let swarms = manager
        .js()
        .get_key_value(subjects::SWARMS_BUCKET)
        .await
        .unwrap();
    swarms.put("s1", Bytes::from_static(b"{}")).await.unwrap();
    assert!(swarms.get("s1").await.unwrap().is_some());
    manager.stored(&subjects::work("general", "s1", "t1")).await;
    manager.stored(&subjects::progress("s1", "t1")).await;
    // A passed deadline, and the notice that a swarm ended early.
    manager.stored(&subjects::control("s1")).await;
    manager.clean();

    // The manager owns the swarms of its partitions: it makes each
    // partition's consumer, pulls it pinned, acks, and lets the pin go; the
    // replicas hear each other's heartbeats.
    let a2ap = manager
        .js()
        .get_stream(subjects::A2AP_STREAM)
        .await
        .unwrap();
    let partitions = swarm_runtime::infra::partitions(&a2ap.cached_info().config)
        .expect("the A2AP stream has the manager partitions");
    let home = subjects::partition("s1", partitions);
    for p in [0, home, subjects::MAX_PARTITIONS - 1] {
        let consumer: jetstream::consumer::PullConsumer = a2ap
            .create_consumer(pull::Config {
                durable_name: Some(subjects::manager_consumer(p)),
                filter_subjects: subjects::manager_filters(p),
                priority_policy: jetstream::consumer::PriorityPolicy::PinnedClient,
                priority_groups: vec![subjects::MANAGER_GROUP.into()],
                priority_timeout: Duration::from_secs(1),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("the manager makes partition {p}'s consumer: {e}"));
        if p != home {
            continue;
        }
        let mut events = consumer
            .stream()
            .group(subjects::MANAGER_GROUP)
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .unwrap();
        let event = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("the partition's first event arrives")
            .unwrap()
            .unwrap();
        assert_eq!(
            subjects::Subject::parse(&event.subject),
            Some(subjects::Subject::Deploy { swarm_id: "s1" })
        );
        event.ack().await.unwrap();
        drop(events);
        a2ap.unpin_consumer(&subjects::manager_consumer(p), subjects::MANAGER_GROUP)
            .await
            .unwrap();
    }
    let mut beats = manager
        .client
        .subscribe(subjects::MANAGER_HEARTBEAT)
        .await
        .unwrap();
    manager
        .client
        .publish(
            subjects::MANAGER_HEARTBEAT,
            Bytes::from_static(b"{\"id\":\"m\"}"),
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), beats.next())
        .await
        .expect("a manager hears the heartbeats")
        .unwrap();
    manager.clean();
    // No other role pulls a partition or speaks for a manager replica.
    for c in [&worker, &client, &boss] {
        c.refused_publish(&format!(
            "$JS.API.CONSUMER.MSG.NEXT.A2AP.{}",
            subjects::manager_consumer(home)
        ))
        .await;
        c.refused_publish(subjects::MANAGER_HEARTBEAT).await;
    }
    for c in [&worker, &client, &boss] {
        c.errors.lock().unwrap().clear();
    }

    // The worker pulls its pool's work, reports progress and results.
    let work = worker.js().get_stream(subjects::WORK_STREAM).await.unwrap();
    let consumer = work
        .create_consumer(pull::Config {
            durable_name: Some(subjects::worker_consumer("general")),
            filter_subject: subjects::work_filter("general"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = consumer.fetch().max_messages(1).messages().await.unwrap();
    let assignment = tokio::time::timeout(Duration::from_secs(5), batch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        assignment.subject.as_str(),
        subjects::work("general", "s1", "t1")
    );
    assignment
        .ack_with(jetstream::AckKind::Progress)
        .await
        .unwrap();
    assignment.double_ack().await.unwrap();
    worker.stored(&subjects::progress("s1", "t1")).await;
    worker.stored(&subjects::result("s1", "t1")).await;
    worker.stored(&subjects::error("s1")).await;
    // It asks a task's collaborators for help, and watches the swarm's state
    // (read only) for the answer.
    worker.stored(&subjects::ask("s1", "t1")).await;
    let state = worker
        .js()
        .get_key_value(subjects::SWARMS_BUCKET)
        .await
        .unwrap();
    assert!(state.get("s1").await.unwrap().is_some());
    let mut watch = state.watch_with_history("s1").await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(seen.key, "s1");
    drop(watch);
    worker.clean();

    // A sub-manager's task: the manager assigns it to the sub-manager pool,
    // the boss takes it (and starts the child swarm), and the child's
    // manager answers the parent task with a result.
    let sub = swarm_common::hierarchy::SUB_MANAGER_POOL;
    manager.stored(&subjects::work(sub, "s1", "t9")).await;
    let consumer = boss
        .js()
        .get_stream(subjects::WORK_STREAM)
        .await
        .unwrap()
        .create_consumer(pull::Config {
            durable_name: Some(subjects::worker_consumer(sub)),
            filter_subject: subjects::work_filter(sub),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = consumer.fetch().max_messages(1).messages().await.unwrap();
    let assignment = tokio::time::timeout(Duration::from_secs(5), batch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(assignment.subject.as_str(), subjects::work(sub, "s1", "t9"));
    assignment.double_ack().await.unwrap();
    manager.stored(&subjects::result("s1", "t9")).await;
    // The manager's model's tasks after a failure: only a manager sends them.
    manager.stored(&subjects::replan("s1", "t1")).await;
    boss.clean();
    manager.clean();
    // A worker cannot take the sub-manager pool's assignments.
    worker
        .refused_publish(&format!(
            "$JS.API.CONSUMER.CREATE.WORK.{}",
            subjects::worker_consumer(sub)
        ))
        .await;
    worker.errors.lock().unwrap().clear();

    // A client follows a swarm, reads its state, cancels it.
    let follow = client
        .js()
        .get_stream(subjects::A2AP_STREAM)
        .await
        .unwrap()
        .create_consumer(pull::OrderedConfig {
            filter_subject: subjects::swarm_events("s1"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut events = follow.messages().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), events.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(subjects::published(&first.subject), subjects::deploy("s1"));
    let state = client
        .js()
        .get_key_value(subjects::SWARMS_BUCKET)
        .await
        .unwrap();
    assert!(state.get("s1").await.unwrap().is_some());
    client.stored(&subjects::control("s1")).await;
    // `swarm list` pages through the records.
    swarm_client::list::list(
        &client.client,
        &swarm_client::list::Query {
            statuses: Vec::new(),
            since: None,
            limit: 10,
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    client.clean();

    // What each must not do, each a violation the client sees.
    // A worker cannot deploy, write swarm state, report, or assign work.
    worker.refused_publish(&subjects::deploy("s2")).await;
    worker.refused_publish("$KV.swarms.s1").await;
    worker
        .refused_publish("$JS.API.STREAM.PURGE.KV_swarms")
        .await;
    worker.refused_publish(&subjects::report("s1")).await;
    worker
        .refused_publish(&subjects::work("general", "s1", "t2"))
        .await;
    worker
        .refused_publish(&subjects::work("result", "s1", "t2"))
        .await;
    worker.refused_publish(subjects::MISSIONS).await;
    worker
        .refused_publish("$JS.API.CONSUMER.MSG.NEXT.A2AP.manager-p0")
        .await;
    worker.refused_publish("$JS.API.STREAM.DELETE.A2AP").await;
    // A client cannot publish results, deployments, reports or work, write
    // swarm state or mission records, delete or purge, or take a role's work.
    client.refused_publish(&subjects::result("s1", "t1")).await;
    client.refused_publish(&subjects::replan("s1", "t1")).await;
    worker.refused_publish(&subjects::replan("s1", "t1")).await;
    client.refused_publish(&subjects::ask("s1", "t1")).await;
    client.refused_publish(&subjects::deploy("s3")).await;
    client.refused_publish(&subjects::report("s1")).await;
    client
        .refused_publish(&subjects::progress("s1", "t1"))
        .await;
    client
        .refused_publish(&subjects::work("general", "s1", "t9"))
        .await;
    client.refused_publish("$KV.swarms.s1").await;
    client.refused_publish("$KV.missions.s1").await;
    client
        .refused_publish(&subjects::mission_record("s9"))
        .await;
    client.refused_publish("$JS.API.STREAM.PURGE.A2AP").await;
    client
        .refused_publish("$JS.API.CONSUMER.MSG.NEXT.A2AP.worker-general")
        .await;
    client
        .refused_publish("$JS.API.CONSUMER.DELETE.A2AP.manager-p15")
        .await;
    // A client reads the swarms' messages, state, records and reports, not
    // the agents' journal and memory, the dead letters or the missions stream.
    for stream in ["KV_journal", "KV_memory", "DEADLETTER", "MISSIONS"] {
        client
            .refused_publish(&format!("$JS.API.DIRECT.GET.{stream}"))
            .await;
        client
            .refused_publish(&format!("$JS.API.STREAM.MSG.GET.{stream}"))
            .await;
        client
            .refused_publish(&format!("$JS.API.CONSUMER.CREATE.{stream}"))
            .await;
    }
    // ... and cannot write swarm state through the KV API either.
    assert!(state.put("s1", Bytes::from_static(b"{}")).await.is_err());
    client.expect_violation("$KV.swarms.s1").await;
    // A manager cannot touch mission records.
    manager.refused_publish("$KV.missions.s1").await;
    manager.refused_publish(&subjects::deploy("s4")).await;
    // A boss cannot write swarm state or assign work.
    boss.refused_publish("$KV.swarms.s1").await;
    boss.refused_publish(&subjects::work("general", "s1", "t3"))
        .await;
    boss.refused_publish(&subjects::result("s1", "t1")).await;

    // Approvals and answers: only the boss writes them (its desk); workers
    // and the approver ask it, each under its own name only, and the client
    // that submits missions cannot approve at all (not its own shell calls,
    // not anyone's).
    for c in [&worker, &client, &manager, &approver] {
        c.refused_publish("$KV.approvals.a1").await;
        c.refused_publish("$KV.inputs.s1.t1").await;
    }
    client
        .refused_publish(&subjects::desk("client", "decide"))
        .await;
    client
        .refused_publish(&subjects::desk("approver", "decide"))
        .await;
    approver
        .refused_publish(&subjects::desk("client", "decide"))
        .await;
    approver
        .refused_publish(&subjects::desk("approver", "ask_approval"))
        .await;
    worker
        .refused_publish(&subjects::desk("worker", "decide"))
        .await;
    // Removing a learned skill is the approver's, as deciding is.
    client
        .refused_publish(&subjects::desk("client", "remove_skill"))
        .await;
    worker
        .refused_publish(&subjects::desk("worker", "remove_skill"))
        .await;
    worker
        .refused_publish(&subjects::desk("client", "decide"))
        .await;
    client
        .refused_publish(&subjects::desk("client", "ask_approval"))
        .await;
    client
        .refused_publish(&subjects::desk("worker", "ask_approval"))
        .await;
    boss.errors.lock().unwrap().clear();
    let approvals = boss
        .js()
        .get_key_value(subjects::APPROVALS_BUCKET)
        .await
        .unwrap();
    approvals
        .put("a1", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    boss.clean();
    // The desk's subjects reach the boss.
    let mut desk = boss.client.subscribe(subjects::DESK_FILTER).await.unwrap();
    boss.client.flush().await.unwrap();
    approver
        .client
        .publish(
            subjects::desk("approver", "decide"),
            Bytes::from_static(b"{}"),
        )
        .await
        .unwrap();
    approver
        .client
        .publish(
            subjects::desk("approver", "remove_skill"),
            Bytes::from_static(b"{}"),
        )
        .await
        .unwrap();
    worker
        .client
        .publish(
            subjects::desk("worker", "ask_approval"),
            Bytes::from_static(b"{}"),
        )
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let msg = tokio::time::timeout(Duration::from_secs(5), desk.next())
            .await
            .unwrap()
            .unwrap();
        got.push(msg.subject.to_string());
    }
    // Two connections: either's may arrive first.
    got.sort();
    assert_eq!(
        got,
        [
            "swarm.desk.approver.decide",
            "swarm.desk.approver.remove_skill",
            "swarm.desk.worker.ask_approval"
        ]
    );

    // Assignments (and their tokens) are for the manager and the pool's
    // workers: a client can neither read them nor another user's replies.
    for api in [
        "$JS.API.DIRECT.GET.WORK",
        "$JS.API.CONSUMER.CREATE.WORK",
        "$JS.API.STREAM.MSG.GET.WORK",
    ] {
        client.refused_publish(api).await;
    }
    for subject in [
        "a2ap.work.general.s1.t1",
        "a2ap.work.>",
        "_INBOX.worker.x",
        "_INBOX.>",
    ] {
        let _sub = client.client.subscribe(subject.to_owned()).await.unwrap();
        client.client.flush().await.unwrap();
        client.expect_violation(subject).await;
    }

    // Nothing refused was stored.
    let mut a2ap = client.js().get_stream(subjects::A2AP_STREAM).await.unwrap();
    let stored = a2ap.info().await.unwrap().state.messages;
    // deploy, progress x2, results x2 (a worker's, a child's), replan,
    // error, ask, control x2
    assert_eq!(
        stored, 10,
        "only the allowed messages are in the A2AP stream"
    );
    let mut work = admin.js().get_stream(subjects::WORK_STREAM).await.unwrap();
    assert_eq!(
        work.info().await.unwrap().state.messages,
        2,
        "two assignments: a worker's and a sub-manager's"
    );
}

/// The A2A gateway's user: a client's reading and cancelling, the desk's
/// decide and answer under its own name, its push configs and its durable
/// consumer; nothing of the roles' work, and no one else has its bucket or
/// its consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_reads_decides_for_its_callers_and_pushes_and_nothing_else() {
    // (and every role writes its own agent card, below)
    let nats = NatsCluster::start(1).unwrap();
    let admin = Conn::new(&nats, "admin").await;
    let gateway = Conn::new(&nats, "gateway").await;
    let client = Conn::new(&nats, "client").await;
    let worker = Conn::new(&nats, "worker").await;
    let manager = Conn::new(&nats, "manager").await;
    let boss = Conn::new(&nats, "boss").await;
    Infra::ensure(&admin.client, 1).await.unwrap();
    Infra::open(&gateway.client, 1).await.unwrap();

    // Its bucket: compare-and-swap writes and reads.
    let pushes = gateway
        .js()
        .get_key_value(subjects::PUSH_BUCKET)
        .await
        .unwrap();
    let revision = pushes
        .create("s1", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    pushes
        .update("s1", Bytes::from_static(b"{\"configs\":[]}"), revision)
        .await
        .unwrap();
    assert!(pushes.entry("s1").await.unwrap().is_some());
    // Its durable consumer, shared by the replicas.
    worker.stored(&subjects::progress("s1", "t1")).await;
    let consumer = gateway
        .js()
        .get_stream(subjects::A2AP_STREAM)
        .await
        .unwrap()
        .create_consumer(pull::Config {
            durable_name: Some(subjects::PUSH_CONSUMER.into()),
            filter_subjects: subjects::push_filters(),
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = consumer.fetch().max_messages(1).messages().await.unwrap();
    let message = tokio::time::timeout(Duration::from_secs(5), batch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    message.ack().await.unwrap();
    // Reading swarms, as GetTask and ListTasks do; cancelling one.
    for bucket in [
        subjects::SWARMS_BUCKET,
        subjects::MISSIONS_BUCKET,
        subjects::APPROVALS_BUCKET,
        subjects::INPUTS_BUCKET,
    ] {
        let kv = gateway.js().get_key_value(bucket).await.unwrap();
        assert!(kv.get("s1").await.unwrap().is_none());
        let _ = kv.keys().await.unwrap().count().await;
    }
    swarm_client::list::list(
        &gateway.client,
        &swarm_client::list::Query {
            statuses: Vec::new(),
            since: None,
            limit: 10,
        },
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    // The console follows the buckets with ordered pull consumers (values
    // of approvals and questions, the keys of swarms and records) and asks
    // the services that answer $SRV.INFO for its agents page.
    boss.js()
        .get_key_value(subjects::APPROVALS_BUCKET)
        .await
        .unwrap()
        .put("a1", Bytes::from_static(b"{}"))
        .await
        .unwrap();
    for (bucket, headers_only) in [
        (subjects::APPROVALS_BUCKET, false),
        (subjects::INPUTS_BUCKET, false),
        (subjects::SWARMS_BUCKET, true),
        (subjects::MISSIONS_BUCKET, true),
    ] {
        let consumer = gateway
            .js()
            .get_stream(format!("KV_{bucket}"))
            .await
            .unwrap()
            .create_consumer(pull::OrderedConfig {
                filter_subject: format!("$KV.{bucket}.>"),
                deliver_policy: jetstream::consumer::DeliverPolicy::All,
                headers_only,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("gateway: following {bucket}: {e}"));
        let mut messages = consumer.messages().await.unwrap();
        if bucket == subjects::APPROVALS_BUCKET {
            let first = tokio::time::timeout(Duration::from_secs(5), messages.next()).await;
            assert!(
                matches!(first, Ok(Some(Ok(_)))),
                "gateway: reading {bucket}: {first:?}"
            );
        }
    }
    let inbox = gateway.client.new_inbox();
    let _answers = gateway.client.subscribe(inbox.clone()).await.unwrap();
    gateway
        .client
        .publish_with_reply("$SRV.INFO", inbox, Bytes::new())
        .await
        .unwrap();
    gateway.stored(&subjects::control("s1")).await;
    // The desk, under its own name.
    for action in ["decide", "answer"] {
        gateway
            .client
            .publish(subjects::desk("gateway", action), Bytes::from_static(b"{}"))
            .await
            .unwrap();
    }
    gateway.client.flush().await.unwrap();
    gateway.clean();

    // Nothing of the roles' work, no other user's desk, no writes to the
    // swarms' buckets, no journal, memory or dead letters.
    for subject in [
        subjects::result("s1", "t1"),
        subjects::progress("s1", "t1"),
        subjects::deploy("s2"),
        subjects::report("s1"),
        subjects::work("general", "s1", "t1"),
        subjects::work("control", "s1", "t1"),
        subjects::desk("approver", "decide"),
        subjects::desk("client", "answer"),
        subjects::desk("gateway", "ask_approval"),
        subjects::mission_record("s9"),
        "$KV.swarms.s1".to_owned(),
        "$KV.missions.s1".to_owned(),
        "$KV.approvals.a1".to_owned(),
        "$KV.inputs.s1.t1".to_owned(),
        "$KV.memory.shared.x".to_owned(),
        "$JS.API.CONSUMER.MSG.NEXT.A2AP.manager-p7".to_owned(),
        "$JS.API.CONSUMER.DELETE.A2AP.manager-p0".to_owned(),
        "$JS.API.CONSUMER.DELETE.A2AP.boss-reports".to_owned(),
        "$JS.API.CONSUMER.CREATE.WORK".to_owned(),
        "$JS.API.DIRECT.GET.KV_journal".to_owned(),
        "$JS.API.DIRECT.GET.KV_memory".to_owned(),
        "$JS.API.DIRECT.GET.DEADLETTER".to_owned(),
        "$JS.API.STREAM.PURGE.A2AP".to_owned(),
        "$JS.API.STREAM.DELETE.KV_a2a-push".to_owned(),
        "$JS.API.STREAM.UPDATE.A2AP".to_owned(),
    ] {
        gateway.refused_publish(&subject).await;
    }
    for subject in ["a2ap.*.*", "_INBOX.client.x", "boss.missions"] {
        let _sub = gateway.client.subscribe(subject.to_owned()).await.unwrap();
        gateway.client.flush().await.unwrap();
        gateway.expect_violation(subject).await;
    }
    // Agent cards: each role writes its own, under its own name; the
    // client reads them all.
    for (c, role) in [
        (&gateway, "gateway"),
        (&boss, "boss"),
        (&manager, "manager"),
        (&worker, "worker"),
    ] {
        c.errors.lock().unwrap().clear();
        let agents = c.js().get_key_value(subjects::AGENTS_BUCKET).await.unwrap();
        agents
            .put(format!("{role}.{role}-1"), Bytes::from_static(b"{}"))
            .await
            .unwrap_or_else(|e| panic!("{role} writes its card: {e}"));
        c.clean();
    }
    for (c, other) in [
        (&gateway, "boss"),
        (&boss, "worker"),
        (&worker, "manager"),
        (&manager, "gateway"),
        (&client, "client"),
    ] {
        c.refused_publish(&format!("$KV.agents.{other}.{other}-9"))
            .await;
    }
    let cards = swarm_client::agents::list(&client.client).await.unwrap();
    assert!(
        cards.is_empty(),
        "the test's values are not cards: {cards:?}"
    );
    let agents = client
        .js()
        .get_key_value(subjects::AGENTS_BUCKET)
        .await
        .unwrap();
    assert!(agents.get("worker.worker-1").await.unwrap().is_some());
    client.errors.lock().unwrap().clear();
    for c in [&gateway, &boss, &worker, &manager] {
        c.errors.lock().unwrap().clear();
    }

    // No one else has its bucket or its consumer.
    for c in [&client, &worker, &manager, &boss] {
        c.refused_publish("$KV.a2a-push.s1").await;
    }

    // Model limits: a worker keeps them in their bucket with the store it
    // runs (read, create, compare-and-swap, watch); no other role writes it.
    {
        use swarm_agent::provider::limit::{LimitStore, SharedLimits};
        worker.errors.lock().unwrap().clear();
        let kv = worker
            .js()
            .get_key_value(subjects::MODEL_LIMITS_BUCKET)
            .await
            .unwrap();
        let store = swarm_worker::limits::KvLimits::new(kv);
        assert!(store.load("e1").await.unwrap().is_none());
        let first = store
            .store("e1", &SharedLimits::default(), None)
            .await
            .unwrap()
            .expect("created");
        assert_eq!(
            store
                .store("e1", &SharedLimits::default(), None)
                .await
                .unwrap(),
            None,
            "a second create loses"
        );
        let paused = SharedLimits {
            pauses: 1,
            ..Default::default()
        };
        let second = store
            .store("e1", &paused, Some(first))
            .await
            .unwrap()
            .expect("updated at its revision");
        assert_eq!(
            store.store("e1", &paused, Some(first)).await.unwrap(),
            None,
            "a stale revision loses"
        );
        assert_eq!(store.load("e1").await.unwrap(), Some((paused, second)));
        // A wait ends when the watch of the bucket brings the newer revision.
        let started = std::time::Instant::now();
        store
            .changed("e1", Some(first), Duration::from_secs(5))
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "the watch saw the change"
        );
        worker.clean();
    }
    for c in [&client, &gateway, &manager, &boss] {
        c.refused_publish("$KV.model-limits.e1").await;
        c.errors.lock().unwrap().clear();
    }
    // Skills: a worker records and lists them, the manager scores them,
    // the boss lists them for its planner and removes one at its desk, a
    // client lists them, each with the book its role runs; no client
    // writes the bucket.
    {
        use swarm_common::skill::{self, LearnedSkill};
        use swarm_runtime::skills::SkillBook;
        let book_of = |c: &Conn| {
            let js = c.js();
            async move { SkillBook::new(js.get_key_value(subjects::SKILLS_BUCKET).await.unwrap()) }
        };
        for c in [&worker, &manager, &boss, &client] {
            c.errors.lock().unwrap().clear();
        }
        let book = book_of(&worker).await;
        let key = book
            .record(LearnedSkill::new(
                skill::DEFAULT_SCOPE,
                "Check permissions",
                "Try each subject as each user.",
                "s1",
                "t1",
                chrono::Utc::now(),
            ))
            .await
            .unwrap();
        assert_eq!(book.all(skill::DEFAULT_SCOPE).await.unwrap().len(), 1);
        worker.clean();
        let scorer = book_of(&manager).await;
        scorer
            .score(std::slice::from_ref(&key), true, "s1/t1/a1/r0")
            .await;
        manager.clean();
        let listed = book_of(&client).await.list(None).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].score, skill::INITIAL_SCORE + skill::PASS_GAIN);
        client.clean();
        let remover = book_of(&boss).await;
        assert_eq!(
            remover
                .best(skill::DEFAULT_SCOPE, "check permissions", 5)
                .await
                .len(),
            1
        );
        assert!(remover.remove(&key).await.unwrap().is_some());
        assert!(book.list(None).await.unwrap().is_empty());
        boss.clean();
    }
    for c in [&client, &gateway] {
        c.refused_publish("$KV.skills.deployment.x").await;
        c.errors.lock().unwrap().clear();
    }
    client
        .refused_publish("$JS.API.CONSUMER.MSG.NEXT.A2AP.gateway-push")
        .await;
    // The A2A NATS binding: the gateway serves it, a client calls it, and
    // no one else may serve it (and so read others' requests).
    let _served = gateway
        .client
        .queue_subscribe(subjects::A2A_RPC, "gateway".into())
        .await
        .unwrap();
    gateway.client.flush().await.unwrap();
    gateway.clean();
    client.errors.lock().unwrap().clear();
    worker.errors.lock().unwrap().clear();
    client
        .client
        .publish(subjects::A2A_RPC, Bytes::from_static(b"{}"))
        .await
        .unwrap();
    client.client.flush().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.clean();
    for c in [&client, &worker] {
        let _sub = c.client.subscribe(subjects::A2A_RPC).await.unwrap();
        c.client.flush().await.unwrap();
        c.expect_violation(subjects::A2A_RPC).await;
    }
    client
        .refused_publish("$JS.API.CONSUMER.DELETE.A2AP.gateway-push")
        .await;
}
