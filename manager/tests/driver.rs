//! Script tests of the per-swarm driver: each feeds a scenario's inputs to a
//! [`Driver`] and checks what it decides, step by step, with no broker. Each
//! test is named for the ordering rule it protects (docs/decisions.md has
//! the reasons). A step's outputs are shown as text: its effects in order,
//! then its request, if any.

#![allow(clippy::unwrap_used)] // tests report failure by panicking

mod support;

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use swarm_common::{
    ErrorBody, ErrorCode, ResultSubmission, SwarmDeployment, SwarmState, TaskDefinition, TaskStatus,
};
use swarm_manager::driver::{
    Arrival, Decoded, Driver, DriverConfig, Effect, Incoming, Input, MAX_HELD, Now, Request,
};
use swarm_manager::machine::{self, Event};

// ---------------------------------------------------------------- the scenes

fn wall0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
}

use support::task;

/// A deployment accepted a minute before the scripts' clock starts.
fn deployment(tasks: Vec<TaskDefinition>) -> SwarmDeployment {
    support::deployment_between(
        tasks,
        wall0() - chrono::Duration::minutes(1),
        wall0() + chrono::Duration::hours(1),
    )
}

/// The chain the scripts run: a, then b, then c.
fn chain() -> SwarmDeployment {
    deployment(vec![task("a", &[]), task("b", &["a"]), task("c", &["b"])])
}

/// The state another replica stored for `d` when it deployed it.
fn stored(d: &SwarmDeployment) -> SwarmState {
    machine::deploy("s1", d, 1, wall0()).0.state
}

fn arrival(id: u64, seq: u64, subject: &str) -> Arrival {
    Arrival {
        id,
        seq,
        delivered: 1,
        subject: subject.into(),
        assignment_ack: None,
    }
}

fn deploy_arrival(id: u64, seq: u64) -> Arrival {
    arrival(id, seq, "a2ap.s1.deploy")
}

/// A result, naming the ack subject `ack-<task>` of the assignment it answers.
fn result_arrival(id: u64, seq: u64, task_id: &str) -> Arrival {
    Arrival {
        assignment_ack: Some(format!("ack-{task_id}")),
        ..arrival(id, seq, &format!("a2ap.s1.result.{task_id}"))
    }
}

fn error_arrival(id: u64, seq: u64) -> Arrival {
    arrival(id, seq, "a2ap.s1.error")
}

fn control_arrival(id: u64, seq: u64) -> Arrival {
    arrival(id, seq, "a2ap.s1.control")
}

fn redelivered(a: Arrival, delivered: i64) -> Arrival {
    Arrival { delivered, ..a }
}

fn event(event: Event) -> Decoded {
    Decoded::Event {
        incoming: Incoming::Event(event),
        age: Duration::ZERO,
    }
}

fn deployed(d: &SwarmDeployment) -> Decoded {
    Decoded::Event {
        incoming: Incoming::Deploy(Box::new(d.clone())),
        age: Duration::ZERO,
    }
}

fn result(task_id: &str, attempt: u32, seq: u64) -> Decoded {
    event(Event::Result {
        replan: false,
        seq,
        submission: Box::new(ResultSubmission {
            skills: Default::default(),
            artifacts: Vec::new(),
            token: String::new(),
            task_id: task_id.into(),
            status: TaskStatus::Completed,
            result: format!("result of {task_id}"),
            attempt,
            revision: 0,
            provider: "offline".into(),
            worker_id: "worker-1".into(),
            started_at: wall0(),
            completed_at: wall0(),
            steps: vec![],
            metrics: Default::default(),
            error: None,
            gate_verdicts: vec![],
        }),
        review: vec![],
    })
}

fn aged(d: Decoded, by: Duration) -> Decoded {
    match d {
        Decoded::Event { incoming, .. } => Decoded::Event { incoming, age: by },
        other => other,
    }
}

/// A worker's error for `task_id`'s attempt `attempt`, worth another attempt.
fn task_error(task_id: &str, attempt: u32) -> Decoded {
    event(Event::TaskError {
        task_id: task_id.into(),
        attempt: Some(attempt),
        error: ErrorBody::new(ErrorCode::Internal, "the worker fell over"),
    })
}

fn cancel() -> Decoded {
    event(Event::Cancel {
        reason: "enough".into(),
    })
}

/// One driver and its clock, in milliseconds from the start.
struct Script {
    d: Driver<String>,
    t0: Instant,
    now: Now,
    epoch: u64,
    last: Option<Request<String>>,
}

impl Script {
    fn new() -> Script {
        let t0 = Instant::now();
        Script {
            d: Driver::new("s1", 0, DriverConfig::new("m1", Duration::from_secs(1))),
            t0,
            now: Now {
                wall: wall0(),
                tick: t0,
            },
            epoch: 0,
            last: None,
        }
    }

    /// A driver that deployed the chain and stored its state (revision 1)
    /// at 30 ms, `a` assigned, nothing held.
    fn owning_the_chain() -> Script {
        let mut s = Script::new();
        s.batch(vec![deploy_arrival(1, 1)]);
        s.step(Input::Decoded(vec![deployed(&chain())]));
        s.posted();
        s.at(30);
        s.step(Input::Flush);
        assert_eq!(s.written(1), ["track deadline", "ack #1"]);
        s
    }

    fn at(&mut self, ms: u64) {
        self.now = Now {
            wall: wall0() + chrono::Duration::milliseconds(ms as i64),
            tick: self.t0 + Duration::from_millis(ms),
        };
    }

    fn step(&mut self, input: Input<String>) -> Vec<String> {
        let ready = self.d.step(self.now, input);
        let mut shown: Vec<String> = ready.effects.iter().map(show_effect).collect();
        shown.extend(ready.request.as_ref().map(show_request));
        self.last = ready.request;
        shown
    }

    fn batch(&mut self, events: Vec<Arrival>) -> Vec<String> {
        self.step(Input::Batch {
            epoch: self.epoch,
            events,
        })
    }

    /// Answers the last request, a post, with every assignment posted.
    fn posted(&mut self) -> Vec<String> {
        let Some(Request::Post(assigns)) = self.last.take() else {
            panic!("the last request was not a post");
        };
        let copies = assigns
            .iter()
            .map(|a| (a.msg_id.clone(), a.msg_id.clone()))
            .collect();
        self.step(Input::Posted(Ok(copies)))
    }

    fn written(&mut self, revision: u64) -> Vec<String> {
        self.step(Input::Written(Ok(Some(revision))))
    }

    fn lost(&mut self) -> Vec<String> {
        self.step(Input::Written(Ok(None)))
    }

    fn read(&mut self, state: SwarmState, revision: u64) -> Vec<String> {
        self.step(Input::Read(Ok(Some((state, revision)))))
    }

    /// The wake-up the driver asks for, in milliseconds from the start.
    fn wake_at(&self) -> Option<u128> {
        self.d
            .wake_at()
            .map(|at| at.duration_since(self.t0).as_millis())
    }
}

fn show_effect(e: &Effect) -> String {
    match e {
        Effect::Unmark(seqs) => format!("unmark {}", list(seqs.iter())),
        Effect::Ack(id) => format!("ack #{id}"),
        Effect::Redeliver(id) => format!("redeliver #{id}"),
        Effect::Retry { id, .. } => format!("retry #{id}"),
        Effect::Wait { id, .. } => format!("wait #{id}"),
        Effect::Reject { id, reason } => format!("reject #{id} ({})", reason.code),
        Effect::AckAssignment(ack) => format!("ack assignment {ack}"),
        Effect::Deadline(Some(_)) => "track deadline".into(),
        Effect::Deadline(None) => "forget deadline".into(),
        Effect::Retire => "retire".into(),
        Effect::ScoreSkills(scores) => format!(
            "score {}",
            list(scores.iter().map(|s| format!(
                "{}{}",
                if s.passed { "+" } else { "-" },
                s.verdict
            )))
        ),
    }
}

fn show_request(r: &Request<String>) -> String {
    let ids = |assigns: &[swarm_manager::driver::Assignment]| {
        format!("[{}]", list(assigns.iter().map(|a| &a.msg_id)))
    };
    match r {
        Request::Mark(seqs) => format!("mark {}", list(seqs.iter())),
        Request::SetAside(events) => list(events.iter().map(|e| {
            let what = if e.deployment { " (deployment)" } else { "" };
            format!("set aside #{}{what}", e.id)
        })),
        Request::Decode(ids) => format!("decode {}", list(ids.iter().map(|id| format!("#{id}")))),
        Request::Read => "read".into(),
        Request::ReadDeployment => "read deployment".into(),
        Request::Review => "review".into(),
        Request::Post(assigns) => format!("post {}", ids(assigns)),
        Request::Write {
            revision,
            confirm,
            alongside,
        } => {
            let mut shown = format!("write@{revision}");
            if !confirm.is_empty() {
                let mut posted: Vec<&String> = confirm.keys().collect();
                posted.sort();
                shown += &format!(" confirming [{}]", list(posted.into_iter()));
            }
            if let Some(assigns) = alongside {
                shown += &format!(" with {}", ids(assigns));
            }
            shown
        }
        Request::Send(assigns) => format!("send {}", ids(assigns)),
        Request::Report => "report".into(),
    }
}

fn list<T: ToString>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

// ----------------------------------------------------------------- the rules

#[test]
fn assignments_of_a_fresh_swarm_go_out_before_its_state_write_but_the_write_waits_for_their_confirmation()
 {
    let mut s = Script::new();
    assert_eq!(s.batch(vec![deploy_arrival(1, 1)]), ["decode #1"]);
    // A first delivery of a recent deployment: no read, the state is created.
    assert_eq!(
        s.step(Input::Decoded(vec![deployed(&chain())])),
        ["post [s1.a.a1.r0]"]
    );
    // Posted, not confirmed: the deployment is held, not acked.
    assert_eq!(s.posted(), ["track deadline"]);
    assert_eq!(s.wake_at(), Some(30));
    s.at(30);
    assert_eq!(
        s.step(Input::Flush),
        ["write@0 confirming [s1.a.a1.r0]"],
        "a create, once the assignment is known stored"
    );
    assert_eq!(s.written(1), ["track deadline", "ack #1"]);
    assert_eq!(s.wake_at(), None);
}

#[test]
fn an_event_is_acked_only_after_the_state_that_records_it_is_stored() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    assert_eq!(s.batch(vec![result_arrival(2, 10, "a")]), ["decode #2"]);
    assert_eq!(s.step(Input::Decoded(vec![result("a", 1, 10)])), ["review"]);
    assert_eq!(s.step(Input::Reviewed), ["post [s1.b.a1.r0]"]);
    // Applied and its successor assigned, but not stored: held.
    assert_eq!(s.posted(), ["track deadline"]);
    s.at(50);
    s.batch(vec![result_arrival(3, 11, "b")]);
    s.step(Input::Decoded(vec![result("b", 1, 11)]));
    assert_eq!(s.step(Input::Reviewed), ["post [s1.c.a1.r0]"]);
    assert_eq!(s.posted(), ["track deadline"], "still held");
    assert_eq!(s.wake_at(), Some(70), "the oldest held event's 30 ms");
    s.at(70);
    assert_eq!(s.step(Input::Flush), ["write@1 confirming [s1.c.a1.r0]"]);
    // Stored: the events are acked, and the assignments they answer.
    assert_eq!(
        s.written(2),
        [
            "track deadline",
            "ack #2",
            "ack #3",
            "ack assignment ack-a",
            "ack assignment ack-b"
        ]
    );
}

#[test]
fn a_result_shows_its_assignment_stored_so_the_write_does_not_confirm_it() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    s.batch(vec![result_arrival(3, 11, "b")]);
    s.step(Input::Decoded(vec![result("b", 1, 11)]));
    s.step(Input::Reviewed);
    s.posted();
    s.at(70);
    // b's assignment was pulled by the worker that answered it: only c's
    // is confirmed.
    assert_eq!(s.step(Input::Flush), ["write@1 confirming [s1.c.a1.r0]"]);
}

#[test]
fn a_deferred_write_is_made_at_the_end_of_the_first_batch_that_finds_it_25_ms_old() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    s.at(65);
    s.batch(vec![result_arrival(3, 11, "b")]);
    s.step(Input::Decoded(vec![result("b", 1, 11)]));
    // This batch's assignment goes out first, then the write.
    assert_eq!(s.step(Input::Reviewed), ["post [s1.c.a1.r0]"]);
    assert_eq!(
        s.posted(),
        ["track deadline", "write@1 confirming [s1.c.a1.r0]"]
    );
    assert_eq!(
        s.written(2),
        [
            "track deadline",
            "ack #2",
            "ack #3",
            "ack assignment ack-a",
            "ack assignment ack-b"
        ]
    );
}

#[test]
fn no_more_than_max_held_events_wait_for_one_write() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    let mut events = vec![result_arrival(2, 10, "a")];
    events.extend((3..3 + MAX_HELD as u64).map(|id| error_arrival(id, id + 10)));
    s.batch(events);
    let mut decoded = vec![result("a", 1, 10)];
    decoded.extend((0..MAX_HELD).map(|_| Decoded::Ignore));
    s.step(Input::Decoded(decoded));
    // Too many to hold: the write is made now, the assignment alongside.
    assert_eq!(s.step(Input::Reviewed), ["write@1 with [s1.b.a1.r0]"]);
    let out = s.written(2);
    assert_eq!(
        out[..3],
        ["track deadline", "ack assignment ack-a", "ack #2"]
    );
    assert_eq!(out.len(), 3 + MAX_HELD);
    assert_eq!(s.wake_at(), None);
}

#[test]
fn a_lost_deferred_write_hands_its_events_back_and_acks_the_assignments_they_answer() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    s.at(70);
    s.step(Input::Flush);
    // Another replica wrote first: the state holding the event is gone, the
    // event comes again; its result is stored, so its assignment is done.
    assert_eq!(s.lost(), ["redeliver #2", "ack assignment ack-a"]);
    assert!(s.d.state().is_none());
    assert_eq!(s.wake_at(), None);
}

#[test]
fn a_failed_confirmation_fails_the_write_and_its_events_come_again() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    s.at(70);
    assert_eq!(s.step(Input::Flush), ["write@1 confirming [s1.b.a1.r0]"]);
    assert_eq!(
        s.step(Input::Written(Err("assignment not stored".into()))),
        ["redeliver #2", "ack assignment ack-a"]
    );
    assert!(s.d.state().is_none());
}

#[test]
fn a_new_swarms_create_that_finds_the_swarm_existing_hands_the_deployment_back() {
    let mut s = Script::new();
    s.batch(vec![deploy_arrival(1, 1)]);
    s.step(Input::Decoded(vec![deployed(&chain())]));
    s.posted();
    s.at(30);
    s.step(Input::Flush);
    // It comes again and reads the state; the assignment posted was a copy
    // within the deduplication window.
    assert_eq!(s.lost(), ["redeliver #1"]);
    assert!(s.d.state().is_none());
}

#[test]
fn a_deployment_redelivered_or_older_than_its_window_is_read_before_it_is_applied() {
    for (delivered, accepted_ago) in [(2, 1), (1, 31)] {
        let mut s = Script::new();
        let mut d = chain();
        d.accepted_at = wall0() - chrono::Duration::minutes(accepted_ago);
        let first = s.batch(vec![redelivered(deploy_arrival(1, 1), delivered)]);
        if delivered > 1 {
            assert_eq!(first, ["mark 1"]);
            s.step(Input::Marked(vec![Ok(0)]));
        }
        assert_eq!(s.step(Input::Decoded(vec![deployed(&d)])), ["read"]);
        // The swarm exists: what it still owes goes out again (same ids).
        assert_eq!(s.read(stored(&d), 4), ["send [s1.a.a1.r0]"]);
        let mut out = s.step(Input::Sent(Ok(())));
        if delivered > 1 {
            assert_eq!(out.remove(1), "unmark 1");
        }
        assert_eq!(out, ["track deadline", "ack #1"]);
    }
}

#[test]
fn a_redelivered_deployment_re_sends_what_the_state_still_owes_without_a_write() {
    let mut s = Script::owning_the_chain();
    s.batch(vec![redelivered(deploy_arrival(2, 1), 2)]);
    s.step(Input::Marked(vec![Ok(0)]));
    assert_eq!(
        s.step(Input::Decoded(vec![deployed(&chain())])),
        ["send [s1.a.a1.r0]"]
    );
    assert_eq!(
        s.step(Input::Sent(Ok(()))),
        ["track deadline", "unmark 1", "ack #2"]
    );
}

#[test]
fn errors_wait_for_their_state_write_before_their_retry_goes_out() {
    let mut s = Script::owning_the_chain();
    s.batch(vec![error_arrival(2, 10)]);
    assert_eq!(
        s.step(Input::Decoded(vec![task_error("a", 1)])),
        ["write@1"]
    );
    assert_eq!(s.written(2), ["send [s1.a.a2.r0]"]);
    assert_eq!(s.step(Input::Sent(Ok(()))), ["track deadline", "ack #2"]);
}

#[test]
fn a_lost_compare_and_swap_reads_again_and_decides_again_and_sends_nothing_twice() {
    let mut s = Script::owning_the_chain();
    s.batch(vec![error_arrival(2, 10)]);
    assert_eq!(
        s.step(Input::Decoded(vec![task_error("a", 1)])),
        ["write@1"]
    );
    // Nothing went out before the lost write: the retry is decided again
    // from the state read now, written, and only then sent, once.
    assert_eq!(s.lost(), ["read"]);
    assert_eq!(s.read(stored(&chain()), 5), ["write@5"]);
    assert_eq!(s.written(6), ["send [s1.a.a2.r0]"]);
    assert_eq!(s.step(Input::Sent(Ok(()))), ["track deadline", "ack #2"]);

    // Had the other replica applied the same error, there is nothing to
    // write, and the retry it owes goes out under its same id.
    let mut s = Script::owning_the_chain();
    s.batch(vec![error_arrival(2, 10)]);
    s.step(Input::Decoded(vec![task_error("a", 1)]));
    s.lost();
    let mut theirs = machine::deploy("s1", &chain(), 1, wall0()).0;
    machine::apply(
        &mut theirs,
        10,
        &Event::TaskError {
            task_id: "a".into(),
            attempt: Some(1),
            error: ErrorBody::new(ErrorCode::Internal, "x"),
        },
        wall0(),
    );
    assert_eq!(s.read(theirs.state, 5), ["send [s1.a.a2.r0]"]);
    assert_eq!(s.step(Input::Sent(Ok(()))), ["track deadline", "ack #2"]);
}

#[test]
fn a_write_of_a_state_that_records_posted_assignments_confirms_them_first() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    // Not only results: the write is made now, and b's posted assignment,
    // recorded in the state, is confirmed before it.
    s.batch(vec![error_arrival(3, 11)]);
    assert_eq!(
        s.step(Input::Decoded(vec![task_error("b", 1)])),
        ["write@1 confirming [s1.b.a1.r0]"]
    );
    assert_eq!(s.written(2), ["send [s1.b.a2.r0]"]);
    assert_eq!(
        s.step(Input::Sent(Ok(()))),
        ["track deadline", "ack #2", "ack assignment ack-a", "ack #3"]
    );
}

#[test]
fn nothing_to_do_decided_from_a_cached_state_is_checked_against_a_fresh_read() {
    let mut s = Script::owning_the_chain();
    // An error of an attempt the cached state does not run: stale, or the
    // cache is behind another replica's writes. Read again before acking.
    s.batch(vec![error_arrival(2, 10)]);
    assert_eq!(s.step(Input::Decoded(vec![task_error("a", 0)])), ["read"]);
    assert_eq!(s.read(stored(&chain()), 1), ["send [s1.a.a1.r0]"]);
    assert_eq!(s.step(Input::Sent(Ok(()))), ["track deadline", "ack #2"]);
}

#[test]
fn a_state_holding_unstored_events_is_not_read_again_for_nothing_to_do() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    // Ahead of any read: no read; what it owes is sent again, and the
    // event waits for the write like the others.
    s.batch(vec![error_arrival(3, 11)]);
    assert_eq!(
        s.step(Input::Decoded(vec![task_error("a", 0)])),
        ["send [s1.b.a1.r0]"]
    );
    assert_eq!(s.step(Input::Sent(Ok(()))), ["track deadline"]);
    s.at(70);
    s.step(Input::Flush);
    assert_eq!(
        s.written(2),
        ["track deadline", "ack #2", "ack #3", "ack assignment ack-a"]
    );
}

#[test]
fn a_result_ahead_of_the_stored_state_waits_and_is_a_dead_letter_only_after_its_patience() {
    for (age, outcome) in [(1, "wait #2"), (11, "reject #2 (validation_failed)")] {
        let mut s = Script::owning_the_chain();
        s.batch(vec![result_arrival(2, 10, "a")]);
        // Attempt 2 of a, which the state has not assigned: its assignment
        // went out with a state write that was lost.
        let ahead = aged(result("a", 2, 10), Duration::from_secs(age));
        s.step(Input::Decoded(vec![ahead]));
        assert_eq!(s.step(Input::Reviewed), ["read"], "the cache may be behind");
        let mut expected = vec!["track deadline"];
        if outcome.starts_with("wait") {
            // Stored, so its assignment is done; the result itself waits
            // (handed back, not dropped).
            expected.push("ack assignment ack-a");
        }
        expected.push(outcome);
        assert_eq!(s.read(stored(&chain()), 1), expected, "aged {age} s");
    }
}

#[test]
fn an_event_for_a_swarm_with_no_state_comes_again_until_its_fifth_delivery_then_is_a_dead_letter() {
    let mut s = Script::new();
    s.batch(vec![error_arrival(1, 10)]);
    assert_eq!(s.step(Input::Decoded(vec![task_error("a", 1)])), ["read"]);
    assert_eq!(s.step(Input::Read(Ok(None))), ["read deployment"]);
    assert_eq!(s.step(Input::Deployment(Ok(None))), ["retry #1"]);

    let mut s = Script::new();
    s.batch(vec![redelivered(error_arrival(1, 10), 5)]);
    s.step(Input::Marked(vec![Ok(0)]));
    s.step(Input::Decoded(vec![task_error("a", 1)]));
    s.step(Input::Read(Ok(None)));
    assert_eq!(
        s.step(Input::Deployment(Ok(None))),
        ["unmark 10", "reject #1 (not_found)"]
    );
}

#[test]
fn an_event_before_its_swarms_first_state_write_deploys_the_swarm_from_its_recent_deployment() {
    let mut s = Script::new();
    s.batch(vec![result_arrival(1, 10, "a")]);
    // A result to review, and no state to review it against.
    assert_eq!(s.step(Input::Decoded(vec![result("a", 1, 10)])), ["read"]);
    assert_eq!(s.step(Input::Read(Ok(None))), ["read"]);
    assert_eq!(s.step(Input::Read(Ok(None))), ["read deployment"]);
    // Deployed from the stream, then the result applied to it; a fresh
    // state is written before anything goes out.
    assert_eq!(
        s.step(Input::Deployment(Ok(Some((chain(), 1))))),
        ["write@0"]
    );
    assert_eq!(s.written(1), ["send [s1.a.a1.r0,s1.b.a1.r0]"]);
    assert_eq!(
        s.step(Input::Sent(Ok(()))),
        ["track deadline", "ack assignment ack-a", "ack #1"]
    );

    // A deployment older than its window is not deployed from.
    let mut s = Script::new();
    s.batch(vec![error_arrival(1, 10)]);
    s.step(Input::Decoded(vec![task_error("a", 1)]));
    s.step(Input::Read(Ok(None)));
    let mut old = chain();
    old.accepted_at = wall0() - chrono::Duration::hours(2);
    assert_eq!(s.step(Input::Deployment(Ok(Some((old, 1))))), ["retry #1"]);
}

#[test]
fn a_poison_mark_leads_to_a_dead_letter_and_a_failed_swarm() {
    let mut s = Script::owning_the_chain();
    // A manager died applying this result before.
    assert_eq!(
        s.batch(vec![redelivered(result_arrival(2, 10, "a"), 3)]),
        ["mark 10"]
    );
    assert_eq!(s.step(Input::Marked(vec![Ok(1)])), ["set aside #2"]);
    // Not read, not applied: the swarm fails with the reason.
    assert_eq!(s.step(Input::SetAside(vec![true])), ["write@1"]);
    assert_eq!(s.written(2), ["report"]);
    let state = s.d.state().unwrap();
    assert_eq!(state.status, swarm_common::SwarmStatus::Failed);
    assert!(
        state
            .cancel_reason
            .as_deref()
            .unwrap()
            .contains("a manager died applying a2ap.s1.result.a (stream sequence 10, delivery 3)")
    );
    assert_eq!(s.step(Input::Reported(Ok(()))), ["write@2"]);
    assert_eq!(
        s.written(3),
        [
            "forget deadline",
            "unmark 10",
            "ack assignment ack-a",
            "ack #2",
            "retire"
        ]
    );
}

#[test]
fn a_deployment_a_manager_died_on_is_set_aside_and_nothing_is_deployed() {
    let mut s = Script::new();
    s.batch(vec![redelivered(deploy_arrival(1, 1), 2)]);
    assert_eq!(
        s.step(Input::Marked(vec![Ok(1)])),
        ["set aside #1 (deployment)"]
    );
    assert_eq!(s.step(Input::SetAside(vec![true])), ["unmark 1", "ack #1"]);
    assert!(s.d.state().is_none());
}

#[test]
fn an_event_to_set_aside_whose_dead_letter_is_not_recorded_comes_again() {
    let mut s = Script::owning_the_chain();
    s.batch(vec![redelivered(control_arrival(2, 10), 2)]);
    s.step(Input::Marked(vec![Ok(1)]));
    assert_eq!(
        s.step(Input::SetAside(vec![false])),
        ["unmark 10", "retry #2"]
    );
}

#[test]
fn an_event_whose_mark_cannot_be_taken_is_applied_unmarked() {
    let mut s = Script::owning_the_chain();
    s.batch(vec![redelivered(control_arrival(2, 10), 2)]);
    assert_eq!(
        s.step(Input::Marked(vec![Err("bucket unavailable".into())])),
        ["decode #2"]
    );
}

#[test]
fn a_cached_state_from_an_earlier_pin_is_dropped_and_the_events_it_held_come_again() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    // This replica lost the pin and got it back: another may have written.
    s.epoch = 1;
    s.batch(vec![control_arrival(3, 11)]);
    assert_eq!(s.step(Input::Decoded(vec![cancel()])), ["read"]);
    assert_eq!(s.read(stored(&chain()), 4), ["write@4"]);
    assert_eq!(s.written(5), ["report"]);
    assert_eq!(s.step(Input::Reported(Ok(()))), ["write@5"]);
    assert_eq!(
        s.written(6),
        [
            "forget deadline",
            "redeliver #2",
            "ack assignment ack-a",
            "ack #3",
            "retire"
        ]
    );
}

#[test]
fn the_report_goes_out_only_after_the_verdict_is_stored_and_is_recorded_once() {
    let mut s = Script::owning_the_chain();
    s.batch(vec![control_arrival(2, 10)]);
    assert_eq!(s.step(Input::Decoded(vec![cancel()])), ["write@1"]);
    assert_eq!(s.written(2), ["report"]);
    assert_eq!(s.step(Input::Reported(Ok(()))), ["write@2"]);
    assert!(s.d.state().unwrap().report_published);
    // Another replica recorded it first: read, and nothing more to do.
    assert_eq!(s.lost(), ["read"]);
    let mut theirs = stored(&chain());
    theirs.status = swarm_common::SwarmStatus::Cancelled;
    theirs.report_published = true;
    assert_eq!(s.read(theirs, 7), ["forget deadline", "ack #2", "retire"]);

    // A report that cannot be published: the cancel comes again.
    let mut s = Script::owning_the_chain();
    s.batch(vec![control_arrival(2, 10)]);
    s.step(Input::Decoded(vec![cancel()]));
    s.written(2);
    assert_eq!(
        s.step(Input::Reported(Err("no responders".into()))),
        ["retry #2"]
    );
    assert!(s.d.state().is_none());
}

#[test]
fn a_batch_that_ends_the_swarm_is_written_at_once_and_its_report_follows() {
    let mut s = Script::new();
    let pair = deployment(vec![task("a", &[]), task("b", &["a"])]);
    s.batch(vec![deploy_arrival(1, 1)]);
    s.step(Input::Decoded(vec![deployed(&pair)]));
    s.posted();
    s.at(30);
    s.step(Input::Flush);
    s.written(1);
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    s.batch(vec![result_arrival(3, 11, "b")]);
    s.step(Input::Decoded(vec![result("b", 1, 11)]));
    assert_eq!(s.step(Input::Reviewed), ["write@1 with []"], "not deferred");
    assert_eq!(s.written(2), ["report"]);
    assert_eq!(s.step(Input::Reported(Ok(()))), ["write@2"]);
    assert_eq!(
        s.written(3),
        [
            "forget deadline",
            "ack #2",
            "ack assignment ack-a",
            "ack assignment ack-b",
            "ack #3",
            "retire"
        ]
    );
}

#[test]
fn results_are_reviewed_once_per_batch_before_they_are_applied_even_when_a_write_is_lost() {
    let mut s = Script::new();
    s.batch(vec![result_arrival(1, 10, "a"), control_arrival(2, 11)]);
    // Reviewed against the stored state, read for the purpose.
    assert_eq!(
        s.step(Input::Decoded(vec![result("a", 1, 10), cancel()])),
        ["read"]
    );
    assert_eq!(s.read(stored(&chain()), 1), ["review"]);
    assert_eq!(s.step(Input::Reviewed), ["write@1"]);
    // The lost race reads and applies again, without a second review.
    assert_eq!(s.lost(), ["read"]);
    assert_eq!(s.read(stored(&chain()), 2), ["write@2"]);
    assert_eq!(s.written(3), ["send [s1.b.a1.r0]"]);
    assert_eq!(s.step(Input::Sent(Ok(()))), ["report"]);
}

#[test]
fn an_event_that_cannot_be_read_is_a_dead_letter_and_acks_no_assignment() {
    let mut s = Script::owning_the_chain();
    s.batch(vec![
        result_arrival(2, 10, "x"),
        error_arrival(3, 11),
        result_arrival(4, 12, "y"),
    ]);
    let invalid = ErrorBody::new(ErrorCode::AuthorizationDenied, "wrong or missing token");
    assert_eq!(
        s.step(Input::Decoded(vec![
            Decoded::Invalid(invalid),
            Decoded::Ignore,
            Decoded::Unreadable("message without JetStream info".into()),
        ])),
        [
            "ack assignment ack-y",
            "reject #2 (authorization_denied)",
            "ack #3",
            "retry #4"
        ]
    );
    // A fault drops the cached state.
    assert!(s.d.state().is_none());
}

#[test]
fn a_fault_drops_the_cached_state_and_hands_back_the_events_it_held() {
    let mut s = Script::owning_the_chain();
    s.at(40);
    s.batch(vec![result_arrival(2, 10, "a")]);
    s.step(Input::Decoded(vec![result("a", 1, 10)]));
    s.step(Input::Reviewed);
    s.posted();
    s.batch(vec![result_arrival(3, 11, "b")]);
    s.step(Input::Decoded(vec![result("b", 1, 11)]));
    s.step(Input::Reviewed);
    assert_eq!(
        s.step(Input::Posted(Err("connection closed".into()))),
        [
            "redeliver #2",
            "ack assignment ack-a",
            "ack assignment ack-b",
            "retry #3"
        ]
    );
    assert!(s.d.state().is_none());
    assert_eq!(s.wake_at(), None);
}

#[test]
fn a_batch_whose_state_keeps_changing_comes_again_after_sixteen_rounds() {
    let mut s = Script::owning_the_chain();
    s.batch(vec![control_arrival(2, 10)]);
    assert_eq!(s.step(Input::Decoded(vec![cancel()])), ["write@1"]);
    for round in 2..=16 {
        assert_eq!(s.lost(), ["read"]);
        assert_eq!(s.read(stored(&chain()), round), [format!("write@{round}")]);
    }
    assert_eq!(s.lost(), ["retry #2"]);
}
