//! `shell`: runs a command with `sh -c` in the workspace root. Off unless
//! configured, annotated `destructive`, so every call goes through the
//! registry's approver first; bounded in time and output.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use super::{ToolAnnotations, ToolError, TypedTool, Workspace};

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
        .await?;
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

/// What a finished command printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    pub fn status_text(&self) -> String {
        match self.code {
            Some(c) => c.to_string(),
            None => "killed by a signal".to_string(),
        }
    }
}

/// Runs `program args` in `dir`, feeding `stdin`, killed after `timeout`;
/// each output stream is cut to `max_bytes`.
pub(crate) async fn run_command(
    program: &str,
    args: &[String],
    dir: &std::path::Path,
    stdin: Option<&str>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<CommandOutput, ToolError> {
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::Failed(format!("cannot start {program}: {e}")))?;
    let input = stdin.map(|s| s.as_bytes().to_vec());
    let mut child_stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let work = async {
        let write = async {
            if let (Some(pipe), Some(bytes)) = (child_stdin.as_mut(), input.as_ref()) {
                use tokio::io::AsyncWriteExt;
                // A command that exits without reading its input is no error.
                let _ = pipe.write_all(bytes).await;
            }
            drop(child_stdin.take());
        };
        let read = |pipe: Option<_>| async move {
            let mut buf = Vec::new();
            if let Some(p) = pipe {
                let p: Box<dyn tokio::io::AsyncRead + Unpin + Send> = p;
                let _ = p.take(max_bytes as u64 + 1).read_to_end(&mut buf).await;
            }
            buf
        };
        let (_, out, err) = tokio::join!(
            write,
            read(stdout.take().map(|p| Box::new(p) as Box<_>)),
            read(stderr.take().map(|p| Box::new(p) as Box<_>))
        );
        let status = child.wait().await;
        (status, out, err)
    };
    let (status, out, err) = match tokio::time::timeout(timeout, work).await {
        Ok(done) => done,
        Err(_) => {
            return Err(ToolError::Failed(format!(
                "{program} did not finish within {timeout:?} and was killed"
            )));
        }
    };
    let status = status.map_err(|e| ToolError::Failed(format!("{program}: {e}")))?;
    let text = |bytes: Vec<u8>| {
        let cut = bytes.len() > max_bytes;
        let mut s = String::from_utf8_lossy(&bytes[..bytes.len().min(max_bytes)]).into_owned();
        if cut {
            s.push_str(&format!("\n[cut after {max_bytes} bytes]"));
        }
        s
    };
    Ok(CommandOutput {
        code: status.code(),
        stdout: text(out),
        stderr: text(err),
    })
}
