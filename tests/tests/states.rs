//! Swarm states in the `swarms` bucket (issue 28, missions of 100,000
//! tasks), against a real nats-server with the buckets `swarm setup`
//! makes: a small state is one entry written whole; a large one is its
//! entry and chunks of tasks, each write storing only the chunks that
//! changed, all of it or nothing (a lost compare-and-swap stores no chunk),
//! and a reader puts it back together or refuses pieces that do not fit.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

use async_nats::jetstream::{self, kv};
use chrono::Utc;
use swarm_common::{
    Codec, Limits, SwarmState, SwarmStatus, TaskDefinition, TaskState, TaskStatus, subjects,
};
use swarm_runtime::infra::Infra;
use swarm_runtime::states::{self, INLINE_TASKS};
use swarm_testkit::NatsServer;

fn state(swarm_id: &str, tasks: usize) -> SwarmState {
    let now = Utc::now();
    let tasks: Vec<TaskState> = (0..tasks)
        .map(|i| {
            TaskState::pending(
                TaskDefinition {
                    task_id: format!("t{i}"),
                    title: format!("task {i}"),
                    description: format!("do thing {i}"),
                    assigned_to: "general".into(),
                    dependencies: Vec::new(),
                    priority: None,
                    estimated_minutes: None,
                    max_result_bytes: None,
                    gates: Vec::new(),
                    condition: None,
                    map: None,
                    on_failure: None,
                },
                "general".into(),
                0,
            )
        })
        .collect();
    // From its stored form: the fields a state cannot do without.
    let mut state: SwarmState = serde_json::from_value(serde_json::json!({
        "swarm_id": swarm_id,
        "mission": "many things",
        "status": SwarmStatus::Running,
        "manager_directive": "",
        "workers": [],
        "tasks": [],
        "limits": Limits::default(),
        "accepted_at": now,
        "started_at": now,
        "deadline": now,
        "last_event_seq": 0,
    }))
    .unwrap();
    state.tasks = tasks.into();
    state
}

async fn setup() -> (NatsServer, jetstream::Context, kv::Store) {
    let nats = NatsServer::start().unwrap();
    let client = nats.client().await;
    let infra = Infra::ensure(&client, 1).await.unwrap();
    (nats, infra.js.clone(), infra.swarms.clone())
}

/// The bucket stream's last sequence: one more per message stored.
async fn last_seq(js: &jetstream::Context) -> u64 {
    let mut stream = js
        .get_stream(format!("KV_{}", subjects::SWARMS_BUCKET))
        .await
        .unwrap();
    stream.info().await.unwrap().state.last_sequence
}

/// Stores `s` at `revision` and records that it is stored, as the manager does.
async fn store(js: &jetstream::Context, kv: &kv::Store, s: &mut SwarmState, revision: u64) -> u64 {
    let written = states::store(js, kv, s, revision)
        .await
        .unwrap()
        .expect("not lost");
    let revision = written.revision;
    written.settle(s);
    revision
}

#[tokio::test]
async fn a_small_state_is_one_entry() {
    let (_nats, js, kv) = setup().await;
    let mut s = state("small", INLINE_TASKS);
    let before = last_seq(&js).await;
    let revision = store(&js, &kv, &mut s, 0).await;
    assert_eq!(last_seq(&js).await, before + 1, "one message");
    assert_eq!(s.chunks, None);
    let raw: SwarmState = Codec::MsgPack
        .decode(&kv.get("small").await.unwrap().unwrap())
        .unwrap();
    assert_eq!(raw.tasks.len(), INLINE_TASKS, "the tasks are in the entry");
    let (back, rev) = states::load(&kv, "small").await.unwrap().unwrap();
    assert_eq!((back, rev), (s, revision));
}

#[tokio::test]
async fn a_large_state_stores_only_the_chunks_that_changed() {
    let (_nats, js, kv) = setup().await;
    let mut s = state("large", 1_000);
    let before = last_seq(&js).await;
    let mut revision = store(&js, &kv, &mut s, 0).await;
    let chunks = s.chunks.clone().expect("stored in chunks");
    assert_eq!(chunks.per_chunk, 128);
    assert_eq!(
        chunks.written,
        vec![1; 8],
        "eight chunks, all in the first write"
    );
    assert_eq!(
        last_seq(&js).await,
        before + 9,
        "eight chunks and the entry"
    );
    assert_eq!(
        revision,
        before + 9,
        "the entry is the batch's last message"
    );
    let raw: SwarmState = Codec::MsgPack
        .decode(&kv.get("large").await.unwrap().unwrap())
        .unwrap();
    assert!(raw.tasks.is_empty(), "the entry keeps no tasks");
    assert_eq!(
        states::load(&kv, "large").await.unwrap().unwrap(),
        (s.clone(), revision)
    );

    // Two tasks in two chunks change: two chunks and the entry are stored.
    s.tasks[5].status = TaskStatus::Completed;
    s.tasks[900].status = TaskStatus::Failed;
    s.last_event_seq = 42;
    let before = last_seq(&js).await;
    revision = store(&js, &kv, &mut s, revision).await;
    assert_eq!(last_seq(&js).await, before + 3);
    assert_eq!(
        s.chunks.as_ref().unwrap().written,
        vec![2, 1, 1, 1, 1, 1, 1, 2]
    );
    let (back, rev) = states::load(&kv, "large").await.unwrap().unwrap();
    assert_eq!(rev, revision);
    assert_eq!(back, s);
    assert_eq!(back.tasks[900].status, TaskStatus::Failed);

    // Nothing changed in the tasks: the entry alone.
    s.last_event_seq = 43;
    let before = last_seq(&js).await;
    store(&js, &kv, &mut s, revision).await;
    assert_eq!(last_seq(&js).await, before + 1);
}

#[tokio::test]
async fn a_lost_compare_and_swap_stores_no_chunk() {
    let (_nats, js, kv) = setup().await;
    let mut s = state("raced", 600);
    let first = store(&js, &kv, &mut s, 0).await;
    let mut other = s.clone();
    other.tasks[0].status = TaskStatus::Completed;
    let second = store(&js, &kv, &mut other, first).await;
    // This copy is one write behind: its write must change nothing.
    s.tasks[1].status = TaskStatus::Completed;
    s.tasks[599].status = TaskStatus::Completed;
    let before = last_seq(&js).await;
    assert_eq!(states::store(&js, &kv, &s, first).await.unwrap(), None);
    assert_eq!(last_seq(&js).await, before, "nothing stored");
    let (back, rev) = states::load(&kv, "raced").await.unwrap().unwrap();
    assert_eq!((back, rev), (other, second));
    // A second creation is refused too.
    assert_eq!(
        states::store(&js, &kv, &state("raced", 600), 0)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn pieces_that_do_not_fit_are_refused() {
    let (_nats, js, kv) = setup().await;
    let mut s = state("torn", 300);
    store(&js, &kv, &mut s, 0).await;
    // A chunk from another write than the one the entry names.
    let stale = Codec::MsgPack
        .encode(&serde_json::json!({"generation": 7, "first": 128, "tasks": []}))
        .unwrap();
    kv.put(states::chunk_key("torn", 1), stale.into())
        .await
        .unwrap();
    let e = states::load(&kv, "torn").await.unwrap_err();
    assert!(format!("{e:#}").contains("kept changing"), "{e:#}");
    // A chunk gone.
    kv.purge(states::chunk_key("torn", 1)).await.unwrap();
    assert!(states::load(&kv, "torn").await.is_err());
}

#[test]
fn chunk_keys_are_not_state_keys() {
    assert!(states::is_state_key("swarm-1"));
    assert!(!states::is_state_key(&states::chunk_key("swarm-1", 3)));
    assert_eq!(states::per_chunk(INLINE_TASKS), None);
    assert_eq!(states::per_chunk(INLINE_TASKS + 1), Some(128));
    assert_eq!(states::per_chunk(100_000), Some(128));
    // Past 999 chunks of 128, chunks grow so that one batch still holds them all.
    assert_eq!(states::per_chunk(999 * 128 + 1), Some(256));
}
