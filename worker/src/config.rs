//! How a worker replica is configured, and where its file tools work when
//! it is not told.

use std::path::PathBuf;
use std::time::Duration;

use swarm_agent::{provider::ProviderConfig, tools::ToolArgs};
use swarm_runtime::NatsArgs;

/// How a worker replica runs.
#[derive(Clone)]
pub struct WorkerConfig {
    /// NATS connection.
    pub nats: NatsArgs,
    /// This replica's agent id.
    pub agent_id: String,
    /// The pool it serves.
    pub pool: String,
    /// Root folder of the file tools; paths outside it are refused.
    pub workspace_root: PathBuf,
    /// Tasks run at once.
    pub concurrency: usize,
    /// How long to finish in-flight tasks after shutdown is asked for.
    pub drain_timeout: Duration,
    /// Copies of each stream and bucket.
    pub replicas: usize,
    /// How long the server waits for an ack (extended while a task runs).
    pub ack_wait: Duration,
    /// The longest one task may run (start to close) before it fails with a timeout.
    pub task_timeout: Duration,
    /// The model the agent loop talks to.
    pub provider: ProviderConfig,
    /// Which optional tools are on (write, fetch, shell) and whether command gates may run.
    pub tool_args: ToolArgs,
    /// How long a destructive tool call waits for a person's approval.
    pub approval_wait: Duration,
    /// Which remote A2A agents its personas may name, and their tokens.
    pub remote: crate::remote::RemoteConfig,
    /// What the pool is for, as skill ids on its card (beside one per tool).
    pub skills: Vec<String>,
    /// MCP servers whose tools it offers.
    pub mcp: crate::mcp::McpConfig,
    /// The model limits every worker of the endpoint shares (unset ones
    /// come from the provider's headers, or do not apply).
    pub model_limits: swarm_agent::provider::limit::Limits,
}

/// The workspace of a worker that is not given one: a folder of its own
/// under the user's data directory (`$XDG_DATA_HOME/swarm/workspace`, else
/// `$HOME/.local/share/swarm/workspace`, else one in the temporary
/// directory), so that a worker started from `/` or a home directory does
/// not hand those to its file tools.
pub fn default_workspace() -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let data = var("XDG_DATA_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".local").join("share")))
        .unwrap_or_else(std::env::temp_dir);
    data.join("swarm").join("workspace")
}

impl WorkerConfig {
    /// Defaults for a worker of pool `general`.
    pub fn new(nats: NatsArgs, agent_id: impl Into<String>) -> Self {
        Self {
            nats,
            agent_id: agent_id.into(),
            pool: swarm_common::default_pool(),
            workspace_root: default_workspace(),
            concurrency: 16,
            drain_timeout: Duration::from_secs(10),
            replicas: 1,
            ack_wait: Duration::from_secs(30),
            task_timeout: Duration::from_secs(600),
            provider: ProviderConfig::offline(),
            tool_args: ToolArgs::default(),
            approval_wait: Duration::from_secs(600),
            remote: Default::default(),
            skills: Vec::new(),
            mcp: Default::default(),
            model_limits: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_workspace_is_a_folder_of_its_own_not_the_current_one() {
        let ws = default_workspace();
        assert!(ws.ends_with("swarm/workspace"), "{}", ws.display());
        assert!(ws.is_absolute() || std::env::var_os("HOME").is_none());
        let cwd = std::env::current_dir().unwrap();
        assert_ne!(ws, cwd);
        assert_ne!(ws, PathBuf::from("."));
        let config = WorkerConfig::new(NatsArgs::local("nats://127.0.0.1:4222"), "w");
        assert_eq!(config.workspace_root, ws);
    }
}
