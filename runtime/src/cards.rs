//! Publishing a replica's agent card ([`swarm_common::card`]): written to
//! the `agents` bucket at start and every [`CARD_REFRESH`] after, removed
//! when the replica stops cleanly. A failed write is logged and tried again
//! at the next refresh: a card is for people and routing, never a reason
//! for a role to stop.

use async_nats::jetstream::kv;
use chrono::Utc;
use swarm_common::card::{AgentCard, CARD_REFRESH};
use tracing::{debug, warn};

/// This build's card for replica `agent_id` of `role`, with no pool,
/// skills or tools yet.
pub fn card(role: &str, agent_id: &str) -> AgentCard {
    let now = Utc::now();
    AgentCard {
        agent_id: agent_id.to_owned(),
        role: role.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        pool: None,
        skills: Vec::new(),
        tools: Vec::new(),
        protocol_versions: crate::hello::versions(),
        codecs: crate::hello::codecs(),
        url: None,
        started_at: now,
        updated_at: now,
    }
}

/// Every card in the bucket (a value that is not a card is left out), at
/// most `swarm_common::card::MAX_CARDS`.
pub async fn read_all(kv: &kv::Store) -> anyhow::Result<Vec<AgentCard>> {
    use futures::TryStreamExt as _;
    let keys: Vec<String> = kv.keys().await?.try_collect().await?;
    let mut cards = Vec::new();
    for key in keys.into_iter().take(swarm_common::card::MAX_CARDS) {
        if let Some(bytes) = kv.get(&key).await?
            && let Ok(card) = serde_json::from_slice::<AgentCard>(&bytes)
        {
            cards.push(card);
        }
    }
    cards.sort_by(|a, b| (&a.role, &a.agent_id).cmp(&(&b.role, &b.agent_id)));
    Ok(cards)
}

/// A card being published; dropping it stops the refreshes (use
/// [`Published::withdraw`] to remove the card too).
pub struct Published {
    kv: kv::Store,
    key: String,
    task: tokio::task::JoinHandle<()>,
}

impl Published {
    /// Stops refreshing the card and removes it from the bucket.
    pub async fn withdraw(self) {
        self.task.abort();
        if let Err(e) = self.kv.delete(&self.key).await {
            debug!(error = %e, key = %self.key, "removing the agent card");
        }
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn write(kv: &kv::Store, card: &mut AgentCard) {
    card.updated_at = Utc::now();
    let bytes = match serde_json::to_vec(card) {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "encoding the agent card");
            return;
        }
    };
    if let Err(e) = kv.put(card.key(), bytes.into()).await {
        warn!(error = %e, key = %card.key(), "writing the agent card; trying again later");
    }
}

/// Writes `card` to the `agents` bucket now and every [`CARD_REFRESH`]
/// until the returned handle is dropped or withdrawn.
pub async fn publish(kv: &kv::Store, mut card: AgentCard) -> Published {
    write(kv, &mut card).await;
    let key = card.key();
    let store = kv.clone();
    let task = tokio::spawn(async move {
        let mut every = tokio::time::interval(CARD_REFRESH);
        every.tick().await;
        loop {
            every.tick().await;
            write(&store, &mut card).await;
        }
    });
    Published {
        kv: kv.clone(),
        key,
        task,
    }
}
