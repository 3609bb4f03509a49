//! The worker's decisions, as pure functions over plain data: no async, no
//! NATS types, the time passed in. The rest of the crate carries them out:
//! the consumer asks what a delivery comes to; the task's run how it starts,
//! when its progress is worth an update and what it submits; the questions
//! and the control watch what an answer or a cancel means for a task that
//! waits or runs.
//!
//! A delivered assignment goes one of these ways:
//!
//! - it cannot be read ([`read`]): rejected, and the manager told when its
//!   subject names a task;
//! - its result is stored already ([`Delivery::Answered`]): acked, not run
//!   again;
//! - it was delivered more than its `max_attempts` ([`Delivery::GiveUp`]):
//!   an `Error` to the manager, and no more deliveries;
//! - its swarm was cancelled ([`Start::Stop`]), before it started or while
//!   it ran: a last update says it stopped, nothing goes to the manager, and
//!   the worker acks it ([`Finish::AckHere`]);
//! - its swarm's deadline passed before it started ([`Start::Fail`]), or it
//!   ran longer than the worker's limit ([`overran`]): a failed result;
//! - it ran: its [`submission`] is handed over naming the assignment, which
//!   the manager acks once the result is stored ([`Finish::AckedByManager`]).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use swarm_agent::tools::TypedTool;
use swarm_agent::tools::write::{WriteFile, WriteFileArgs};
use swarm_agent::{
    AgentTask, ContextItem,
    agent_loop::{AgentEvent, AgentOutcome, answer_feedback},
};
use swarm_common::{
    Envelope, ErrorBody, ErrorCode, ErrorMessage, GateVerdict, ResultSubmission, SWARM_ENDED,
    StepRecord, TaskAssignment, TaskStatus, approval::InputRecord, subjects::Subject,
};

/// Least time between two routine progress updates of a task (steps and the
/// agent's own reports; gate verdicts and the end always go), and how long a
/// task runs before it announces that it started.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(50);

/// Updates of a reply being written go at most this often: a few a second
/// is as fast as a person reads, and each is a stored message.
pub const WRITING_EVERY: Duration = Duration::from_millis(250);

/// How long a delivery handed back (a task that did not finish, an `Error`
/// that could not be sent) waits before it comes again.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A delivery that can never run.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    /// The swarm and task its subject names, whose manager is told (so the
    /// task fails rather than waits); none when the subject names none.
    pub task: Option<(String, String)>,
    /// Why: kept with the dead letter and sent to the manager.
    pub error: ErrorBody,
}

/// Reads a delivery on `subject`: the assignment `decode` yields, if the
/// subject is a work subject and the assignment is the one it names. A
/// delivery on any other subject is not decoded at all.
pub fn read(
    subject: &str,
    decode: impl FnOnce() -> Result<Envelope<TaskAssignment>, ErrorBody>,
) -> Result<Envelope<TaskAssignment>, Unreadable> {
    let Some(Subject::Work {
        swarm_id, task_id, ..
    }) = Subject::parse(subject)
    else {
        return Err(Unreadable {
            task: None,
            error: ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("{subject} is not a work subject"),
            ),
        });
    };
    let unreadable = |error| Unreadable {
        task: Some((swarm_id.to_string(), task_id.to_string())),
        error,
    };
    match decode() {
        Ok(env) if env.swarm_id == swarm_id && env.body.task_id == task_id => Ok(env),
        Ok(_) => Err(unreadable(ErrorBody::new(
            ErrorCode::ValidationFailed,
            "the assignment's swarm or task id does not match its subject",
        ))),
        Err(e) => Err(unreadable(e)),
    }
}

/// The `Error` that tells the manager a task's assignment can never run.
/// It has no token: the assignment that would hold it could not be read.
pub fn rejection(task_id: &str, error: ErrorBody) -> ErrorMessage {
    ErrorMessage {
        token: String::new(),
        task_id: Some(task_id.to_string()),
        attempt: None,
        error,
    }
}

/// Whether a delivery is a redelivery: then its worker may have handed its
/// result over already, and a stored result is looked for ([`answers`])
/// before anything else. A first delivery skips the look-up.
pub fn redelivered(delivered: i64) -> bool {
    delivered > 1
}

/// Whether a stored result of `a`'s task, of `attempt` and `revision`,
/// answers `a`. Attempts and revisions only grow: a result no older in
/// either answers this assignment or one that superseded it.
pub fn answers(attempt: u32, revision: u32, a: &TaskAssignment) -> bool {
    attempt >= a.attempt && revision >= a.revision
}

/// What a delivery of an assignment comes to before any work on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// Its result is stored (no manager acked it within `ack_wait`, or the
    /// ack was lost): acked here and not run again.
    Answered,
    /// Its workers died or stalled on it at every delivery: the manager
    /// gets this error (the task fails) and the delivery is terminated.
    GiveUp(ErrorBody),
    /// Worked on.
    Work,
}

/// What the `delivered`-th delivery of `a` comes to, `answered` when a
/// stored result [`answers`] it. An answered assignment is acked however
/// often it came; one delivered more than its `max_attempts` (at least one)
/// is given up rather than kill workers for ever.
pub fn delivery(a: &TaskAssignment, delivered: i64, answered: bool) -> Delivery {
    if answered {
        Delivery::Answered
    } else if delivered > i64::from(a.max_attempts.max(1)) {
        Delivery::GiveUp(ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "task {} was delivered {delivered} times without a result (at most {} tries): its workers died or stalled on it",
                a.task_id, a.max_attempts
            ),
        ))
    } else {
        Delivery::Work
    }
}

/// The `Error` that gives `a` up: it echoes the assignment's token and
/// attempt, as only its holder can.
pub fn give_up(a: &TaskAssignment, error: ErrorBody) -> ErrorMessage {
    ErrorMessage {
        token: a.token.clone(),
        task_id: Some(a.task_id.clone()),
        attempt: Some(a.attempt),
        error,
    }
}

/// How a task begins once its worker holds the assignment.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    /// Its swarm was cancelled: it does not run, and nothing goes to the
    /// manager (the swarm has ended).
    Stop,
    /// It cannot run: it fails at once with this error, as a result.
    Fail(ErrorBody),
    /// It runs.
    Run,
}

/// How `a` begins at `now`, `cancelled` when its swarm was. A cancel comes
/// before the deadline: a cancelled swarm wants nothing more from its tasks.
pub fn start(a: &TaskAssignment, cancelled: bool, now: DateTime<Utc>) -> Start {
    if cancelled {
        Start::Stop
    } else if now > a.deadline {
        Start::Fail(ErrorBody::new(
            ErrorCode::Timeout,
            "the swarm's deadline passed before the task started",
        ))
    } else {
        Start::Run
    }
}

/// Why a task that ran longer than the worker's `limit` fails.
pub fn overran(limit: Duration) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::Timeout,
        format!("the task ran longer than the worker's limit of {limit:?}"),
    )
}

/// The outcome of a task that failed with `error` before or instead of its
/// agent's end, as `provider` would have run it.
pub fn failed(error: ErrorBody, provider: &str) -> AgentOutcome {
    AgentOutcome {
        status: TaskStatus::Failed,
        result: String::new(),
        steps: Vec::new(),
        metrics: Default::default(),
        error: Some(error),
        provider: provider.to_string(),
    }
}

/// How a task that ran to its end leaves its assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Its result was handed over naming the assignment: the manager acks
    /// it once the result is stored.
    AckedByManager,
    /// Its swarm was cancelled and nothing went to the manager: the worker
    /// acks it.
    AckHere,
}

/// The ids of the dependencies' results `a` does not carry, to be read
/// from the stream, in the order of its context.
pub fn results_to_read(a: &TaskAssignment) -> Vec<u64> {
    a.context
        .iter()
        .filter(|c| c.result.is_none())
        .map(|c| c.result_seq)
        .collect()
}

/// Most bytes of dependencies' results one task is given as context: a
/// reduce after a map of a thousand children would otherwise hand the model
/// every child's whole result at once.
pub const MAX_CONTEXT_BYTES: usize = 256 * 1024;

/// The task's context: each dependency's result, the one `a` carries or
/// the next of `read` (those of [`results_to_read`], in order), within
/// [`MAX_CONTEXT_BYTES`] ([`bound_context`]). `None` if `read` runs out.
pub fn context(
    a: &TaskAssignment,
    read: impl IntoIterator<Item = String>,
) -> Option<Vec<ContextItem>> {
    let mut items = whole_context(a, read)?;
    bound_context(&mut items, MAX_CONTEXT_BYTES);
    Some(items)
}

/// Cuts the results in `items` so that together they take at most `max`
/// bytes: results smaller than an even share stay whole, and the others
/// share what is left evenly, each cut at a character boundary and ending
/// with a note of how much was left out (the whole result stays in the
/// stream). Nothing changes when they fit.
pub fn bound_context(items: &mut [ContextItem], max: usize) {
    let total: usize = items.iter().map(|c| c.result.len()).sum();
    if total <= max || items.is_empty() {
        return;
    }
    let mut sizes: Vec<usize> = items.iter().map(|c| c.result.len()).collect();
    sizes.sort_unstable();
    // The largest share such that the results under it, whole, and the
    // others at the share, fit in `max`.
    let mut left = max;
    let mut share = max / items.len();
    for (k, size) in sizes.iter().enumerate() {
        let rest = items.len() - k;
        share = left / rest;
        if *size > share {
            break;
        }
        left -= size;
    }
    for c in items.iter_mut().filter(|c| c.result.len() > share) {
        let whole = c.result.len();
        let note = format!("\n[cut: {share} of {whole} bytes shown]");
        let mut cut = share.saturating_sub(note.len()).min(whole);
        while !c.result.is_char_boundary(cut) {
            cut -= 1;
        }
        c.result.truncate(cut);
        c.result.push_str(&note);
    }
}

fn whole_context(
    a: &TaskAssignment,
    read: impl IntoIterator<Item = String>,
) -> Option<Vec<ContextItem>> {
    let mut read = read.into_iter();
    let mut items = Vec::with_capacity(a.context.len());
    for c in &a.context {
        let result = match &c.result {
            Some(text) => text.clone(),
            None => read.next()?,
        };
        items.push(ContextItem {
            task_id: c.task_id.clone(),
            title: c.title.clone(),
            result,
        });
    }
    Some(items)
}

/// Whether the journal of a task's `round` (answers to its questions so
/// far) is read for steps to replay. Only the first round of a first
/// delivery has nothing there and skips the round trip.
pub fn replays_journal(delivered: i64, round: u32) -> bool {
    !(delivered == 1 && round == 0)
}

/// A progress update to post.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// The task's status.
    pub status: TaskStatus,
    /// How far it is, 0 to 100.
    pub pct: u8,
    /// What it says.
    pub message: String,
    /// Figures that go with it.
    pub metrics: Vec<(&'static str, f64)>,
}

impl Update {
    fn new(status: TaskStatus, pct: u8, message: String) -> Self {
        Self {
            status,
            pct,
            message,
            metrics: Vec::new(),
        }
    }
}

/// When a running task's progress is worth an update. Steps that follow
/// each other within [`PROGRESS_EVERY`] are not worth a stored update each
/// (a tool-only task would send three in a millisecond); a step of a model
/// call, seconds long, is. Gate verdicts always go; the text of a reply
/// being written goes at most every [`WRITING_EVERY`].
#[derive(Debug, Clone)]
pub struct Pacer {
    /// When the last update went, or the run started.
    last_sent: Instant,
    /// When the last update of a reply being written went.
    last_written: Option<Instant>,
    /// The percentage of the last update, which one of text keeps.
    last_pct: u8,
    /// Whether an update went.
    announced: bool,
}

impl Pacer {
    /// A pacer for a run that starts at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            last_sent: now,
            last_written: None,
            last_pct: 0,
            announced: false,
        }
    }

    /// The update `event` is worth at `now`, if any, for a task of at most
    /// `max_steps` steps; one returned counts as sent.
    pub fn update(&mut self, event: AgentEvent, max_steps: u32, now: Instant) -> Option<Update> {
        // A gate's verdict and a wait for the model limits are told each
        // time: a watcher would otherwise not know why a task stands still.
        if let AgentEvent::Writing { text, len } = &event {
            if self
                .last_written
                .is_some_and(|at| now.saturating_duration_since(at) < WRITING_EVERY)
            {
                return None;
            }
            self.last_written = Some(now);
            self.last_sent = now;
            self.announced = true;
            return Some(Update::new(
                TaskStatus::InProgress,
                self.last_pct,
                writing_message(text, *len),
            ));
        }
        let routine = !matches!(event, AgentEvent::Gate(_) | AgentEvent::Waiting { .. });
        if routine && now.saturating_duration_since(self.last_sent) < PROGRESS_EVERY {
            return None;
        }
        self.last_sent = now;
        self.announced = true;
        let update = match event {
            AgentEvent::Step(step) => {
                let pct = (step.step * 90 / max_steps.max(1)).min(95) as u8;
                let what = match &step.tool {
                    Some(tool) => format!("step {}: called {tool}", step.step),
                    None => format!("step {}: answered", step.step),
                };
                Update {
                    metrics: vec![("step", f64::from(step.step))],
                    ..Update::new(TaskStatus::InProgress, pct, what)
                }
            }
            AgentEvent::Progress {
                message,
                percentage,
            } => Update::new(
                TaskStatus::InProgress,
                percentage.unwrap_or(50).min(99),
                message,
            ),
            AgentEvent::Waiting { message } => Update::new(TaskStatus::InProgress, 10, message),
            AgentEvent::Gate(v) => Update::new(
                TaskStatus::InProgress,
                90,
                if v.passed {
                    format!("gate {} passed", v.gate)
                } else {
                    format!("gate {} failed: {}", v.gate, v.reason)
                },
            ),
            AgentEvent::SkillRecorded { name, .. } => Update::new(
                TaskStatus::InProgress,
                self.last_pct,
                format!("recorded skill: {name}"),
            ),
            // Answered above.
            AgentEvent::Writing { .. } => return None,
        };
        self.last_pct = update.pct;
        Some(update)
    }

    /// Whether an update went: a watcher has seen the task at work.
    pub fn announced(&self) -> bool {
        self.announced
    }
}

/// The message of an update of a reply being written: `writing: ` and the
/// end of its text, `tail`, marked `…` when the text (`len` bytes) is
/// longer (the end is what is new).
pub fn writing_message(tail: &str, len: usize) -> String {
    if len > tail.len() {
        format!("writing: …{tail}")
    } else {
        format!("writing: {tail}")
    }
}

/// The update of a task still running after [`PROGRESS_EVERY`]: it started.
/// One done by then (a tool call) goes straight to its result, so a fast
/// task stores no progress update at all.
pub fn started(task_id: &str, agent_id: &str) -> Update {
    Update::new(
        TaskStatus::InProgress,
        0,
        format!("{task_id} started on {agent_id}"),
    )
}

/// The last update of a task its swarm's cancel stopped.
pub fn stopped(task_id: &str) -> Update {
    Update::new(
        TaskStatus::Cancelled,
        100,
        format!("{task_id} stopped: the swarm was cancelled"),
    )
}

/// What a run that ended submits for `a`, the `delivered`-th delivery,
/// run by `worker_id` from `started_at` to `completed_at`: its outcome for
/// the assignment's attempt and revision, echoing its token, with how many
/// times the assignment reached a worker (`deliveries`: more than one means
/// a worker died or stalled on it before).
pub fn submission(
    a: &TaskAssignment,
    worker_id: &str,
    delivered: i64,
    outcome: AgentOutcome,
    gate_verdicts: Vec<GateVerdict>,
    started_at: DateTime<Utc>,
    completed_at: DateTime<Utc>,
) -> ResultSubmission {
    let mut metrics = outcome.metrics;
    metrics.insert("deliveries".into(), delivered as f64);
    ResultSubmission {
        skills: Default::default(),
        artifacts: artifacts(&outcome.steps),
        token: a.token.clone(),
        task_id: a.task_id.clone(),
        status: outcome.status,
        result: outcome.result,
        attempt: a.attempt,
        revision: a.revision,
        provider: outcome.provider,
        worker_id: worker_id.to_string(),
        started_at,
        completed_at,
        steps: outcome.steps,
        metrics,
        error: outcome.error,
        gate_verdicts,
    }
}

/// The files a run wrote, as its result's `artifacts`: the paths of its
/// `write_file` calls that succeeded, in order, each once.
fn artifacts(steps: &[StepRecord]) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for step in steps {
        if step.is_error || step.tool.as_deref() != Some(<WriteFile as TypedTool>::NAME) {
            continue;
        }
        let path = step
            .arguments
            .as_deref()
            .and_then(|a| serde_json::from_str::<WriteFileArgs>(a).ok())
            .map(|args| args.path);
        if let Some(path) = path
            && !paths.contains(&path)
        {
            paths.push(path);
        }
    }
    paths
}

/// The last update of a task that submitted `s`, at 100 %, with its
/// figures: only for a task a watcher has seen at work (`announced`). A
/// task that ended before it said anything (a tool call) has its result as
/// its only word.
pub fn last_update(s: &ResultSubmission, announced: bool) -> Option<Update> {
    if !announced {
        return None;
    }
    let bytes = s.result.len();
    let elapsed_ms = (s.completed_at - s.started_at).num_milliseconds() as f64;
    let metrics = [("elapsed_ms", elapsed_ms), ("result_bytes", bytes as f64)]
        .into_iter()
        .chain(
            ["input_tokens", "output_tokens", "cost_usd"]
                .into_iter()
                .filter_map(|k| s.metrics.get(k).map(|v| (k, *v))),
        )
        .collect();
    Some(Update {
        metrics,
        ..Update::new(
            s.status,
            100,
            format!("{} {:?} ({bytes} bytes)", s.task_id, s.status),
        )
    })
}

/// The deduplication id of `a`'s result: one per attempt and revision, so
/// a result handed over again after a crash lands once.
pub fn result_id(swarm_id: &str, a: &TaskAssignment) -> String {
    format!(
        "{swarm_id}.{}.a{}.r{}.result",
        a.task_id, a.attempt, a.revision
    )
}

/// The deduplication id of the `Error` that gives `a` up.
pub fn give_up_id(swarm_id: &str, a: &TaskAssignment) -> String {
    format!(
        "{swarm_id}.{}.a{}.r{}.gave-up",
        a.task_id, a.attempt, a.revision
    )
}

/// The question a run that ended with `status` asks a person, if it asks
/// one: then the task waits for the answer instead of submitting.
pub fn question(status: TaskStatus, question: Option<String>) -> Option<String> {
    match (status, question) {
        (TaskStatus::InputRequired, Some(q)) => Some(q),
        _ => None,
    }
}

/// The update that shows a task waiting on a person's answer to `question`.
pub fn asking(swarm_id: &str, task_id: &str, question: &str) -> Update {
    Update::new(
        TaskStatus::InputRequired,
        50,
        format!(
            "question for a person: {question} (answer with: swarm answer {swarm_id} {task_id} \"...\")"
        ),
    )
}

/// What a stored question record says to a task waiting on `question`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Nothing yet (or a record of another question): the wait goes on.
    Waiting,
    /// A person answered: the task goes on with it ([`answered`]).
    Given(String),
    /// The question was closed unanswered, for this reason: the task fails
    /// to finish.
    Closed(String),
}

/// What `record` says to a task waiting on `question`. An answer stands
/// over a close made after it.
pub fn answer(record: InputRecord, question: &str) -> Answer {
    if record.question != question {
        Answer::Waiting
    } else if let Some(answer) = record.answer {
        Answer::Given(answer)
    } else if let Some(why) = record.closed {
        Answer::Closed(why)
    } else {
        Answer::Waiting
    }
}

/// Takes a person's `answer` to the task's `question` into its next round:
/// the model reads it as feedback.
pub fn answered(task: &mut AgentTask, question: &str, answer: &str) {
    task.feedback.push(answer_feedback(question, answer));
}

/// Why a swarm's cancel closes the approval requests and questions its
/// tasks wait on here. The manager's notice of an end says so itself ("the
/// swarm ended: TimedOut"); a person's cancel carries their reason.
pub fn close_reason(reason: &str) -> String {
    match reason.trim() {
        "" => "the swarm was cancelled".to_string(),
        r if r.starts_with(SWARM_ENDED) => r.to_string(),
        r => format!("the swarm was cancelled: {r}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use swarm_common::{ContextRef, WorkerDeploymentPlan};

    fn assignment() -> TaskAssignment {
        TaskAssignment {
            skills_scope: None,
            tasks: Vec::new(),
            child: None,
            task_id: "t1".into(),
            title: "count".into(),
            description: "Count the words".into(),
            persona: WorkerDeploymentPlan {
                name: "w".into(),
                role: "analyst".into(),
                system_prompt: "You count.".into(),
                tools: vec![],
                collaborators: vec![],
                pool: "general".into(),
                a2a_url: None,
                a2a_credential: None,
                skill: None,
            },
            attempt: 2,
            revision: 1,
            feedback: vec![],
            context: vec![],
            max_steps: 10,
            max_attempts: 3,
            max_result_bytes: 4096,
            priority: 0,
            // 2100-01-01: fixed, so that two fixtures are equal.
            deadline: DateTime::from_timestamp(4_102_444_800, 0).unwrap(),
            gates: vec![],
            budget: Default::default(),
            spent_tokens: 0,
            spent_cost_usd: 0.0,
            token: "tok".into(),
            collaborators: Vec::new(),
        }
    }

    fn env(swarm_id: &str, a: TaskAssignment) -> Envelope<TaskAssignment> {
        Envelope::new("manager", "worker", swarm_id, a.task_id.clone().as_str(), a)
    }

    fn step(n: u32, tool: Option<&str>) -> AgentEvent {
        AgentEvent::Step(StepRecord {
            step: n,
            tool: tool.map(Into::into),
            arguments: None,
            observation: String::new(),
            is_error: false,
        })
    }

    fn gate(passed: bool) -> AgentEvent {
        AgentEvent::Gate(GateVerdict {
            gate: "tests".into(),
            passed,
            reason: "2 failed".into(),
            revision: 0,
        })
    }

    fn record(question: &str, answer: Option<&str>, closed: Option<&str>) -> InputRecord {
        InputRecord {
            swarm_id: "s1".into(),
            task_id: "t1".into(),
            question: question.into(),
            asked_by: "w".into(),
            asked_at: Utc::now(),
            answer: answer.map(Into::into),
            answered_by: None,
            answered_at: None,
            closed: closed.map(Into::into),
        }
    }

    #[test]
    fn a_delivery_off_a_work_subject_is_rejected_without_decoding_or_telling_a_manager() {
        let read = read("a2ap.s1.result.t1", || panic!("decoded"));
        let e = read.unwrap_err();
        assert_eq!(e.task, None);
        assert_eq!(e.error.code, ErrorCode::ValidationFailed);
        assert!(e.error.message.contains("not a work subject"), "{e:?}");
    }

    #[test]
    fn an_assignment_its_subject_does_not_name_is_rejected_and_its_manager_told() {
        let subject = "a2ap.work.general.s1.t1";
        let other_task = TaskAssignment {
            task_id: "t2".into(),
            ..assignment()
        };
        for decoded in [env("s1", other_task), env("s2", assignment())] {
            let e = read(subject, || Ok(decoded)).unwrap_err();
            assert_eq!(e.task, Some(("s1".into(), "t1".into())));
            assert!(e.error.message.contains("does not match"), "{e:?}");
        }
        let garbled = ErrorBody::new(ErrorCode::ValidationFailed, "garbled");
        let e = read(subject, || Err(garbled.clone())).unwrap_err();
        assert_eq!(
            (e.task, e.error),
            (Some(("s1".into(), "t1".into())), garbled)
        );
        let ok = read(subject, || Ok(env("s1", assignment()))).unwrap();
        assert_eq!(ok.body, assignment());
        let told = rejection("t1", ErrorBody::new(ErrorCode::ValidationFailed, "x"));
        assert_eq!((told.token.as_str(), told.attempt), ("", None));
    }

    #[test]
    fn only_a_redelivery_is_looked_up_for_a_stored_result() {
        assert!(!redelivered(1));
        assert!(redelivered(2));
    }

    #[test]
    fn a_stored_result_of_this_or_a_later_attempt_and_revision_answers_the_assignment() {
        let a = assignment(); // attempt 2, revision 1
        assert!(answers(2, 1, &a));
        assert!(answers(3, 1, &a), "superseded by a later attempt");
        assert!(answers(2, 2, &a), "superseded by a later revision");
        assert!(!answers(1, 1, &a), "an earlier attempt's result");
        assert!(!answers(3, 0, &a), "an earlier revision's result");
    }

    #[test]
    fn an_answered_assignment_is_acked_not_run_again_however_often_it_came() {
        let a = assignment();
        assert_eq!(delivery(&a, 2, true), Delivery::Answered);
        assert_eq!(delivery(&a, 10, true), Delivery::Answered);
    }

    #[test]
    fn an_assignment_delivered_more_than_its_max_attempts_is_given_up() {
        let a = assignment(); // max_attempts 3
        assert_eq!(delivery(&a, 1, false), Delivery::Work);
        assert_eq!(delivery(&a, 3, false), Delivery::Work);
        let Delivery::GiveUp(e) = delivery(&a, 4, false) else {
            panic!("not given up")
        };
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.contains("delivered 4 times"), "{}", e.message);
        let once = TaskAssignment {
            max_attempts: 0,
            ..assignment()
        };
        assert_eq!(
            delivery(&once, 1, false),
            Delivery::Work,
            "at least one try"
        );
        assert!(matches!(delivery(&once, 2, false), Delivery::GiveUp(_)));
    }

    #[test]
    fn a_give_up_echoes_the_token_and_attempt_under_an_id_of_its_own() {
        let a = assignment();
        let e = give_up(&a, ErrorBody::new(ErrorCode::LimitExceeded, "x"));
        assert_eq!(e.token, "tok");
        assert_eq!((e.task_id.as_deref(), e.attempt), (Some("t1"), Some(2)));
        assert_eq!(give_up_id("s1", &a), "s1.t1.a2.r1.gave-up");
        assert_eq!(result_id("s1", &a), "s1.t1.a2.r1.result");
    }

    #[test]
    fn a_cancelled_swarms_task_stops_before_it_starts_even_past_its_deadline() {
        let a = assignment();
        let late = a.deadline + chrono::Duration::seconds(1);
        assert_eq!(start(&a, true, Utc::now()), Start::Stop);
        assert_eq!(start(&a, true, late), Start::Stop);
    }

    #[test]
    fn a_task_past_its_swarms_deadline_fails_with_a_timeout_instead_of_running() {
        let a = assignment();
        assert_eq!(start(&a, false, a.deadline), Start::Run);
        let Start::Fail(e) = start(&a, false, a.deadline + chrono::Duration::seconds(1)) else {
            panic!("ran past the deadline")
        };
        assert_eq!(e.code, ErrorCode::Timeout);
        let outcome = failed(e.clone(), "offline");
        assert_eq!(outcome.status, TaskStatus::Failed);
        assert_eq!(outcome.error, Some(e));
        assert_eq!(overran(Duration::from_secs(2)).code, ErrorCode::Timeout);
    }

    #[test]
    fn routine_updates_go_at_most_every_50_ms_and_gate_verdicts_always() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(t0);
        let ms = |n| t0 + Duration::from_millis(n);
        assert_eq!(pacer.update(step(1, Some("echo")), 10, ms(1)), None);
        assert!(
            !pacer.announced(),
            "a step right after the start says nothing"
        );
        let gate_update = pacer.update(gate(false), 10, ms(2)).unwrap();
        assert_eq!(gate_update.message, "gate tests failed: 2 failed");
        assert_eq!(gate_update.pct, 90);
        assert!(pacer.announced());
        // The gate's update counts: the next routine one waits 50 ms from it.
        assert_eq!(pacer.update(step(2, None), 10, ms(51)), None);
        let update = pacer.update(step(3, None), 10, ms(52)).unwrap();
        assert_eq!(update.message, "step 3: answered");
        assert_eq!(update.metrics, [("step", 3.0)]);
        assert_eq!(
            pacer.update(gate(true), 10, ms(53)).unwrap().message,
            "gate tests passed"
        );
    }

    #[test]
    fn step_updates_count_up_to_95_percent_and_the_agents_own_below_100() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(t0);
        let mut at = t0;
        let mut next = |event, max_steps| {
            at += PROGRESS_EVERY;
            pacer.update(event, max_steps, at).unwrap()
        };
        assert_eq!(next(step(5, Some("echo")), 10).pct, 45);
        assert_eq!(
            next(step(5, Some("echo")), 10).message,
            "step 5: called echo"
        );
        assert_eq!(next(step(12, None), 10).pct, 95);
        assert_eq!(next(step(1, None), 0).pct, 90, "max_steps 0 counts as 1");
        let said = |percentage| AgentEvent::Progress {
            message: "half way".into(),
            percentage,
        };
        assert_eq!(next(said(None), 10).pct, 50);
        assert_eq!(next(said(Some(100)), 10).pct, 99);
        let own = next(said(Some(30)), 10);
        assert_eq!((own.pct, own.message.as_str()), (30, "half way"));
    }

    #[test]
    fn a_reply_being_written_is_told_a_few_times_a_second_at_the_last_percentage() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(t0);
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(
            pacer
                .update(step(5, Some("echo")), 10, at(100))
                .unwrap()
                .pct,
            45
        );
        let u = pacer
            .update(AgentEvent::writing("The answer"), 10, at(110))
            .expect("the first goes");
        assert_eq!((u.pct, u.message.as_str()), (45, "writing: The answer"));
        // Text that grows within WRITING_EVERY waits for the next update.
        assert_eq!(
            pacer.update(AgentEvent::writing("The answer is"), 10, at(200)),
            None
        );
        let long = format!("{}end", "x".repeat(2000));
        let u = pacer
            .update(AgentEvent::writing(&long), 10, at(400))
            .expect("after 250 ms");
        assert!(u.message.starts_with("writing: …x") && u.message.ends_with("end"));
        assert!(u.message.len() < swarm_agent::WRITING_TAIL_BYTES + 20);
        // Text does not hold back a step, nor a step the text.
        assert!(pacer.update(step(6, None), 10, at(460)).is_some());
        assert!(
            pacer
                .update(AgentEvent::writing("more"), 10, at(660))
                .is_some()
        );
    }

    #[test]
    fn a_wait_for_the_model_limits_is_told_at_once() {
        let t0 = Instant::now();
        let mut pacer = Pacer::new(t0);
        // Within the pacing interval a routine step is held back...
        assert_eq!(pacer.update(step(1, None), 10, t0), None);
        // ...but a wait is told, however soon it comes.
        let waiting = AgentEvent::Waiting {
            message: "waiting for the model's limits (paused)".into(),
        };
        let u = pacer.update(waiting, 10, t0).expect("told");
        assert_eq!(u.message, "waiting for the model's limits (paused)");
        assert_eq!(u.status, TaskStatus::InProgress);
        assert!(pacer.announced());
    }

    #[test]
    fn a_task_that_said_nothing_has_its_result_as_its_only_word() {
        let a = assignment();
        let now = Utc::now();
        let outcome = AgentOutcome {
            status: TaskStatus::Completed,
            result: "42".into(),
            ..failed(ErrorBody::new(ErrorCode::Internal, "unused"), "offline")
        };
        let s = submission(&a, "w1", 1, outcome, vec![], now, now);
        assert_eq!(last_update(&s, false), None);
    }

    #[test]
    fn a_task_a_watcher_saw_at_work_ends_with_an_update_at_100_percent() {
        let a = assignment();
        let started_at = Utc::now();
        let mut outcome = failed(ErrorBody::new(ErrorCode::Internal, "boom"), "offline");
        outcome.result = "abc".into();
        outcome.metrics.insert("input_tokens".into(), 7.0);
        let s = submission(
            &a,
            "w1",
            1,
            outcome,
            vec![],
            started_at,
            started_at + chrono::Duration::milliseconds(120),
        );
        let last = last_update(&s, true).unwrap();
        assert_eq!((last.status, last.pct), (TaskStatus::Failed, 100));
        assert_eq!(last.message, "t1 Failed (3 bytes)");
        assert_eq!(
            last.metrics,
            [
                ("elapsed_ms", 120.0),
                ("result_bytes", 3.0),
                ("input_tokens", 7.0)
            ]
        );
    }

    #[test]
    fn a_submission_answers_its_attempt_and_revision_echoes_the_token_and_counts_deliveries() {
        let a = assignment();
        let now = Utc::now();
        let verdict = GateVerdict {
            gate: "g".into(),
            passed: true,
            reason: String::new(),
            revision: 1,
        };
        let mut outcome = failed(ErrorBody::new(ErrorCode::Internal, "boom"), "offline");
        outcome.metrics.insert("steps".into(), 2.0);
        let s = submission(&a, "w1", 3, outcome, vec![verdict.clone()], now, now);
        assert_eq!(s.token, "tok");
        assert_eq!((s.task_id.as_str(), s.attempt, s.revision), ("t1", 2, 1));
        assert_eq!(
            (s.worker_id.as_str(), s.provider.as_str()),
            ("w1", "offline")
        );
        assert_eq!(s.status, TaskStatus::Failed);
        assert_eq!(s.metrics.get("deliveries"), Some(&3.0));
        assert_eq!(s.metrics.get("steps"), Some(&2.0));
        assert_eq!(s.gate_verdicts, [verdict]);
        assert!(s.error.is_some());
    }

    #[test]
    fn inline_results_are_used_and_the_others_read_in_order() {
        let dep = |id: &str, seq, result: Option<&str>| ContextRef {
            task_id: id.into(),
            title: id.into(),
            result_seq: seq,
            result: result.map(Into::into),
        };
        let a = TaskAssignment {
            context: vec![
                dep("a", 10, None),
                dep("b", 11, Some("inline")),
                dep("c", 12, None),
            ],
            ..assignment()
        };
        assert_eq!(results_to_read(&a), [10, 12]);
        let items = context(&a, ["ra".to_string(), "rc".to_string()]).unwrap();
        let results: Vec<&str> = items.iter().map(|i| i.result.as_str()).collect();
        assert_eq!(results, ["ra", "inline", "rc"]);
        assert_eq!(context(&a, ["ra".to_string()]), None, "a result not read");
    }

    #[test]
    fn only_the_first_round_of_a_first_delivery_skips_the_journal() {
        assert!(!replays_journal(1, 0));
        assert!(replays_journal(1, 1), "a round after an answer");
        assert!(replays_journal(2, 0), "a redelivery");
    }

    #[test]
    fn a_run_that_asks_a_question_waits_for_a_person_and_any_other_is_done() {
        let q = || Some("which file?".to_string());
        assert_eq!(
            question(TaskStatus::InputRequired, q()).as_deref(),
            Some("which file?")
        );
        assert_eq!(question(TaskStatus::InputRequired, None), None);
        assert_eq!(question(TaskStatus::Completed, q()), None);
        let update = asking("s1", "t1", "which file?");
        assert_eq!(update.status, TaskStatus::InputRequired);
        assert!(update.message.contains("swarm answer s1 t1"), "{update:?}");
    }

    #[test]
    fn an_answer_to_the_question_resumes_the_task_and_a_close_ends_its_wait() {
        let q = "which file?";
        assert_eq!(answer(record(q, None, None), q), Answer::Waiting);
        assert_eq!(
            answer(record("another?", Some("x"), None), q),
            Answer::Waiting
        );
        assert_eq!(
            answer(record(q, Some("notes.txt"), None), q),
            Answer::Given("notes.txt".into())
        );
        assert_eq!(
            answer(record(q, Some("notes.txt"), Some("late")), q),
            Answer::Given("notes.txt".into()),
            "an answer stands"
        );
        assert_eq!(
            answer(record(q, None, Some("the swarm was cancelled")), q),
            Answer::Closed("the swarm was cancelled".into())
        );
        let mut task = AgentTask {
            task_id: "t1".into(),
            title: "count".into(),
            description: "Count".into(),
            persona: assignment().persona,
            context: vec![],
            feedback: vec![],
            max_steps: 8,
            max_result_bytes: 4096,
        };
        answered(&mut task, q, "notes.txt");
        assert_eq!(task.feedback, [answer_feedback(q, "notes.txt")]);
    }

    #[test]
    fn a_cancel_closes_waits_with_the_persons_reason_or_the_managers_notice() {
        assert_eq!(close_reason("  "), "the swarm was cancelled");
        assert_eq!(close_reason("enough"), "the swarm was cancelled: enough");
        let ended = swarm_common::swarm_ended(swarm_common::SwarmStatus::TimedOut);
        assert_eq!(close_reason(&ended), ended);
        let stop = stopped("t1");
        assert_eq!((stop.status, stop.pct), (TaskStatus::Cancelled, 100));
        assert_eq!(started("t1", "w1").message, "t1 started on w1");
    }

    #[test]
    fn a_context_too_large_is_cut_to_fair_shares_and_says_so() {
        let item = |id: &str, n: usize| ContextItem {
            task_id: id.into(),
            title: id.into(),
            result: "é".repeat(n / 2),
        };
        let mut small = vec![item("a", 100), item("b", 100)];
        bound_context(&mut small, 1000);
        assert_eq!(small[0].result.len(), 100, "what fits is untouched");

        let mut items = vec![item("small", 100), item("big", 5000), item("bigger", 9000)];
        bound_context(&mut items, 2100);
        assert_eq!(
            items[0].result.len(),
            100,
            "a result under its share stays whole"
        );
        for c in &items[1..] {
            assert!(c.result.len() <= 1000, "{}", c.result.len());
            assert!(
                c.result.ends_with("bytes shown]"),
                "{}",
                &c.result[c.result.len() - 40..]
            );
        }
        let total: usize = items.iter().map(|c| c.result.len()).sum();
        assert!(total <= 2100, "{total}");

        let mut many: Vec<ContextItem> = (0..1000)
            .map(|k| item(&format!("c{k}"), 64 * 1024))
            .collect();
        bound_context(&mut many, MAX_CONTEXT_BYTES);
        let total: usize = many.iter().map(|c| c.result.len()).sum();
        assert!(total <= MAX_CONTEXT_BYTES, "{total}");
    }
}
