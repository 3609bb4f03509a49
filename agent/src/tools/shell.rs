//! `shell`: runs a command with `sh -c` in the workspace root. Off unless
//! configured, annotated `destructive`, so every call goes through the
//! registry's approver first; bounded in time and output. The command runs
//! as every child process does (`crate::command`).

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{ToolAnnotations, ToolError, TypedTool, Workspace};
use crate::command::{CommandError, run_command};

/// Limits of the `shell` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellConfig {
    /// The longest a command may run before it is killed.
    pub timeout: Duration,
    /// The most bytes of stdout and of stderr returned.
    pub max_output_bytes: usize,
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            timeout: Duration::from_secs(60),
            max_output_bytes: 64 * 1024,
        }
    }
}

/// The `shell` tool.
#[derive(Debug, Clone)]
pub struct Shell {
    /// Where commands run.
    pub workspace: Workspace,
    /// Its limits.
    pub config: ShellConfig,
}

/// Arguments of `shell`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellArgs {
    /// The command line, run with `sh -c` in the workspace root.
    pub command: String,
}

#[async_trait]
impl TypedTool for Shell {
    type Args = ShellArgs;
    const NAME: &'static str = "shell";
    const DESCRIPTION: &'static str = "Runs a shell command in the workspace root and returns \
        its exit status, stdout and stderr. Every call needs a person's approval.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations {
        read_only: false,
        destructive: true,
        idempotent: false,
    };

    async fn run(&self, args: ShellArgs) -> Result<String, ToolError> {
        let root = self.workspace.canonical_root()?;
        let output = run_command(
            "sh",
            &["-c".to_string(), args.command.clone()],
            &root,
            None,
            self.config.timeout,
            self.config.max_output_bytes,
        )
        .await
        .map_err(|CommandError(why)| ToolError::Failed(why))?;
        let text = format!(
            "exit status: {}\nstdout:\n{}\nstderr:\n{}",
            output.status_text(),
            output.stdout,
            output.stderr
        );
        if output.success() {
            Ok(text)
        } else {
            Err(ToolError::Failed(text))
        }
    }
}
