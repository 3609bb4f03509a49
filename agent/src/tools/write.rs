//! `write_file`: writes a text file inside the workspace, creating missing
//! directories. Paths are confined as for the reading tools
//! ([`Workspace::resolve_for_write`]).

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{ToolAnnotations, ToolError, TypedTool, Workspace};

/// The largest content `write_file` writes, in bytes.
pub const MAX_WRITE_BYTES: usize = 10 * 1024 * 1024;

/// The `write_file` tool.
#[derive(Debug, Clone)]
pub struct WriteFile(pub Workspace);

/// Arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path of the file, relative to the workspace root; missing directories are created.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
}

#[async_trait]
impl TypedTool for WriteFile {
    type Args = WriteFileArgs;
    const NAME: &'static str = "write_file";
    const DESCRIPTION: &'static str = "Writes a text file in the workspace, replacing it if it \
        exists and creating missing directories. Returns the path and the number of bytes written.";
    const ANNOTATIONS: ToolAnnotations = ToolAnnotations {
        read_only: false,
        destructive: false,
        idempotent: true,
    };

    async fn run(&self, args: WriteFileArgs) -> Result<String, ToolError> {
        if args.content.len() > MAX_WRITE_BYTES {
            return Err(ToolError::InvalidArguments(format!(
                "write_file: the content is {} bytes; the limit is {MAX_WRITE_BYTES}",
                args.content.len()
            )));
        }
        let ws = self.0.clone();
        super::builtin::blocking(move || {
            let path = ws.resolve_for_write(&args.path)?;
            std::fs::write(&path, args.content.as_bytes())
                .map_err(|e| ToolError::Failed(format!("{}: {e}", args.path)))?;
            Ok(format!(
                "wrote {} bytes to {}",
                args.content.len(),
                ws.display(&path)
            ))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::typed;

    #[tokio::test]
    async fn writes_inside_and_refuses_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(&root).unwrap();
        let tool = typed(WriteFile(Workspace::new(&root)));
        let out = tool
            .call(json!({"path": "out/a.txt", "content": "hello"}))
            .await
            .unwrap();
        assert_eq!(out, "wrote 5 bytes to out/a.txt");
        assert_eq!(
            std::fs::read_to_string(root.join("out/a.txt")).unwrap(),
            "hello"
        );
        for bad in ["../evil.txt", "out/../../evil.txt", "/tmp/evil.txt", "."] {
            let e = tool
                .call(json!({"path": bad, "content": "x"}))
                .await
                .unwrap_err();
            assert!(matches!(e, ToolError::Refused(_)), "{bad}: {e}");
        }
        assert!(!dir.path().join("evil.txt").exists());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
            std::os::unix::fs::symlink(dir.path().join("x.txt"), root.join("link.txt")).unwrap();
            std::fs::write(dir.path().join("x.txt"), "keep").unwrap();
            for bad in ["up/evil.txt", "up/new/evil.txt", "link.txt"] {
                let e = tool
                    .call(json!({"path": bad, "content": "x"}))
                    .await
                    .unwrap_err();
                assert!(matches!(e, ToolError::Refused(_)), "{bad}: {e}");
            }
            assert!(!dir.path().join("new").exists());
            assert_eq!(
                std::fs::read_to_string(dir.path().join("x.txt")).unwrap(),
                "keep"
            );
        }
    }
}
