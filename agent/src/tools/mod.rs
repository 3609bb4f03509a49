//! Tools an agent may call: the [`Tool`] trait, typed arguments with a JSON
//! schema derived from a Rust struct, and the [`ToolRegistry`].
//!
//! **Invariant:** every tool of [`ToolRegistry::builtin`] only reads, and
//! only inside the workspace root it was built with (see [`workspace`]).
//! The optional tools ([`ToolsConfig`]: `write_file`, `http_fetch`, `shell`,
//! `memory`) are added only when configured.
//!
//! **Invariant:** a call of a tool annotated `destructive` runs only after
//! the registry's [`Approver`] approved it; the default approver denies.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tracing::Instrument as _;

pub mod approval;
pub mod args;
mod builtin;
pub mod calc;
pub mod fetch;
pub mod memory;
pub mod shell;
pub mod workspace;
pub mod write;

pub use approval::{AllowAll, ApprovalDecision, ApprovalRequest, Approver, DenyAll, Expiring};
pub use args::{CommandGateArgs, ToolArgs};
pub(crate) use builtin::EMPTY_DIRECTORY;
pub use fetch::{FetchConfig, HttpFetch};
pub use memory::{InMemoryStore, Memory, MemoryError, MemoryStore};
pub use shell::{Shell, ShellConfig};
pub use workspace::Workspace;
pub use write::WriteFile;

/// Hints about what a tool does, so a runtime can decide which calls need a
/// person's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ToolAnnotations {
    /// The tool changes nothing.
    pub read_only: bool,
    /// The tool may destroy data; a person must approve each call.
    pub destructive: bool,
    /// Calling it twice with the same arguments has the same effect as once.
    pub idempotent: bool,
}

impl ToolAnnotations {
    /// A tool that only reads and may be repeated freely.
    pub const READ_ONLY: ToolAnnotations = ToolAnnotations {
        read_only: true,
        destructive: false,
        idempotent: true,
    };
}

/// What a tool is, as offered to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON schema of its arguments object.
    pub parameters: serde_json::Value,
    /// What kind of effect it has.
    pub annotations: ToolAnnotations,
}

/// Why a tool call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The call is not allowed (a path outside the workspace, ...).
    #[error("refused: {0}")]
    Refused(String),
    /// The tool ran and failed (a missing file, a division by zero, ...).
    #[error("failed: {0}")]
    Failed(String),
    /// No tool has this name.
    #[error("unknown tool {0:?}")]
    UnknownTool(String),
}

/// Who a tool call is made for: tools that keep state per swarm (memory)
/// and approvals read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolContext {
    /// The swarm, when known.
    pub swarm_id: Option<String>,
    /// The task, when known.
    pub task_id: Option<String>,
}

/// Something an agent can call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Its name, description, argument schema and annotations.
    fn spec(&self) -> ToolSpec;
    /// Runs it. `arguments` is a JSON object matching `spec().parameters`.
    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError>;
    /// Runs it for the swarm and task in `ctx`; most tools ignore it.
    async fn call_in(
        &self,
        ctx: &ToolContext,
        arguments: serde_json::Value,
    ) -> Result<String, ToolError> {
        let _ = ctx;
        self.call(arguments).await
    }
}

/// A tool whose arguments are a Rust type: the schema is derived from it and
/// the JSON arguments are parsed into it before [`TypedTool::run`]. Wrap one
/// with [`typed`] to get a [`Tool`].
#[async_trait]
pub trait TypedTool: Send + Sync + 'static {
    /// The arguments object.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// The tool's name.
    const NAME: &'static str;
    /// What it does, for the model.
    const DESCRIPTION: &'static str;
    /// What kind of effect it has.
    const ANNOTATIONS: ToolAnnotations;
    /// Runs it with parsed arguments.
    async fn run(&self, args: Self::Args) -> Result<String, ToolError>;
    /// Runs it for the swarm and task in `ctx`; [`TypedTool::run`] unless overridden.
    async fn run_in(&self, ctx: &ToolContext, args: Self::Args) -> Result<String, ToolError> {
        let _ = ctx;
        self.run(args).await
    }
}

/// Makes a [`Tool`] of a [`TypedTool`]. The schema is derived once, here:
/// specs are asked for on every task, and deriving is not cheap.
pub fn typed<T: TypedTool>(tool: T) -> Arc<dyn Tool> {
    let spec = ToolSpec {
        name: T::NAME.to_string(),
        description: T::DESCRIPTION.to_string(),
        parameters: schemars::schema_for!(T::Args).to_value(),
        annotations: T::ANNOTATIONS,
    };
    Arc::new(Typed { tool, spec })
}

struct Typed<T> {
    tool: T,
    spec: ToolSpec,
}

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        self.tool.run(parse_args::<T>(arguments)?).await
    }

    async fn call_in(
        &self,
        ctx: &ToolContext,
        arguments: serde_json::Value,
    ) -> Result<String, ToolError> {
        self.tool.run_in(ctx, parse_args::<T>(arguments)?).await
    }
}

fn parse_args<T: TypedTool>(arguments: serde_json::Value) -> Result<T::Args, ToolError> {
    // Models often send `null` for "no arguments"; defaults then apply.
    let arguments = if arguments.is_null() {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        arguments
    };
    serde_json::from_value(arguments)
        .map_err(|e| ToolError::InvalidArguments(format!("{}: {e}", T::NAME)))
}

/// Which optional tools a registry offers besides the read-only built-ins.
#[derive(Clone, Default)]
pub struct ToolsConfig {
    /// Offer `write_file` (writes inside the workspace).
    pub write_file: bool,
    /// Offer `http_fetch` with these limits.
    pub http_fetch: Option<FetchConfig>,
    /// Offer `shell` with these limits (each call needs approval).
    pub shell: Option<ShellConfig>,
    /// Offer `memory`, kept in this store.
    pub memory: Option<Arc<dyn MemoryStore>>,
}

impl std::fmt::Debug for ToolsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsConfig")
            .field("write_file", &self.write_file)
            .field("http_fetch", &self.http_fetch)
            .field("shell", &self.shell)
            .field("memory", &self.memory.is_some())
            .finish()
    }
}

/// The tools a worker offers, by name, and the approver of destructive calls.
#[derive(Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Registered>,
    approver: Arc<dyn Approver>,
}

/// A tool and its annotations, read once when it is registered: a call
/// needs them, and a spec (with its schema) is not free to make.
#[derive(Clone)]
struct Registered {
    tool: Arc<dyn Tool>,
    annotations: ToolAnnotations,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        ToolRegistry {
            tools: BTreeMap::new(),
            approver: Arc::new(DenyAll),
        }
    }
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistry")
            .field("tools", &self.names())
            .finish()
    }
}

impl ToolRegistry {
    /// A registry with no tools.
    pub fn new() -> ToolRegistry {
        ToolRegistry::default()
    }

    /// A registry with every built-in tool, reading under `workspace_root`:
    /// `echo`, `read_file`, `list_files`, `grep`, `count`, `checksum`, `calc`.
    pub fn builtin(workspace_root: impl Into<PathBuf>) -> ToolRegistry {
        let mut registry = ToolRegistry::new();
        for tool in builtin::all(Workspace::new(workspace_root)) {
            registry.register(tool);
        }
        registry
    }

    /// The built-in tools plus the optional ones `config` enables, all under
    /// `workspace_root`. Destructive calls are denied until
    /// [`ToolRegistry::with_approver`] sets an approver.
    pub fn with_config(workspace_root: impl Into<PathBuf>, config: &ToolsConfig) -> ToolRegistry {
        let workspace = Workspace::new(workspace_root);
        let mut registry = ToolRegistry::builtin(workspace.root());
        if config.write_file {
            registry.register(typed(WriteFile(workspace.clone())));
        }
        if let Some(fetch) = &config.http_fetch {
            registry.register(typed(HttpFetch(fetch.clone())));
        }
        if let Some(shell) = &config.shell {
            registry.register(typed(Shell {
                workspace,
                config: shell.clone(),
            }));
        }
        if let Some(store) = &config.memory {
            registry.register(typed(Memory(store.clone())));
        }
        registry
    }

    /// The same registry with `approver` deciding on destructive calls.
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> ToolRegistry {
        self.approver = approver;
        self
    }

    /// Adds a tool, replacing any tool of the same name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        let spec = tool.spec();
        self.tools.insert(
            spec.name,
            Registered {
                tool,
                annotations: spec.annotations,
            },
        );
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).map(|r| r.tool.clone())
    }

    /// Every tool's name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Every tool's spec, sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|r| r.tool.spec()).collect()
    }

    /// Calls the tool with this name (with no swarm or task context).
    pub async fn call(
        &self,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<String, ToolError> {
        self.call_in(&ToolContext::default(), name, arguments).await
    }

    /// Calls the tool with this name for the swarm and task in `ctx`. A
    /// destructive tool is put to the approver first; a denial is
    /// [`ToolError::Refused`] with the approver's reason. The call is a
    /// span `execute_tool {name}` (GenAI semantic conventions) when traces
    /// are exported (target `swarm_otel`, see [`crate::provider`]).
    pub async fn call_in(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<String, ToolError> {
        let span = tracing::info_span!(
            target: "swarm_otel",
            "execute_tool",
            otel.name = format!("execute_tool {name}"),
            otel.kind = "internal",
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = name,
            gen_ai.tool.type = "function",
            error.type = tracing::field::Empty,
        );
        let result = self
            .call_unseen(ctx, name, arguments)
            .instrument(span.clone())
            .await;
        if let Err(e) = &result
            && !span.is_disabled()
        {
            span.record("otel.status_code", "ERROR");
            let kind = match e {
                ToolError::InvalidArguments(_) => "invalid_arguments",
                ToolError::Refused(_) => "refused",
                ToolError::Failed(_) => "failed",
                ToolError::UnknownTool(_) => "unknown_tool",
            };
            span.record("error.type", kind);
            span.record("otel.status_description", e.to_string());
        }
        result
    }

    async fn call_unseen(
        &self,
        ctx: &ToolContext,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<String, ToolError> {
        let Some(Registered { tool, annotations }) = self.tools.get(name) else {
            return Err(ToolError::UnknownTool(name.to_string()));
        };
        let annotations = *annotations;
        if annotations.destructive {
            let request = ApprovalRequest {
                id: uuid::Uuid::new_v4().to_string(),
                tool: name.to_string(),
                arguments: arguments.clone(),
                annotations,
                swarm_id: ctx.swarm_id.clone(),
                task_id: ctx.task_id.clone(),
            };
            let id = request.id.clone();
            tracing::info!(approval_id = %id, tool = %name, task_id = ?ctx.task_id, "asking for approval");
            match self.approver.approve(request).await {
                ApprovalDecision::Approved => {
                    tracing::info!(approval_id = %id, tool = %name, "approved");
                }
                ApprovalDecision::Denied { reason } => {
                    tracing::info!(approval_id = %id, tool = %name, %reason, "denied");
                    return Err(ToolError::Refused(format!(
                        "the call of {name} was denied: {reason}"
                    )));
                }
            }
        }
        tool.call_in(ctx, arguments).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_specs_have_schemas_and_read_only_annotations() {
        let registry = ToolRegistry::builtin(".");
        assert_eq!(
            registry.names(),
            [
                "calc",
                "checksum",
                "count",
                "echo",
                "grep",
                "list_files",
                "read_file"
            ]
        );
        for spec in registry.specs() {
            assert!(!spec.description.is_empty(), "{}", spec.name);
            assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
            assert!(spec.parameters["properties"].is_object(), "{}", spec.name);
            assert_eq!(
                spec.annotations,
                ToolAnnotations::READ_ONLY,
                "{}",
                spec.name
            );
        }
        let echo = registry.get("echo").unwrap().spec();
        assert_eq!(echo.parameters["required"], json!(["text"]));
    }

    #[tokio::test]
    async fn wrong_arguments_are_named() {
        let registry = ToolRegistry::builtin(".");
        let err = registry.call("echo", json!({})).await.unwrap_err();
        assert!(
            matches!(&err, ToolError::InvalidArguments(m) if m.contains("text")),
            "{err}"
        );
        let err = registry.call("echo", json!({"text": 5})).await.unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)), "{err}");
        let err = registry
            .call("echo", json!({"text": "a", "txt": "b"}))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, ToolError::InvalidArguments(m) if m.contains("txt")),
            "{err}"
        );
        let err = registry.call("nope", json!({})).await.unwrap_err();
        assert_eq!(err, ToolError::UnknownTool("nope".into()));
    }
}
