//! Crash-proof swarms: managers and workers killed with SIGKILL, a broker
//! restart, cancellation and deadlines. Every path ends in exactly one
//! `FinalReport` with the honest status, and no finished task runs again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use swarm_common::{
    FinalReport, ProgressUpdate, ResultSubmission, SwarmStatus, TaskStatus,
    mission::MissionRequest, subjects,
};
use swarm_testkit::Cluster;

/// A cluster whose redeliveries come fast, so kills are recovered from quickly.
fn fast_redelivery() -> swarm_testkit::ClusterBuilder {
    Cluster::builder()
        .env("SWARM_MANAGER_ACK_WAIT", "2")
        .env("SWARM_WORKER_ACK_WAIT", "3")
}

/// A small deterministic generator for kill timings (xorshift), seeded and printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Tasks `ids`, each depending on the one before, described by `what`.
fn chain(ids: &[String], what: impl Fn(&str) -> String) -> Vec<swarm_common::TaskDefinition> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            let deps: Vec<&str> = ids[..i].last().map(String::as_str).into_iter().collect();
            common::task(id, &what(id), &deps)
        })
        .collect()
}

/// The assignments of a swarm stored so far, every task and pool.
async fn assignments(
    nc: &async_nats::Client,
    swarm_id: &str,
) -> Vec<swarm_common::Envelope<swarm_common::TaskAssignment>> {
    common::messages(nc, &subjects::work("*", swarm_id, "*")).await
}

/// Waits (up to 30 s, looking every `every`) until at least `n` of a
/// swarm's assignments are stored, and returns them.
async fn wait_for_assignments(
    nc: &async_nats::Client,
    swarm_id: &str,
    n: usize,
    every: Duration,
) -> Vec<swarm_common::Envelope<swarm_common::TaskAssignment>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = assignments(nc, swarm_id).await;
        if seen.len() >= n {
            return seen;
        }
        assert!(Instant::now() < deadline, "the chain did not get going");
        tokio::time::sleep(every).await;
    }
}

/// SIGKILLs the manager replica whose agent id is `agent_id` (`manager-<n>`).
fn kill_manager(cluster: &mut Cluster, agent_id: &str) {
    let index: usize = agent_id
        .trim_start_matches("manager-")
        .parse()
        .expect("a manager's agent id");
    cluster.local_mut().managers[index - 1].kill();
}

/// Waits for the first progress update of `task_id` and returns the worker
/// named in it ("<task> started on <worker>").
async fn started_on(
    nc: &async_nats::Client,
    swarm_id: &str,
    task_id: &str,
    after: usize,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let updates =
            common::messages::<ProgressUpdate>(nc, &subjects::progress(swarm_id, task_id)).await;
        let starts: Vec<String> = updates
            .iter()
            .filter(|u| u.body.progress_percentage == 0 && u.body.status == TaskStatus::InProgress)
            .map(|u| u.sender_agent.clone())
            .collect();
        if starts.len() > after {
            return starts[after].clone();
        }
        assert!(
            Instant::now() < deadline,
            "task {task_id} did not start a {}th time",
            after + 1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_managers_at_random_moments_loses_no_swarm_and_repeats_no_task() {
    // Thirteen kills in four seconds may land twice on one redelivered
    // event, which the poison guard cannot tell from an event that kills;
    // this test is about takeovers, so it allows more such deaths.
    let mut cluster = fast_redelivery()
        .env("SWARM_MANAGER_POISON_DEATHS", "5")
        .bosses(1)
        .managers(3)
        .workers(2)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let mut swarms = Vec::new();
    for i in 0..20 {
        let m = common::mission(
            &format!("mission {i}"),
            vec![
                common::task("a", &common::sleep(100), &[]),
                common::task("b", &common::echo("b"), &["a"]),
                common::task("c", &common::echo("c"), &["a"]),
                common::task("d", &common::sleep(50), &["b", "c"]),
            ],
        );
        swarms.push(common::submit(&nc, &m).await);
    }
    let watchers: Vec<_> = swarms
        .iter()
        .map(|id| {
            let nc = nc.clone();
            let id = id.clone();
            tokio::spawn(async move {
                swarm_client::client::watch(&nc, &id, Duration::from_secs(120), |_| {}).await
            })
        })
        .collect();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("kill schedule seed {seed}");
    let mut rng = Rng(seed);
    let mut kills = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        tokio::time::sleep(Duration::from_millis(50 + rng.below(300))).await;
        let i = rng.below(3) as usize;
        let m = &mut cluster.local_mut().managers[i];
        m.kill();
        kills += 1;
        tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
        m.restart().unwrap();
    }
    println!("{kills} manager kills");
    let mut reports: Vec<FinalReport> = Vec::new();
    for w in watchers {
        match w.await.unwrap() {
            Ok(r) => reports.push(r),
            Err(e) => panic!("{e:#}\n{}", cluster.log_tails()),
        }
    }
    assert!(kills >= 8);
    for (swarm_id, report) in swarms.iter().zip(&reports) {
        assert_eq!(
            report.overall_status,
            SwarmStatus::Completed,
            "{swarm_id}: {report:#?}"
        );
        let finals = common::messages::<FinalReport>(&nc, &subjects::report(swarm_id)).await;
        assert_eq!(finals.len(), 1, "{swarm_id}: exactly one FinalReport");
        for t in ["a", "b", "c", "d"] {
            // Each execution of a task publishes one result: one means it ran once.
            let results =
                common::messages::<ResultSubmission>(&nc, &subjects::result(swarm_id, t)).await;
            assert_eq!(
                results.len(),
                1,
                "{swarm_id}/{t} ran {} times",
                results.len()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_task_is_replaced_and_the_task_completes() {
    let mut cluster = fast_redelivery()
        .bosses(1)
        .managers(1)
        .workers(2)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let m = common::mission(
        "slow",
        vec![
            common::task("slow", &common::sleep(2000), &[]),
            common::task("after", &common::echo("done"), &["slow"]),
        ],
    );
    let swarm_id = common::submit(&nc, &m).await;
    let victim = started_on(&nc, &swarm_id, "slow", 0).await;
    let killed_at = Instant::now();
    cluster
        .local_mut()
        .workers
        .iter_mut()
        .find(|w| w.name() == victim)
        .unwrap()
        .kill();
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    let state = common::state(&nc, &swarm_id).await;
    let slow = state.task("slow").unwrap();
    assert_ne!(
        slow.worker_id.as_deref(),
        Some(victim.as_str()),
        "another worker finished it"
    );
    assert_eq!(slow.redeliveries, 1, "the state counts the redelivery");
    println!(
        "task recovered {:?} after its worker was killed",
        killed_at.elapsed()
    );
    let results =
        common::messages::<ResultSubmission>(&nc, &subjects::result(&swarm_id, "slow")).await;
    assert_eq!(results.len(), 1, "the killed attempt submitted nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_kills_every_worker_fails_after_max_attempts() {
    let mut cluster = fast_redelivery()
        .bosses(1)
        .managers(1)
        .workers(2)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let m = common::mission(
        "deadly",
        vec![
            common::task("deadly", &common::sleep(5000), &[]),
            common::task("after", &common::echo("never"), &["deadly"]),
        ],
    );
    let swarm_id = common::submit(&nc, &m).await;
    let max = swarm_common::Limits::default().max_attempts as usize;
    for attempt in 0..max {
        let victim = started_on(&nc, &swarm_id, "deadly", attempt).await;
        let w = cluster
            .local_mut()
            .workers
            .iter_mut()
            .find(|w| w.name() == victim)
            .unwrap();
        w.kill();
        w.restart().unwrap();
    }
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Failed);
    let deadly = common::outcome(&report, "deadly");
    assert_eq!(deadly.status, TaskStatus::Failed);
    let error = deadly.error.as_deref().unwrap();
    assert!(
        error.contains("limit_exceeded") && error.contains(&format!("delivered {} times", max + 1)),
        "{error}"
    );
    let after = common::outcome(&report, "after");
    assert_eq!(after.status, TaskStatus::Cancelled);
    let errors =
        common::messages::<swarm_common::ErrorMessage>(&nc, &subjects::error(&swarm_id)).await;
    assert_eq!(errors.len(), 1, "one Error for the task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_running_work_and_reports_cancelled() {
    let cluster = fast_redelivery()
        .bosses(1)
        .managers(2)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let m = common::mission(
        "long",
        vec![
            common::task("long", &common::sleep(30_000), &[]),
            common::task("later", &common::echo("x"), &["long"]),
        ],
    );
    let swarm_id = common::submit(&nc, &m).await;
    started_on(&nc, &swarm_id, "long", 0).await;
    let asked = Instant::now();
    swarm_client::client::cancel(&nc, &swarm_id, "the user changed their mind")
        .await
        .unwrap();
    let report = common::final_report(&cluster, &nc, &swarm_id, 20).await;
    assert_eq!(report.overall_status, SwarmStatus::Cancelled);
    assert!(
        report.summary.contains("changed their mind"),
        "{}",
        report.summary
    );
    assert!(
        report
            .task_results
            .iter()
            .all(|t| t.status == TaskStatus::Cancelled)
    );
    // The worker stops the running task within a bounded time.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let updates =
            common::messages::<ProgressUpdate>(&nc, &subjects::progress(&swarm_id, "long")).await;
        if updates
            .iter()
            .any(|u| u.body.status == TaskStatus::Cancelled)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not stop the cancelled task"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("cancelled and stopped in {:?}", asked.elapsed());
    assert!(asked.elapsed() < Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        common::messages::<FinalReport>(&nc, &subjects::report(&swarm_id))
            .await
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_ends_the_swarm_timed_out_with_what_was_done() {
    let cluster = fast_redelivery()
        .bosses(1)
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let mut m = common::mission(
        "too slow",
        vec![
            common::task("quick", &common::echo("done"), &[]),
            common::task("slow", &common::sleep(20_000), &["quick"]),
        ],
    );
    m.max_execution_seconds = Some(2);
    let swarm_id = common::submit(&nc, &m).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 20).await;
    assert_eq!(report.overall_status, SwarmStatus::TimedOut);
    let by_id: HashMap<&str, _> = report
        .task_results
        .iter()
        .map(|t| (t.task_id.as_str(), t))
        .collect();
    assert_eq!(by_id["quick"].status, TaskStatus::Completed);
    assert_eq!(by_id["quick"].result, "done");
    assert_eq!(by_id["slow"].status, TaskStatus::Cancelled);
    assert!(by_id["slow"].error.as_deref().unwrap().contains("deadline"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        common::messages::<FinalReport>(&nc, &subjects::report(&swarm_id))
            .await
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_mid_mission_is_ridden_out() {
    let mut cluster = fast_redelivery()
        .bosses(1)
        .managers(2)
        .workers(2)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let m = common::mission(
        "through a restart",
        vec![
            common::task("one", &common::sleep(500), &[]),
            common::task("two", &common::sleep(500), &["one"]),
            common::task("three", &common::echo("three"), &["two"]),
        ],
    );
    let swarm_id = common::submit(&nc, &m).await;
    started_on(&nc, &swarm_id, "one", 0).await;
    cluster.local_mut().nats.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.local_mut().nats.restart().unwrap();
    // The old connection reconnects by itself; follow the mission on it.
    let report = common::final_report(&cluster, &nc, &swarm_id, 90).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(common::outcome(&report, "three").result, "three");
    common::assert_all_running(&mut cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mission_recorded_by_a_boss_that_died_is_planned_by_another() {
    use async_nats::jetstream;
    use swarm_common::{
        Codec,
        mission::{MissionRecord, MissionStatus, swarm_id_for},
    };
    // No boss yet: the mission below was accepted by one that died before planning it.
    let mut cluster = fast_redelivery()
        .bosses(0)
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let js = jetstream::new(nc.clone());
    let swarm_id = swarm_id_for(Some("orphan"));
    let now = chrono::Utc::now();
    let record = MissionRecord {
        parent: None,
        swarm_id: swarm_id.clone(),
        request: MissionRequest {
            mission_id: Some("orphan".into()),
            ..MissionRequest::text("Compute 40 + 2")
        },
        status: MissionStatus::Accepted,
        accepted_at: now,
        updated_at: now,
        plan: None,
        overall_status: None,
        report_object: None,
        report_file: None,
        error: None,
    };
    let bytes = bytes::Bytes::from(Codec::MsgPack.encode(&record).unwrap());
    let missions = js.get_key_value(subjects::MISSIONS_BUCKET).await.unwrap();
    missions.create(&swarm_id, bytes.clone()).await.unwrap();
    js.publish(subjects::mission_record(&swarm_id), bytes)
        .await
        .unwrap()
        .await
        .unwrap();

    cluster.local_mut().spawn_boss().unwrap();
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed);
    assert!(
        report.task_results[0].result.contains("42"),
        "{}",
        report.task_results[0].result
    );
    let record = swarm_client::client::wait_for_rendering(&nc, &swarm_id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(record.status, MissionStatus::Reported);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_manager_owns_a_swarm_and_another_takes_it_over_when_it_dies() {
    // Default ack_wait and pin lifetime: what a user gets.
    let mut cluster = Cluster::builder()
        .bosses(1)
        .managers(2)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let ids: Vec<String> = (0..12).map(|i| format!("t{i}")).collect();
    let tasks = chain(&ids, |_| common::sleep(100));
    let swarm_id = common::submit(&nc, &common::mission("pinned", tasks)).await;
    let before = wait_for_assignments(&nc, &swarm_id, 3, Duration::from_millis(50)).await;
    // The server delivers every event of the swarm's partition to the
    // replica that owns it: it alone assigns.
    let active = before[0].sender_agent.clone();
    assert!(
        before.iter().all(|a| a.sender_agent == active),
        "{before:#?}"
    );
    let killed_at = Instant::now();
    kill_manager(&mut cluster, &active);
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let after = assignments(&nc, &swarm_id).await;
    assert_eq!(
        after.len(),
        ids.len(),
        "each task assigned once, none again after the takeover"
    );
    let standby: Vec<_> = after[before.len()..]
        .iter()
        .map(|a| a.sender_agent.as_str())
        .collect();
    assert!(standby.last().is_some_and(|s| *s != active), "{standby:?}");
    println!(
        "takeover and the rest of the chain took {:?}",
        killed_at.elapsed()
    );
    cluster.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_at_capacity_still_finishes_every_swarm() {
    // One swarm at a time: the others wait in the stream until it is idle.
    let cluster = fast_redelivery()
        .env("SWARM_MANAGER_MAX_SWARMS", "1")
        .bosses(1)
        .managers(1)
        .workers(2)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let mut swarms = Vec::new();
    for i in 0..3 {
        let m = common::mission(
            &format!("capacity {i}"),
            vec![
                common::task("a", &common::sleep(200), &[]),
                common::task("b", &common::echo("b"), &["a"]),
            ],
        );
        swarms.push(common::submit(&nc, &m).await);
    }
    for swarm_id in &swarms {
        let report = common::final_report(&cluster, &nc, swarm_id, 90).await;
        assert_eq!(report.overall_status, SwarmStatus::Completed);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_ahead_of_a_lost_state_write_waits_for_it_and_is_not_dropped() {
    // A manager sends the next assignments while it writes the state. Should
    // it die in between, the next task's result can reach the new manager
    // before the redelivered events that lead to its assignment. Played here
    // without workers: b's result is stored before a's.
    let cluster = fast_redelivery()
        .bosses(1)
        .managers(1)
        .workers(0)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let m = common::mission(
        "ahead",
        vec![
            common::task("a", &common::echo("a"), &[]),
            common::task("b", &common::echo("b"), &["a"]),
        ],
    );
    let swarm_id = common::submit(&nc, &m).await;
    common::play_worker_result(&nc, &swarm_id, "b", 1, "B from the future").await;
    common::play_worker_result(&nc, &swarm_id, "a", 1, "A").await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 30).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(common::outcome(&report, "b").result, "B from the future");
    common::assert_one_report(&nc, &swarm_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_before_its_swarms_first_state_write_deploys_the_swarm() {
    // A new swarm's first assignments go out while its state is first
    // written. Played here: a replica takes the deployment and dies before
    // the write (the test pulls it and never acks), and the task's result
    // reaches the next manager long before the deployment is redelivered.
    let mut cluster = Cluster::builder()
        .env("SWARM_MANAGER_ACK_WAIT", "60")
        .bosses(1)
        .managers(1)
        .workers(0)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    cluster.local_mut().managers[0].kill();
    let m = common::mission(
        "first write lost",
        vec![common::task("a", &common::echo("a"), &[])],
    );
    let swarm_id = common::submit(&nc, &m).await;
    let js = async_nats::jetstream::new(nc.clone());
    let a2ap = js.get_stream(subjects::A2AP_STREAM).await.unwrap();
    let partitions = swarm_runtime::infra::partitions(&a2ap.cached_info().config).unwrap();
    let consumer: async_nats::jetstream::consumer::PullConsumer = a2ap
        .get_consumer(&subjects::manager_consumer(subjects::partition(
            &swarm_id, partitions,
        )))
        .await
        .unwrap();
    // The killed replica's pin lapses first (a pull is refused until then).
    let deadline = Instant::now() + Duration::from_secs(15);
    let deployment = loop {
        let taken = consumer
            .stream()
            .group(subjects::MANAGER_GROUP)
            .max_messages_per_batch(1)
            .expires(Duration::from_secs(1))
            .messages()
            .await;
        if let Ok(mut taken) = taken
            && let Ok(Some(Ok(m))) =
                tokio::time::timeout(Duration::from_secs(3), futures::StreamExt::next(&mut taken))
                    .await
        {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "the deployment was not delivered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        deployment.subject.as_str(),
        subjects::stored(&subjects::deploy(&swarm_id), Some(partitions))
    );
    common::play_worker_result(&nc, &swarm_id, "a", 1, "A").await;
    cluster.local_mut().managers[0].restart().unwrap();
    // Well within the 60 s before the deployment comes back.
    let report = common::final_report(&cluster, &nc, &swarm_id, 30).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(common::outcome(&report, "a").result, "A");
    common::assert_one_report(&nc, &swarm_id).await;
    assert!(common::state(&nc, &swarm_id).await.report_published);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_killed_while_its_state_write_waits_loses_nothing() {
    // Quick tasks in a chain: the active manager defers each state write a
    // few milliseconds for the next hops, so a kill mid-chain lands while
    // it holds applied but unstored events. The standby must finish the
    // chain from the stored state and the redelivered events, each task run once.
    let mut cluster = Cluster::builder()
        .bosses(1)
        .managers(2)
        .workers(2)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let ids: Vec<String> = (0..40).map(|i| format!("q{i}")).collect();
    let tasks = chain(&ids, common::echo);
    let swarm_id = common::submit(&nc, &common::mission("deferred", tasks)).await;
    let active = wait_for_assignments(&nc, &swarm_id, 10, Duration::from_millis(5)).await[0]
        .sender_agent
        .clone();
    kill_manager(&mut cluster, &active);
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    for id in &ids {
        assert_eq!(common::outcome(&report, id).result, *id);
        let results =
            common::messages::<ResultSubmission>(&nc, &subjects::result(&swarm_id, id)).await;
        assert_eq!(results.len(), 1, "{id} ran once");
    }
    common::assert_one_report(&nc, &swarm_id).await;
    let state = common::state(&nc, &swarm_id).await;
    assert!(state.report_published && state.status == SwarmStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chains_posted_assignments_are_each_stored_once() {
    // Quick tasks in a chain take the manager's deferred path: each next
    // assignment is posted without asking for the server's answer, and the
    // ones still unanswered by a result are sent again with their
    // deduplication ids before each state write. Every assignment lands
    // exactly once, and the stored state is the whole chain, done.
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let ids: Vec<String> = (0..30).map(|i| format!("p{i}")).collect();
    let swarm_id = common::submit(&nc, &common::mission("posted", chain(&ids, common::echo))).await;
    let report = common::final_report(&cluster, &nc, &swarm_id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let stored = assignments(&nc, &swarm_id).await;
    let mut tasks: Vec<&str> = stored.iter().map(|a| a.body.task_id.as_str()).collect();
    tasks.sort_unstable();
    let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(tasks, want, "each assignment stored once");
    let state = common::state(&nc, &swarm_id).await;
    assert_eq!(state.status, SwarmStatus::Completed);
    assert!(
        state
            .tasks
            .iter()
            .all(|t| t.status == TaskStatus::Completed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_handed_over_while_no_manager_runs_is_not_worked_again() {
    // Workers leave their assignments unacked and the manager acks each one
    // when its result reaches it. With the manager up that is at once; with
    // none running, the assignment comes back after the workers' ack_wait
    // (3 s here), and the worker must find its result stored instead of
    // running the task a second time.
    let mut cluster = fast_redelivery()
        .bosses(1)
        .managers(1)
        .workers(1)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;

    let first = common::submit(
        &nc,
        &common::mission("acked", vec![common::task("a", &common::echo("a"), &[])]),
    )
    .await;
    common::final_report(&cluster, &nc, &first, 30).await;
    // Acked well within the workers' ack_wait, by the manager, and
    // delivered once.
    let info = common::no_assignment_pending(&nc, "general", Duration::from_secs(2)).await;
    assert_eq!(info.delivered.consumer_sequence, 1, "{info:#?}");

    let m = common::mission(
        "unmanaged",
        vec![common::task("slow", &common::sleep(1000), &[])],
    );
    let swarm_id = common::submit(&nc, &m).await;
    started_on(&nc, &swarm_id, "slow", 0).await;
    cluster.local_mut().managers[0].kill();
    // The result is handed over with no manager to receive it; the
    // assignment comes back and is acked by the worker that finds it answered.
    let log_path = cluster.dir().join("logs").join("worker-1.log");
    common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(100),
        "the unacked assignment came back answered",
        || async {
            let log = std::fs::read_to_string(&log_path).unwrap();
            match log.contains("assignment came back answered") {
                true => Ok(()),
                false => Err(log),
            }
        },
    )
    .await;
    let info = common::no_assignment_pending(&nc, "general", Duration::from_secs(5)).await;
    assert_eq!(
        info.delivered.consumer_sequence, 3,
        "one delivery each, and the slow one's again: {info:#?}"
    );
    let updates =
        common::messages::<ProgressUpdate>(&nc, &subjects::progress(&swarm_id, "slow")).await;
    let starts = updates
        .iter()
        .filter(|u| u.body.progress_percentage == 0 && u.body.status == TaskStatus::InProgress)
        .count();
    assert_eq!(starts, 1, "the task ran once: {updates:#?}");

    // A manager again: the stored result finishes the swarm.
    cluster.local_mut().managers[0].restart().unwrap();
    let report = common::final_report(&cluster, &nc, &swarm_id, 30).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let results =
        common::messages::<ResultSubmission>(&nc, &subjects::result(&swarm_id, "slow")).await;
    assert_eq!(results.len(), 1);
    common::assert_one_report(&nc, &swarm_id).await;
}

/// A mission with every kind of graph growth: a list, a map over it (6
/// items, 3 at a time), a sub-manager's part run as a child swarm of two
/// chained tasks, and a reduce after both.
fn growing_mission(i: usize) -> MissionRequest {
    let items: Vec<String> = (0..6).map(|k| format!("item{k}")).collect();
    let list = serde_json::json!({ "items": items }).to_string();
    let each = swarm_common::TaskDefinition {
        map: Some(
            serde_json::from_value(serde_json::json!(
                {"over": {"task": "list", "pointer": "/items"}, "concurrency": 3}
            ))
            .unwrap(),
        ),
        ..common::task("each", &common::sleep(50), &["list"])
    };
    let part = swarm_common::TaskDefinition {
        assigned_to: "lead".into(),
        ..common::task("part", "Run the part.", &[])
    };
    let mut plan = common::plan(vec![
        common::task("list", &common::echo(&list), &[]),
        each,
        part,
        common::task("reduce", &common::echo("reduced"), &["each", "part"]),
    ]);
    plan.sub_managers = vec![swarm_common::hierarchy::SubManagerPlan {
        name: "lead".into(),
        role: "runs the part".into(),
        plan: Some(Box::new(common::plan(vec![
            common::task("x", &common::sleep(150), &[]),
            common::task("y", &common::echo("y"), &["x"]),
        ]))),
    }];
    MissionRequest {
        plan: Some(plan),
        ..MissionRequest::text(format!("growing mission {i}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sub_managers_and_maps_survive_killed_managers_and_workers() {
    let mut cluster = fast_redelivery()
        .bosses(1)
        .managers(2)
        .workers(2)
        .start()
        .await
        .unwrap();
    let nc = cluster.client().await;
    let mut swarms = Vec::new();
    for i in 0..4 {
        swarms.push(common::submit(&nc, &growing_mission(i)).await);
    }
    let watchers: Vec<_> = swarms
        .iter()
        .map(|id| {
            let (nc, id) = (nc.clone(), id.clone());
            tokio::spawn(async move {
                swarm_client::client::watch(&nc, &id, Duration::from_secs(180), |_| {}).await
            })
        })
        .collect();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("kill schedule seed {seed}");
    let mut rng = Rng(seed);
    let mut kills = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        tokio::time::sleep(Duration::from_millis(100 + rng.below(300))).await;
        let local = cluster.local_mut();
        let victim = if kills % 2 == 0 {
            &mut local.managers[rng.below(2) as usize]
        } else {
            &mut local.workers[rng.below(2) as usize]
        };
        victim.kill();
        kills += 1;
        tokio::time::sleep(Duration::from_millis(rng.below(200))).await;
        victim.restart().unwrap();
    }
    println!("{kills} kills of managers and workers");
    for (swarm_id, w) in swarms.iter().zip(watchers) {
        let report = match w.await.unwrap() {
            Ok(r) => r,
            Err(e) => panic!("{e:#}\n{}", cluster.log_tails()),
        };
        assert_eq!(
            report.overall_status,
            SwarmStatus::Completed,
            "{swarm_id}: {report:#?}"
        );
        common::assert_one_report(&nc, swarm_id).await;
        let children = report
            .task_results
            .iter()
            .filter(|t| t.task_id.starts_with("each-"))
            .count();
        assert_eq!(children, 6, "{swarm_id}: the map made one task per item");
        let part = common::outcome(&report, "part");
        assert_eq!(
            (part.attempts, part.revisions),
            (1, 0),
            "{swarm_id}: the part ran as one child swarm"
        );
        let child = part.child_swarm.clone().expect("the part's child swarm");
        let child_report = common::final_report(&cluster, &nc, &child, 30).await;
        assert_eq!(child_report.overall_status, SwarmStatus::Completed);
        common::assert_one_report(&nc, &child).await;
        let answers =
            common::messages::<ResultSubmission>(&nc, &subjects::result(swarm_id, "part")).await;
        assert_eq!(answers.len(), 1, "{swarm_id}: the child answered once");
        for t in ["x", "y"] {
            let results =
                common::messages::<ResultSubmission>(&nc, &subjects::result(&child, t)).await;
            assert!(
                !results.is_empty() && results.len() <= 2,
                "{child}/{t}: {} results",
                results.len()
            );
        }
    }
}
