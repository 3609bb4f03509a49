//! The peers of issue 6's targets, measured in the same run as Swarm: Ray
//! and Celery (with Redis) run the same shapes as the latency missions (one
//! task, a fan-out with its fan-in, a chain) and the sustained load, each task
//! returning its input, through `bench/peers/driver.py`, one long-lived
//! driver process per peer, so a peer's run can alternate with Swarm's on
//! the same host speed (`swarm-bench --peers ray,celery`).
//!
//! `bench/peers/setup.sh` provides the Python that has them (a venv under
//! `.bench-peers/`, installed on first use) and Redis. A third peer,
//! `threads`, needs nothing but `python3`: a thread pool in the driver's own
//! process, no broker and nothing stored, the least a Python task runner
//! can take for these shapes (and what the harness's own test runs).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::ValueEnum;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const PEERS_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers");

/// How long a peer may take to start (Ray: a few seconds; its first start
/// on a cold disk, more).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// How long one run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// A peer to measure beside Swarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Peer {
    /// Ray, a local cluster of this machine's CPUs.
    Ray,
    /// Celery with Redis as broker and result backend, a prefork worker.
    Celery,
    /// A thread pool in the driver's process: no broker, nothing stored.
    Threads,
}

impl Peer {
    /// The name the driver knows it by.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Ray => "ray",
            Peer::Celery => "celery",
            Peer::Threads => "threads",
        }
    }

    /// Whether the peer needs the packages `setup.sh` installs.
    fn needs_setup(self) -> bool {
        self != Peer::Threads
    }
}

/// A mission's shape, as a peer runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One task.
    OneTask,
    /// This many independent tasks and one that takes all their results.
    FanOut(usize),
    /// This many tasks, each taking the result of the one before.
    Chain(usize),
    /// The sustained load: this many missions of this many independent
    /// tasks each, all submitted at once.
    Load {
        /// Missions.
        missions: usize,
        /// Tasks per mission.
        tasks: usize,
    },
}

impl Shape {
    /// The driver's request line for one run.
    fn request(self) -> String {
        match self {
            Shape::OneTask => "one-task\n".to_owned(),
            Shape::FanOut(n) => format!("fan-out {n}\n"),
            Shape::Chain(n) => format!("chain {n}\n"),
            Shape::Load { missions, tasks } => format!("load {missions} {tasks}\n"),
        }
    }
}

/// One line from the driver.
#[derive(Debug, Default, Deserialize, PartialEq)]
struct Answer {
    #[serde(default)]
    ready: bool,
    version: Option<String>,
    setup: Option<String>,
    ms: Option<f64>,
    error: Option<String>,
}

fn parse(peer: Peer, line: Option<String>) -> anyhow::Result<Answer> {
    let line = line.with_context(|| format!("the {} driver exited", peer.name()))?;
    let answer: Answer = serde_json::from_str(&line)
        .with_context(|| format!("the {} driver said {line:?}", peer.name()))?;
    if let Some(e) = &answer.error {
        bail!("{}: {e}", peer.name());
    }
    Ok(answer)
}

/// The Python that runs `peer`'s driver: `python3` for `threads`, else the
/// one `setup.sh` prints (installing the peers on first use).
pub fn python(peer: Peer) -> anyhow::Result<PathBuf> {
    if !peer.needs_setup() {
        return Ok(PathBuf::from("python3"));
    }
    let script = Path::new(PEERS_DIR).join("setup.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed ({})", script.display(), out.status);
    }
    let path = String::from_utf8(out.stdout).context("setup.sh printed a non-UTF-8 path")?;
    Ok(PathBuf::from(path.trim()))
}

/// A running driver of one peer.
pub struct PeerDriver {
    /// Which peer.
    pub peer: Peer,
    /// Its version, as the driver reports it.
    pub version: String,
    /// How it is set up, in a phrase.
    pub setup: String,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// Dropped last: whatever the peer left running goes with it.
    _group: ProcessGroup,
}

/// The driver's process group: the driver, and what the peer starts (Ray's
/// daemons and agents, Celery's worker and Redis), which would outlive a
/// driver that was killed. Dropping it kills the whole group; after a clean
/// stop there is nothing left to kill.
struct ProcessGroup(u32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        // `kill(1)`: the workspace forbids the `unsafe` a libc call needs.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}

impl PeerDriver {
    /// Starts `peer`'s driver and waits until the peer is ready.
    pub async fn start(peer: Peer) -> anyhow::Result<PeerDriver> {
        let python = tokio::task::spawn_blocking(move || python(peer)).await??;
        let mut child = Command::new(&python)
            .arg(Path::new(PEERS_DIR).join("driver.py"))
            .args(["--peer", peer.name()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {} with {}", peer.name(), python.display()))?;
        let group = ProcessGroup(child.id().context("the driver exited at once")?);
        let stdin = child.stdin.take().context("no stdin")?;
        let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
        let first = tokio::time::timeout(START_TIMEOUT, lines.next_line())
            .await
            .with_context(|| format!("{} did not start within {START_TIMEOUT:?}", peer.name()))??;
        let ready = parse(peer, first)?;
        if !ready.ready {
            bail!("the {} driver did not say it is ready", peer.name());
        }
        Ok(PeerDriver {
            peer,
            version: ready.version.unwrap_or_default(),
            setup: ready.setup.unwrap_or_default(),
            child,
            stdin,
            lines,
            _group: group,
        })
    }

    /// `Ray 2.60.0`
    pub fn label(&self) -> String {
        let name = match self.peer {
            Peer::Ray => "Ray",
            Peer::Celery => "Celery",
            Peer::Threads => "Python threads",
        };
        format!("{name} {}", self.version)
    }

    /// Runs one mission of `shape`: milliseconds from submission to the
    /// last result, as the driver measured them.
    pub async fn run(&mut self, shape: Shape) -> anyhow::Result<f64> {
        self.stdin.write_all(shape.request().as_bytes()).await?;
        self.stdin.flush().await?;
        let line = tokio::time::timeout(RUN_TIMEOUT, self.lines.next_line())
            .await
            .with_context(|| format!("{} took over {RUN_TIMEOUT:?}", self.peer.name()))??;
        parse(self.peer, line)?
            .ms
            .with_context(|| format!("{} answered without a time", self.peer.name()))
    }

    /// Stops the peer: closes the driver's input and waits for it to shut
    /// the peer down, then kills whatever is left of its process group.
    pub async fn stop(self) {
        let PeerDriver {
            mut child,
            stdin,
            _group,
            ..
        } = self;
        drop(stdin);
        let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_dropped_group_takes_what_its_leader_started() {
        use std::os::unix::process::CommandExt as _;
        // A leader that starts a child of its own, as a driver starts Redis.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 60 & echo $!; wait"])
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(leader.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild = line.trim().to_owned();
        let alive = |pid: &str| Path::new(&format!("/proc/{pid}")).exists();
        assert!(alive(&grandchild));
        drop(ProcessGroup(leader.id()));
        // Killed (a zombie until init reaps it), well before its minute is up.
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            !alive(&grandchild)
                || std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
                    .is_ok_and(|s| s.contains(") Z "))
        });
        assert!(gone, "sleep {grandchild} outlived its group");
        assert!(
            !leader.wait().unwrap().success(),
            "the leader was killed too"
        );
    }

    #[test]
    fn requests_name_the_shape_and_size() {
        assert_eq!(Shape::OneTask.request(), "one-task\n");
        assert_eq!(Shape::FanOut(200).request(), "fan-out 200\n");
        assert_eq!(Shape::Chain(50).request(), "chain 50\n");
        let load = Shape::Load {
            missions: 1000,
            tasks: 10,
        };
        assert_eq!(load.request(), "load 1000 10\n");
    }

    #[test]
    fn answers_are_times_or_errors() {
        let ok = parse(Peer::Ray, Some(r#"{"ms": 4.5}"#.into())).unwrap();
        assert_eq!(ok.ms, Some(4.5));
        let err = parse(Peer::Celery, Some(r#"{"error": "chain 50: boom"}"#.into()));
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("celery: chain 50: boom")
        );
        assert!(parse(Peer::Ray, Some("Token authentication".into())).is_err());
        let gone = parse(Peer::Threads, None).unwrap_err().to_string();
        assert!(gone.contains("exited"), "{gone}");
    }
}
