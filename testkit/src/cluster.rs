//! Whole-system clusters of the Swarm binaries for one test.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context;
use swarm_local::{LocalCluster, LocalOptions};

use crate::nats::dev_nats_conf;
use crate::scratch::Scratch;

/// The managers' key for assignment tokens in every [`Cluster`].
pub const TEST_TOKEN_KEY: &str = "swarm-test-token-key";

/// The packages whose binaries a [`Cluster`] runs.
const ROLE_PACKAGES: [&str; 4] = ["swarm-boss", "swarm-manager", "swarm-worker", "swarm-cli"];

/// Where the `boss`, `manager`, `worker` and `swarm` binaries are.
///
/// `SWARM_BIN_DIR` if set (taken as is). Otherwise the cargo profile
/// directory the running test was built into (a test runs from
/// `target/<profile>/deps/`), after making sure the binaries there are
/// current: when one is missing or older than its sources (say after
/// `cargo test -p swarm-tests` alone), the first call in a test process runs
/// `cargo build --bins` for the role packages. Panics with a clear message
/// if the binaries cannot be had.
pub fn bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(find_bin_dir).clone()
}

fn find_bin_dir() -> PathBuf {
    let dir = match std::env::var_os("SWARM_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().expect("cannot find the running test's path");
            let dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("the running test is not in target/<profile>/deps/")
                .to_path_buf();
            if binaries_stale(&dir) {
                build_role_binaries(&dir);
            }
            dir
        }
    };
    let boss = dir.join(format!("boss{}", std::env::consts::EXE_SUFFIX));
    assert!(
        boss.is_file(),
        "no boss binary at {}: run `cargo test --workspace` so the boss/manager/worker \
         binaries are built, or set SWARM_BIN_DIR",
        boss.display()
    );
    dir
}

/// Whether a role binary is missing or older than a source file of the
/// crates it is built from. `cargo test --workspace` builds the binaries
/// itself (their packages have integration tests); rebuilding them here
/// without need would relink them with `cargo build`'s feature set and make
/// the next `cargo test` relink them back.
fn binaries_stale(profile_dir: &Path) -> bool {
    let oldest_binary = ["boss", "manager", "worker", "swarm"]
        .iter()
        .map(|b| profile_dir.join(format!("{b}{}", std::env::consts::EXE_SUFFIX)))
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect::<Option<Vec<_>>>()
        .and_then(|times| times.into_iter().min());
    let Some(oldest_binary) = oldest_binary else {
        return true;
    };
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let mut dirs: Vec<PathBuf> = [
        "common", "runtime", "agent", "boss", "manager", "worker", "client", "local", "cli",
        "proto",
    ]
    .iter()
    .map(|c| root.join(c))
    .collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "tests") {
                    dirs.push(path);
                }
            } else if entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > oldest_binary)
            {
                return true;
            }
        }
    }
    false
}

/// Runs `cargo build --bins` for the role packages in the profile of
/// `profile_dir` (`target/debug`, `target/release`, `target/<custom>`).
/// Does nothing when the test was not started by cargo.
fn build_role_binaries(profile_dir: &Path) {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return;
    };
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--bins", "--quiet"])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"));
    for package in ROLE_PACKAGES {
        cmd.args(["-p", package]);
    }
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(profile) => {
            cmd.args(["--profile", profile]);
        }
    }
    // Build into the same target dir as the running test (cargo marks its
    // root with CACHEDIR.TAG; under `--target <triple>` that is one level up,
    // and the default is then left alone).
    if let Some(target) = profile_dir.parent()
        && target.join("CACHEDIR.TAG").is_file()
    {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    let out = cmd
        .output()
        .expect("cannot run cargo to build the boss/manager/worker binaries");
    assert!(
        out.status.success(),
        "`cargo build --bins` of {} failed:\n{}",
        ROLE_PACKAGES.join(", "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds a [`Cluster`]: `Cluster::builder().managers(2).workers(3).start().await`.
#[derive(Debug, Clone)]
pub struct ClusterBuilder {
    bosses: usize,
    managers: usize,
    workers: usize,
    workspace: Option<PathBuf>,
    env: Vec<(String, String)>,
    ready_timeout: Option<Duration>,
    bin_dir: Option<PathBuf>,
    metrics_base_port: Option<u16>,
    gateway: bool,
}

impl Default for ClusterBuilder {
    fn default() -> Self {
        ClusterBuilder {
            bosses: 1,
            managers: 2,
            workers: 2,
            workspace: None,
            env: Vec::new(),
            ready_timeout: None,
            bin_dir: None,
            metrics_base_port: None,
            gateway: false,
        }
    }
}

impl ClusterBuilder {
    /// Number of boss replicas (default 1).
    pub fn bosses(mut self, n: usize) -> Self {
        self.bosses = n;
        self
    }

    /// Number of manager replicas (default 2).
    pub fn managers(mut self, n: usize) -> Self {
        self.managers = n;
        self
    }

    /// Number of worker replicas (default 2).
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = n;
        self
    }

    /// The workers' workspace root (default: an empty `workspace/` in the
    /// cluster's temporary directory).
    pub fn workspace(mut self, path: impl Into<PathBuf>) -> Self {
        self.workspace = Some(path.into());
        self
    }

    /// An environment variable for every role process.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// How long to wait for the cluster to be ready (default 30 s).
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = Some(timeout);
        self
    }

    /// Serve each role's `/metrics` on 127.0.0.1 from this port up
    /// ([`LocalOptions::metrics_base_port`]; default: none).
    pub fn metrics_base_port(mut self, port: u16) -> Self {
        self.metrics_base_port = Some(port);
        self
    }

    /// Run an A2A gateway on a free port of 127.0.0.1 too
    /// ([`LocalCluster::gateway_url`]).
    pub fn gateway(mut self) -> Self {
        self.gateway = true;
        self
    }

    /// Where the role binaries are (default: [`bin_dir()`]).
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Starts nats-server and the roles in a new temporary directory and
    /// waits until they are ready. The error carries the logs' tails.
    pub async fn start(self) -> anyhow::Result<Cluster> {
        let bin_dir = match self.bin_dir {
            Some(dir) => dir,
            None => tokio::task::spawn_blocking(bin_dir)
                .await
                .context("finding the role binaries panicked")?,
        };
        let dir = Scratch::new("cluster")?;
        let mut opts = LocalOptions::new(dir.path());
        opts.bosses = self.bosses;
        opts.managers = self.managers;
        opts.workers = self.workers;
        opts.nats_conf = Some(dev_nats_conf());
        opts.bin_dir = bin_dir;
        // A key tests know, so a test playing a worker can make the token
        // its result must echo (the test's own variables come after).
        opts.extra_env = [("SWARM_TOKEN_KEY".to_owned(), TEST_TOKEN_KEY.to_owned())]
            .into_iter()
            .chain(self.env)
            .collect();
        opts.metrics_base_port = self.metrics_base_port;
        opts.gateway_port = self.gateway.then_some(0);
        if let Some(timeout) = self.ready_timeout {
            opts.ready_timeout = timeout;
        }
        opts.workspace_root = match self.workspace {
            Some(path) => path,
            None => {
                let path = dir.path().join("workspace");
                std::fs::create_dir_all(&path)
                    .with_context(|| format!("cannot create {}", path.display()))?;
                path
            }
        };
        let local = LocalCluster::start(opts).await?;
        Ok(Cluster {
            local: Some(local),
            dir,
        })
    }
}

/// A running Swarm: nats-server plus boss, manager and worker processes in
/// a temporary directory. Derefs to [`LocalCluster`] for the processes
/// (kill, restart, spawn more). Everything is killed on `Drop`; a test that
/// panics while it holds a cluster prints the tails of the logs.
#[derive(Debug)]
pub struct Cluster {
    // Declared before `dir`: the processes die before their files are deleted.
    // `None` only inside `stop`.
    local: Option<LocalCluster>,
    dir: Scratch,
}

impl Cluster {
    /// A builder with 1 boss, 2 managers and 2 workers.
    pub fn builder() -> ClusterBuilder {
        ClusterBuilder::default()
    }

    /// The supervised processes.
    pub fn local(&self) -> &LocalCluster {
        self.local.as_ref().expect("cluster already stopped")
    }

    /// The supervised processes, to kill, restart or add some.
    pub fn local_mut(&mut self) -> &mut LocalCluster {
        self.local.as_mut().expect("cluster already stopped")
    }

    /// A new client connected to the cluster's nats-server. Panics if it
    /// cannot connect.
    pub async fn client(&self) -> async_nats::Client {
        let url = self.url();
        async_nats::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the cluster's nats-server at {url}: {e}"))
    }

    /// The temporary directory (store, logs, reports, default workspace).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where the bosses write rendered reports.
    pub fn reports_dir(&self) -> PathBuf {
        self.local().reports_dir().to_path_buf()
    }

    /// The last 40 lines of every process's log, for failure messages.
    pub fn log_tails(&self) -> String {
        self.local().log_tails(40)
    }

    /// Graceful shutdown: SIGTERM to the roles, SIGKILL after `grace`, then
    /// the same for nats-server.
    pub async fn stop(mut self, grace: Duration) {
        if let Some(local) = self.local.take() {
            local.stop(grace).await;
        }
    }
}

impl Deref for Cluster {
    type Target = LocalCluster;

    fn deref(&self) -> &LocalCluster {
        self.local()
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        self.local_mut()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(local) = &self.local
        {
            eprintln!(
                "--- swarm test cluster in {} ---\n{}",
                self.dir.path().display(),
                local.log_tails(40)
            );
        }
    }
}
