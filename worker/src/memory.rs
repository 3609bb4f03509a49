//! Agent memory on JetStream KV: what one task learns is readable by later
//! tasks of its swarm, and, once put in the `shared` namespace, by later
//! swarms (the seed's "bubble up").

use async_nats::jetstream::kv;
use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use swarm_agent::tools::{MemoryError, MemoryStore};

/// A [`MemoryStore`] in the `memory` bucket, keys `<namespace>.<key>`.
pub struct KvMemory {
    store: kv::Store,
}

impl KvMemory {
    /// Notes in `store`.
    pub fn new(store: kv::Store) -> Self {
        Self { store }
    }
}

fn err(e: impl std::fmt::Display) -> MemoryError {
    MemoryError(e.to_string())
}

#[async_trait]
impl MemoryStore for KvMemory {
    async fn put(&self, namespace: &str, key: &str, value: &str) -> Result<(), MemoryError> {
        self.store
            .put(format!("{namespace}.{key}"), Bytes::from(value.to_string()))
            .await
            .map(|_| ())
            .map_err(err)
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<String>, MemoryError> {
        let value = self
            .store
            .get(format!("{namespace}.{key}"))
            .await
            .map_err(err)?;
        Ok(value.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    async fn list(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, MemoryError> {
        let ns = format!("{namespace}.");
        let mut keys = self.store.keys().await.map_err(err)?;
        let mut out = Vec::new();
        while let Some(k) = keys.next().await {
            let k = k.map_err(err)?;
            if let Some(rest) = k.strip_prefix(&ns)
                && rest.starts_with(prefix)
            {
                out.push(rest.to_string());
            }
        }
        out.sort();
        Ok(out)
    }
}
