//! The per-swarm driver: every decision about when a swarm's state is read,
//! applied, written and acknowledged, as a pure state machine in the style
//! of raft-rs's `Ready`.
//!
//! [`crate::machine`] decides what an event does to a swarm; this module
//! decides when: which state an event is applied to (a cached one, a fresh
//! read, a deployment found in the stream), when the state is written (now,
//! or deferred for the next events), what must be known stored before the
//! write (the assignments posted without an answer), which side effects go
//! out before the write and which only after it, what a lost
//! compare-and-swap undoes, and when each event is acked, handed back or
//! set aside. It owns what the NATS layer ([`crate::service`]) used to keep
//! beside its I/O: the cached state (`Cached`), the events held for a
//! deferred write (`Held`) and the assignments posted and not yet confirmed
//! ([`Posted`]).
//!
//! It does no I/O and reads no clock. [`Driver::step`] takes an [`Input`]
//! (a batch of events, the answer to a request, the deferred write's timer)
//! with the time it happens ([`Now`]), and returns a [`Ready`]: the
//! [`Effect`]s to carry out now, in order, then at most one [`Request`]
//! whose answer is the next input. The service carries them out; the
//! script tests (`manager/tests/driver.rs`) feed inputs and check outputs,
//! one ordering rule each.
//!
//! The rules, each with its entry in docs/decisions.md:
//!
//! - An event is acked only once a stored state includes it; a state is
//!   stored only once every assignment it records is known stored
//!   ("Assignments posted, confirmed before the write").
//! - Results applied to a state this replica holds under its current pin,
//!   and a new swarm's deployment, send their assignments with the state
//!   write, or before it when the write is deferred; errors, control
//!   messages and the report wait for their write ("Assignments go out with
//!   the state write").
//! - A deferred write is made at the end of the first batch that finds its
//!   oldest event [`WRITE_AFTER_BATCH`] old, when [`DEFER_WRITE`] passes
//!   with no batch, when [`MAX_HELD`] events would be held, or when another
//!   kind of batch writes the state; if the state holding the events is
//!   dropped or read again, they are handed back ("Deferred state writes").
//! - Every write is a compare-and-swap: a lost one reads again and decides
//!   again; a "nothing to do" decided from a cached state is checked
//!   against a fresh read ("One owner per swarm, pinned by the server").
//! - An event ahead of the stored state waits for the events before it,
//!   within a patience; an event before its swarm's first state write
//!   deploys the swarm from its recent deployment in the stream.
//! - A redelivered event is marked while applied; one a manager already
//!   died on is set aside and fails its swarm ([`crate::poison`]).
//! - The assignment a result answers is acked once the result is settled
//!   ("The manager acks the assignment").

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use swarm_common::{
    ErrorBody, ErrorCode, GateVerdict, ResultSubmission, SwarmDeployment, SwarmState,
    TaskAssignment, subjects::Subject,
};
use tracing::{debug, error, info, warn};

use crate::index::Indexed;
use crate::machine::{self, Command, Event, SkillScore};

/// How long a swarm's state write may wait for the next events of the same
/// swarm, so a chain of quick tasks costs one write per many hops instead of
/// one per hop. Its events stay unacked until the write lands, so this must
/// stay far below the manager's `ack_wait` (0.5 s at the least). 12 ms against
/// 5 ms took a chain of 50 from about seven writes of its whole state to
/// three; 30 ms against 12 takes it to one or two and the chain down about
/// 4 % with the server on one Go thread, where each write's cost in the
/// server weighs more (docs/decisions.md, "Deferred state writes").
pub const DEFER_WRITE: Duration = Duration::from_millis(30);

/// A deferred write this old is made at the end of the batch that finds it
/// so, just after the batch's assignments went out, rather than when
/// [`DEFER_WRITE`] is up: the write then runs while the workers do, not in
/// the way of the next result (in a chain, the timer would fire at a
/// random moment of a hop and hold up the result arriving during it).
pub const WRITE_AFTER_BATCH: Duration = Duration::from_millis(25);

/// Most events held for one deferred write.
pub const MAX_HELD: usize = 1024;

/// A deployment accepted this recently is written alongside its first
/// assignments: their copies, should the state exist after all, fall within
/// the stream's one-hour deduplication window.
pub const NEW_SWARM_WINDOW: chrono::TimeDelta = chrono::TimeDelta::minutes(30);

/// How long an event handed back ([`Effect::Retry`], [`Effect::Wait`])
/// stays away before it is delivered again.
pub const REDELIVERY_DELAY: Duration = Duration::from_millis(500);

/// Compare-and-swap rounds of one batch before its events are handed back.
const MAX_ATTEMPTS: u32 = 16;

/// Deliveries of an event for a swarm with no state before it is a dead letter.
const DELIVERIES_WITHOUT_STATE: i64 = 5;

/// The executor's handle on one event it passed in ([`Arrival::id`]).
pub type EventId = u64;

/// Assignments posted without asking for the server's answer and not yet
/// known stored, by deduplication id ([`machine::assignment_msg_id`]): the
/// executor's copy of each (`P`), to send again with an answer before a
/// state that records them is written.
pub type Posted<P> = HashMap<String, P>;

/// The time an input happens: the wall clock for what the state records, a
/// monotonic instant for the deferred write's timers.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// Wall-clock time.
    pub wall: DateTime<Utc>,
    /// Monotonic time.
    pub tick: Instant,
}

/// How a driver decides.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// This replica's agent id, recorded in each state it writes.
    pub agent_id: String,
    /// How long an event ahead of the stored state waits for the events
    /// before it before it is a dead letter.
    pub patience: Duration,
    /// The swarms this replica deploys may have their graphs grown by the
    /// manager's model ([`swarm_common::replan`]): it has one.
    pub replan: bool,
    /// Deaths recorded by marks after which a redelivered event is set
    /// aside ([`crate::poison`]).
    pub deaths_allowed: u32,
}

impl DriverConfig {
    /// The manager's: an event ahead may wait ten `ack_wait`s, at least 10 s.
    pub fn new(agent_id: impl Into<String>, ack_wait: Duration) -> DriverConfig {
        DriverConfig {
            agent_id: agent_id.into(),
            patience: (ack_wait * 10).max(Duration::from_secs(10)),
            replan: false,
            deaths_allowed: crate::poison::DEATHS_ALLOWED,
        }
    }
}

/// One event of a batch as it arrives, before it is read.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// The executor's handle, named again by the effects that settle it.
    pub id: EventId,
    /// Its stream sequence (0: unknown).
    pub seq: u64,
    /// How many times it has been delivered (0: unknown).
    pub delivered: i64,
    /// Its subject.
    pub subject: String,
    /// The ack subject of the assignment it answers (a result's).
    pub assignment_ack: Option<String>,
}

/// An event as read by the executor ([`Request::Decode`]).
#[derive(Debug, Clone)]
pub enum Decoded {
    /// Something to apply, stored `age` ago.
    Event {
        /// What it is.
        incoming: Incoming,
        /// How long ago it was stored in the stream.
        age: Duration,
    },
    /// Nothing to apply (a worker's error that names no task): acked.
    Ignore,
    /// It can never be applied: a dead letter.
    Invalid(ErrorBody),
    /// It cannot be read now: handed back.
    Unreadable(String),
}

/// An event to apply.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// A swarm's deployment (boxed: far larger than the events).
    Deploy(Box<SwarmDeployment>),
    /// Anything else that happens to a swarm.
    Event(Event),
}

/// An assignment to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// The pool.
    pub pool: String,
    /// Its deduplication id.
    pub msg_id: String,
    /// The assignment.
    pub assignment: Box<TaskAssignment>,
}

/// An event a manager died on, to record as a dead letter.
#[derive(Debug, Clone, PartialEq)]
pub struct SetAside {
    /// The event.
    pub id: EventId,
    /// Why.
    pub reason: ErrorBody,
    /// It is the swarm's deployment: there is no swarm to fail, so the
    /// swarm's watchers are told instead.
    pub deployment: bool,
}

/// One result of a batch to review ([`Driver::to_review`]): its stream
/// sequence, the submission, the verdicts to add to, and whether a replan
/// was sent for it.
pub type ToReview<'a> = (
    u64,
    &'a mut ResultSubmission,
    &'a mut Vec<GateVerdict>,
    &'a mut bool,
);

/// What happens to a driver.
#[derive(Debug)]
pub enum Input<P> {
    /// Events of the swarm, in stream order, delivered under the pin
    /// counted `epoch` (the executor counts the pins it is given).
    Batch {
        /// The executor's count of pins.
        epoch: u64,
        /// The events.
        events: Vec<Arrival>,
    },
    /// The deferred write's time is up ([`Driver::wake_at`]), or the
    /// swarm's actor ends.
    Flush,
    /// Answers [`Request::Mark`]: per event, the deaths its mark recorded.
    Marked(Vec<Result<u32, String>>),
    /// Answers [`Request::SetAside`]: per event, whether the dead letter
    /// was recorded.
    SetAside(Vec<bool>),
    /// Answers [`Request::Decode`], in its order.
    Decoded(Vec<Decoded>),
    /// Answers [`Request::Read`]: the stored state and its revision.
    Read(Result<Option<(SwarmState, u64)>, String>),
    /// Answers [`Request::ReadDeployment`]: the swarm's deployment in the
    /// stream and its sequence.
    Deployment(Result<Option<(SwarmDeployment, u64)>, String>),
    /// Answers [`Request::Review`].
    Reviewed,
    /// Answers [`Request::Post`]: the executor's copy of each assignment posted.
    Posted(Result<Vec<(String, P)>, String>),
    /// Answers [`Request::Write`]: the new revision, or `None` if another
    /// writer got there first.
    Written(Result<Option<u64>, String>),
    /// Answers [`Request::Send`].
    Sent(Result<(), String>),
    /// Answers [`Request::Report`].
    Reported(Result<(), String>),
}

/// Something to do now, needing no answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Remove the marks of these events (stream sequences): they were
    /// applied or set aside.
    Unmark(Vec<u64>),
    /// The event is done: ack it.
    Ack(EventId),
    /// The state that held the event is gone: hand it back at once, to be
    /// applied again.
    Redeliver(EventId),
    /// The event could not be applied for a fault that may pass: hand it
    /// back in [`REDELIVERY_DELAY`].
    Retry {
        /// The event.
        id: EventId,
        /// The fault.
        error: String,
    },
    /// The event waits for events before it: hand it back in
    /// [`REDELIVERY_DELAY`].
    Wait {
        /// The event.
        id: EventId,
        /// Why.
        why: String,
    },
    /// The event can never be applied: record it as a dead letter and stop
    /// its redelivery.
    Reject {
        /// The event.
        id: EventId,
        /// Why.
        reason: ErrorBody,
    },
    /// Ack, for its worker, the assignment a stored result answers.
    AckAssignment(String),
    /// The swarm runs until this deadline (`None`: it has ended): for the
    /// deadline sweeper.
    Deadline(Option<DateTime<Utc>>),
    /// The swarm has ended and its report is out: it needs no actor.
    Retire,
    /// Move learned skills' scores by the batch's verdicts (counted once
    /// per verdict by each skill).
    ScoreSkills(Vec<SkillScore>),
}

/// Something to do whose answer is the driver's next input.
#[derive(Debug)]
pub enum Request<P> {
    /// Mark these redelivered events (stream sequences) as being applied;
    /// answered by [`Input::Marked`].
    Mark(Vec<u64>),
    /// Record these events as dead letters, in order; answered by
    /// [`Input::SetAside`].
    SetAside(Vec<SetAside>),
    /// Read these events; answered by [`Input::Decoded`].
    Decode(Vec<EventId>),
    /// Read the swarm's stored state; answered by [`Input::Read`].
    Read,
    /// Read the swarm's deployment from the stream; answered by
    /// [`Input::Deployment`].
    ReadDeployment,
    /// Run the gates and the model reviewer on the batch's results
    /// ([`Driver::to_review`]); answered by [`Input::Reviewed`].
    Review,
    /// Post these assignments without asking for the server's answers;
    /// answered by [`Input::Posted`].
    Post(Vec<Assignment>),
    /// Write the state ([`Driver::state`]) by compare-and-swap at
    /// `revision` (0: create it); answered by [`Input::Written`].
    Write {
        /// The revision the key must still be at.
        revision: u64,
        /// First make sure these posted assignments are stored: send each
        /// again asking for the answer, and await every answer.
        confirm: Posted<P>,
        /// Then publish these assignments while the state is written
        /// (`None`: write only).
        alongside: Option<Vec<Assignment>>,
    },
    /// Publish these assignments and await their answers; answered by
    /// [`Input::Sent`].
    Send(Vec<Assignment>),
    /// Publish the final report of the state ([`Driver::state`]); answered
    /// by [`Input::Reported`].
    Report,
}

/// What a step decided: effects to carry out now, in order, then at most
/// one request, whose answer is the next step's input. No request: the
/// driver waits for the next batch or [`Input::Flush`].
#[derive(Debug)]
pub struct Ready<P> {
    /// To carry out now, in order.
    pub effects: Vec<Effect>,
    /// To carry out after them.
    pub request: Option<Request<P>>,
}

impl<P> Default for Ready<P> {
    fn default() -> Self {
        Ready {
            effects: Vec::new(),
            request: None,
        }
    }
}

/// The cached state of the swarm and the revision it was read at.
struct Cached<P> {
    state: Indexed,
    /// The revision last stored (the state may be ahead of it: `dirty`).
    revision: u64,
    /// The state holds applied events not yet stored (a deferred write).
    dirty: bool,
    /// Which read this state descends from: a state read again is a new
    /// generation, and what a dirty earlier one held is gone with it.
    generation: u64,
    /// Assignments this state records that were posted and are not yet
    /// known stored: each is confirmed before a write of the state (or,
    /// sooner, by its result). Only a dirty state has any.
    posted: Posted<P>,
}

/// Events applied to the cached state whose write is deferred, and the
/// generation of the state that holds them.
struct Held {
    events: Vec<EventId>,
    /// The ack subjects of the assignments their results answer, acked
    /// when the events are settled, whichever way: sent with the
    /// assignment that follows, each ack would reach the server in the
    /// same write and be handled before that assignment is delivered.
    assignment_acks: Vec<String>,
    generation: u64,
    since: Instant,
}

/// How one event of a batch ends.
#[derive(Debug, Clone)]
enum Outcome {
    Applied,
    Reject(ErrorBody),
    Retry(String),
    Wait(String),
}

/// One event of a batch to apply, with where it sits in the stream.
struct Item {
    /// Its position in the batch.
    index: usize,
    incoming: Incoming,
    seq: u64,
    delivered: i64,
    age: Duration,
}

/// One compare-and-swap round of a batch.
#[derive(Default)]
struct Attempt {
    /// There was no cached state: it was read (or is new) this round.
    fresh: bool,
    /// A new swarm's state, created without a read.
    new_swarm: bool,
    /// The state held unstored events when the round began.
    was_dirty: bool,
    /// The cached state was found still the stored one before the batch
    /// ([`Driver::still_current`]).
    verified: bool,
    changed: bool,
    /// Some event changed nothing or is ahead: a cached state may be behind.
    unsure: bool,
    /// One per item, in order.
    outcomes: Vec<Outcome>,
    /// What the events decided, in order.
    commands: Vec<Command>,
    assigns: Vec<Assignment>,
    finalize: bool,
    /// The skills' scores the events move.
    scores: Vec<SkillScore>,
    /// The assignments went out with (or before) the write.
    sent: bool,
}

/// A batch being handled.
struct Batch {
    events: Vec<Arrival>,
    /// Per event, once known before the apply (read failures, set-asides).
    outcomes: Vec<Option<Outcome>>,
    /// Positions of the redelivered events, marked while applied.
    marked: Vec<usize>,
    /// Positions of the events to set aside, and why.
    poisoned: Vec<(usize, ErrorBody)>,
    /// Positions of the events read ([`Request::Decode`]).
    decoding: Vec<usize>,
    /// Per event, what to apply.
    incoming: Vec<Option<(Incoming, Duration)>>,
    items: Vec<Item>,
    /// The write may be deferred (the held events stay within [`MAX_HELD`]).
    defer: bool,
    only_results: bool,
    /// A first delivery of a recent deployment with no state cached:
    /// created without a read first.
    assume_new: bool,
    attempts: u32,
    attempt: Attempt,
    report_rounds: u32,
}

/// Where a driver is: idle, or waiting for the answer to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle,
    Marking,
    SettingAside,
    Decoding,
    ReadingForReview,
    Reviewing,
    Reading,
    ReadingDeployment,
    Posting,
    Writing,
    Sending,
    Reporting,
    ReportReading,
    ReportWriting,
    /// A deferred write; `true` when made at the end of a batch.
    Flushing(bool),
}

/// One swarm's driver (see the module's documentation). `P` is the
/// executor's copy of an assignment posted without an answer.
pub struct Driver<P> {
    swarm_id: String,
    config: DriverConfig,
    /// The pin the cached state was read or written under.
    epoch: u64,
    cache: Option<Cached<P>>,
    /// The executor found the cached state still the stored one, for the
    /// next batch.
    verified: bool,
    held: Option<Held>,
    generations: u64,
    phase: Phase,
    batch: Option<Batch>,
}

impl<P> Driver<P> {
    /// A driver for `swarm_id`, with nothing cached, under the pin counted
    /// `epoch`.
    pub fn new(swarm_id: impl Into<String>, epoch: u64, config: DriverConfig) -> Driver<P> {
        Driver {
            swarm_id: swarm_id.into(),
            config,
            epoch,
            cache: None,
            verified: false,
            held: None,
            generations: 0,
            phase: Phase::Idle,
            batch: None,
        }
    }

    /// The cached state: what [`Request::Write`] stores and
    /// [`Request::Report`] reports.
    pub fn state(&self) -> Option<&Indexed> {
        self.cache.as_ref().map(|c| &c.state)
    }

    /// The revision of the cached state, if a batch under the pin count
    /// `epoch` would drop it (a pin was given since it was read) or read
    /// it again on an event that changes nothing (as it does for any
    /// cached state) and it is large: the executor may check it is still
    /// the stored one ([`Driver::still_current`]) with one small read,
    /// rather than have up to 100,000 tasks read again.
    pub fn cache_to_check(&self, epoch: u64) -> Option<u64> {
        let c = self.cache.as_ref()?;
        (c.revision != 0 && (epoch != self.epoch || c.state.chunks.is_some())).then_some(c.revision)
    }

    /// The stored state is still at the cached revision under the pin count
    /// `epoch`: nobody wrote it since, so the cache stays, and the next
    /// batch decides on it as on a fresh read.
    pub fn still_current(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.verified = true;
    }

    /// The cached state, to record in it that it was stored as it is (which
    /// of its tasks changed since; where they are stored).
    pub fn state_mut(&mut self) -> Option<&mut SwarmState> {
        self.cache.as_mut().map(|c| &mut c.state.state)
    }

    /// When to send [`Input::Flush`] if no batch comes first: a deferred
    /// write's time. `None`: nothing waits.
    pub fn wake_at(&self) -> Option<Instant> {
        self.held.as_ref().map(|h| h.since + DEFER_WRITE)
    }

    /// For [`Request::Review`]: the cached state and the batch's results,
    /// each with its stream sequence, the verdicts to add to (and its
    /// metrics, for the model's cost) and whether a replan was sent for it.
    pub fn to_review(&mut self) -> Option<(&Indexed, impl Iterator<Item = ToReview<'_>>)> {
        let state = &self.cache.as_ref()?.state;
        let items = self.batch.as_mut()?.items.iter_mut();
        Some((
            state,
            items.filter_map(|i| match &mut i.incoming {
                Incoming::Event(Event::Result {
                    submission,
                    review,
                    replan,
                    ..
                }) => Some((i.seq, &mut **submission, review, replan)),
                _ => None,
            }),
        ))
    }

    /// Takes one input and decides what to do next.
    pub fn step(&mut self, now: Now, input: Input<P>) -> Ready<P> {
        let mut out = Ready::default();
        let phase = std::mem::replace(&mut self.phase, Phase::Idle);
        match (phase, input) {
            (Phase::Idle, Input::Batch { epoch, events }) => {
                self.begin(now, epoch, events, &mut out)
            }
            (Phase::Idle, Input::Flush) => self.flush(false, &mut out),
            (Phase::Marking, Input::Marked(deaths)) => self.marked(now, deaths, &mut out),
            (Phase::SettingAside, Input::SetAside(recorded)) => {
                self.set_aside(now, recorded, &mut out)
            }
            (Phase::Decoding, Input::Decoded(decoded)) => self.decoded(now, decoded, &mut out),
            (Phase::ReadingForReview, Input::Read(read)) => {
                // A failed read leaves the review out, not the batch.
                if let Ok(read) = read {
                    self.cache = read.map(|(s, rev)| self.read(s, rev));
                }
                self.review(now, &mut out)
            }
            (Phase::Reviewing, Input::Reviewed) => self.apply(now, &mut out),
            (Phase::Reading, Input::Read(read)) => match read {
                Ok(read) => {
                    self.cache = read.map(|(s, rev)| self.read(s, rev));
                    self.after_read(now, &mut out)
                }
                Err(e) => self.fail_batch(now, e, &mut out),
            },
            (Phase::ReadingDeployment, Input::Deployment(found)) => {
                self.deployment(now, found, &mut out)
            }
            (Phase::Posting, Input::Posted(posted)) => self.posted(now, posted, &mut out),
            (Phase::Writing, Input::Written(written)) => self.written(now, written, &mut out),
            (Phase::Sending, Input::Sent(sent)) => match sent {
                Ok(()) => self.after_send(now, &mut out),
                Err(e) => self.fail_batch(now, e, &mut out),
            },
            (Phase::Reporting, Input::Reported(reported)) => match reported {
                Ok(()) => self.record_report(now, &mut out),
                Err(e) => self.fail_batch(now, e, &mut out),
            },
            (Phase::ReportReading, Input::Read(read)) => match read {
                Ok(read) => {
                    self.cache = read.map(|(s, rev)| self.read(s, rev));
                    self.record_report(now, &mut out)
                }
                Err(e) => self.fail_batch(now, e, &mut out),
            },
            (Phase::ReportWriting, Input::Written(written)) => {
                self.report_written(now, written, &mut out)
            }
            (Phase::Flushing(from_batch), Input::Written(written)) => {
                self.flushed(from_batch, written, &mut out)
            }
            (phase, _) => {
                error!(?phase, "a driver input out of turn; ignored");
                self.phase = phase;
            }
        }
        out
    }

    /// A state as read from the bucket: a new generation.
    fn read(&mut self, state: SwarmState, revision: u64) -> Cached<P> {
        self.cached(Indexed::new(state), revision)
    }

    fn cached(&mut self, state: Indexed, revision: u64) -> Cached<P> {
        self.generations += 1;
        Cached {
            state,
            revision,
            dirty: false,
            generation: self.generations,
            posted: Posted::new(),
        }
    }

    fn request(&mut self, phase: Phase, request: Request<P>, out: &mut Ready<P>) {
        self.phase = phase;
        out.request = Some(request);
    }

    fn begin(&mut self, now: Now, epoch: u64, events: Vec<Arrival>, out: &mut Ready<P>) {
        // A state cached under an earlier pin may be behind the writes of
        // the replica that held the pin in between.
        if epoch != self.epoch {
            self.epoch = epoch;
            self.cache = None;
        }
        let held = self.held.as_ref().map_or(0, |h| h.events.len());
        let marked: Vec<usize> = (0..events.len())
            .filter(|&i| events[i].delivered > 1)
            .collect();
        let seqs: Vec<u64> = marked.iter().map(|&i| events[i].seq).collect();
        self.batch = Some(Batch {
            defer: held + events.len() <= MAX_HELD,
            outcomes: vec![None; events.len()],
            incoming: events.iter().map(|_| None).collect(),
            events,
            marked,
            poisoned: Vec::new(),
            decoding: Vec::new(),
            items: Vec::new(),
            only_results: false,
            assume_new: false,
            attempts: 0,
            attempt: Attempt::default(),
            report_rounds: 0,
        });
        if seqs.is_empty() {
            self.decode(now, out)
        } else {
            self.request(Phase::Marking, Request::Mark(seqs), out)
        }
    }

    /// The marks are taken: an event a manager already died on is set aside.
    fn marked(&mut self, now: Now, deaths: Vec<Result<u32, String>>, out: &mut Ready<P>) {
        let allowed = self.config.deaths_allowed.max(1);
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        let mut set_aside = Vec::new();
        for (&i, deaths) in batch.marked.iter().zip(deaths) {
            let event = &batch.events[i];
            match deaths {
                Ok(n) if n >= allowed => {
                    let reason = ErrorBody::new(
                        ErrorCode::LimitExceeded,
                        format!(
                            "a manager died applying {} (stream sequence {}, delivery {}): it was set aside and not handed to another",
                            event.subject, event.seq, event.delivered
                        ),
                    );
                    set_aside.push(SetAside {
                        id: event.id,
                        reason: reason.clone(),
                        deployment: matches!(
                            Subject::parse(&event.subject),
                            Some(Subject::Deploy { .. })
                        ),
                    });
                    batch.poisoned.push((i, reason));
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(
                        seq = event.seq,
                        error = %e,
                        "cannot mark a redelivered event; applying it unmarked"
                    )
                }
            }
        }
        if set_aside.is_empty() {
            self.decode(now, out)
        } else {
            self.request(Phase::SettingAside, Request::SetAside(set_aside), out)
        }
    }

    /// The dead letters are recorded: a deployment set aside is done; any
    /// other event set aside fails its swarm.
    fn set_aside(&mut self, now: Now, recorded: Vec<bool>, out: &mut Ready<P>) {
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        for ((i, reason), recorded) in std::mem::take(&mut batch.poisoned)
            .into_iter()
            .zip(recorded)
        {
            let deployment = matches!(
                Subject::parse(&batch.events[i].subject),
                Some(Subject::Deploy { .. })
            );
            if !recorded {
                batch.outcomes[i] = Some(Outcome::Retry(
                    "an event to set aside could not be recorded".into(),
                ));
            } else if deployment {
                batch.outcomes[i] = Some(Outcome::Applied);
            } else {
                // Applied as the notice that fails the swarm.
                let poisoned = Event::Poisoned {
                    reason: reason.message,
                };
                batch.incoming[i] = Some((Incoming::Event(poisoned), Duration::ZERO));
            }
        }
        self.decode(now, out)
    }

    /// Asks for the events that are not set aside to be read.
    fn decode(&mut self, now: Now, out: &mut Ready<P>) {
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        batch.decoding = (0..batch.events.len())
            .filter(|&i| batch.outcomes[i].is_none() && batch.incoming[i].is_none())
            .collect();
        if batch.decoding.is_empty() {
            return self.decoded(now, Vec::new(), out);
        }
        let ids = batch.decoding.iter().map(|&i| batch.events[i].id).collect();
        self.request(Phase::Decoding, Request::Decode(ids), out)
    }

    fn decoded(&mut self, now: Now, decoded: Vec<Decoded>, out: &mut Ready<P>) {
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        for (&i, d) in batch.decoding.iter().zip(decoded) {
            match d {
                Decoded::Event { incoming, age } => batch.incoming[i] = Some((incoming, age)),
                Decoded::Ignore => batch.outcomes[i] = Some(Outcome::Applied),
                Decoded::Invalid(reason) => batch.outcomes[i] = Some(Outcome::Reject(reason)),
                Decoded::Unreadable(e) => batch.outcomes[i] = Some(Outcome::Retry(e)),
            }
        }
        let incoming = std::mem::take(&mut batch.incoming);
        batch.items = incoming
            .into_iter()
            .enumerate()
            .filter_map(|(index, i)| {
                let (incoming, age) = i?;
                let event = &batch.events[index];
                Some(Item {
                    index,
                    incoming,
                    seq: event.seq,
                    delivered: event.delivered,
                    age,
                })
            })
            .collect();
        if batch.items.is_empty() {
            return self.end_batch(now, out);
        }
        if !batch
            .items
            .iter()
            .any(|i| matches!(i.incoming, Incoming::Event(Event::Result { .. })))
        {
            return self.apply(now, out);
        }
        // Results are reviewed against the state first: once per batch,
        // outside the compare-and-swap rounds, so a lost race does not pay
        // for a model twice.
        if self.cache.is_none() {
            return self.request(Phase::ReadingForReview, Request::Read, out);
        }
        self.review(now, out)
    }

    fn review(&mut self, now: Now, out: &mut Ready<P>) {
        if self.cache.is_none() {
            return self.apply(now, out);
        }
        self.request(Phase::Reviewing, Request::Review, out)
    }

    /// Starts applying the batch's events.
    fn apply(&mut self, now: Now, out: &mut Ready<P>) {
        let cached = self.cache.is_some();
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        // Results only, applied to a state this replica wrote or read under
        // its current pin: the hot path, whose assignments go out with the
        // write.
        batch.only_results = batch
            .items
            .iter()
            .all(|i| matches!(i.incoming, Incoming::Event(Event::Result { .. })));
        // A swarm's deployment, delivered for the first time, has no state
        // yet: create it without reading first (a lost race reads), and send
        // its first assignments while it is written. Should the swarm exist
        // after all, they are copies of assignments sent since the mission
        // was accepted, so within the stream's deduplication window if the
        // mission is younger than it: they land once.
        batch.assume_new = !cached
            && batch.items.first().is_some_and(|i| {
                i.delivered == 1
                    && matches!(&i.incoming, Incoming::Deploy(d) if recent(d, now.wall))
            });
        self.attempt(now, out)
    }

    /// One compare-and-swap round: read if nothing is cached, apply, write.
    fn attempt(&mut self, now: Now, out: &mut Ready<P>) {
        let fresh = self.cache.is_none();
        let verified = std::mem::take(&mut self.verified) && !fresh;
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        if batch.attempts >= MAX_ATTEMPTS {
            return self.fail_batch(now, "state kept changing under us".into(), out);
        }
        batch.attempts += 1;
        let new_swarm = fresh && std::mem::take(&mut batch.assume_new);
        batch.attempt = Attempt {
            fresh,
            verified,
            new_swarm,
            ..Attempt::default()
        };
        if fresh && !new_swarm {
            return self.request(Phase::Reading, Request::Read, out);
        }
        self.after_read(now, out)
    }

    fn after_read(&mut self, now: Now, out: &mut Ready<P>) {
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        batch.attempt.was_dirty = self.cache.as_ref().is_some_and(|c| c.dirty);
        if self.cache.is_none()
            && batch
                .items
                .first()
                .is_some_and(|i| matches!(i.incoming, Incoming::Event(_)))
        {
            // Events before their swarm's state: the deployment's first
            // write may have been lost with the replica that made it, after
            // its assignments went out. Deploy from the stream now (the
            // redelivered deployment then finds the state).
            return self.request(Phase::ReadingDeployment, Request::ReadDeployment, out);
        }
        self.apply_items(now, out)
    }

    fn deployment(
        &mut self,
        now: Now,
        found: Result<Option<(SwarmDeployment, u64)>, String>,
        out: &mut Ready<P>,
    ) {
        match found {
            Err(e) => self.fail_batch(now, e, out),
            Ok(found) => {
                if let Some((d, seq)) = found.filter(|(d, _)| recent(d, now.wall)) {
                    let (mut state, commands) = machine::deploy(&self.swarm_id, &d, seq, now.wall);
                    state.replan = self.config.replan;
                    info!(tasks = state.tasks.len(), status = ?state.status, "swarm deployed from the stream: an event came before its state");
                    self.cache = Some(self.cached(state, 0));
                    if let Some(batch) = self.batch.as_mut() {
                        batch.attempt.changed = true;
                        batch.attempt.commands.extend(commands);
                    }
                }
                self.apply_items(now, out)
            }
        }
    }

    /// Applies the batch's events, in order, to the state, then decides how
    /// the state is written and the assignments sent.
    fn apply_items(&mut self, now: Now, out: &mut Ready<P>) {
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        let a = &mut batch.attempt;
        let swarm_id = self.swarm_id.as_str();
        let mut owed = false;
        for item in &batch.items {
            match (&mut self.cache, &item.incoming) {
                (None, Incoming::Deploy(d)) => {
                    let (mut state, commands) = machine::deploy(swarm_id, d, item.seq, now.wall);
                    state.replan = self.config.replan;
                    info!(tasks = state.tasks.len(), status = ?state.status, "swarm deployed");
                    self.generations += 1;
                    self.cache = Some(Cached {
                        state,
                        revision: 0,
                        dirty: false,
                        generation: self.generations,
                        posted: Posted::new(),
                    });
                    a.changed = true;
                    a.commands.extend(commands);
                    a.outcomes.push(Outcome::Applied);
                }
                (None, Incoming::Event(Event::Poisoned { .. })) => {
                    // Set aside already (a dead letter); no swarm to fail.
                    a.outcomes.push(Outcome::Applied);
                }
                (None, Incoming::Event(_)) => {
                    // An event for a swarm whose state is not stored (yet): give
                    // the deployment time to land, then record it as a dead letter.
                    a.outcomes
                        .push(if item.delivered < DELIVERIES_WITHOUT_STATE {
                            Outcome::Retry(format!("swarm {swarm_id} has no state yet"))
                        } else {
                            Outcome::Reject(ErrorBody::new(
                                ErrorCode::NotFound,
                                format!("no swarm {swarm_id} exists"),
                            ))
                        });
                }
                (Some(c), Incoming::Deploy(_)) => {
                    debug!("deployment seen again; re-sending what the state still owes");
                    a.commands.extend(machine::outstanding(&c.state));
                    a.outcomes.push(Outcome::Applied);
                }
                (Some(c), Incoming::Event(event)) => {
                    // A result shows its assignment stored: a worker pulled it.
                    if let Event::Result { submission, .. } = event
                        && !c.posted.is_empty()
                    {
                        c.posted.remove(&machine::assignment_msg_id(
                            swarm_id,
                            &submission.task_id,
                            submission.attempt,
                            submission.revision,
                        ));
                    }
                    let applied = machine::apply_only(&mut c.state, item.seq, event, now.wall);
                    if applied.ahead {
                        // A cached state may only be behind our own pin's
                        // writes; a stored one waits for the events before it,
                        // but not for ever: one that never catches up answers
                        // an assignment nobody made.
                        a.unsure = true;
                        let patience = self.config.patience;
                        a.outcomes.push(if item.age > patience {
                            Outcome::Reject(ErrorBody::new(
                                ErrorCode::ValidationFailed,
                                format!(
                                    "{} answers an attempt or revision of its task that swarm {swarm_id} never assigned (still ahead of its state after {patience:?})",
                                    event_name(event)
                                ),
                            ))
                        } else {
                            Outcome::Wait(format!(
                                "{} is ahead of the stored state; it waits for the events before it",
                                event_name(event)
                            ))
                        });
                        continue;
                    }
                    a.changed |= applied.changed;
                    a.unsure |= !applied.changed;
                    owed |= !applied.changed;
                    a.commands.extend(applied.commands);
                    a.outcomes.push(Outcome::Applied);
                }
            }
        }
        if owed && let Some(c) = self.cache.as_ref() {
            // What the state still owes, once for every event that changed
            // nothing (a redelivery may mean it was lost).
            a.commands.extend(machine::outstanding(&c.state));
        }
        if a.unsure && !a.fresh && !a.verified && !a.was_dirty {
            // "Nothing to do" from a cached state may only mean the cache is
            // behind another replica's writes: decide again on a fresh read.
            // (A state with unstored events is ahead of any read.)
            self.cache = None;
            return self.attempt(now, out);
        }
        (a.assigns, a.finalize, a.scores) = split(std::mem::take(&mut a.commands));
        let hot = (batch.only_results && !a.fresh) || a.new_swarm;
        let defer = batch.defer;
        let Some(c) = self.cache.as_mut() else {
            return self.after_write(now, out);
        };
        if !a.changed {
            return self.after_write(now, out);
        }
        if defer && hot && !a.finalize {
            // The state write waits: the events stay unacked until a later
            // write stores them (within DEFER_WRITE), and the assignments go
            // out now, posted without waiting for the server's answer: the
            // write confirms them first. A new swarm's first write (a
            // create) waits the same way, its deployment held: should the
            // swarm exist after all, the create fails, the deployment comes
            // again and reads it, and the assignments posted were copies
            // within the stream's deduplication window (see `assume_new`).
            let assigns = std::mem::take(&mut a.assigns);
            return self.request(Phase::Posting, Request::Post(assigns), out);
        }
        // Assignments posted by earlier batches are recorded in this state
        // too: known stored before it is written. On the hot path this
        // batch's own go out while the state is written.
        let alongside = hot.then(|| std::mem::take(&mut a.assigns));
        a.sent = alongside.is_some();
        let request = write(c, &self.config.agent_id, alongside);
        self.request(Phase::Writing, request, out)
    }

    fn posted(&mut self, now: Now, posted: Result<Vec<(String, P)>, String>, out: &mut Ready<P>) {
        match posted {
            Ok(posted) => {
                if let Some(c) = self.cache.as_mut() {
                    c.posted.extend(posted);
                    c.dirty = true;
                }
                if let Some(batch) = self.batch.as_mut() {
                    batch.attempt.sent = true;
                }
                self.after_write(now, out)
            }
            Err(e) => {
                self.cache = None;
                self.fail_batch(now, e, out)
            }
        }
    }

    fn written(&mut self, now: Now, written: Result<Option<u64>, String>, out: &mut Ready<P>) {
        match written {
            Ok(Some(revision)) => {
                self.stored(revision);
                self.after_write(now, out)
            }
            Ok(None) => {
                debug!("lost a state compare-and-swap; reloading");
                self.cache = None;
                self.attempt(now, out)
            }
            Err(e) => {
                self.cache = None;
                self.fail_batch(now, e, out)
            }
        }
    }

    /// The state is stored (or needed no write): the assignments that wait
    /// for it go out.
    fn after_write(&mut self, now: Now, out: &mut Ready<P>) {
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        let a = &mut batch.attempt;
        if !a.sent && !a.assigns.is_empty() {
            let assigns = std::mem::take(&mut a.assigns);
            return self.request(Phase::Sending, Request::Send(assigns), out);
        }
        self.after_send(now, out)
    }

    fn after_send(&mut self, now: Now, out: &mut Ready<P>) {
        if self.batch.as_ref().is_some_and(|b| b.attempt.finalize) && self.cache.is_some() {
            return self.request(Phase::Reporting, Request::Report, out);
        }
        self.applied(now, out)
    }

    /// The report is out: remember so in the state, so a later redelivery
    /// does not send it again.
    fn record_report(&mut self, now: Now, out: &mut Ready<P>) {
        let Some(batch) = self.batch.as_mut() else {
            return;
        };
        if batch.report_rounds >= MAX_ATTEMPTS {
            error!(
                "could not record that the report was published; a redelivery may send it again (deduplicated)"
            );
            return self.applied(now, out);
        }
        batch.report_rounds += 1;
        match self.cache.as_mut() {
            None => self.request(Phase::ReportReading, Request::Read, out),
            Some(c) if c.state.report_published => self.applied(now, out),
            Some(c) => {
                // Marked in place (no copy of the state): a failed write
                // drops the cache, a lost race reads the state again.
                c.state.report_published = true;
                set_manager(&mut c.state, &self.config.agent_id);
                let revision = c.revision;
                self.request(
                    Phase::ReportWriting,
                    Request::Write {
                        revision,
                        confirm: Posted::new(),
                        alongside: None,
                    },
                    out,
                )
            }
        }
    }

    /// The cached state is now stored at `revision`.
    fn stored(&mut self, revision: u64) {
        if let Some(c) = self.cache.as_mut() {
            c.revision = revision;
            c.dirty = false;
        }
    }

    fn report_written(
        &mut self,
        now: Now,
        written: Result<Option<u64>, String>,
        out: &mut Ready<P>,
    ) {
        match written {
            Ok(Some(revision)) => {
                self.stored(revision);
                self.applied(now, out)
            }
            Ok(None) => self.request(Phase::ReportReading, Request::Read, out),
            Err(e) => {
                self.cache = None;
                self.fail_batch(now, e, out)
            }
        }
    }

    /// The batch is applied and its side effects are out.
    fn applied(&mut self, now: Now, out: &mut Ready<P>) {
        if let Some(c) = &self.cache {
            out.effects.push(deadline(&c.state));
        }
        self.end_batch(now, out)
    }

    /// The batch's events are not applied: each comes again.
    fn fail_batch(&mut self, now: Now, error: String, out: &mut Ready<P>) {
        if let Some(batch) = self.batch.as_mut() {
            batch.attempt.outcomes = batch
                .items
                .iter()
                .map(|_| Outcome::Retry(error.clone()))
                .collect();
        }
        self.end_batch(now, out)
    }

    /// Settles each event of the batch: acked, held for a deferred write,
    /// handed back or set aside; and the assignments answered are acked.
    fn end_batch(&mut self, now: Now, out: &mut Ready<P>) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let Batch {
            events,
            mut outcomes,
            marked,
            items,
            attempt,
            ..
        } = batch;
        for (item, outcome) in items.iter().zip(attempt.outcomes) {
            outcomes[item.index] = Some(outcome);
        }
        if !marked.is_empty() {
            out.effects.push(Effect::Unmark(
                marked.iter().map(|&i| events[i].seq).collect(),
            ));
        }
        // The verdicts of events applied, stored or held: should the state
        // be lost, the events come again and the same verdicts count once.
        if !attempt.scores.is_empty() {
            out.effects.push(Effect::ScoreSkills(attempt.scores));
        }
        self.settle(out);
        let dirty = self
            .cache
            .as_ref()
            .filter(|c| c.dirty)
            .map(|c| c.generation);
        let outcomes: Vec<Outcome> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Outcome::Retry("event left unsettled".into())))
            .collect();
        // A result reached us because it is stored: the assignment it
        // answers, which its worker left unacked, is done (whatever the
        // result's own fate). A result that cannot be read acks nothing.
        // Those of held events are acked when the events are settled.
        for (event, outcome) in events.iter().zip(&outcomes) {
            if let Some(ack) = &event.assignment_ack
                && !matches!(outcome, Outcome::Reject(_))
                && !(dirty.is_some() && matches!(outcome, Outcome::Applied))
            {
                out.effects.push(Effect::AckAssignment(ack.clone()));
            }
        }
        for (event, outcome) in events.into_iter().zip(outcomes) {
            let id = event.id;
            match outcome {
                Outcome::Applied => match dirty {
                    Some(generation) => {
                        let h = self.held.get_or_insert_with(|| Held {
                            events: Vec::new(),
                            assignment_acks: Vec::new(),
                            generation,
                            since: now.tick,
                        });
                        h.assignment_acks.extend(event.assignment_ack);
                        h.events.push(id);
                    }
                    None => out.effects.push(Effect::Ack(id)),
                },
                Outcome::Reject(reason) => out.effects.push(Effect::Reject { id, reason }),
                Outcome::Retry(error) => {
                    self.cache = None;
                    out.effects.push(Effect::Retry { id, error });
                }
                Outcome::Wait(why) => out.effects.push(Effect::Wait { id, why }),
            }
        }
        // A retry above dropped the cache: what it held comes again.
        self.settle(out);
        if self
            .held
            .as_ref()
            .is_some_and(|h| now.tick.saturating_duration_since(h.since) >= WRITE_AFTER_BATCH)
        {
            return self.flush(true, out);
        }
        self.retire(out)
    }

    /// A finished swarm whose report is out needs no actor.
    fn retire(&self, out: &mut Ready<P>) {
        if self
            .cache
            .as_ref()
            .is_some_and(|c| c.state.status.is_terminal() && c.state.report_published)
        {
            out.effects.push(Effect::Retire);
        }
    }

    /// Makes the deferred write, if the state holding the events is still
    /// the cached one; settles the events either way.
    fn flush(&mut self, from_batch: bool, out: &mut Ready<P>) {
        let Some(generation) = self.held.as_ref().map(|h| h.generation) else {
            if from_batch {
                self.retire(out);
            }
            return;
        };
        if let Some(c) = self
            .cache
            .as_mut()
            .filter(|c| c.dirty && c.generation == generation)
        {
            // The state may only say what the stream holds: its posted
            // assignments are known stored before it is written.
            let request = write(c, &self.config.agent_id, None);
            return self.request(Phase::Flushing(from_batch), request, out);
        }
        self.settle(out);
        if from_batch {
            self.retire(out);
        }
    }

    fn flushed(
        &mut self,
        from_batch: bool,
        written: Result<Option<u64>, String>,
        out: &mut Ready<P>,
    ) {
        match written {
            Ok(Some(revision)) => {
                self.stored(revision);
                if let Some(c) = self.cache.as_ref() {
                    out.effects.push(deadline(&c.state));
                }
            }
            Ok(None) => {
                debug!("lost a deferred state write's compare-and-swap; its events come again");
                self.cache = None;
            }
            Err(e) => {
                warn!(
                    error = %e,
                    "deferred state write failed; its events come again"
                );
                self.cache = None;
            }
        }
        self.settle(out);
        if from_batch {
            self.retire(out);
        }
    }

    /// Settles the events held for a deferred write against the cache as it
    /// is now: acked once a stored state includes them, still held while the
    /// state that holds them waits for its write, and handed back (applied
    /// again from their redelivery) if that state was dropped or read again.
    fn settle(&mut self, out: &mut Ready<P>) {
        let Some(h) = self.held.take() else {
            return;
        };
        match self.cache.as_ref().filter(|c| c.generation == h.generation) {
            Some(c) if c.dirty => {
                self.held = Some(h);
                return;
            }
            Some(_) => out.effects.extend(h.events.into_iter().map(Effect::Ack)),
            None => out
                .effects
                .extend(h.events.into_iter().map(Effect::Redeliver)),
        }
        // Their results are stored either way: the assignments are done.
        out.effects
            .extend(h.assignment_acks.into_iter().map(Effect::AckAssignment));
    }
}

/// Whether a deployment is recent enough that its first assignments may have
/// gone out before a state write that was lost (the window within which new
/// deployments are written alongside their assignments).
pub fn recent(d: &SwarmDeployment, now: DateTime<Utc>) -> bool {
    now - d.accepted_at < NEW_SWARM_WINDOW
}

/// The write of a cached state, confirming the assignments it records.
fn write<P>(c: &mut Cached<P>, agent_id: &str, alongside: Option<Vec<Assignment>>) -> Request<P> {
    set_manager(&mut c.state, agent_id);
    Request::Write {
        revision: c.revision,
        confirm: std::mem::take(&mut c.posted),
        alongside,
    }
}

/// Records this replica as the state's last writer.
fn set_manager(state: &mut SwarmState, agent_id: &str) {
    if state.last_manager != agent_id {
        state.last_manager = agent_id.to_owned();
    }
}

/// The sweeper's view of a state: its deadline while it runs.
fn deadline(state: &SwarmState) -> Effect {
    Effect::Deadline((!state.status.is_terminal()).then_some(state.deadline))
}

/// Splits a round's commands into its assignments, one each (an assignment
/// owed twice in a batch goes out once), whether the report is owed, and
/// the skills' scores to move.
fn split(commands: Vec<Command>) -> (Vec<Assignment>, bool, Vec<SkillScore>) {
    let mut seen = HashSet::new();
    let mut finalize = false;
    let mut scores = Vec::new();
    let mut assigns = Vec::with_capacity(commands.len());
    for c in commands {
        match c {
            Command::Assign {
                pool,
                msg_id,
                assignment,
            } => {
                if seen.insert(msg_id.clone()) {
                    assigns.push(Assignment {
                        pool,
                        msg_id,
                        assignment,
                    });
                }
            }
            Command::Finalize => finalize = true,
            Command::ScoreSkills(score) => scores.push(score),
        }
    }
    (assigns, finalize, scores)
}

/// How an event is named in logs and dead letters.
fn event_name(event: &Event) -> String {
    match event {
        Event::Result { submission, .. } => format!(
            "the result of task {} (attempt {}, revision {})",
            submission.task_id, submission.attempt, submission.revision
        ),
        Event::TaskError {
            task_id, attempt, ..
        } => match attempt {
            Some(a) => format!("the error of task {task_id} (attempt {a})"),
            None => format!("the error of task {task_id}"),
        },
        Event::Ask { request } => format!(
            "ask {} of task {} (attempt {}, revision {})",
            request.ask, request.task_id, request.attempt, request.revision
        ),
        Event::Replan { replan } => format!(
            "the replan after task {} (attempt {}, revision {})",
            replan.task_id, replan.attempt, replan.revision
        ),
        Event::Cancel { .. } => "the cancel".into(),
        Event::Expire => "the expiry".into(),
        Event::Poisoned { .. } => "the notice of an event set aside".into(),
    }
}
