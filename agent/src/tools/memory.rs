//! `memory`: notes a swarm keeps across its tasks. What one task puts,
//! later tasks of the same swarm can get; notes put in the `shared` scope
//! (the seed's "bubble up") are readable by later swarms too.
//!
//! Storage is a [`MemoryStore`]: [`InMemoryStore`] here, a JetStream KV
//! bucket in the worker. A note lives under a namespace: the swarm's id for
//! the `swarm` scope, [`SHARED_NAMESPACE`] for the `shared` scope.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::RwLock;

use super::{ToolAnnotations, ToolContext, ToolError, TypedTool};

/// The namespace of notes every swarm can read.
pub const SHARED_NAMESPACE: &str = "shared";
/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 128;
/// The largest note, in bytes.
pub const MAX_NOTE_BYTES: usize = 64 * 1024;
/// The most keys `list` returns.
const MAX_LIST: usize = 500;

/// Why the store failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("memory store: {0}")]
pub struct MemoryError(pub String);

/// Where notes are kept.
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Stores `value` under `namespace`/`key`, replacing any note there.
    async fn put(&self, namespace: &str, key: &str, value: &str) -> Result<(), MemoryError>;
    /// The note under `namespace`/`key`, if any.
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<String>, MemoryError>;
    /// The keys under `namespace` that start with `prefix`, sorted.
    async fn list(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, MemoryError>;
}

/// A [`MemoryStore`] in process memory, for tests and single-process runs.
#[derive(Debug, Default)]
pub struct InMemoryStore {
    notes: RwLock<BTreeMap<(String, String), String>>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> InMemoryStore {
        InMemoryStore::default()
    }
}

#[async_trait]
impl MemoryStore for InMemoryStore {
    async fn put(&self, namespace: &str, key: &str, value: &str) -> Result<(), MemoryError> {
        self.notes
            .write()
            .await
            .insert((namespace.to_string(), key.to_string()), value.to_string());
        Ok(())
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<String>, MemoryError> {
        Ok(self
            .notes
            .read()
            .await
            .get(&(namespace.to_string(), key.to_string()))
            .cloned())
    }

    async fn list(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, MemoryError> {
        Ok(self
            .notes
            .read()
            .await
            .keys()
            .filter(|(ns, k)| ns == namespace && k.starts_with(prefix))
            .map(|(_, k)| k.clone())
            .collect())
    }
}

/// The `memory` tool.
#[derive(Clone)]
pub struct Memory(pub Arc<dyn MemoryStore>);

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Memory")
    }
}

/// What to do with the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryAction {
    /// Store a note under a key (replacing any note there).
    Put,
    /// Read the note under a key.
    Get,
    /// List the keys that start with a prefix.
    List,
}

/// Whose notes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MemoryScope {
    /// This swarm's notes.
    #[default]
    Swarm,
    /// Notes shared with later swarms.
    Shared,
}

/// Arguments of `memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryArgs {
    /// put, get or list.
    pub action: MemoryAction,
    /// The note's key (put, get) or a key prefix (list): letters, digits, `-`, `_`, `.`, `/`, `=`.
    #[serde(default)]
    pub key: String,
    /// The note (put only).
    #[serde(default)]
    pub value: Option<String>,
    /// `swarm` (default) for this swarm's notes, `shared` for notes later swarms can read.
    #[serde(default)]
    pub scope: MemoryScope,
}

fn check_key(key: &str, allow_empty: bool) -> Result<(), ToolError> {
    if key.is_empty() && allow_empty {
        return Ok(());
    }
    let ok = !key.is_empty()
        && key.len() <= MAX_KEY_BYTES
        && !key.starts_with('.')
        && !key.ends_with('.')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ToolError::InvalidArguments(format!(
            "memory: key {key:?} must be 1 to {MAX_KEY_BYTES} letters, digits, '-', '_', '.', \
             '/' or '=', not starting or ending with '.'"
        )))
    }
}

#[async_trait]
impl TypedTool for Memory {
    type Args = MemoryArgs;
    const NAME: &'static str = "memory";
    const DESCRIPTION: &'static str = "Keeps notes for the swarm: put a note under a key, get \
        it back, or list keys by prefix. Later tasks of this swarm see `swarm` notes; later \
        swarms see `shared` notes.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations {
        read_only: false,
        destructive: false,
        idempotent: true,
    };

    async fn run(&self, args: MemoryArgs) -> Result<String, ToolError> {
        self.run_in(&ToolContext::default(), args).await
    }

    async fn run_in(&self, ctx: &ToolContext, args: MemoryArgs) -> Result<String, ToolError> {
        let namespace = match args.scope {
            MemoryScope::Shared => SHARED_NAMESPACE.to_string(),
            MemoryScope::Swarm => ctx.swarm_id.clone().unwrap_or_else(|| "local".to_string()),
        };
        let failed = |e: MemoryError| ToolError::Failed(e.to_string());
        match args.action {
            MemoryAction::Put => {
                check_key(&args.key, false)?;
                let value = args.value.ok_or_else(|| {
                    ToolError::InvalidArguments("memory: put needs a value".to_string())
                })?;
                if value.len() > MAX_NOTE_BYTES {
                    return Err(ToolError::InvalidArguments(format!(
                        "memory: the note is {} bytes; the limit is {MAX_NOTE_BYTES}",
                        value.len()
                    )));
                }
                self.0
                    .put(&namespace, &args.key, &value)
                    .await
                    .map_err(failed)?;
                Ok(format!("stored {} bytes under {:?}", value.len(), args.key))
            }
            MemoryAction::Get => {
                check_key(&args.key, false)?;
                match self.0.get(&namespace, &args.key).await.map_err(failed)? {
                    Some(v) => Ok(v),
                    None => Err(ToolError::Failed(format!(
                        "memory: no note under {:?}",
                        args.key
                    ))),
                }
            }
            MemoryAction::List => {
                check_key(&args.key, true)?;
                let mut keys = self.0.list(&namespace, &args.key).await.map_err(failed)?;
                if keys.is_empty() {
                    return Ok("(no notes)".to_string());
                }
                let total = keys.len();
                keys.truncate(MAX_LIST);
                let mut out = keys.join("\n");
                if total > MAX_LIST {
                    out.push_str(&format!("\n[{total} keys in all]"));
                }
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::typed;

    #[tokio::test]
    async fn notes_are_kept_per_swarm_and_shared() {
        let store = Arc::new(InMemoryStore::new());
        let tool = typed(Memory(store.clone()));
        let s1 = ToolContext {
            swarm_id: Some("s1".into()),
            task_id: Some("t1".into()),
        };
        let s2 = ToolContext {
            swarm_id: Some("s2".into()),
            task_id: None,
        };
        tool.call_in(
            &s1,
            json!({"action": "put", "key": "facts/a", "value": "42"}),
        )
        .await
        .unwrap();
        tool.call_in(
            &s1,
            json!({"action": "put", "key": "facts/b", "value": "x", "scope": "shared"}),
        )
        .await
        .unwrap();
        assert_eq!(
            tool.call_in(&s1, json!({"action": "get", "key": "facts/a"}))
                .await
                .unwrap(),
            "42"
        );
        assert_eq!(
            tool.call_in(&s1, json!({"action": "list", "key": "facts/"}))
                .await
                .unwrap(),
            "facts/a"
        );
        assert!(
            tool.call_in(&s2, json!({"action": "get", "key": "facts/a"}))
                .await
                .is_err()
        );
        assert_eq!(
            tool.call_in(
                &s2,
                json!({"action": "get", "key": "facts/b", "scope": "shared"})
            )
            .await
            .unwrap(),
            "x"
        );
        let e = tool
            .call_in(&s1, json!({"action": "put", "key": "a b", "value": "1"}))
            .await
            .unwrap_err();
        assert!(matches!(e, ToolError::InvalidArguments(_)), "{e}");
        let e = tool
            .call_in(&s1, json!({"action": "put", "key": "k"}))
            .await
            .unwrap_err();
        assert!(matches!(e, ToolError::InvalidArguments(_)), "{e}");
    }
}
