//! Temporary directories that can be kept for debugging.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tempfile::TempDir;

/// Set to keep every test directory instead of deleting it on `Drop`.
const KEEP_VAR: &str = "SWARM_KEEP_TEST_DIRS";

/// A temporary directory, deleted on `Drop` unless `SWARM_KEEP_TEST_DIRS` was
/// set when it was made.
#[derive(Debug)]
pub(crate) enum Scratch {
    Temp(TempDir),
    Kept(PathBuf),
}

impl Scratch {
    /// A new directory named `swarm-<what>-...` under the system temp dir.
    pub(crate) fn new(what: &str) -> anyhow::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("swarm-{what}-"))
            .tempdir()
            .context("cannot create a temporary directory")?;
        if std::env::var_os(KEEP_VAR).is_some() {
            let path = dir.keep();
            eprintln!("{KEEP_VAR}: keeping {}", path.display());
            return Ok(Scratch::Kept(path));
        }
        Ok(Scratch::Temp(dir))
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            Scratch::Temp(dir) => dir.path(),
            Scratch::Kept(path) => path,
        }
    }
}
