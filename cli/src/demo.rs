//! What `swarm demo` works on: this repository's own files when it runs
//! inside the repository, or else a few sample files it writes into its
//! data folder, so that its mission names only files that exist wherever it
//! is started (a tool call on a missing file fails the mission).

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The demo's mission on the repository: real tools on its own files.
pub const REPOSITORY_MISSION: &str = "\
1. List the files in common/src
2. Count the words in README.md
3. Compute (17 * 23) + 2^10, then checksum the previous result
";

/// The demo's mission on its sample files.
pub const SAMPLE_MISSION: &str = "\
1. List the files in notes
2. Count the words in README.md
3. Compute (17 * 23) + 2^10, then checksum the previous result
";

/// The sample files, relative to the sample workspace.
const SAMPLE_FILES: [(&str, &str); 4] = [
    (
        "README.md",
        "# Swarm demo workspace\n\n\
         `swarm demo` wrote these files because it was started outside the Swarm\n\
         repository. Its workers read them with real tools: they list the notes\n\
         folder, count the words of this file and checksum a computed number.\n",
    ),
    (
        "notes/agenda.txt",
        "Monday: plan the release.\nTuesday: review the reports.\n",
    ),
    (
        "notes/ideas.txt",
        "A swarm of agents, a manager that reviews them, a boss that plans.\n",
    ),
    (
        "notes/todo.txt",
        "- try swarm up\n- submit a mission with --wait\n- list the swarms\n",
    ),
];

/// Where the demo's workers work and what it asks of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// The workers' workspace root.
    pub workspace: PathBuf,
    /// The mission, naming files under `workspace`.
    pub mission: &'static str,
    /// Whether `workspace` is the Swarm repository (else the sample files).
    pub repository: bool,
}

/// The Swarm repository holding `dir`, if any: `dir` or an ancestor whose
/// `Cargo.toml` is a workspace with the `cli` member named `swarm-cli`, and
/// which has the files the repository mission names.
pub fn find_repository(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| {
            let manifest = std::fs::read_to_string(d.join("Cargo.toml")).unwrap_or_default();
            let cli = std::fs::read_to_string(d.join("cli/Cargo.toml")).unwrap_or_default();
            manifest.contains("[workspace]")
                && cli.contains("name = \"swarm-cli\"")
                && d.join("README.md").is_file()
                && d.join("common/src").is_dir()
        })
        .map(Path::to_path_buf)
}

/// Chooses the demo's workspace: the repository holding `cwd`, or sample
/// files written (afresh) into `<data_dir>/workspace`.
pub fn prepare(cwd: &Path, data_dir: &Path) -> anyhow::Result<Setup> {
    if let Some(root) = find_repository(cwd) {
        return Ok(Setup {
            workspace: root,
            mission: REPOSITORY_MISSION,
            repository: true,
        });
    }
    let workspace = data_dir.join("workspace");
    for (path, text) in SAMPLE_FILES {
        let file = workspace.join(path);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    }
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("workspace {}", workspace.display()))?;
    Ok(Setup {
        workspace,
        mission: SAMPLE_MISSION,
        repository: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_the_repository_the_demo_works_on_it() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let root = find_repository(&here).expect("the source tree is a repository");
        assert!(root.join("cli/Cargo.toml").is_file());
        let setup = prepare(&here, Path::new("/nonexistent")).unwrap();
        assert!(setup.repository);
        assert_eq!(setup.mission, REPOSITORY_MISSION);
    }

    #[test]
    fn elsewhere_it_writes_the_files_its_mission_names() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().join("somewhere");
        std::fs::create_dir_all(&cwd).unwrap();
        assert_eq!(find_repository(&cwd), None);
        let setup = prepare(&cwd, &dir.path().join("data")).unwrap();
        assert!(!setup.repository);
        assert!(setup.workspace.join("README.md").is_file());
        assert!(setup.workspace.join("notes").is_dir());
        assert!(setup.mission.contains("notes") && setup.mission.contains("README.md"));
        // Written again over an earlier run's files.
        prepare(&cwd, &dir.path().join("data")).unwrap();
    }
}
