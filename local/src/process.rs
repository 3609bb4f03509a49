//! One supervised child process ([`ManagedProcess`]): started with its
//! stdout and stderr appended to a log file (a marker line at each start),
//! optionally on CPUs of its own, stopped with SIGTERM and then SIGKILL,
//! restarted with the same command, and killed when dropped. Also the tail
//! of a log ([`log_tail`]), which every error about a child quotes.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::{Signal, kill as send_signal};
use nix::unistd::Pid;

use crate::cpus::{cpu_list, on_cpus};

/// How often the supervisor looks at a process it is waiting for.
pub(crate) const POLL: Duration = Duration::from_millis(50);
/// How much of the end of a log file [`log_tail`] reads: enough for any
/// sensible number of lines, without reading a huge log whole.
const TAIL_BYTES: u64 = 64 * 1024;

/// The last `lines` lines of the file at `path` (at most the last 64 KiB),
/// or a note saying why it cannot be read.
pub fn log_tail(path: &Path, lines: usize) -> String {
    match read_tail(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

fn read_tail(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if start > 0 {
        // The first line was cut by the seek: drop it.
        text = text
            .split_once('\n')
            .map(|(_, rest)| rest.to_owned())
            .unwrap_or_default();
    }
    Ok(text)
}

/// One supervised child process and its log file.
///
/// Killed (SIGKILL) when dropped.
#[derive(Debug)]
pub struct ManagedProcess {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(String, String)>,
    log_path: PathBuf,
    /// The CPUs the process (every thread of it) may run on; `None`: those
    /// of the supervisor.
    cpus: Option<Vec<usize>>,
    child: Option<Child>,
}

impl ManagedProcess {
    /// Starts `program` with `args` and the extra environment `env`, its
    /// stdout and stderr appended to `log_path`. `name` is for messages.
    pub fn spawn(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
        env: Vec<(String, String)>,
        log_path: impl Into<PathBuf>,
    ) -> anyhow::Result<ManagedProcess> {
        Self::spawn_on(name, program, args, env, log_path, None)
    }

    /// [`ManagedProcess::spawn`] on the CPUs `cpus` only (`None`: wherever
    /// the supervisor may run), here and on every restart.
    pub fn spawn_on(
        name: impl Into<String>,
        program: impl Into<PathBuf>,
        args: impl IntoIterator<Item = impl Into<OsString>>,
        env: Vec<(String, String)>,
        log_path: impl Into<PathBuf>,
        cpus: Option<Vec<usize>>,
    ) -> anyhow::Result<ManagedProcess> {
        let mut process = ManagedProcess {
            name: name.into(),
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env,
            log_path: log_path.into(),
            cpus,
            child: None,
        };
        process.launch()?;
        Ok(process)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        if let Some(dir) = self.log_path.parent() {
            fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("cannot open the log {}", self.log_path.display()))?;
        // A marker line, so a restarted process's log shows where each run starts.
        writeln!(log, "=== swarm: starting {} ===", self.command_line())
            .with_context(|| format!("cannot write to {}", self.log_path.display()))?;
        let stderr = log
            .try_clone()
            .with_context(|| format!("cannot reopen {}", self.log_path.display()))?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        let spawned = match &self.cpus {
            Some(cpus) => on_cpus(cpus, || command.spawn())
                .with_context(|| format!("cannot run {} on CPUs {}", self.name, cpu_list(cpus)))?,
            None => command.spawn(),
        };
        let child = spawned
            .with_context(|| format!("cannot start {} ({})", self.name, self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Changes the arguments the next (re)start uses.
    pub(crate) fn set_args(&mut self, args: Vec<OsString>) {
        self.args = args;
    }

    fn command_line(&self) -> String {
        let mut line = self.program.display().to_string();
        for arg in &self.args {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        line
    }

    /// The name given at spawn (e.g. `worker-1`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pid of the last started child; `None` after [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The CPUs the child runs on, if it was given some of its own.
    pub fn cpus(&self) -> Option<&[usize]> {
        self.cpus.as_deref()
    }

    /// The log file the child's stdout and stderr go to.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log_path, lines)
    }

    /// Whether the child is still running (reaps it if it has exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// How the child ended, if it has; `None` while it runs or after
    /// [`kill`](Self::kill).
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends SIGTERM without waiting (nothing if the child is not running).
    pub fn signal_terminate(&mut self) {
        if !self.is_running() {
            // An exited child is reaped already: its pid may belong to another process now.
            return;
        }
        if let Some(pid) = self.pid().and_then(|p| i32::try_from(p).ok()) {
            // The child may exit between the check and the signal: nothing to do then.
            let _ = send_signal(Pid::from_raw(pid), Signal::SIGTERM);
        }
    }

    /// Kills the child with SIGKILL and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Fails only if the child is gone already, which is what we want.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then SIGKILL if the child still runs after `grace`. Blocks.
    pub fn terminate(&mut self, grace: Duration) {
        self.signal_terminate();
        let deadline = Instant::now() + grace;
        while self.is_running() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        self.kill();
    }

    /// Kills the child if it runs and starts the same command again, appending
    /// to the same log.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.launch()
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        fs::write(&path, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&path, 2), "c\nd");
        assert_eq!(log_tail(&path, 10), "a\nb\nc\nd");
        assert!(log_tail(&dir.path().join("missing"), 2).starts_with("(cannot read"));
    }

    #[test]
    fn log_tail_of_a_big_file_drops_the_cut_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.log");
        let line = "x".repeat(99);
        let text: String = (0..2000).map(|i| format!("{i} {line}\n")).collect();
        fs::write(&path, text).unwrap();
        let tail = log_tail(&path, 3000);
        assert!(tail.ends_with(&format!("1999 {line}")));
        assert!(tail.lines().all(|l| l.ends_with(&line)));
    }

    /// Waits (up to 5 s) until `needle` appears `count` times in the log.
    fn wait_for_log(p: &ManagedProcess, needle: &str, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.log_tail(100).matches(needle).count() < count {
            assert!(Instant::now() < deadline, "{}", p.log_tail(100));
            std::thread::sleep(POLL);
        }
    }

    #[test]
    fn managed_process_terminates_restarts_and_logs() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/sleeper.log");
        let mut p = ManagedProcess::spawn(
            "sleeper",
            "sh",
            ["-c", "echo hello $GREETING; exec sleep 30"],
            vec![("GREETING".into(), "world".into())],
            &log,
        )
        .unwrap();
        assert_eq!(p.name(), "sleeper");
        assert!(p.is_running());
        wait_for_log(&p, "hello world", 1);
        p.terminate(Duration::from_secs(5));
        assert!(!p.is_running());
        assert_eq!(p.pid(), None);

        p.restart().unwrap();
        assert!(p.is_running());
        wait_for_log(&p, "hello world", 2);
        let tail = p.log_tail(10);
        assert_eq!(tail.matches("=== swarm: starting").count(), 2, "{tail}");
        p.kill();
        assert!(!p.is_running());
    }

    #[test]
    fn exit_status_of_a_finished_process() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = ManagedProcess::spawn(
            "false",
            "sh",
            ["-c", "exit 3"],
            vec![],
            dir.path().join("f.log"),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.is_running() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        assert_eq!(p.exit_status().and_then(|s| s.code()), Some(3));
        // Signalling an exited process is a no-op.
        p.signal_terminate();
    }
}
