//! Tools an agent may call: the [`Tool`] trait, typed arguments with a JSON
//! schema derived from a Rust struct, and the [`ToolRegistry`].
//!
//! **Invariant:** every built-in tool only reads, and only inside the
//! workspace root it was built with (see [`workspace`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

mod builtin;
pub mod calc;
pub mod workspace;

pub(crate) use builtin::EMPTY_DIRECTORY;
pub use workspace::Workspace;

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

/// Something an agent can call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Its name, description, argument schema and annotations.
    fn spec(&self) -> ToolSpec;
    /// Runs it. `arguments` is a JSON object matching `spec().parameters`.
    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError>;
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
}

/// Makes a [`Tool`] of a [`TypedTool`].
pub fn typed<T: TypedTool>(tool: T) -> Arc<dyn Tool> {
    Arc::new(Typed(tool))
}

struct Typed<T>(T);

#[async_trait]
impl<T: TypedTool> Tool for Typed<T> {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: T::NAME.to_string(),
            description: T::DESCRIPTION.to_string(),
            parameters: schemars::schema_for!(T::Args).to_value(),
            annotations: T::ANNOTATIONS,
        }
    }

    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        // Models often send `null` for "no arguments"; defaults then apply.
        let arguments = if arguments.is_null() {
            serde_json::Value::Object(serde_json::Map::new())
        } else {
            arguments
        };
        let args: T::Args = serde_json::from_value(arguments)
            .map_err(|e| ToolError::InvalidArguments(format!("{}: {e}", T::NAME)))?;
        self.0.run(args).await
    }
}

/// The tools a worker offers, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
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

    /// Adds a tool, replacing any tool of the same name.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.spec().name, tool);
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    /// Every tool's name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Every tool's spec, sorted by name.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }

    /// Calls the tool with this name.
    pub async fn call(
        &self,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<String, ToolError> {
        match self.tools.get(name) {
            Some(tool) => tool.call(arguments).await,
            None => Err(ToolError::UnknownTool(name.to_string())),
        }
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
