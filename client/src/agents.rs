//! The running agents: every replica's card from the `agents` bucket
//! (`swarm agents`).

use anyhow::Context as _;
use async_nats::jetstream;
use swarm_common::card::AgentCard;
use swarm_common::subjects;

/// Every card in the bucket, by role then agent id. A value that is not a
/// card is left out.
pub async fn list(client: &async_nats::Client) -> anyhow::Result<Vec<AgentCard>> {
    let kv = jetstream::new(client.clone())
        .get_key_value(subjects::AGENTS_BUCKET)
        .await
        .context("opening the agents bucket (is the cluster set up?)")?;
    swarm_runtime::cards::read_all(&kv)
        .await
        .context("reading the agent cards")
}
