//! Events a manager died on are not handed to a third one.
//!
//! A message that kills the process applying it (a bug, a bound not yet
//! checked) comes back to the next replica when its `ack_wait` runs out,
//! and would take every replica down in turn, for ever. JetStream's
//! delivery count cannot tell such a death from the deliveries a manager
//! asks for itself (an event that waits for the events before it is handed
//! back every half second), so the manager counts deaths itself: before it
//! applies a *redelivered* event it records a mark for the event's stream
//! sequence in the `swarms` bucket, under a key no swarm id can take
//! (`marks=<seq>`, `=` is not in a token), and removes it once the event
//! was applied, whatever the outcome. A mark still there on the next
//! delivery means a manager died while applying it. With one such death
//! recorded (the first delivery is not marked, so two replicas have died
//! on it), the event is set aside as a dead letter and its swarm fails with
//! the reason. First deliveries pay nothing: marks cost two KV operations
//! on redeliveries only.

use async_nats::jetstream::kv;

/// Deaths recorded by marks after which an event is set aside.
pub const DEATHS_ALLOWED: u32 = 1;

/// What every mark's key starts with.
pub const KEY_PREFIX: &str = "marks=";

/// The key of the mark of the event at stream sequence `seq`.
pub fn key(seq: u64) -> String {
    format!("{KEY_PREFIX}{seq}")
}

/// Whether a key of the `swarms` bucket is a mark rather than a swarm.
pub fn is_mark(key: &str) -> bool {
    key.starts_with(KEY_PREFIX)
}

/// Records that the event at `seq` is being applied and returns how many
/// deaths while applying it the marks recorded before.
pub async fn begin(store: &kv::Store, seq: u64) -> anyhow::Result<u32> {
    let key = key(seq);
    let before = match store.get(&key).await? {
        Some(v) => std::str::from_utf8(&v)
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
            .unwrap_or(0),
        None => 0,
    };
    store
        .put(&key, (before + 1).to_string().into_bytes().into())
        .await?;
    Ok(before)
}

/// The event at `seq` was applied (or set aside): its mark goes.
pub async fn end(store: &kv::Store, seq: u64) {
    if let Err(e) = store.purge(key(seq)).await {
        tracing::debug!(seq, error = %e, "cannot remove an event's mark; the next delivery counts it");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_cannot_be_swarms() {
        assert!(is_mark(&key(42)));
        assert_eq!(key(42), "marks=42");
        assert!(!swarm_common::subjects::is_token(&key(42)));
        assert!(!is_mark("marks"));
    }
}
