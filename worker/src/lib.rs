//! The Swarm worker: a generic executor in a pool. Replicas of a pool share
//! one durable pull consumer; each assignment carries the persona to play.
//! For each one the worker resolves its dependencies' results, runs the
//! agent loop (think, act with tools, observe) with its provider, streams
//! `ProgressUpdate`s, and hands its `ResultSubmission` to the stream. The
//! assignment is acked once the result is stored: by the manager, which
//! receives the result only then (the worker does not wait for the server's
//! answer), or, should the assignment come back first, by the worker that
//! finds its result stored and does not run the task again.

pub mod approvals;
pub mod cancels;
pub mod journal;
pub mod memory;
pub mod tools;
pub mod waits;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{
    self, AckKind,
    consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull},
};
use chrono::Utc;
use futures::StreamExt;
use swarm_agent::{
    AgentTask, Budget, ContextItem,
    agent_loop::{
        AgentEvent, AgentOutcome, RunOptions, SyntheticTools, answer_feedback, run_agent,
    },
    gates::GateOptions,
    provider::{Provider, ProviderConfig},
    tools::{MemoryStore, ToolArgs, ToolRegistry, typed},
};
use swarm_common::{
    Control, Envelope, ErrorBody, ErrorCode, ErrorMessage, ProgressUpdate, ResultSubmission,
    TaskAssignment, TaskStatus,
    approval::{DeskReply, DeskRequest, InputRecord},
    subjects::{self, Subject},
};
use swarm_runtime::{Infra, NatsArgs, desk, wire};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tracing::{Instrument, info, info_span, warn};

/// How a worker replica runs.
#[derive(Clone)]
pub struct WorkerConfig {
    /// NATS connection.
    pub nats: NatsArgs,
    /// This replica's agent id.
    pub agent_id: String,
    /// The pool it serves.
    pub pool: String,
    /// Root folder of the file tools; paths outside it are refused.
    pub workspace_root: PathBuf,
    /// Tasks run at once.
    pub concurrency: usize,
    /// How long to finish in-flight tasks after shutdown is asked for.
    pub drain_timeout: Duration,
    /// Copies of each stream and bucket.
    pub replicas: usize,
    /// How long the server waits for an ack (extended while a task runs).
    pub ack_wait: Duration,
    /// The longest one task may run (start to close) before it fails with a timeout.
    pub task_timeout: Duration,
    /// The model the agent loop talks to.
    pub provider: ProviderConfig,
    /// Which optional tools are on (write, fetch, shell) and whether command gates may run.
    pub tool_args: ToolArgs,
    /// How long a destructive tool call waits for a person's approval.
    pub approval_wait: Duration,
}

/// The workspace of a worker that is not given one: a folder of its own
/// under the user's data directory (`$XDG_DATA_HOME/swarm/workspace`, else
/// `$HOME/.local/share/swarm/workspace`, else one in the temporary
/// directory), so that a worker started from `/` or a home directory does
/// not hand those to its file tools.
pub fn default_workspace() -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let data = var("XDG_DATA_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".local").join("share")))
        .unwrap_or_else(std::env::temp_dir);
    data.join("swarm").join("workspace")
}

impl WorkerConfig {
    /// Defaults for a worker of pool `general`.
    pub fn new(nats: NatsArgs, agent_id: impl Into<String>) -> Self {
        Self {
            nats,
            agent_id: agent_id.into(),
            pool: swarm_common::default_pool(),
            workspace_root: default_workspace(),
            concurrency: 16,
            drain_timeout: Duration::from_secs(10),
            replicas: 1,
            ack_wait: Duration::from_secs(30),
            task_timeout: Duration::from_secs(600),
            provider: ProviderConfig::offline(),
            tool_args: ToolArgs::default(),
            approval_wait: Duration::from_secs(600),
        }
    }
}

struct Ctx {
    infra: Infra,
    /// The step journal's bucket, shared by every task's journal.
    journal: Arc<jetstream::kv::Store>,
    a2ap: jetstream::stream::Stream,
    agent_id: String,
    /// The NATS user the desk is asked as.
    desk_user: String,
    /// The worker's tools, those with side effects journaled.
    tools: ToolRegistry,
    provider: Arc<dyn Provider>,
    /// The pool's durable consumer, for the redelivery metric.
    consumer: String,
    gate_options: GateOptions,
    ack_wait: Duration,
    task_timeout: Duration,
    /// Per swarm, a flag its running tasks watch; set when the swarm is cancelled.
    cancels: std::sync::Mutex<cancels::Cancels>,
    /// The approver, whose open requests a swarm's end closes.
    approver: Arc<approvals::NatsApprover>,
    /// Per swarm, the tasks whose questions wait for a person here.
    questions: waits::Waits,
}

impl Ctx {
    /// The cancel flag of a swarm's tasks.
    fn cancel_flag(&self, swarm_id: &str) -> watch::Receiver<bool> {
        match self.cancels.lock() {
            Ok(mut c) => c.flag(swarm_id),
            Err(_) => watch::channel(false).1,
        }
    }

    /// Stops the swarm's running tasks and refuses its queued ones.
    fn cancel(&self, swarm_id: &str) {
        if let Ok(mut c) = self.cancels.lock() {
            c.cancel(swarm_id);
        }
    }

    /// Forgets a swarm's flag once no task watches it (cancelled flags are kept).
    fn release(&self, swarm_id: &str) {
        if let Ok(mut c) = self.cancels.lock() {
            c.release(swarm_id);
        }
    }
}

/// Listens for control messages: a cancel (from a person, or from the
/// manager when a swarm ends before its tasks do) stops the swarm's tasks
/// and closes the approval requests and questions they wait on here.
async fn watch_control(ctx: Arc<Ctx>, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        if let Ok(env) = wire::decode::<Control>(msg.headers.as_ref(), &msg.payload)
            && let Control::Cancel { reason } = env.body
        {
            info!(swarm_id = %env.swarm_id, "swarm cancelled; stopping its tasks");
            // Taken before the tasks stop, as their waits leave the sets.
            let approvals = ctx.approver.open_requests(&env.swarm_id);
            let questions = ctx.questions.of(&env.swarm_id);
            ctx.cancel(&env.swarm_id);
            if approvals.is_empty() && questions.is_empty() {
                continue;
            }
            let ctx = ctx.clone();
            // The manager's notice of an end says so itself ("the swarm
            // ended: TimedOut"); a person's cancel carries their reason.
            let why = match reason.trim() {
                "" => "the swarm was cancelled".to_string(),
                r if r.starts_with(swarm_common::SWARM_ENDED) => r.to_string(),
                r => format!("the swarm was cancelled: {r}"),
            };
            tokio::spawn(async move {
                ctx.approver.close(&approvals, &why).await;
                for task_id in questions {
                    close_question(&ctx, &env.swarm_id, &task_id, &why).await;
                }
            });
        }
    }
}

/// Runs a worker replica until `shutdown` resolves.
pub async fn run(config: WorkerConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    anyhow::ensure!(
        subjects::is_token(&config.pool),
        "pool {:?} must be letters, digits, '-' or '_'",
        config.pool
    );
    std::fs::create_dir_all(&config.workspace_root)
        .with_context(|| format!("creating the workspace {}", config.workspace_root.display()))?;
    let root = std::fs::canonicalize(&config.workspace_root)
        .with_context(|| format!("workspace root {}", config.workspace_root.display()))?;
    swarm_runtime::health::starting();
    let client = config.nats.connect(&config.agent_id).await?;
    let infra = Infra::open(&client, config.replicas).await?;
    let a2ap = infra.a2ap().await?;
    let consumer: PullConsumer = infra
        .work()
        .await?
        .create_consumer(pull::Config {
            durable_name: Some(subjects::worker_consumer(&config.pool)),
            description: Some(format!("Workers of pool {}", config.pool)),
            filter_subject: subjects::work_filter(&config.pool),
            ack_policy: AckPolicy::Explicit,
            ack_wait: config.ack_wait,
            deliver_policy: DeliverPolicy::All,
            // A backstop: a worker gives an assignment up (an `Error` to the
            // manager) once it was delivered more than its `max_attempts`.
            max_deliver: 100,
            ..Default::default()
        })
        .await
        .context("creating the pool's consumer")?;
    let concurrency = config.concurrency.max(1);
    // Pull no more than we can start, so nothing waits in a local buffer while its ack timer runs.
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(concurrency)
        .messages()
        .await
        .context("pulling assignments")?;
    let desk_user = swarm_runtime::desk::user_or(config.nats.user.as_deref(), "worker");
    let approver = Arc::new(approvals::NatsApprover::new(
        infra.approvals.clone(),
        infra.js.clone(),
        desk_user.clone(),
        config.agent_id.clone(),
        config.approval_wait,
    ));
    let tools = {
        let memory: Arc<dyn MemoryStore> = Arc::new(memory::KvMemory::new(infra.memory.clone()));
        let mut tools =
            ToolRegistry::with_config(root.clone(), &config.tool_args.tools_config(Some(memory)))
                .with_approver(approver.clone());
        tools.register(typed(tools::Sleep));
        journal::journaled_tools(&tools)
    };
    let ctx = Arc::new(Ctx {
        consumer: subjects::worker_consumer(&config.pool),
        journal: Arc::new(infra.journal.clone()),
        infra: infra.clone(),
        a2ap,
        agent_id: config.agent_id.clone(),
        desk_user,
        tools,
        provider: config.provider.build().context("building the provider")?,
        gate_options: config.tool_args.gate_options(&root),
        ack_wait: config.ack_wait,
        task_timeout: config.task_timeout,
        cancels: Default::default(),
        approver,
        questions: Default::default(),
    });
    let control = client
        .subscribe(subjects::control("*"))
        .await
        .context("subscribing to control messages")?;
    let control_watch = tokio::spawn(watch_control(ctx.clone(), control));
    info!(agent_id = %config.agent_id, pool = %config.pool, workspace = %root.display(), provider = ctx.provider.name(), "worker ready");
    swarm_runtime::health::started();

    let permits = Arc::new(Semaphore::new(concurrency));
    let mut running = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let msg = tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = running.join_next(), if !running.is_empty() => { drop(permit); continue; }
            next = messages.next() => match next {
                None => break,
                Some(Err(e)) => {
                    let fresh = consumer.stream().max_messages_per_batch(concurrency).messages();
                    if let Some(fresh) = swarm_runtime::retry::pull_again("assignments", &e, fresh).await {
                        messages = fresh;
                    }
                    continue;
                }
                Some(Ok(m)) => m,
            },
        };
        let ctx = ctx.clone();
        let span = info_span!("task", subject = %msg.subject);
        running.spawn(
            async move {
                // Boxed: a task's future holds the whole agent loop (tens of
                // KiB), and the spawn would move it through every layer.
                Box::pin(handle(&ctx, msg)).await;
                drop(permit);
            }
            .instrument(span),
        );
        while running.try_join_next().is_some() {}
    }
    info!("worker draining");
    swarm_runtime::health::stopping();
    control_watch.abort();
    swarm_runtime::shutdown::drain(&mut running, config.drain_timeout, "tasks").await;
    client.drain().await.ok();
    Ok(())
}

async fn handle(ctx: &Ctx, msg: jetstream::Message) {
    // Every delivery of a pull consumer names its ack subject; without one
    // nothing could be acked, rejected or handed over.
    let Some(ack_subject) = msg.reply.clone() else {
        warn!(subject = %msg.subject, "a delivery without an ack subject; ignored");
        return;
    };
    let (swarm_id, task_id) = match Subject::parse(&msg.subject) {
        Some(Subject::Work {
            swarm_id, task_id, ..
        }) => (swarm_id.to_string(), task_id.to_string()),
        _ => {
            let e = ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!("{} is not a work subject", msg.subject),
            );
            reject(ctx, &msg, None, e).await;
            return;
        }
    };
    let env = match wire::decode::<TaskAssignment>(msg.headers.as_ref(), &msg.payload) {
        Ok(env) if env.swarm_id == swarm_id && env.body.task_id == task_id => env,
        Ok(_) => {
            let e = ErrorBody::new(
                ErrorCode::ValidationFailed,
                "the assignment's swarm or task id does not match its subject",
            );
            reject(ctx, &msg, Some((&swarm_id, &task_id)), e).await;
            return;
        }
        Err(e) => {
            reject(ctx, &msg, Some((&swarm_id, &task_id)), e).await;
            return;
        }
    };
    // A task whose worker died on it (or never finished in time) at every
    // delivery fails instead of killing workers forever.
    let delivered = msg.info().map(|i| i.delivered).unwrap_or(1);
    if delivered > 1 {
        swarm_runtime::metrics::redelivered(&ctx.consumer);
        swarm_runtime::metrics::takeover("task");
        if answered(ctx, &env).await {
            if let Err(e) = msg.ack().await {
                warn!(error = %e, "ack not sent; the assignment comes back and its result is found again");
            }
            return;
        }
    }
    if delivered > i64::from(env.body.max_attempts.max(1)) {
        let error = ErrorBody::new(
            ErrorCode::LimitExceeded,
            format!(
                "task {task_id} was delivered {delivered} times without a result (at most {} tries): its workers died or stalled on it",
                env.body.max_attempts
            ),
        );
        give_up(ctx, &msg, &env, error).await;
        return;
    }
    // Keep the assignment ours while the agent works, however long a step takes.
    let outcome = {
        let every = ctx.ack_wait / 3;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let work = work(ctx, &env, delivered, &ack_subject);
        tokio::pin!(work);
        loop {
            tokio::select! {
                // The work first: a tool call is often done in its first
                // poll, and then no timer is armed for it at all (arming one
                // wakes the runtime's driver, a system call and an extra
                // turn of the event loop).
                biased;
                outcome = &mut work => break outcome,
                _ = ticks.tick() => {
                    let _ = msg.ack_with(AckKind::Progress).await;
                }
            }
        }
    };
    match outcome {
        Ok(Finish::AckedByManager) => {}
        Ok(Finish::AckHere) => {
            if let Err(e) = msg.ack().await {
                warn!(error = %e, "ack not sent; a redelivery replays the task from its journal, and its result lands once");
            }
        }
        Err(e) => {
            warn!(
                error = format!("{e:#}"),
                "task not finished; it will be redelivered"
            );
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
        }
    }
}

/// Fails a task for good: tells the manager with an `Error` and stops redelivery.
async fn give_up(
    ctx: &Ctx,
    msg: &jetstream::Message,
    env: &Envelope<TaskAssignment>,
    error: ErrorBody,
) {
    warn!(swarm_id = %env.swarm_id, task_id = %env.body.task_id, reason = %error.message, "giving up on task");
    let report = Envelope::new(
        ctx.agent_id.as_str(),
        env.sender_agent.as_str(),
        env.swarm_id.as_str(),
        env.body.task_id.as_str(),
        ErrorMessage {
            token: env.body.token.clone(),
            task_id: Some(env.body.task_id.clone()),
            attempt: Some(env.body.attempt),
            error,
        },
    );
    let msg_id = format!(
        "{}.{}.a{}.r{}.gave-up",
        env.swarm_id, env.body.task_id, env.body.attempt, env.body.revision
    );
    match wire::publish(
        &ctx.infra.js,
        subjects::error(&env.swarm_id),
        &report,
        Some(&msg_id),
    )
    .await
    {
        Ok(_) => {
            let _ = msg.ack_with(AckKind::Term).await;
        }
        Err(e) => {
            warn!(error = %e, "cannot report the failure; will retry");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
        }
    }
}

/// An assignment that can never run: tell the manager (so the task fails
/// rather than waits) and keep a dead letter with the reason.
async fn reject(ctx: &Ctx, msg: &jetstream::Message, task: Option<(&str, &str)>, error: ErrorBody) {
    if let Some((swarm_id, task_id)) = task {
        let env = Envelope::new(
            ctx.agent_id.as_str(),
            "manager",
            swarm_id,
            task_id,
            ErrorMessage {
                token: String::new(),
                task_id: Some(task_id.to_string()),
                attempt: None,
                error: error.clone(),
            },
        );
        if let Err(e) = wire::publish(&ctx.infra.js, subjects::error(swarm_id), &env, None).await {
            warn!(error = %e, "cannot report the bad assignment; will retry");
            let _ = msg
                .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                .await;
            return;
        }
    }
    wire::reject(&ctx.infra.js, "worker", msg, error, &ctx.agent_id).await;
}

/// Least time between two routine progress updates of a task (steps and the
/// agent's own reports; gate verdicts and the end always go), and how long a
/// task runs before it announces that it started.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);

async fn progress(
    ctx: &Ctx,
    env: &Envelope<TaskAssignment>,
    status: TaskStatus,
    pct: u8,
    message: String,
    metrics: Vec<(&str, f64)>,
) {
    let a = &env.body;
    let update = Envelope::new(
        ctx.agent_id.as_str(),
        env.sender_agent.as_str(),
        env.swarm_id.as_str(),
        a.task_id.as_str(),
        ProgressUpdate {
            task_id: a.task_id.clone(),
            status,
            progress_percentage: pct,
            message,
            attempt: a.attempt,
            revision: a.revision,
            metrics: metrics
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        },
    );
    // Progress is advisory: stored without an ack.
    if let Err(e) = wire::post(
        &ctx.infra.js,
        subjects::progress(&env.swarm_id, &a.task_id),
        &update,
    )
    .await
    {
        warn!(error = %e, "progress update not sent");
    }
}

/// The dependencies' results: those the manager sent along, and the others
/// read from the stream.
async fn context_items(ctx: &Ctx, a: &TaskAssignment) -> anyhow::Result<Vec<ContextItem>> {
    let seqs: Vec<u64> = a
        .context
        .iter()
        .filter(|c| c.result.is_none())
        .map(|c| c.result_seq)
        .collect();
    let mut read = wire::read_results(&ctx.a2ap, &seqs)
        .await
        .context("reading the results of the dependencies")?
        .into_iter();
    let mut items = Vec::with_capacity(a.context.len());
    for c in &a.context {
        let result = match &c.result {
            Some(text) => text.clone(),
            None => read
                .next()
                .map(|sub| sub.result)
                .context("a dependency's result was not read")?,
        };
        items.push(ContextItem {
            task_id: c.task_id.clone(),
            title: c.title.clone(),
            result,
        });
    }
    Ok(items)
}

/// A task counted as in flight for the metrics until it finishes; one that
/// ends any other way (cancelled, an error) is counted as `stopped`.
struct InFlight {
    started: std::time::Instant,
    status: Option<&'static str>,
}

impl InFlight {
    fn start() -> Self {
        swarm_runtime::metrics::task_started();
        Self {
            started: std::time::Instant::now(),
            status: None,
        }
    }

    fn finish(&mut self, status: TaskStatus) {
        // The label values as they always were: the status's name in lower case.
        self.status = Some(match status {
            TaskStatus::Pending => "pending",
            TaskStatus::Assigned => "assigned",
            TaskStatus::InProgress => "inprogress",
            TaskStatus::InputRequired => "inputrequired",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        });
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let status = self.status.unwrap_or("stopped");
        swarm_runtime::metrics::task_finished(status, self.started.elapsed().as_secs_f64());
    }
}

/// Runs the agent loop through the step journal, and through as many rounds
/// as the task has questions for a person: a question parks the task
/// (`InputRequired`) until `swarm answer` gives the answer, which goes back
/// to the model in the next round.
async fn run_rounds(
    ctx: &Ctx,
    env: &Envelope<TaskAssignment>,
    mut task: AgentTask,
    delivered: i64,
    events: &mpsc::UnboundedSender<AgentEvent>,
) -> anyhow::Result<(AgentOutcome, Vec<swarm_common::GateVerdict>)> {
    let a = &env.body;
    let mut round = 0;
    let mut verdicts = Vec::new();
    loop {
        let journal = journal::Journal::open(
            ctx.journal.clone(),
            &env.swarm_id,
            &a.task_id,
            a.attempt,
            a.revision,
            round,
            !(delivered == 1 && round == 0),
        )
        .await
        .context("opening the step journal")?;
        // A deterministic provider's replies are asked for again on a
        // replay: as cheap as reading them, and one store round trip less a step.
        let provider: Arc<dyn Provider> = if ctx.provider.deterministic() {
            ctx.provider.clone()
        } else {
            Arc::new(journal::JournaledProvider::new(
                ctx.provider.clone(),
                journal.clone(),
            ))
        };
        let options = RunOptions {
            budget: Budget {
                max_tokens: a.budget.max_tokens,
                max_cost_usd: a.budget.max_cost_usd,
                spent_tokens: a.spent_tokens,
                spent_cost_usd: a.spent_cost_usd,
            },
            gates: a.gates.clone(),
            gate_options: ctx.gate_options.clone(),
            revision: a.revision,
            swarm_id: Some(env.swarm_id.clone()),
            synthetic: SyntheticTools {
                request_input: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let run = journal::with_journal(
            journal.clone(),
            Box::pin(run_agent(
                provider.as_ref(),
                &ctx.tools,
                &task,
                &options,
                Some(events),
            )),
        )
        .await;
        let mut outcome = run.outcome;
        outcome
            .metrics
            .insert("journal_replayed".into(), journal.replayed() as f64);
        outcome
            .metrics
            .insert("journal_recorded".into(), journal.recorded() as f64);
        verdicts.extend(run.gate_verdicts);
        let question = match (outcome.status, run.question) {
            (TaskStatus::InputRequired, Some(q)) => q,
            _ => return Ok((outcome, verdicts)),
        };
        ask(ctx, &env.swarm_id, &a.task_id, &question).await?;
        let _open = ctx.questions.enter(&env.swarm_id, &a.task_id);
        progress(
            ctx,
            env,
            TaskStatus::InputRequired,
            50,
            format!(
                "question for a person: {question} (answer with: swarm answer {} {} \"...\")",
                env.swarm_id, a.task_id
            ),
            vec![],
        )
        .await;
        let answer = wait_for_answer(ctx, &env.swarm_id, &a.task_id, &question).await?;
        info!(swarm_id = %env.swarm_id, task_id = %a.task_id, "question answered; going on");
        task.feedback.push(answer_feedback(&question, &answer));
        round += 1;
    }
}

/// Records the task's question (through the desk, in the `inputs` bucket),
/// where `swarm answer` finds it. Done before the question is announced, so
/// a person who answers at once finds it there.
async fn ask(ctx: &Ctx, swarm_id: &str, task_id: &str, question: &str) -> anyhow::Result<()> {
    let record = InputRecord {
        swarm_id: swarm_id.to_string(),
        task_id: task_id.to_string(),
        question: question.to_string(),
        asked_by: ctx.agent_id.clone(),
        asked_at: Utc::now(),
        answer: None,
        answered_by: None,
        answered_at: None,
        closed: None,
    };
    match ask_desk(ctx, DeskRequest::AskQuestion { record })
        .await
        .context("storing the question")?
    {
        DeskReply::Question(_) => Ok(()),
        DeskReply::Refused(e) => anyhow::bail!("the question was refused: {}", e.message),
        other => anyhow::bail!("the desk answered {other:?}"),
    }
}

/// How long a worker keeps asking the desk while no boss answers.
const DESK_PATIENCE: Duration = Duration::from_secs(30);

/// Sends `request` to the boss's desk as this worker's user.
async fn ask_desk(
    ctx: &Ctx,
    request: DeskRequest,
) -> Result<DeskReply, swarm_runtime::RuntimeError> {
    desk::call(
        &ctx.infra.js.client(),
        &ctx.desk_user,
        &request,
        DESK_PATIENCE,
    )
    .await
}

/// Closes a question that is still unanswered, with `reason` (an answer
/// given meanwhile stands).
async fn close_question(ctx: &Ctx, swarm_id: &str, task_id: &str, reason: &str) {
    let request = DeskRequest::CloseQuestion {
        swarm_id: swarm_id.to_owned(),
        task_id: task_id.to_owned(),
        reason: reason.to_owned(),
    };
    match ask_desk(ctx, request).await {
        Ok(DeskReply::Question(r)) if r.closed.as_deref() == Some(reason) => {
            info!(%swarm_id, %task_id, reason, "question closed");
        }
        Ok(_) => {}
        Err(e) => warn!(%swarm_id, %task_id, error = %e, "cannot close the question"),
    }
}

/// Waits for the answer to the question stored by [`ask`].
async fn wait_for_answer(
    ctx: &Ctx,
    swarm_id: &str,
    task_id: &str,
    question: &str,
) -> anyhow::Result<String> {
    let key = format!("{swarm_id}.{task_id}");
    let mut watch = ctx
        .infra
        .inputs
        .watch_with_history(&key)
        .await
        .context("waiting for the answer")?;
    while let Some(entry) = watch.next().await {
        let entry = entry.context("waiting for the answer")?;
        let Ok(r) = swarm_common::Codec::MsgPack.decode::<InputRecord>(&entry.value) else {
            continue;
        };
        if r.question != question {
            continue;
        }
        if let Some(answer) = r.answer {
            return Ok(answer);
        }
        if let Some(why) = r.closed {
            anyhow::bail!("the question was closed: {why}");
        }
    }
    anyhow::bail!("the wait for an answer ended without one")
}

/// How a task that ran to its end leaves its assignment.
enum Finish {
    /// Its result was handed over naming the assignment: the manager acks it.
    AckedByManager,
    /// Its swarm was cancelled and nothing went to the manager: the worker acks it.
    AckHere,
}

/// Whether a redelivered assignment is already answered: its worker handed
/// over a result (stored, or this attempt was superseded by a newer one)
/// and nobody acked the assignment since, because no manager was running
/// within its `ack_wait` or the ack was lost. Its work is not done again.
async fn answered(ctx: &Ctx, env: &Envelope<TaskAssignment>) -> bool {
    let a = &env.body;
    match wire::last_result(&ctx.a2ap, &subjects::result(&env.swarm_id, &a.task_id)).await {
        // Attempts and revisions only grow: a result no older in either
        // answers this assignment or one that superseded it.
        Ok(Some((seq, r))) if r.attempt >= a.attempt && r.revision >= a.revision => {
            info!(swarm_id = %env.swarm_id, task_id = %a.task_id, seq, attempt = r.attempt, revision = r.revision, "assignment came back answered: its result is stored; not run again");
            true
        }
        Ok(_) => false,
        Err(e) => {
            // Not knowing costs a second run at most, whose result lands once.
            warn!(error = %e, "could not look for a stored result; running the task");
            false
        }
    }
}

async fn work(
    ctx: &Ctx,
    env: &Envelope<TaskAssignment>,
    delivered: i64,
    ack_subject: &str,
) -> anyhow::Result<Finish> {
    let a = &env.body;
    let started_at = Utc::now();
    let mut in_flight = InFlight::start();
    info!(swarm_id = %env.swarm_id, task_id = %a.task_id, attempt = a.attempt, revision = a.revision, "task started");
    let failed = |code: ErrorCode, message: String| {
        let outcome = AgentOutcome {
            status: TaskStatus::Failed,
            result: String::new(),
            steps: Vec::new(),
            metrics: Default::default(),
            error: Some(ErrorBody::new(code, message)),
            provider: ctx.provider.name().to_string(),
        };
        (outcome, Vec::new())
    };
    // Whether a watcher has seen this task at work: then it also gets a
    // last progress update at 100 %. A task that ended before it said
    // anything (a tool call) has its result as its only word.
    let announced = AtomicBool::new(false);
    let mut cancel = ctx.cancel_flag(&env.swarm_id);
    let outcome = if *cancel.borrow() {
        None
    } else if Utc::now() > a.deadline {
        Some(failed(
            ErrorCode::Timeout,
            "the swarm's deadline passed before the task started".into(),
        ))
    } else {
        let task = AgentTask {
            task_id: a.task_id.clone(),
            title: a.title.clone(),
            description: a.description.clone(),
            persona: a.persona.clone(),
            context: context_items(ctx, a).await?,
            feedback: a.feedback.clone(),
            max_steps: a.max_steps,
            max_result_bytes: a.max_result_bytes,
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<AgentEvent>();
        let forward = async {
            // Steps that follow each other within PROGRESS_EVERY are not
            // worth a stored update each (a tool-only task would send three
            // in a millisecond); a step of a model call, seconds long, is.
            let mut last_sent = std::time::Instant::now();
            while let Some(event) = rx.recv().await {
                let routine = !matches!(event, AgentEvent::Gate(_));
                if routine && last_sent.elapsed() < PROGRESS_EVERY {
                    continue;
                }
                last_sent = std::time::Instant::now();
                announced.store(true, Ordering::Relaxed);
                let (pct, what, metrics) = match event {
                    AgentEvent::Step(step) => {
                        let pct = (step.step * 90 / a.max_steps.max(1)).min(95) as u8;
                        let what = match &step.tool {
                            Some(tool) => format!("step {}: called {tool}", step.step),
                            None => format!("step {}: answered", step.step),
                        };
                        (pct, what, vec![("step", f64::from(step.step))])
                    }
                    AgentEvent::Progress {
                        message,
                        percentage,
                    } => (percentage.unwrap_or(50).min(99), message, vec![]),
                    AgentEvent::Gate(v) => (
                        90,
                        if v.passed {
                            format!("gate {} passed", v.gate)
                        } else {
                            format!("gate {} failed: {}", v.gate, v.reason)
                        },
                        vec![],
                    ),
                };
                progress(ctx, env, TaskStatus::InProgress, pct, what, metrics).await;
            }
        };
        let run = async {
            // Boxed: the agent loop's future is tens of KiB, and each wrapper
            // around it (timeout, join, select) would otherwise move it.
            let rounds = Box::pin(run_rounds(ctx, env, task, delivered, &tx));
            let outcome = tokio::time::timeout(ctx.task_timeout, rounds).await;
            drop(tx);
            outcome
        };
        let run = async { tokio::join!(run, forward).0 };
        // A task still running after PROGRESS_EVERY says it started; one
        // done by then (a tool call) goes straight to its result, so a fast
        // task stores no progress update at all.
        let both = async {
            tokio::pin!(run);
            tokio::select! {
                biased;
                outcome = &mut run => return outcome,
                () = tokio::time::sleep(PROGRESS_EVERY) => {}
            }
            announced.store(true, Ordering::Relaxed);
            progress(
                ctx,
                env,
                TaskStatus::InProgress,
                0,
                format!("{} started on {}", a.task_id, ctx.agent_id),
                vec![],
            )
            .await;
            run.await
        };
        // A cancel stops the agent where it is: its future is dropped.
        tokio::select! {
            outcome = both => Some(match outcome {
                Ok(result) => result?,
                Err(_) => failed(
                    ErrorCode::Timeout,
                    format!("the task ran longer than the worker's limit of {:?}", ctx.task_timeout),
                ),
            }),
            Ok(_) = cancel.wait_for(|c| *c) => None,
        }
    };
    drop(cancel);
    ctx.release(&env.swarm_id);
    let Some((outcome, gate_verdicts)) = outcome else {
        info!(swarm_id = %env.swarm_id, task_id = %a.task_id, "task stopped: its swarm was cancelled");
        progress(
            ctx,
            env,
            TaskStatus::Cancelled,
            100,
            format!("{} stopped: the swarm was cancelled", a.task_id),
            vec![],
        )
        .await;
        return Ok(Finish::AckHere);
    };
    let completed_at = Utc::now();
    let status = outcome.status;
    let m = |k: &str| outcome.metrics.get(k).copied().unwrap_or(0.0) as u64;
    if m("input_tokens") + m("output_tokens") > 0 {
        swarm_runtime::metrics::llm_tokens(
            &outcome.provider,
            m("input_tokens"),
            m("output_tokens"),
        );
    }
    in_flight.finish(status);
    let submission = ResultSubmission {
        token: a.token.clone(),
        task_id: a.task_id.clone(),
        status,
        result: outcome.result,
        attempt: a.attempt,
        revision: a.revision,
        provider: outcome.provider,
        worker_id: ctx.agent_id.clone(),
        started_at,
        completed_at,
        steps: outcome.steps,
        metrics: {
            let mut m = outcome.metrics;
            // How many times this assignment reached a worker: more than one
            // means a worker died or stalled on it before.
            m.insert("deliveries".into(), delivered as f64);
            m
        },
        error: outcome.error,
        gate_verdicts,
    };
    let bytes = submission.result.len();
    // The last progress update's figures, for a task that sent any before.
    let last_update: Option<Vec<(&str, f64)>> = announced.into_inner().then(|| {
        let elapsed_ms = (completed_at - started_at).num_milliseconds() as f64;
        [("elapsed_ms", elapsed_ms), ("result_bytes", bytes as f64)]
            .into_iter()
            .chain(
                ["input_tokens", "output_tokens", "cost_usd"]
                    .into_iter()
                    .filter_map(|k| submission.metrics.get(k).map(|v| (k, *v))),
            )
            .collect()
    });
    let result_env = Envelope::new(
        ctx.agent_id.as_str(),
        env.sender_agent.as_str(),
        env.swarm_id.as_str(),
        a.task_id.as_str(),
        submission,
    );
    let msg_id = format!(
        "{}.{}.a{}.r{}.result",
        env.swarm_id, a.task_id, a.attempt, a.revision
    );
    wire::hand_over(
        &ctx.infra.js,
        subjects::result(&env.swarm_id, &a.task_id),
        &result_env,
        &msg_id,
        ack_subject,
    )
    .await
    .context("submitting the result")?;
    if let Some(metrics) = last_update {
        progress(
            ctx,
            env,
            status,
            100,
            format!("{} {:?} ({bytes} bytes)", a.task_id, status),
            metrics,
        )
        .await;
    }
    info!(swarm_id = %env.swarm_id, task_id = %a.task_id, ?status, bytes, "task finished");
    Ok(Finish::AckedByManager)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_workspace_is_a_folder_of_its_own_not_the_current_one() {
        let ws = default_workspace();
        assert!(ws.ends_with("swarm/workspace"), "{}", ws.display());
        assert!(ws.is_absolute() || std::env::var_os("HOME").is_none());
        let cwd = std::env::current_dir().unwrap();
        assert_ne!(ws, cwd);
        assert_ne!(ws, PathBuf::from("."));
        let config = WorkerConfig::new(NatsArgs::local("nats://127.0.0.1:4222"), "w");
        assert_eq!(config.workspace_root, ws);
    }
}
