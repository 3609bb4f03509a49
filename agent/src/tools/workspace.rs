//! The workspace root that confines every path a tool is given.
//!
//! **Invariant:** a path is used only after its canonical form (symlinks
//! resolved) is found inside the canonical root; anything else is
//! [`ToolError::Refused`].

use std::path::{Component, Path, PathBuf};

use super::ToolError;

/// The directory tools may read under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// A workspace rooted at `root` (which need not exist yet; calls fail
    /// until it does).
    pub fn new(root: impl Into<PathBuf>) -> Workspace {
        Workspace { root: root.into() }
    }

    /// The root as given.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The canonical root.
    pub fn canonical_root(&self) -> Result<PathBuf, ToolError> {
        self.root.canonicalize().map_err(|e| {
            ToolError::Failed(format!(
                "the workspace root {} is not usable: {e}",
                self.root.display()
            ))
        })
    }

    /// Resolves a path argument to an existing canonical path inside the root.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        let root = self.canonical_root()?;
        if path.contains('\0') {
            return Err(ToolError::InvalidArguments(
                "a path may not contain NUL".to_string(),
            ));
        }
        let joined = root.join(path);
        // A lexical check first, so that `../secret` is refused as outside the
        // workspace even when it does not exist, rather than reported missing.
        if !lexically_normal(&joined).starts_with(&root) {
            return Err(outside(path));
        }
        let canonical = joined.canonicalize().map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ToolError::Failed(format!("{path}: no such file or directory"))
            } else {
                ToolError::Failed(format!("{path}: {e}"))
            }
        })?;
        if !canonical.starts_with(&root) {
            return Err(outside(path));
        }
        Ok(canonical)
    }

    /// Resolves a path argument for writing: the file need not exist, but
    /// its nearest existing ancestor must be inside the root once canonical,
    /// and so must the file itself when it exists (a symlink out is
    /// refused). Missing parent directories are created. Returns the path to
    /// write, inside the canonical root.
    pub fn resolve_for_write(&self, path: &str) -> Result<PathBuf, ToolError> {
        let root = self.canonical_root()?;
        if path.contains('\0') {
            return Err(ToolError::InvalidArguments(
                "a path may not contain NUL".to_string(),
            ));
        }
        let target = lexically_normal(&root.join(path));
        if !target.starts_with(&root) || target == root {
            return Err(outside(path));
        }
        let Some(parent) = target.parent() else {
            return Err(outside(path));
        };
        // The deepest ancestor that exists decides where the write lands.
        let mut existing = parent;
        while !existing.exists() {
            existing = existing.parent().ok_or_else(|| outside(path))?;
        }
        let canonical = existing
            .canonicalize()
            .map_err(|e| ToolError::Failed(format!("{path}: {e}")))?;
        if !canonical.starts_with(&root) {
            return Err(outside(path));
        }
        std::fs::create_dir_all(parent).map_err(|e| ToolError::Failed(format!("{path}: {e}")))?;
        let parent = parent
            .canonicalize()
            .map_err(|e| ToolError::Failed(format!("{path}: {e}")))?;
        if !parent.starts_with(&root) {
            return Err(outside(path));
        }
        let file = parent.join(target.file_name().ok_or_else(|| outside(path))?);
        if std::fs::symlink_metadata(&file).is_ok() {
            let resolved = file
                .canonicalize()
                .map_err(|_| ToolError::Refused(format!("{path:?} is a dangling symlink")))?;
            if !resolved.starts_with(&root) {
                return Err(outside(path));
            }
            if resolved.is_dir() {
                return Err(ToolError::Failed(format!("{path} is a directory")));
            }
            return Ok(resolved);
        }
        Ok(file)
    }

    /// How a canonical path inside the root is shown: relative, with `/`
    /// separators, and `.` for the root itself.
    pub fn display(&self, canonical: &Path) -> String {
        let Ok(root) = self.canonical_root() else {
            return canonical.display().to_string();
        };
        relative_display(&root, canonical)
    }
}

/// `path` relative to `root`, `/`-separated, `.` for the root.
pub(crate) fn relative_display(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => path.display().to_string(),
    }
}

fn outside(path: &str) -> ToolError {
    ToolError::Refused(format!("{path:?} is outside the workspace"))
}

/// Removes `.` and resolves `..` without touching the file system.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_inside_and_are_refused_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "s").unwrap();
        let ws = Workspace::new(&root);

        let a = ws.resolve("sub/a.txt").unwrap();
        assert_eq!(ws.display(&a), "sub/a.txt");
        assert_eq!(ws.display(&ws.resolve(".").unwrap()), ".");
        assert_eq!(
            ws.display(&ws.resolve("sub/../sub/./a.txt").unwrap()),
            "sub/a.txt"
        );
        // An absolute path inside the root is fine.
        let abs = root.join("sub/a.txt");
        assert!(ws.resolve(abs.to_str().unwrap()).is_ok());

        for bad in [
            "../secret.txt",
            "../nope",
            "sub/../../secret.txt",
            "/etc/passwd",
            "/",
        ] {
            assert!(
                matches!(ws.resolve(bad), Err(ToolError::Refused(_))),
                "{bad} was not refused"
            );
        }
        assert!(matches!(
            ws.resolve("missing.txt"),
            Err(ToolError::Failed(_))
        ));
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_of_the_workspace_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(dir.path().join("secret.txt"), "s").unwrap();
        std::fs::write(root.join("inside.txt"), "i").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("up")).unwrap();
        std::os::unix::fs::symlink(root.join("inside.txt"), root.join("ok.txt")).unwrap();
        let ws = Workspace::new(&root);
        assert!(matches!(ws.resolve("link.txt"), Err(ToolError::Refused(_))));
        assert!(matches!(
            ws.resolve("up/secret.txt"),
            Err(ToolError::Refused(_))
        ));
        assert_eq!(ws.display(&ws.resolve("ok.txt").unwrap()), "inside.txt");
    }
}
