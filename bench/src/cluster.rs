//! A local Swarm for one scenario: nats-server (dev configuration, or the
//! same with `sync_interval: always`) and the boss, manager and worker
//! binaries as real processes, plus a client that sees every `FinalReport`
//! the moment it is published.

use std::collections::HashMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt;
use swarm_common::{
    FinalReport,
    mission::{MissionRecord, MissionRequest, MissionStatus},
    subjects,
};
use swarm_local::{LocalCluster, LocalOptions, NatsCpus};
use tokio::sync::oneshot;

/// The dev nats-server configuration of this source tree.
const DEV_NATS_CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../nats.conf");
/// The packages whose binaries a cluster runs.
const ROLE_PACKAGES: [&str; 3] = ["swarm-boss", "swarm-manager", "swarm-worker"];

/// How JetStream writes reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// The dev `nats.conf`: the server's default sync (every 2 minutes; an
    /// acknowledged write is in the OS page cache).
    Default,
    /// `sync_interval: always`: fsync before every acknowledgement.
    Always,
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SyncMode::Default => "default sync",
            SyncMode::Always => "sync_interval: always",
        })
    }
}

/// When the role binaries are (re)built before a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildPolicy {
    /// Run `cargo build` for them every time (a no-op when current).
    Always,
    /// Only if one is missing.
    IfMissing,
    /// Never: use what is in the bin dir.
    Never,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Server configuration.
    pub sync: SyncMode,
    /// Manager replicas.
    pub managers: usize,
    /// Worker replicas.
    pub workers: usize,
    /// Extra environment for every role.
    pub env: Vec<(String, String)>,
    /// Extra environment for the nats-server (after its local defaults).
    pub nats_env: Vec<(String, String)>,
    /// The nats-server's CPUs.
    pub nats_cpus: NatsCpus,
}

impl ClusterSpec {
    /// `swarm up`'s topology (1 boss, 2 managers, 2 workers, a server on CPUs of
    /// its own) on `sync`.
    pub fn standard(sync: SyncMode) -> ClusterSpec {
        ClusterSpec {
            sync,
            managers: 2,
            workers: 2,
            env: Vec::new(),
            nats_env: Vec::new(),
            nats_cpus: NatsCpus::Own,
        }
    }

    /// Adds an environment variable for every role.
    pub fn with_env(mut self, key: &str, value: impl Into<String>) -> ClusterSpec {
        self.env.push((key.to_owned(), value.into()));
        self
    }
}

/// The directory the role binaries are in: `SWARM_BIN_DIR`, else the cargo
/// profile directory this program was built into (`target/release` for
/// `cargo bench` and `cargo run --release`), building them there per `policy`.
pub fn bin_dir(policy: BuildPolicy) -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("SWARM_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let mut dir = exe
        .parent()
        .context("this program has no parent directory")?
        .to_path_buf();
    // Benches and tests run from `target/<profile>/deps/`.
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let missing = ["boss", "manager", "worker"].iter().any(|b| {
        !dir.join(format!("{b}{}", std::env::consts::EXE_SUFFIX))
            .is_file()
    });
    let build = match policy {
        BuildPolicy::Always => true,
        BuildPolicy::IfMissing => missing,
        BuildPolicy::Never => false,
    };
    if build {
        build_roles(&dir)?;
    }
    Ok(dir)
}

/// `cargo build --bins` of the role packages into `profile_dir`'s profile.
fn build_roles(profile_dir: &Path) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--bins",
        "--quiet",
        "--manifest-path",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"),
    ]);
    for p in ROLE_PACKAGES {
        cmd.args(["-p", p]);
    }
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            cmd.arg("--release");
        }
        Some(other) => {
            cmd.args(["--profile", other]);
        }
    }
    if let Some(target) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target);
    }
    eprintln!(
        "building the role binaries into {} ...",
        profile_dir.display()
    );
    let status = cmd.status().context("cannot run cargo")?;
    if !status.success() {
        bail!("building {} failed ({status})", ROLE_PACKAGES.join(", "));
    }
    Ok(())
}

/// A path from `from_dir` to the absolute `target` made of `..` steps up to
/// the root and then `target`'s components: nats-server resolves `include`
/// relative to the including file.
fn relative_to_root(from_dir: &Path, target: &Path) -> PathBuf {
    let mut rel = PathBuf::new();
    for c in from_dir.components() {
        if matches!(c, Component::Normal(_)) {
            rel.push("..");
        }
    }
    for c in target.components() {
        if let Component::Normal(part) = c {
            rel.push(part);
        }
    }
    rel
}

/// Writes the server configuration for `sync` into `dir`; `None` means the
/// dev configuration as it is.
fn nats_conf(sync: SyncMode, dir: &Path) -> anyhow::Result<PathBuf> {
    let dev = std::fs::canonicalize(DEV_NATS_CONF)
        .with_context(|| format!("cannot find {DEV_NATS_CONF}"))?;
    match sync {
        SyncMode::Default => Ok(dev),
        SyncMode::Always => {
            let dir = std::fs::canonicalize(dir)?;
            let path = dir.join("nats-sync-always.conf");
            // A second `jetstream` block replaces the dev one: restate its limits.
            let text = format!(
                "# The dev configuration with an fsync before every acknowledgement.\n\
                 include \"{}\"\n\
                 jetstream {{\n    max_memory_store: 256MB\n    max_file_store: 8GB\n    sync_interval: always\n}}\n",
                relative_to_root(&dir, &dev).display()
            );
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        }
    }
}

/// When a report arrived, and the report.
#[derive(Debug)]
pub struct Arrival {
    /// When the client received it.
    pub at: Instant,
    /// The same, by the wall clock (to compare with the report's timestamps).
    pub wall: chrono::DateTime<chrono::Utc>,
    /// The report.
    pub report: FinalReport,
}

/// One mission from submission to report.
#[derive(Debug)]
pub struct MissionRun {
    /// The swarm the mission ran as.
    pub swarm_id: String,
    /// From just before the request to the report's arrival (monotonic clock).
    pub elapsed: Duration,
    /// Wall clock just before the request.
    pub submitted: chrono::DateTime<chrono::Utc>,
    /// Wall clock when the report arrived.
    pub arrived: chrono::DateTime<chrono::Utc>,
    /// The report.
    pub report: FinalReport,
}

enum Slot<T> {
    Waiting(oneshot::Sender<T>),
    Arrived(T),
}

/// One value per swarm id, handed to whoever waits for it, whether it came
/// before they asked or after; a second value for the same swarm is dropped.
pub struct Mailbox<T> {
    slots: Arc<Mutex<HashMap<String, Slot<T>>>>,
}

impl<T> Clone for Mailbox<T> {
    fn clone(&self) -> Self {
        Mailbox {
            slots: self.slots.clone(),
        }
    }
}

impl<T> Default for Mailbox<T> {
    fn default() -> Self {
        Mailbox {
            slots: Arc::default(),
        }
    }
}

impl<T> Mailbox<T> {
    fn deliver(&self, swarm_id: String, value: T) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        match slots.remove(&swarm_id) {
            Some(Slot::Waiting(tx)) => {
                // The waiter may have given up: nothing to do then.
                let _ = tx.send(value);
            }
            Some(Slot::Arrived(first)) => {
                slots.insert(swarm_id, Slot::Arrived(first));
            }
            None => {
                slots.insert(swarm_id, Slot::Arrived(value));
            }
        }
    }

    /// The value of `swarm_id` when it arrives (at once if it has).
    pub fn expect(&self, swarm_id: &str) -> oneshot::Receiver<T> {
        let (tx, rx) = oneshot::channel();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        match slots.remove(swarm_id) {
            Some(Slot::Arrived(a)) => {
                let _ = tx.send(a);
            }
            _ => {
                slots.insert(swarm_id.to_owned(), Slot::Waiting(tx));
            }
        }
        rx
    }
}

/// Every `FinalReport` published on the cluster, by swarm id, received on a
/// plain (core NATS) subscription: no consumer to create per swarm, and no
/// replay of the swarm's progress messages as `swarm_client::client::watch` does.
pub type Reports = Mailbox<Arrival>;

/// Missions whose record the boss has closed (report rendered and stored,
/// or planning failed), by swarm id: seen on a plain subscription to the
/// `missions` bucket's subjects, so nothing is asked of the server for it.
pub type Settled = Mailbox<()>;

/// A running local Swarm and a client of it.
pub struct BenchCluster {
    /// The processes.
    pub local: LocalCluster,
    /// A client connection.
    pub client: async_nats::Client,
    /// JetStream on `client`.
    pub js: async_nats::jetstream::Context,
    /// Reports as they are published.
    pub reports: Reports,
    /// Missions as the boss closes their records.
    pub settled: Settled,
    /// What was started.
    pub spec: ClusterSpec,
    next_mission: std::sync::atomic::AtomicU64,
    /// Holds the store, the logs and the workers' workspace.
    dir: tempfile::TempDir,
}

impl BenchCluster {
    /// Starts the cluster `spec` with the binaries in `bin_dir`.
    pub async fn start(spec: ClusterSpec, bin_dir: &Path) -> anyhow::Result<BenchCluster> {
        let dir = tempfile::Builder::new()
            .prefix("swarm-bench-")
            .tempdir()
            .context("creating a temp dir")?;
        let workspace = dir.path().join("workspace");
        std::fs::create_dir_all(&workspace)?;
        let mut opts = LocalOptions::new(dir.path().join("data"));
        opts.bin_dir = bin_dir.to_path_buf();
        opts.managers = spec.managers;
        opts.workers = spec.workers;
        opts.workspace_root = workspace;
        opts.nats_conf = Some(nats_conf(spec.sync, dir.path())?);
        opts.extra_env = spec.env.clone();
        opts.nats_env = spec.nats_env.clone();
        opts.nats_cpus = spec.nats_cpus.clone();
        // Warnings only: a log line per task would be part of what is measured.
        if std::env::var_os("RUST_LOG").is_none() {
            opts.extra_env.push(("RUST_LOG".into(), "warn".into()));
        }
        let local = LocalCluster::start(opts).await?;
        let client = async_nats::connect(local.url())
            .await
            .context("connecting to the cluster")?;
        let js = async_nats::jetstream::new(client.clone());
        let reports = Reports::default();
        let mut sub = client
            .subscribe(subjects::REPORT_FILTER)
            .await
            .context("subscribing to reports")?;
        let sink = reports.clone();
        tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let at = Instant::now();
                let wall = chrono::Utc::now();
                let Some(swarm_id) =
                    subjects::Subject::parse(&msg.subject).map(|s| s.swarm_id().to_owned())
                else {
                    continue;
                };
                if let Ok(env) =
                    swarm_runtime::wire::decode::<FinalReport>(msg.headers.as_ref(), &msg.payload)
                {
                    sink.deliver(
                        swarm_id,
                        Arrival {
                            at,
                            wall,
                            report: env.body,
                        },
                    );
                }
            }
        });
        let settled = Settled::default();
        let prefix = format!("$KV.{}.", subjects::MISSIONS_BUCKET);
        let mut records = client
            .subscribe(format!("{prefix}>"))
            .await
            .context("subscribing to mission records")?;
        let sink = settled.clone();
        tokio::spawn(async move {
            while let Some(msg) = records.next().await {
                let Some(swarm_id) = msg.subject.strip_prefix(prefix.as_str()) else {
                    continue;
                };
                let closed = swarm_common::Codec::MsgPack
                    .decode::<MissionRecord>(&msg.payload)
                    .is_ok_and(|r| {
                        matches!(r.status, MissionStatus::Reported | MissionStatus::Failed)
                    });
                if closed {
                    sink.deliver(swarm_id.to_owned(), ());
                }
            }
        });
        client.flush().await.context("subscribing to reports")?;
        Ok(BenchCluster {
            local,
            client,
            js,
            reports,
            settled,
            spec,
            next_mission: std::sync::atomic::AtomicU64::new(0),
            dir,
        })
    }

    /// A mission id not used before in this cluster.
    pub fn mission_id(&self, label: &str) -> String {
        let n = self
            .next_mission
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("bench-{label}-{n}")
    }

    /// Submits `request` and waits for its report. Returns the time from
    /// just before the submission to the report's arrival, and the report.
    pub async fn run_mission(
        &self,
        request: &MissionRequest,
        timeout: Duration,
    ) -> anyhow::Result<(Duration, FinalReport)> {
        let run = self.run_mission_timed(request, timeout).await?;
        Ok((run.elapsed, run.report))
    }

    /// As [`run_mission`](Self::run_mission), with wall-clock times too.
    pub async fn run_mission_timed(
        &self,
        request: &MissionRequest,
        timeout: Duration,
    ) -> anyhow::Result<MissionRun> {
        // A mission id names its swarm before the boss does; without one,
        // the reply names it (its report, should it come first, waits in
        // the mailbox).
        let named = request
            .mission_id
            .as_deref()
            .map(|id| swarm_common::mission::swarm_id_for(Some(id)));
        let early = named.as_deref().map(|id| self.reports.expect(id));
        let submitted = chrono::Utc::now();
        let start = Instant::now();
        let reply = swarm_client::client::submit(&self.client, request, timeout).await?;
        let swarm_id = reply.swarm_id;
        if let Some(named) = named
            && named != swarm_id
        {
            bail!("the boss named the swarm {swarm_id} rather than {named}");
        }
        let report = early.unwrap_or_else(|| self.reports.expect(&swarm_id));
        let arrival = self
            .within(timeout, report, || format!("no report for {swarm_id}"))
            .await?;
        Ok(MissionRun {
            swarm_id,
            elapsed: arrival.at.duration_since(start),
            submitted,
            arrived: arrival.wall,
            report: arrival.report,
        })
    }

    /// Waits until the boss has closed the record of `swarm_id` (its report
    /// rendered and stored, or its planning failed).
    pub async fn settle(&self, swarm_id: &str, timeout: Duration) -> anyhow::Result<()> {
        self.within(timeout, self.settled.expect(swarm_id), || {
            format!("the record of {swarm_id} was not closed")
        })
        .await
    }

    /// What a mailbox hands over within `timeout`; otherwise an error that
    /// says what did not come, with the tails of the roles' logs.
    async fn within<T>(
        &self,
        timeout: Duration,
        value: oneshot::Receiver<T>,
        what: impl FnOnce() -> String,
    ) -> anyhow::Result<T> {
        tokio::time::timeout(timeout, value)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "{} within {timeout:?}\n{}",
                    what(),
                    self.local.log_tails(20)
                )
            })?
            .context("the subscription feeding it ended")
    }

    /// Resident memory of the manager processes, in bytes.
    pub fn managers_rss(&self) -> u64 {
        self.local
            .managers
            .iter()
            .filter_map(|m| m.pid())
            .filter_map(rss_bytes)
            .sum()
    }

    /// The most resident memory the manager processes have had, in bytes.
    pub fn managers_peak_rss(&self) -> u64 {
        self.local
            .managers
            .iter()
            .filter_map(|m| m.pid())
            .filter_map(|pid| status_kib(pid, "VmHWM:"))
            .sum()
    }

    /// The workers' workspace (their tools' root).
    pub fn workspace(&self) -> std::path::PathBuf {
        self.dir.path().join("workspace")
    }

    /// Resident memory of the nats-server, in bytes.
    pub fn nats_rss(&self) -> u64 {
        self.local
            .nats
            .process()
            .pid()
            .and_then(rss_bytes)
            .unwrap_or(0)
    }

    /// Stops every process. The cluster's files (logs, store) are removed,
    /// unless the environment variable `SWARM_BENCH_KEEP` is set: then their
    /// directory is printed and kept.
    pub async fn stop(self) {
        self.local.stop(Duration::from_secs(5)).await;
        if std::env::var_os("SWARM_BENCH_KEEP").is_some() {
            eprintln!(
                "kept the cluster's logs and store in {}",
                self.dir.keep().display()
            );
        }
    }
}

/// `VmRSS` of a process from `/proc/<pid>/status`.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// A size in `/proc/<pid>/status` (given in KiB), in bytes.
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_path_climbs_to_the_root() {
        let rel = relative_to_root(Path::new("/tmp/x"), Path::new("/work/main/nats.conf"));
        assert_eq!(rel, PathBuf::from("../../work/main/nats.conf"));
    }

    #[test]
    fn own_rss_is_readable() {
        assert!(rss_bytes(std::process::id()).is_some_and(|b| b > 0));
    }
}
