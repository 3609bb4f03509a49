//! What a worker sends to the A2AP stream: progress updates (posted without
//! asking for an answer: they are advisory), results (handed over naming
//! their assignment, which the manager acks once the result is stored), and
//! the `Error`s that tell the manager a task cannot run.

use swarm_common::{
    Envelope, ErrorMessage, ProgressUpdate, ResultSubmission, TaskAssignment, subjects,
};
use swarm_runtime::wire;
use tracing::warn;

use crate::ctx::Ctx;
use crate::decide::Update;

/// Posts a progress update of `env`'s task; one that is lost costs nothing.
pub(crate) async fn progress(ctx: &Ctx, env: &Envelope<TaskAssignment>, update: Update) {
    let a = &env.body;
    let message = Envelope::new(
        ctx.agent_id.as_str(),
        env.sender_agent.as_str(),
        env.swarm_id.as_str(),
        a.task_id.as_str(),
        ProgressUpdate {
            task_id: a.task_id.clone(),
            status: update.status,
            progress_percentage: update.pct,
            message: update.message,
            attempt: a.attempt,
            revision: a.revision,
            metrics: update
                .metrics
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        },
    );
    // Progress is advisory: stored without an ack.
    if let Err(e) = wire::post(
        &ctx.infra.js,
        subjects::progress(&env.swarm_id, &a.task_id),
        &message,
    )
    .await
    {
        warn!(error = %e, "progress update not sent");
    }
}

/// Hands `env`'s result to the stream without waiting for the server's
/// answer, naming the assignment's `ack_subject` for the manager to ack.
pub(crate) async fn hand_over(
    ctx: &Ctx,
    env: &Envelope<TaskAssignment>,
    submission: ResultSubmission,
    ack_subject: &str,
) -> anyhow::Result<()> {
    let a = &env.body;
    let result = Envelope::new(
        ctx.agent_id.as_str(),
        env.sender_agent.as_str(),
        env.swarm_id.as_str(),
        a.task_id.as_str(),
        submission,
    );
    wire::hand_over(
        &ctx.infra.js,
        subjects::result(&env.swarm_id, &a.task_id),
        &result,
        &crate::decide::result_id(&env.swarm_id, a),
        ack_subject,
    )
    .await?;
    Ok(())
}

/// Sends `error` about `task_id` of `swarm_id` to its manager (`recipient`),
/// and waits until it is stored.
pub(crate) async fn tell_manager(
    ctx: &Ctx,
    recipient: &str,
    swarm_id: &str,
    task_id: &str,
    error: ErrorMessage,
    msg_id: Option<&str>,
) -> anyhow::Result<()> {
    let report = Envelope::new(ctx.agent_id.as_str(), recipient, swarm_id, task_id, error);
    wire::publish(&ctx.infra.js, subjects::error(swarm_id), &report, msg_id).await?;
    Ok(())
}
