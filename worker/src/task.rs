//! Running one assignment's task: its dependencies' results, the agent loop
//! through the step journal and as many rounds as it has questions for a
//! person, its progress updates paced by [`decide::Pacer`], the worker's
//! time limit and its swarm's cancel, and the result it hands over.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use chrono::Utc;
use swarm_agent::{
    AgentTask, Budget, ContextItem,
    agent_loop::{AgentEvent, AgentOutcome, Collaboration, RunOptions, SyntheticTools, run_agent},
    provider::{Provider, limit},
};
use swarm_common::skill;
use swarm_common::{Envelope, ErrorBody, GateVerdict, SkillsUsed, TaskAssignment, TaskStatus};
use swarm_runtime::wire;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};

use crate::ctx::Ctx;
use crate::decide::{self, Finish, PROGRESS_EVERY, Start};
use crate::{collaborate, journal, outbox, questions, remote};

/// Runs `env`'s task, the `delivered`-th delivery of its assignment, to
/// its end: its result handed over naming `ack_subject`, or stopped by its
/// swarm's cancel. An error leaves the task unfinished, to be redelivered.
pub(crate) async fn work(
    ctx: &Ctx,
    env: &Envelope<TaskAssignment>,
    delivered: i64,
    ack_subject: &str,
) -> anyhow::Result<Finish> {
    let a = &env.body;
    let started_at = Utc::now();
    let mut in_flight = InFlight::start();
    info!(swarm_id = %env.swarm_id, task_id = %a.task_id, attempt = a.attempt, revision = a.revision, "task started");
    if swarm_runtime::trace::enabled() {
        let span = tracing::Span::current();
        span.record("swarm.id", env.swarm_id.as_str());
        span.record("swarm.task_id", a.task_id.as_str());
        span.record("swarm.attempt", i64::from(a.attempt));
        span.record("swarm.revision", i64::from(a.revision));
        span.record("swarm.delivered", delivered);
    }
    let mut cancel = ctx.cancel_flag(&env.swarm_id);
    let cancelled = *cancel.borrow();
    let ran = match decide::start(a, cancelled, Utc::now()) {
        Start::Stop => None,
        Start::Fail(error) => Some(Ran::failed(ctx, error, false)),
        Start::Run => run(ctx, env, delivered, &mut cancel).await?,
    };
    drop(cancel);
    ctx.release(&env.swarm_id);
    let Some(Ran {
        outcome,
        gate_verdicts,
        announced,
        skills,
    }) = ran
    else {
        info!(swarm_id = %env.swarm_id, task_id = %a.task_id, "task stopped: its swarm was cancelled");
        outbox::progress(ctx, env, decide::stopped(&a.task_id)).await;
        return Ok(Finish::AckHere);
    };
    let completed_at = Utc::now();
    let m = |k: &str| outcome.metrics.get(k).copied().unwrap_or(0.0) as u64;
    if m("input_tokens") + m("output_tokens") > 0 {
        swarm_runtime::metrics::llm_tokens(
            &outcome.provider,
            m("input_tokens"),
            m("output_tokens"),
        );
    }
    in_flight.finish(outcome.status);
    let mut submission = decide::submission(
        a,
        &ctx.agent_id,
        delivered,
        outcome,
        gate_verdicts,
        started_at,
        completed_at,
    );
    // The manager moves these skills' scores by its verdict on the result.
    submission.skills = skills;
    let (status, bytes) = (submission.status, submission.result.len());
    if swarm_runtime::trace::enabled() {
        tracing::Span::current().record("swarm.status", tracing::field::debug(status));
    }
    let last_update = decide::last_update(&submission, announced);
    outbox::hand_over(ctx, env, submission, ack_subject)
        .await
        .context("submitting the result")?;
    if let Some(update) = last_update {
        outbox::progress(ctx, env, update).await;
    }
    info!(swarm_id = %env.swarm_id, task_id = %a.task_id, ?status, bytes, "task finished");
    Ok(Finish::AckedByManager)
}

/// How a task's run ended, unless its swarm's cancel stopped it.
struct Ran {
    outcome: AgentOutcome,
    gate_verdicts: Vec<GateVerdict>,
    /// Whether a watcher has seen the task at work: then it also gets a
    /// last update at 100 %.
    announced: bool,
    /// The learned skills it was offered and recorded.
    skills: SkillsUsed,
}

impl Ran {
    /// A task that failed with `error` instead of running to its end.
    fn failed(ctx: &Ctx, error: ErrorBody, announced: bool) -> Self {
        Ran {
            outcome: decide::failed(error, ctx.provider.name()),
            gate_verdicts: Vec::new(),
            announced,
            skills: SkillsUsed::default(),
        }
    }
}

/// Runs `env`'s task within the worker's time limit, its progress paced
/// by [`decide::Pacer`], until it ends or its swarm's `cancel` stops it
/// where it is (its future is dropped; then `None`).
async fn run(
    ctx: &Ctx,
    env: &Envelope<TaskAssignment>,
    delivered: i64,
    cancel: &mut watch::Receiver<bool>,
) -> anyhow::Result<Option<Ran>> {
    let a = &env.body;
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
    let scope = a.skills_scope.as_deref().unwrap_or(skill::DEFAULT_SCOPE);
    // A remote agent runs its own loop: it is offered no skills.
    let offered = if a.persona.a2a_url.is_none() {
        ctx.learned
            .offered(scope, &format!("{} {}", a.title, a.description))
            .await
    } else {
        Vec::new()
    };
    let hints: Vec<(String, String)> = offered
        .iter()
        .map(|s| (s.name.clone(), s.how_to.clone()))
        .collect();
    let (tx, mut rx) = mpsc::unbounded_channel::<AgentEvent>();
    let forward = async {
        let mut pacer = decide::Pacer::new(Instant::now());
        let mut recorded = Vec::new();
        while let Some(event) = rx.recv().await {
            if let AgentEvent::SkillRecorded { name, how_to } = &event {
                let new = skill::LearnedSkill::new(
                    scope,
                    name,
                    how_to,
                    &env.swarm_id,
                    &a.task_id,
                    chrono::Utc::now(),
                );
                match ctx.learned.record(new).await {
                    Ok(key) => recorded.push(skill::SkillRef {
                        key,
                        name: name.trim().to_string(),
                    }),
                    Err(e) => {
                        warn!(error = %e, skill = %name, "a recorded skill could not be kept")
                    }
                }
            }
            if let Some(update) = pacer.update(event, a.max_steps, Instant::now()) {
                outbox::progress(ctx, env, update).await;
            }
        }
        (pacer.announced(), recorded)
    };
    let rounds = async {
        // Boxed: the agent loop's future is tens of KiB, and each wrapper
        // around it (timeout, join, select) would otherwise move it.
        let rounds = Box::pin(run_rounds(ctx, env, task, delivered, &hints, &tx));
        let outcome = tokio::time::timeout(ctx.task_timeout, rounds).await;
        drop(tx);
        outcome
    };
    let run = async { tokio::join!(rounds, forward) };
    // A task still running after PROGRESS_EVERY says it started; one done
    // by then (a tool call) goes straight to its result, so a fast task
    // stores no progress update at all.
    let both = async {
        tokio::pin!(run);
        tokio::select! {
            biased;
            ran = &mut run => return ran,
            () = tokio::time::sleep(PROGRESS_EVERY) => {}
        }
        outbox::progress(ctx, env, decide::started(&a.task_id, &ctx.agent_id)).await;
        let (outcome, (_, recorded)) = run.await;
        (outcome, (true, recorded))
    };
    let ran = tokio::select! {
        (outcome, (announced, recorded)) = both => Some((match outcome {
            Ok(result) => {
                let (outcome, gate_verdicts) = result?;
                Ran { outcome, gate_verdicts, announced, skills: SkillsUsed::default() }
            }
            Err(_) => Ran::failed(ctx, decide::overran(ctx.task_timeout), announced),
        }, recorded)),
        Ok(_) = cancel.wait_for(|c| *c) => None,
    };
    let Some((mut ran, learned)) = ran else {
        return Ok(None);
    };
    ran.skills = SkillsUsed {
        used: offered.iter().map(skill::LearnedSkill::reference).collect(),
        learned,
    };
    Ok(Some(ran))
}

/// The dependencies' results: those the manager sent along, and the others
/// read from the stream.
async fn context_items(ctx: &Ctx, a: &TaskAssignment) -> anyhow::Result<Vec<ContextItem>> {
    let read = wire::read_results(&ctx.a2ap, &decide::results_to_read(a))
        .await
        .context("reading the results of the dependencies")?;
    decide::context(a, read.into_iter().map(|sub| sub.result))
        .context("a dependency's result was not read")
}

/// A task counted as in flight for the metrics until it finishes; one that
/// ends any other way (cancelled, an error) is counted as `stopped`.
struct InFlight {
    started: Instant,
    status: Option<&'static str>,
}

impl InFlight {
    fn start() -> Self {
        swarm_runtime::metrics::task_started();
        Self {
            started: Instant::now(),
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
            TaskStatus::Skipped => "skipped",
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
    skills: &[(String, String)],
    events: &mpsc::UnboundedSender<AgentEvent>,
) -> anyhow::Result<(AgentOutcome, Vec<GateVerdict>)> {
    let a = &env.body;
    if let Some(skill) = &a.persona.skill
        && !ctx.skills.contains(skill)
    {
        // The boss chose this pool when its workers offered the skill; this
        // one does not (a pool's replicas configured apart).
        let error = swarm_common::ErrorBody::new(
            swarm_common::ErrorCode::NotFound,
            format!(
                "persona {:?} needs skill {skill:?}, which this worker of pool {:?} does not \
                 offer",
                a.persona.name, a.persona.pool
            ),
        );
        return Ok((decide::failed(error, ctx.provider.name()), Vec::new()));
    }
    if a.persona.a2a_url.is_some() {
        let run = remote::run_rounds(ctx, env, &task, delivered).await?;
        return Ok((run.outcome, run.gate_verdicts));
    }
    let mut round = 0;
    let mut verdicts = Vec::new();
    // Only a persona with collaborators is offered `ask_collaborator`.
    let collaboration = (!a.collaborators.is_empty()).then(|| Collaboration {
        roster: a.collaborators.clone(),
        asker: Arc::new(collaborate::NatsCollaborator::new(
            ctx.infra.js.clone(),
            ctx.infra.swarms.clone(),
            ctx.a2ap.clone(),
            &ctx.agent_id,
            env,
        )),
    });
    loop {
        let journal = journal::Journal::open(
            ctx.journal.clone(),
            &env.swarm_id,
            &a.task_id,
            a.attempt,
            a.revision,
            round,
            decide::replays_journal(delivered, round),
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
                record_skill: true,
                ..Default::default()
            },
            skills: skills.to_vec(),
            collaboration: collaboration.clone(),
            ..Default::default()
        };
        // The shared model limits know the swarm (fair shares) and tell a
        // wait to whoever watches the task; a streamed reply's text goes
        // the same way as it is written.
        let scope = {
            let waits = events.clone();
            let texts = events.clone();
            limit::CallScope::new(
                env.swarm_id.clone(),
                Some(Arc::new(move |notice: &limit::WaitNotice| {
                    let _ = waits.send(AgentEvent::Waiting {
                        message: notice.to_string(),
                    });
                })),
            )
            .with_text(Arc::new(move |text: &str| {
                let _ = texts.send(AgentEvent::writing(text));
            }))
        };
        let run = limit::scoped(
            scope.clone(),
            journal::with_journal(
                journal.clone(),
                Box::pin(run_agent(
                    provider.as_ref(),
                    &ctx.tools,
                    &task,
                    &options,
                    Some(events),
                )),
            ),
        )
        .await;
        let mut outcome = run.outcome;
        let waited = scope.waited_ms();
        if waited > 0 {
            *outcome.metrics.entry("model_wait_ms".into()).or_insert(0.0) += waited as f64;
        }
        outcome
            .metrics
            .insert("journal_replayed".into(), journal.replayed() as f64);
        outcome
            .metrics
            .insert("journal_recorded".into(), journal.recorded() as f64);
        verdicts.extend(run.gate_verdicts);
        let Some(question) = decide::question(outcome.status, run.question) else {
            return Ok((outcome, verdicts));
        };
        let answer = questions::ask(ctx, env, &question).await?;
        info!(swarm_id = %env.swarm_id, task_id = %a.task_id, "question answered; going on");
        decide::answered(&mut task, &question, &answer);
        round += 1;
    }
}
