//! The model limits every worker of a deployment shares, kept in the KV
//! bucket `model-limits`: one key per provider endpoint and model, its
//! value the JSON [`SharedLimits`], changed only by compare-and-swap
//! (`kv.update` at the revision read). The algorithm is the agent's
//! ([`swarm_agent::provider::limit`]); this is only where its state lives.
//!
//! Waiting calls learn of changes from one watcher of the whole bucket per
//! replica (not one consumer per wait), which keeps the last revision it
//! saw of each key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_nats::jetstream::kv;
use async_trait::async_trait;
use futures::StreamExt as _;
use swarm_agent::provider::limit::{LimitStore, SharedLimits};
use tokio::sync::watch;

/// A [`LimitStore`] over the `model-limits` bucket.
pub struct KvLimits {
    kv: kv::Store,
    /// The last revision the watcher saw of each key (0: none yet).
    seen: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>,
    /// The watcher, started by the first wait and stopped with this store.
    watcher: OnceLock<tokio_util::sync::DropGuard>,
}

impl std::fmt::Debug for KvLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvLimits")
            .field("bucket", &self.kv.name)
            .finish_non_exhaustive()
    }
}

impl KvLimits {
    /// The limits kept in `kv`.
    pub fn new(kv: kv::Store) -> KvLimits {
        KvLimits {
            kv,
            seen: Default::default(),
            watcher: OnceLock::new(),
        }
    }

    fn sender(&self, key: &str) -> watch::Sender<u64> {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.entry(key.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .clone()
    }

    fn start_watcher(&self) {
        self.watcher.get_or_init(|| {
            let stop = tokio_util::sync::CancellationToken::new();
            let kv = self.kv.clone();
            let seen = self.seen.clone();
            let token = stop.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = token.cancelled() => {}
                    () = watch_bucket(kv, seen) => {}
                }
            });
            stop.drop_guard()
        });
    }
}

/// Keeps `seen` current with the bucket, watching again after any error
/// (a broker restart ends a watch).
async fn watch_bucket(kv: kv::Store, seen: Arc<Mutex<HashMap<String, watch::Sender<u64>>>>) {
    loop {
        // Each key's current revision first, then every change: a change
        // made before the watch began still ends the wait it was for.
        match kv.watch_with_history(">").await {
            Ok(mut entries) => {
                while let Some(entry) = entries.next().await {
                    let Ok(entry) = entry else { break };
                    let tx = {
                        let mut seen = seen
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        seen.entry(entry.key.clone())
                            .or_insert_with(|| watch::channel(0).0)
                            .clone()
                    };
                    tx.send_if_modified(|r| {
                        let newer = entry.revision > *r;
                        if newer {
                            *r = entry.revision;
                        }
                        newer
                    });
                }
            }
            Err(e) => tracing::debug!(error = %e, "watching the model limits"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[async_trait]
impl LimitStore for KvLimits {
    async fn load(&self, key: &str) -> Result<Option<(SharedLimits, u64)>, String> {
        let entry = self.kv.entry(key).await.map_err(|e| e.to_string())?;
        Ok(entry.and_then(|e| {
            if e.operation != kv::Operation::Put {
                return None;
            }
            // A value that is not the state (written by a peer that should
            // not have) is overwritten with a fresh one, not obeyed.
            let state = serde_json::from_slice(&e.value).unwrap_or_else(|err| {
                tracing::warn!(key = %e.key, error = %err, "a malformed model limits entry is reset");
                SharedLimits::default()
            });
            Some((state, e.revision))
        }))
    }

    async fn store(
        &self,
        key: &str,
        value: &SharedLimits,
        revision: Option<u64>,
    ) -> Result<Option<u64>, String> {
        let bytes: bytes::Bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?.into();
        match revision {
            None => match self.kv.create(key, bytes).await {
                Ok(r) => Ok(Some(r)),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(None),
                Err(e) => Err(e.to_string()),
            },
            Some(r) => match self.kv.update(key, bytes, r).await {
                Ok(r) => Ok(Some(r)),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(None),
                Err(e) => Err(e.to_string()),
            },
        }
    }

    async fn changed(&self, key: &str, seen: Option<u64>, timeout: Duration) {
        self.start_watcher();
        let mut rx = self.sender(key).subscribe();
        let known = *rx.borrow_and_update();
        // Only a revision newer than the caller's ends the wait at once: the
        // watcher may lag behind the read the caller just made.
        if known > seen.unwrap_or(0) {
            return;
        }
        let _ = tokio::time::timeout(timeout, rx.changed()).await;
    }
}

/// The limiter a worker's provider asks before each model call: the
/// configured limits, kept in the `model-limits` bucket, each wait, pause
/// and outage counted in the metrics. A slot is leased for the provider's
/// timeout and a margin, so one held by a worker that died frees itself.
pub fn limiter(
    config: &crate::WorkerConfig,
    infra: &swarm_runtime::Infra,
) -> Arc<dyn swarm_agent::provider::limit::CallLimiter> {
    use swarm_agent::provider::limit::{LimitEvent, SharedLimiter};
    let lease = config.provider.timeout + Duration::from_secs(30);
    let store = KvLimits::new(infra.model_limits.clone());
    Arc::new(
        SharedLimiter::new(store, config.model_limits, lease).on_event(Arc::new(
            |event| match event {
                LimitEvent::Waited(reason, waited) => swarm_runtime::metrics::model_limit_waited(
                    reason.as_str(),
                    waited.as_secs_f64(),
                ),
                LimitEvent::Paused { .. } => swarm_runtime::metrics::model_paused(),
                LimitEvent::Unavailable(_) => swarm_runtime::metrics::model_limits_unavailable(),
            },
        )),
    )
}
