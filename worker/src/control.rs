//! Control messages: a cancel (from a person, or from the manager when a
//! swarm ends before its tasks do) stops the swarm's tasks, running and
//! queued, and closes the approval requests and questions they wait on here.

use std::sync::Arc;

use futures::StreamExt;
use swarm_common::Control;
use swarm_runtime::wire;
use tracing::info;

use crate::ctx::Ctx;
use crate::{decide, questions};

/// Applies the control messages of `sub` until it ends.
pub(crate) async fn watch(ctx: Arc<Ctx>, mut sub: async_nats::Subscriber) {
    while let Some(msg) = sub.next().await {
        if let Ok(env) = wire::decode::<Control>(msg.headers.as_ref(), &msg.payload)
            && let Control::Cancel { reason } = env.body
        {
            info!(swarm_id = %env.swarm_id, "swarm cancelled; stopping its tasks");
            // Taken before the tasks stop, as their waits leave the sets.
            let approvals = ctx.approver.open_requests(&env.swarm_id);
            let waiting = ctx.questions.of(&env.swarm_id);
            ctx.cancel(&env.swarm_id);
            if approvals.is_empty() && waiting.is_empty() {
                continue;
            }
            let ctx = ctx.clone();
            let why = decide::close_reason(&reason);
            tokio::spawn(async move {
                ctx.approver.close(&approvals, &why).await;
                for task_id in waiting {
                    questions::close(&ctx, &env.swarm_id, &task_id, &why).await;
                }
            });
        }
    }
}
