//! A task's questions for a person: recorded through the boss's desk in the
//! `inputs` bucket (where `swarm answer` finds them), announced, and waited
//! on until answered or closed; a swarm's end closes those still open.

use std::time::Duration;

use anyhow::Context as _;
use chrono::Utc;
use futures::StreamExt;
use swarm_common::{
    Envelope, TaskAssignment,
    approval::{DeskReply, DeskRequest, InputRecord},
};
use swarm_runtime::desk;
use tracing::{info, warn};

use crate::ctx::Ctx;
use crate::decide::{self, Answer};
use crate::outbox;

/// How long a worker keeps asking the desk while no boss answers.
const DESK_PATIENCE: Duration = Duration::from_secs(30);

/// Asks a person `question` for `env`'s task and waits for the answer. The
/// question is recorded before it is announced, so a person who answers at
/// once finds it there; while the task waits, a cancel of its swarm closes
/// it ([`close`]).
pub(crate) async fn ask(
    ctx: &Ctx,
    env: &Envelope<TaskAssignment>,
    question: &str,
) -> anyhow::Result<String> {
    let (swarm_id, task_id) = (env.swarm_id.as_str(), env.body.task_id.as_str());
    record(ctx, swarm_id, task_id, question).await?;
    let _open = ctx.questions.enter(swarm_id, task_id);
    outbox::progress(ctx, env, decide::asking(swarm_id, task_id, question)).await;
    wait_for_answer(ctx, swarm_id, task_id, question).await
}

/// Records the task's question (through the desk, in the `inputs` bucket).
async fn record(ctx: &Ctx, swarm_id: &str, task_id: &str, question: &str) -> anyhow::Result<()> {
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
pub(crate) async fn close(ctx: &Ctx, swarm_id: &str, task_id: &str, reason: &str) {
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

/// Waits for the answer to the question stored by [`record`].
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
        match decide::answer(r, question) {
            Answer::Waiting => {}
            Answer::Given(answer) => return Ok(answer),
            Answer::Closed(why) => anyhow::bail!("the question was closed: {why}"),
        }
    }
    anyhow::bail!("the wait for an answer ended without one")
}
