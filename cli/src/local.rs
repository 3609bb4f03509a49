//! The local cluster supervisor: runs a nats-server and the `boss`, `manager`
//! and `worker` binaries as child processes on this machine, for `swarm up`,
//! `swarm demo` and the whole-system tests.
//!
//! Every child writes its stdout and stderr to one log file under
//! `<data_dir>/logs/` (`nats-server.log`, `boss-1.log`, `worker-2.log`, ...),
//! appended across restarts. Children stay in the supervisor's process group
//! on purpose: a Ctrl-C in the terminal reaches them too, so an interrupted
//! test run leaves no orphans behind. [`LocalCluster::stop`] is the ordered
//! shutdown (roles first, then the broker).

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::sys::signal::{Signal, kill as send_signal};
use nix::unistd::Pid;
use swarm_common::subjects;

/// The NATS service name the boss replicas register: the cluster is ready
/// once `$SRV.PING.boss` gets a reply.
pub const BOSS_SERVICE: &str = "boss";
/// The worker pool a local cluster's workers join unless told otherwise.
pub const DEFAULT_POOL: &str = "general";

/// The installer script of the source tree this binary was built from.
const INSTALLER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/nats-server.sh");
/// The dev nats-server configuration of the source tree this binary was built from.
const DEV_NATS_CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../nats.conf");
/// How long a started nats-server may take to accept connections.
const NATS_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the supervisor looks at a process it is waiting for.
const POLL: Duration = Duration::from_millis(50);
/// How much of the end of a log file [`log_tail`] reads: enough for any
/// sensible number of lines, without reading a huge log whole.
const TAIL_BYTES: u64 = 64 * 1024;

/// What a [`LocalCluster`] runs and where it keeps its files.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Holds the nats-server store (`nats/`) and the logs (`logs/`).
    pub data_dir: PathBuf,
    /// The nats-server client port; `None` lets the server pick a free one.
    pub port: Option<u16>,
    /// Number of boss replicas.
    pub bosses: usize,
    /// Number of manager replicas.
    pub managers: usize,
    /// Number of worker replicas (pool [`DEFAULT_POOL`]).
    pub workers: usize,
    /// nats-server configuration file; `None` runs the server on flags alone.
    pub nats_conf: Option<PathBuf>,
    /// The directory the workers' tools may read and write.
    pub workspace_root: PathBuf,
    /// Where the bosses write rendered reports.
    pub reports_dir: PathBuf,
    /// Where the `boss`, `manager` and `worker` binaries are.
    pub bin_dir: PathBuf,
    /// Extra environment variables for every role process.
    pub extra_env: Vec<(String, String)>,
    /// Extra environment variables for the nats-server, after the ones it
    /// gets by default (so `GOMAXPROCS` here overrides the local default).
    pub nats_env: Vec<(String, String)>,
    /// Which CPUs the nats-server runs on: [`NatsCpus::Shared`] by default
    /// (the tests run many clusters side by side); `swarm up`, `swarm demo`
    /// and the benchmark harness give it CPUs of its own.
    pub nats_cpus: NatsCpus,
    /// How long [`LocalCluster::start`] waits for the roles to be ready.
    pub ready_timeout: Duration,
}

impl LocalOptions {
    /// One boss, two managers and two workers, keeping their files in
    /// `data_dir`. The binaries are looked for beside the current executable,
    /// the workspace is the current directory, reports go to
    /// `data_dir/reports`, and the dev `nats.conf` of the source tree is used
    /// if it exists.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        let data_dir = data_dir.into();
        let bin_dir = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| PathBuf::from("."));
        let dev_conf = PathBuf::from(DEV_NATS_CONF);
        LocalOptions {
            reports_dir: data_dir.join("reports"),
            data_dir,
            port: None,
            bosses: 1,
            managers: 2,
            workers: 2,
            nats_conf: dev_conf.is_file().then_some(dev_conf),
            workspace_root: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            bin_dir,
            extra_env: Vec::new(),
            nats_env: Vec::new(),
            nats_cpus: NatsCpus::Shared,
            ready_timeout: Duration::from_secs(30),
        }
    }
}

/// The path of a nats-server >= 2.11, installing one if needed.
///
/// Runs `deploy/nats-server.sh` (or the script named by the environment
/// variable `SWARM_NATS_INSTALLER`) once per process and remembers its answer.
/// The script honours `NATS_SERVER_BIN`.
pub fn nats_server_bin() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(find_nats_server)
        .clone()
        .map_err(|e| anyhow!(e))
}

fn find_nats_server() -> Result<PathBuf, String> {
    let script = std::env::var_os("SWARM_NATS_INSTALLER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(INSTALLER));
    if !script.is_file() {
        // An installed `swarm` has no source tree beside it.
        if let Some(bin) = std::env::var_os("NATS_SERVER_BIN") {
            return Ok(PathBuf::from(bin));
        }
        return Err(format!(
            "cannot find the nats-server installer {}: set NATS_SERVER_BIN to a nats-server >= 2.11 \
             or SWARM_NATS_INSTALLER to deploy/nats-server.sh",
            script.display()
        ));
    }
    let out = Command::new("bash")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}) to provide a nats-server >= 2.11:\n{}",
            script.display(),
            out.status,
            stderr.trim_end()
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().map(str::trim).rfind(|l| !l.is_empty()) {
        Some(path) => Ok(PathBuf::from(path)),
        None => Err(format!(
            "{} printed no nats-server path:\n{}",
            script.display(),
            stderr.trim_end()
        )),
    }
}

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

/// The CPUs this process may run on (1 if that cannot be told).
fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The numbers of the CPUs this process may run on, in order (empty if they
/// cannot be told).
fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Runs `f` (a spawn) with this thread on the CPUs `cpus` only, then puts
/// the thread back where it was: a child inherits the CPUs of the thread
/// that starts it, every thread of the child too.
fn on_cpus<T>(cpus: &[usize], f: impl FnOnce() -> T) -> anyhow::Result<T> {
    let this_thread = Pid::from_raw(0);
    let before = sched_getaffinity(this_thread).context("reading this thread's CPUs")?;
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)
            .with_context(|| format!("CPU {cpu} is beyond this system's CPUs"))?;
    }
    sched_setaffinity(this_thread, &set)
        .context("this process may not run on those CPUs (taskset, cgroup)")?;
    let out = f();
    // The child is started by now and must not be lost to an error here: a
    // thread left narrowed (putting back the set it had does not fail in
    // practice) only runs this supervisor's later work on fewer CPUs.
    if let Err(e) = sched_setaffinity(this_thread, &before) {
        tracing::warn!(error = %e, "cannot put this thread back on its CPUs");
    }
    Ok(out)
}

/// `0,2,5`: CPU numbers as `taskset -c` and `/proc/<pid>/status` write them.
fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Which CPUs a local nats-server runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NatsCpus {
    /// Wherever the supervisor may run, beside the roles (the default; the
    /// tests start many servers side by side, which must not share one CPU).
    #[default]
    Shared,
    /// CPUs of its own when the supervisor may use two or more: the last
    /// half of them (at least one), the rest left to the roles. For a server
    /// that is the only one on the machine (`swarm up`, the harness). On a
    /// 2-vCPU machine it took a chain of 50 down 3-11 % and the one-task
    /// round trip 2-6 % against a server that may run anywhere, and the
    /// sustained load no slower (docs/decisions.md, "CPUs of a local
    /// nats-server").
    Own,
    /// Exactly these CPUs (`taskset -c` numbers).
    List(Vec<usize>),
}

impl NatsCpus {
    /// The CPUs a server started by this process gets; `None`: no CPUs of
    /// its own.
    pub fn here(&self) -> Option<Vec<usize>> {
        self.pick(&allowed_cpus())
    }

    /// The CPUs a server gets when this process may run on `allowed`;
    /// `None`: no CPUs of its own.
    pub fn pick(&self, allowed: &[usize]) -> Option<Vec<usize>> {
        match self {
            NatsCpus::Shared => None,
            NatsCpus::Own if allowed.len() < 2 => None,
            NatsCpus::Own => Some(allowed[allowed.len() - (allowed.len() / 2).max(1)..].to_vec()),
            NatsCpus::List(cpus) => Some(cpus.clone()),
        }
    }
}

impl std::str::FromStr for NatsCpus {
    type Err = String;

    /// `shared`, `own`, or a list of CPU numbers such as `1` or `2,3`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "shared" => Ok(NatsCpus::Shared),
            "own" => Ok(NatsCpus::Own),
            list => {
                let cpus = list
                    .split(',')
                    .map(|n| n.trim().parse::<usize>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| {
                        format!("{s:?} is not `shared`, `own` or a list of CPU numbers like `1` or `2,3`")
                    })?;
                Ok(NatsCpus::List(cpus))
            }
        }
    }
}

impl std::fmt::Display for NatsCpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsCpus::Shared => f.write_str("shared"),
            NatsCpus::Own => f.write_str("own"),
            NatsCpus::List(cpus) => f.write_str(&cpu_list(cpus)),
        }
    }
}

/// The environment a local nats-server gets beside this process's own: Go
/// threads (`GOMAXPROCS`) for half of the `shared` CPUs it may run on beside
/// the roles (at least one), or for each CPU of its `own` if it has some,
/// unless the caller's environment sets `GOMAXPROCS` (`user_set`), which
/// then passes through as it is. A local server shares the machine with the
/// boss, the managers and the workers; with a Go thread per CPU, the
/// server's idle threads spin looking for work on the CPUs the roles need at
/// that moment and hand each message between threads. On a 2-vCPU machine
/// one Go thread took a chain of 50 down 12-15 %, at the cost of about a
/// sixth of the sustained throughput (still well above its target; see
/// docs/decisions.md, "CPUs of a local nats-server"). A server on machines
/// of its own (`k8s/`) keeps Go's default.
fn nats_env(user_set: bool, shared: usize, own: Option<&[usize]>) -> Vec<(String, String)> {
    if user_set {
        return Vec::new();
    }
    let threads = own.map_or((shared / 2).max(1), |cpus| cpus.len().max(1));
    vec![("GOMAXPROCS".into(), threads.to_string())]
}

/// A supervised nats-server on 127.0.0.1 with JetStream in its own store
/// directory. Killed when dropped.
#[derive(Debug)]
pub struct NatsProcess {
    process: ManagedProcess,
    port: u16,
    store_dir: PathBuf,
    ports_dir: PathBuf,
}

impl NatsProcess {
    /// Starts `bin` (with the configuration `conf`, if any) on `port` (`None`:
    /// a port the server picks and reports) with its JetStream store in
    /// `store_dir` and its output in `log`, and waits (up to 10 s) until it
    /// listens and accepts TCP connections. The server reports its port in a
    /// ports file beside the log, removed once read.
    pub fn start(
        bin: &Path,
        conf: Option<&Path>,
        port: Option<u16>,
        store_dir: &Path,
        log: &Path,
    ) -> anyhow::Result<NatsProcess> {
        Self::start_with_env(bin, conf, port, store_dir, log, Vec::new())
    }

    /// [`NatsProcess::start`] with `env` added to the server's environment
    /// after its defaults (see [`LocalOptions::nats_env`]).
    pub fn start_with_env(
        bin: &Path,
        conf: Option<&Path>,
        port: Option<u16>,
        store_dir: &Path,
        log: &Path,
        env: Vec<(String, String)>,
    ) -> anyhow::Result<NatsProcess> {
        Self::start_on(bin, conf, port, store_dir, log, env, &NatsCpus::Shared)
    }

    /// [`NatsProcess::start_with_env`] on the CPUs `cpus` picks from those
    /// this process may run on (see [`LocalOptions::nats_cpus`]).
    pub fn start_on(
        bin: &Path,
        conf: Option<&Path>,
        port: Option<u16>,
        store_dir: &Path,
        log: &Path,
        env: Vec<(String, String)>,
        cpus: &NatsCpus,
    ) -> anyhow::Result<NatsProcess> {
        let store_dir = std::path::absolute(store_dir)?;
        let log = std::path::absolute(log)?;
        fs::create_dir_all(&store_dir)
            .with_context(|| format!("cannot create {}", store_dir.display()))?;
        let mut base: Vec<OsString> = Vec::new();
        if let Some(conf) = conf {
            base.extend(["-c".into(), std::path::absolute(conf)?.into_os_string()]);
        }
        base.extend([
            "-a".into(),
            "127.0.0.1".into(),
            "-js".into(),
            "-sd".into(),
            store_dir.clone().into_os_string(),
        ]);
        // The server writes `<executable>_<pid>.ports` here once it listens.
        // Waiting for that file, not for the port to accept connections,
        // cannot be fooled by another process that holds the port.
        let ports_dir = log
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| store_dir.clone());
        base.extend([
            "--ports_file_dir".into(),
            ports_dir.clone().into_os_string(),
        ]);
        let with_port = |port: &str| {
            let mut args = base.clone();
            args.extend(["-p".into(), port.into()]);
            args
        };

        // `-p -1` lets the server bind a free port itself, so no other
        // process can take the port between choosing and binding it.
        let first_port = port.map_or_else(|| "-1".to_owned(), |p| p.to_string());
        let own = cpus.here();
        let process = ManagedProcess::spawn_on(
            "nats-server",
            bin,
            with_port(&first_port),
            nats_env(
                std::env::var_os("GOMAXPROCS").is_some(),
                available_cpus(),
                own.as_deref(),
            )
            .into_iter()
            .chain(env)
            .collect(),
            &log,
            own,
        )?;
        let mut nats = NatsProcess {
            process,
            port: port.unwrap_or(0),
            store_dir,
            ports_dir,
        };
        nats.port = nats.wait_listening(Instant::now() + NATS_START_TIMEOUT)?;
        // A restart must come back on the same port.
        nats.process.args = with_port(&nats.port.to_string());
        Ok(nats)
    }

    /// Waits until the server reports the port it listens on and that port
    /// accepts a connection; returns the port.
    fn wait_listening(&mut self, deadline: Instant) -> anyhow::Result<u16> {
        let port = read_ports_file(&mut self.process, &self.ports_dir, deadline)?;
        if self.port != 0 && port != self.port {
            bail!(
                "nats-server listens on port {port}, not on the requested {}; last lines of {}:\n{}",
                self.port,
                self.process.log_path.display(),
                self.process.log_tail(30)
            );
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(port);
            }
            if !self.process.is_running() || Instant::now() >= deadline {
                bail!(
                    "nats-server reported port {port} but does not accept connections there; last lines of {}:\n{}",
                    self.process.log_path.display(),
                    self.process.log_tail(30)
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The JetStream store directory (the server keeps its data in `jetstream/` below it).
    pub fn store_dir(&self) -> &Path {
        &self.store_dir
    }

    /// The log file of the server.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// The server process.
    pub fn process(&self) -> &ManagedProcess {
        &self.process
    }

    /// The server process, to signal or inspect it.
    pub fn process_mut(&mut self) -> &mut ManagedProcess {
        &mut self.process
    }

    /// Whether the server is running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Kills the server with SIGKILL (no clean shutdown) and waits for it.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGTERM (a clean shutdown), then SIGKILL after `grace`.
    pub fn terminate(&mut self, grace: Duration) {
        self.process.terminate(grace);
    }

    /// Kills the server if it runs and starts it again on the same port with
    /// the same store, waiting until it accepts connections.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.process.restart()?;
        self.wait_listening(Instant::now() + NATS_START_TIMEOUT)?;
        Ok(())
    }
}

/// Waits for the ports file a nats-server started with `--ports_file_dir`
/// writes (`<executable>_<pid>.ports`, JSON `{"nats": ["nats://host:port"]}`)
/// and returns the client port in it.
fn read_ports_file(
    process: &mut ManagedProcess,
    dir: &Path,
    deadline: Instant,
) -> anyhow::Result<u16> {
    #[derive(serde::Deserialize)]
    struct Ports {
        nats: Vec<String>,
    }
    let pid = process.pid().context("nats-server has no pid")?;
    let suffix = format!("_{pid}.ports");
    loop {
        let found = fs::read_dir(dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|p| p.to_string_lossy().ends_with(&suffix));
        if let Some(path) = found {
            // The server writes the file in place: a read may see half of it, so retry.
            let port = fs::read(&path)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Ports>(&bytes).ok())
                .and_then(|ports| {
                    ports
                        .nats
                        .iter()
                        .find_map(|url| url.rsplit_once(':')?.1.parse::<u16>().ok())
                });
            if let Some(port) = port {
                // The file is only a way to learn the port; a killed server would leave it behind.
                let _ = fs::remove_file(&path);
                return Ok(port);
            }
        }
        if !process.is_running() {
            bail!(
                "nats-server exited ({}) before listening; last lines of {}:\n{}",
                describe_exit(process.exit_status()),
                process.log_path().display(),
                process.log_tail(30)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "nats-server did not report its port within {:?}; last lines of {}:\n{}",
                NATS_START_TIMEOUT,
                process.log_path().display(),
                process.log_tail(30)
            );
        }
        std::thread::sleep(POLL);
    }
}

fn describe_exit(status: Option<ExitStatus>) -> String {
    status.map_or_else(|| "status unknown".to_owned(), |s| s.to_string())
}

/// A nats-server and the boss, manager and worker processes of one local
/// Swarm. Every process is killed when this is dropped; [`stop`](Self::stop)
/// shuts down gracefully.
#[derive(Debug)]
pub struct LocalCluster {
    /// The broker.
    pub nats: NatsProcess,
    /// Boss replicas (`boss-1`, ...).
    pub bosses: Vec<ManagedProcess>,
    /// Manager replicas (`manager-1`, ...).
    pub managers: Vec<ManagedProcess>,
    /// Worker replicas (`worker-1`, ...).
    pub workers: Vec<ManagedProcess>,
    opts: LocalOptions,
    /// The managers' key for assignment tokens, made for this cluster.
    token_key: String,
}

/// 32 random hex digits from the system's random source.
fn random_key() -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom for the managers' token key")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl LocalCluster {
    /// Starts nats-server, then the roles, then waits (up to
    /// `opts.ready_timeout`) until the boss service answers a ping and the
    /// JetStream consumers of the managers and the workers exist. An error
    /// carries the tails of the logs.
    pub async fn start(opts: LocalOptions) -> anyhow::Result<LocalCluster> {
        let opts = absolute_options(opts)?;
        for dir in [
            &opts.data_dir,
            &opts.reports_dir,
            &opts.data_dir.join("logs"),
        ] {
            fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        for (role, count) in [
            ("boss", opts.bosses),
            ("manager", opts.managers),
            ("worker", opts.workers),
        ] {
            if count > 0 {
                role_binary(&opts.bin_dir, role)?;
            }
        }

        let bin = tokio::task::spawn_blocking(nats_server_bin).await??;
        let conf = opts.nats_conf.clone();
        let port = opts.port;
        let store = opts.data_dir.join("nats");
        let log = opts.data_dir.join("logs").join("nats-server.log");
        let env = opts.nats_env.clone();
        let cpus = opts.nats_cpus.clone();
        let nats = tokio::task::spawn_blocking(move || {
            NatsProcess::start_on(&bin, conf.as_deref(), port, &store, &log, env, &cpus)
        })
        .await??;

        let mut cluster = LocalCluster {
            nats,
            bosses: Vec::new(),
            managers: Vec::new(),
            workers: Vec::new(),
            opts,
            token_key: random_key()?,
        };
        for _ in 0..cluster.opts.bosses {
            cluster.spawn_boss()?;
        }
        for _ in 0..cluster.opts.managers {
            cluster.spawn_manager()?;
        }
        for _ in 0..cluster.opts.workers {
            cluster.spawn_worker(&[])?;
        }
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// The options the cluster was started with (paths made absolute).
    pub fn options(&self) -> &LocalOptions {
        &self.opts
    }

    /// The URL of the cluster's nats-server.
    pub fn url(&self) -> String {
        self.nats.url()
    }

    /// Where every process's log is.
    pub fn logs_dir(&self) -> PathBuf {
        self.opts.data_dir.join("logs")
    }

    /// Where the bosses write reports.
    pub fn reports_dir(&self) -> &Path {
        &self.opts.reports_dir
    }

    /// Starts one more boss replica.
    pub fn spawn_boss(&mut self) -> anyhow::Result<()> {
        let id = format!("boss-{}", self.bosses.len() + 1);
        let mut args = self.common_args(&id);
        args.extend([
            "--reports-dir".into(),
            self.opts.reports_dir.clone().into_os_string(),
        ]);
        let process = self.spawn_role("boss", &id, args)?;
        self.bosses.push(process);
        Ok(())
    }

    /// Starts one more manager replica.
    pub fn spawn_manager(&mut self) -> anyhow::Result<()> {
        let id = format!("manager-{}", self.managers.len() + 1);
        let args = self.common_args(&id);
        let process = self.spawn_role("manager", &id, args)?;
        self.managers.push(process);
        Ok(())
    }

    /// Starts one more worker replica with `extra_args` after the usual
    /// flags. It joins pool [`DEFAULT_POOL`] unless `extra_args` names
    /// another with `--pool`.
    pub fn spawn_worker(&mut self, extra_args: &[&str]) -> anyhow::Result<()> {
        let id = format!("worker-{}", self.workers.len() + 1);
        let mut args = self.common_args(&id);
        let names_pool = extra_args
            .iter()
            .any(|a| *a == "--pool" || a.starts_with("--pool="));
        if !names_pool {
            args.extend(["--pool".into(), DEFAULT_POOL.into()]);
        }
        args.extend([
            "--workspace-root".into(),
            self.opts.workspace_root.clone().into_os_string(),
        ]);
        args.extend(extra_args.iter().map(OsString::from));
        let process = self.spawn_role("worker", &id, args)?;
        self.workers.push(process);
        Ok(())
    }

    fn common_args(&self, id: &str) -> Vec<OsString> {
        vec![
            "--nats-url".into(),
            self.url().into(),
            "--agent-id".into(),
            id.into(),
        ]
    }

    fn spawn_role(
        &self,
        role: &str,
        id: &str,
        args: Vec<OsString>,
    ) -> anyhow::Result<ManagedProcess> {
        let program = role_binary(&self.opts.bin_dir, role)?;
        let mut env = vec![
            ("NATS_URL".to_owned(), self.url()),
            (
                "RUST_LOG".to_owned(),
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned()),
            ),
        ];
        if role == "manager" {
            // The replicas share one key for assignment tokens, so results
            // are checked here as in production (a test's `extra_env`, set
            // after, may give its own).
            env.push(("SWARM_TOKEN_KEY".to_owned(), self.token_key.clone()));
        }
        env.extend(self.opts.extra_env.iter().cloned());
        let log = self.logs_dir().join(format!("{id}.log"));
        ManagedProcess::spawn(id, program, args, env, log)
    }

    fn roles_mut(&mut self) -> impl Iterator<Item = &mut ManagedProcess> {
        self.bosses
            .iter_mut()
            .chain(self.managers.iter_mut())
            .chain(self.workers.iter_mut())
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + self.opts.ready_timeout;
        let client =
            match tokio::time::timeout(Duration::from_secs(5), async_nats::connect(self.url()))
                .await
            {
                Ok(Ok(client)) => client,
                Ok(Err(e)) => bail!(
                    "cannot connect to {}: {e}\n{}",
                    self.url(),
                    self.log_tails(30)
                ),
                Err(_) => bail!(
                    "cannot connect to {}: timed out\n{}",
                    self.url(),
                    self.log_tails(30)
                ),
            };
        loop {
            let exited: Vec<String> = self
                .roles_mut()
                .filter_map(|p| {
                    p.exit_status()
                        .map(|status| format!("{} exited ({status})", p.name()))
                })
                .collect();
            if !exited.is_empty() {
                bail!(
                    "the local cluster did not start: {}\n{}",
                    exited.join(", "),
                    self.log_tails(30)
                );
            }
            let Some(missing) = self.not_ready(&client).await else {
                return Ok(());
            };
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "the local cluster was not ready after {:?}: still waiting for {missing}\n{}",
                    self.opts.ready_timeout,
                    self.log_tails(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What the cluster still lacks to be ready, or `None` if it is ready.
    async fn not_ready(&self, client: &async_nats::Client) -> Option<String> {
        const ASK: Duration = Duration::from_secs(2);
        if !self.bosses.is_empty() {
            let ping = format!("$SRV.PING.{BOSS_SERVICE}");
            match tokio::time::timeout(ASK, client.request(ping.clone(), "".into())).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Some(format!("a reply to {ping} ({e})")),
                Err(_) => return Some(format!("a reply to {ping} (timed out)")),
            }
        }
        let mut consumers = Vec::new();
        if !self.managers.is_empty() {
            consumers.push((subjects::A2AP_STREAM, subjects::MANAGER_CONSUMER.to_owned()));
        }
        if !self.workers.is_empty() {
            consumers.push((
                subjects::WORK_STREAM,
                subjects::worker_consumer(DEFAULT_POOL),
            ));
        }
        let js = async_nats::jetstream::new(client.clone());
        for (name, consumer) in consumers {
            let stream = match tokio::time::timeout(ASK, js.get_stream(name)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Some(format!("stream {name} ({e})")),
                Err(_) => return Some(format!("stream {name} (timed out)")),
            };
            match tokio::time::timeout(ASK, stream.consumer_info(&consumer)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Some(format!("consumer {consumer} ({e})")),
                Err(_) => return Some(format!("consumer {consumer} (timed out)")),
            }
        }
        None
    }

    /// The last `lines` lines of every process's log, each under a header
    /// naming the process: for test failure messages.
    pub fn log_tails(&self, lines: usize) -> String {
        let processes = std::iter::once(self.nats.process())
            .chain(&self.bosses)
            .chain(&self.managers)
            .chain(&self.workers);
        let mut out = String::new();
        for p in processes {
            out.push_str(&format!(
                "==> {} ({}) <==\n{}\n",
                p.name(),
                p.log_path().display(),
                p.log_tail(lines)
            ));
        }
        out
    }

    /// Graceful shutdown: SIGTERM to every role, SIGKILL to those still
    /// running after `grace`; then the same for nats-server.
    pub async fn stop(mut self, grace: Duration) {
        let mut roles: Vec<&mut ManagedProcess> = self.roles_mut().collect();
        terminate_all(&mut roles, grace).await;
        terminate_all(&mut [self.nats.process_mut()], grace).await;
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // Roles first, so none of them logs the broker vanishing.
        for p in self.roles_mut() {
            p.kill();
        }
        self.nats.kill();
    }
}

async fn terminate_all(processes: &mut [&mut ManagedProcess], grace: Duration) {
    for p in processes.iter_mut() {
        p.signal_terminate();
    }
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline && processes.iter_mut().any(|p| p.is_running()) {
        tokio::time::sleep(POLL).await;
    }
    for p in processes.iter_mut() {
        p.kill();
    }
}

fn role_binary(bin_dir: &Path, role: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir.join(format!("{role}{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        bail!(
            "no `{role}` binary at {}: build the workspace first (`cargo build --workspace`)",
            path.display()
        );
    }
    Ok(path)
}

/// The options with every path absolute, since the children may not share
/// the supervisor's working directory forever.
fn absolute_options(mut opts: LocalOptions) -> anyhow::Result<LocalOptions> {
    let abs =
        |p: &Path| std::path::absolute(p).with_context(|| format!("bad path {}", p.display()));
    opts.data_dir = abs(&opts.data_dir)?;
    opts.reports_dir = abs(&opts.reports_dir)?;
    opts.workspace_root = abs(&opts.workspace_root)?;
    opts.bin_dir = abs(&opts.bin_dir)?;
    opts.nats_conf = opts.nats_conf.as_deref().map(abs).transpose()?;
    Ok(opts)
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

    #[test]
    fn nats_process_picks_a_port_and_restarts_on_it() {
        let dir = tempfile::tempdir().unwrap();
        let bin = nats_server_bin().unwrap();
        let mut nats = NatsProcess::start(
            &bin,
            Some(Path::new(DEV_NATS_CONF)),
            None,
            &dir.path().join("store"),
            &dir.path().join("logs/nats-server.log"),
        )
        .unwrap();
        let port = nats.port();
        assert_ne!(port, 0);
        assert_eq!(nats.url(), format!("nats://127.0.0.1:{port}"));
        // The server runs with the Go threads `nats_env` gives it (or the
        // caller's own GOMAXPROCS).
        let expected = match std::env::var("GOMAXPROCS") {
            Ok(v) => format!("GOMAXPROCS={v}"),
            Err(_) => {
                let (k, v) = &nats_env(false, available_cpus(), None)[0];
                format!("{k}={v}")
            }
        };
        assert_in_environment(&nats, &expected);
        nats.kill();
        assert!(!nats.is_running());
        nats.restart().unwrap();
        assert_eq!(nats.port(), port);
        assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
        assert!(nats.store_dir().join("jetstream").is_dir());
        nats.terminate(Duration::from_secs(5));
        assert!(!nats.is_running());
    }

    fn assert_in_environment(nats: &NatsProcess, expected: &str) {
        let pid = nats.process().pid().unwrap();
        let environ = fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(
            environ
                .split(|b| *b == 0)
                .any(|kv| kv == expected.as_bytes()),
            "{expected} not in the server's environment"
        );
    }

    #[test]
    fn a_server_setting_given_by_the_caller_overrides_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let nats = NatsProcess::start_with_env(
            &nats_server_bin().unwrap(),
            Some(Path::new(DEV_NATS_CONF)),
            None,
            &dir.path().join("store"),
            &dir.path().join("nats-server.log"),
            vec![("GOMAXPROCS".into(), "3".into())],
        )
        .unwrap();
        assert_in_environment(&nats, "GOMAXPROCS=3");
    }

    #[test]
    fn a_local_server_gets_half_the_cpus_unless_gomaxprocs_is_set() {
        let threads = |cpus| nats_env(false, cpus, None);
        assert_eq!(threads(1), vec![("GOMAXPROCS".to_owned(), "1".to_owned())]);
        assert_eq!(threads(2), vec![("GOMAXPROCS".to_owned(), "1".to_owned())]);
        assert_eq!(threads(3), vec![("GOMAXPROCS".to_owned(), "1".to_owned())]);
        assert_eq!(threads(16), vec![("GOMAXPROCS".to_owned(), "8".to_owned())]);
        assert!(nats_env(true, 16, None).is_empty());
        // A server with CPUs of its own gets a Go thread for each.
        let own = nats_env(false, 16, Some(&[12, 13, 14]));
        assert_eq!(own, vec![("GOMAXPROCS".to_owned(), "3".to_owned())]);
        assert!(nats_env(true, 16, Some(&[12])).is_empty());
    }

    #[test]
    fn a_server_of_its_own_gets_the_last_half_of_the_cpus() {
        assert_eq!(NatsCpus::Shared.pick(&[0, 1, 2, 3]), None);
        assert_eq!(NatsCpus::Own.pick(&[]), None);
        assert_eq!(NatsCpus::Own.pick(&[0]), None, "one CPU is shared");
        assert_eq!(NatsCpus::Own.pick(&[0, 1]), Some(vec![1]));
        assert_eq!(NatsCpus::Own.pick(&[0, 1, 2]), Some(vec![2]));
        assert_eq!(
            NatsCpus::Own.pick(&(0..8).collect::<Vec<_>>()),
            Some(vec![4, 5, 6, 7])
        );
        // The CPUs this process may use, not CPU numbers from 0.
        assert_eq!(NatsCpus::Own.pick(&[2, 5, 7, 9]), Some(vec![7, 9]));
        assert_eq!(NatsCpus::List(vec![3]).pick(&[0, 1]), Some(vec![3]));
    }

    #[test]
    fn nats_cpus_are_read_and_written_as_on_the_command_line() {
        for (text, cpus) in [
            ("shared", NatsCpus::Shared),
            ("own", NatsCpus::Own),
            ("1", NatsCpus::List(vec![1])),
            ("2,3", NatsCpus::List(vec![2, 3])),
        ] {
            assert_eq!(text.parse::<NatsCpus>(), Ok(cpus.clone()));
            assert_eq!(cpus.to_string(), text);
        }
        assert_eq!(" 2, 3".parse(), Ok(NatsCpus::List(vec![2, 3])));
        for bad in ["", "all", "1,,2", "-1", "1-3"] {
            let err = bad.parse::<NatsCpus>().unwrap_err();
            assert!(err.contains("`own`"), "{bad:?}: {err}");
        }
    }

    /// The CPUs `/proc` says each thread of `pid` may run on.
    fn threads_cpus(pid: u32) -> Vec<String> {
        fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .map(|task| {
                let status = fs::read_to_string(task.unwrap().path().join("status")).unwrap();
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .unwrap()
                    .trim()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn a_server_with_cpus_of_its_own_runs_on_them_only_and_keeps_them_on_restart() {
        let allowed = allowed_cpus();
        let cpu = *allowed.last().unwrap();
        let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut nats = NatsProcess::start_on(
            &nats_server_bin().unwrap(),
            Some(Path::new(DEV_NATS_CONF)),
            None,
            &dir.path().join("store"),
            &dir.path().join("nats-server.log"),
            Vec::new(),
            &NatsCpus::List(vec![cpu]),
        )
        .unwrap();
        assert_eq!(nats.process().cpus(), Some(&[cpu][..]));
        let pid = nats.process().pid().unwrap();
        let threads = threads_cpus(pid);
        assert!(threads.len() > 1, "a Go server runs several threads");
        assert!(threads.iter().all(|c| *c == cpu.to_string()), "{threads:?}");
        // One Go thread for its one CPU, unless the caller chose.
        if std::env::var_os("GOMAXPROCS").is_none() {
            assert_in_environment(&nats, "GOMAXPROCS=1");
        }
        // The supervisor's own thread is back where it was.
        assert_eq!(sched_getaffinity(Pid::from_raw(0)).unwrap(), before);
        nats.restart().unwrap();
        let pid = nats.process().pid().unwrap();
        assert!(threads_cpus(pid).iter().all(|c| *c == cpu.to_string()));
    }

    #[test]
    fn a_server_on_cpus_this_process_may_not_use_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = NatsProcess::start_on(
            &nats_server_bin().unwrap(),
            None,
            None,
            &dir.path().join("store"),
            &dir.path().join("nats-server.log"),
            Vec::new(),
            &NatsCpus::List(vec![100_000]),
        )
        .unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("cannot run nats-server on CPUs 100000"),
            "{text}"
        );
    }

    #[test]
    fn nats_process_reports_a_taken_port() {
        let dir = tempfile::tempdir().unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = NatsProcess::start(
            &nats_server_bin().unwrap(),
            None,
            Some(port),
            &dir.path().join("store"),
            &dir.path().join("nats-server.log"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("nats-server"), "{err:#}");
    }

    #[tokio::test]
    async fn a_role_that_exits_fails_the_start_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let bin_dir = dir.path().join("bin");
        fs::create_dir_all(&bin_dir).unwrap();
        let boss = bin_dir.join("boss");
        fs::write(
            &boss,
            "#!/bin/sh\necho \"boss cannot start: $*\" >&2\nexit 7\n",
        )
        .unwrap();
        let mut perms = fs::metadata(&boss).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        fs::set_permissions(&boss, perms).unwrap();

        let mut opts = LocalOptions::new(dir.path().join("data"));
        opts.bin_dir = bin_dir;
        opts.managers = 0;
        opts.workers = 0;
        let err = LocalCluster::start(opts).await.unwrap_err().to_string();
        assert!(err.contains("boss-1 exited"), "{err}");
        assert!(
            err.contains("boss cannot start: --nats-url nats://127.0.0.1:"),
            "{err}"
        );
        assert!(err.contains("--agent-id boss-1 --reports-dir"), "{err}");
    }

    fn fake_binary(dir: &Path, role: &str, script: &str) {
        fs::create_dir_all(dir).unwrap();
        let path = dir.join(role);
        fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        let mut perms = fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        fs::set_permissions(&path, perms).unwrap();
    }

    #[tokio::test]
    async fn roles_get_their_flags_and_stop_gracefully() {
        let dir = tempfile::tempdir().unwrap();
        let bin_dir = dir.path().join("bin");
        // Exits on SIGTERM like a role that drains; `wait` lets the trap run at once.
        let sleeper = "trap 'kill $! 2>/dev/null; echo drained; exit 0' TERM; \
                       echo \"args: $*\"; echo \"url: $NATS_URL extra: $EXTRA\"; sleep 30 & wait";
        fake_binary(&bin_dir, "manager", sleeper);
        fake_binary(&bin_dir, "worker", sleeper);
        let mut opts = LocalOptions::new(dir.path().join("data"));
        opts.bin_dir = bin_dir;
        (opts.bosses, opts.managers, opts.workers) = (0, 0, 0);
        opts.extra_env.push(("EXTRA".into(), "yes".into()));
        opts.workspace_root = dir.path().join("ws");
        let mut cluster = LocalCluster::start(opts).await.unwrap();
        cluster.spawn_manager().unwrap();
        cluster.spawn_worker(&[]).unwrap();
        cluster.spawn_worker(&["--pool", "code"]).unwrap();
        let url = cluster.url();
        let ws = dir.path().join("ws");
        let logs = cluster.logs_dir();
        let deadline = Instant::now() + Duration::from_secs(5);
        while cluster.log_tails(5).matches("extra: yes").count() < 3 {
            assert!(Instant::now() < deadline, "{}", cluster.log_tails(5));
            tokio::time::sleep(POLL).await;
        }
        let manager = fs::read_to_string(logs.join("manager-1.log")).unwrap();
        assert!(
            manager.contains(&format!("args: --nats-url {url} --agent-id manager-1\n")),
            "{manager}"
        );
        assert!(
            manager.contains(&format!("url: {url} extra: yes")),
            "{manager}"
        );
        let worker = fs::read_to_string(logs.join("worker-1.log")).unwrap();
        let expected = format!(
            "args: --nats-url {url} --agent-id worker-1 --pool general --workspace-root {}\n",
            ws.display()
        );
        assert!(worker.contains(&expected), "{worker}");
        let worker2 = fs::read_to_string(logs.join("worker-2.log")).unwrap();
        assert!(
            worker2.contains("--agent-id worker-2 --workspace-root"),
            "{worker2}"
        );
        assert!(worker2.contains("--pool code\n"), "{worker2}");
        assert!(cluster.log_tails(5).contains("==> nats-server ("));

        cluster.stop(Duration::from_secs(10)).await;
        for log in ["manager-1.log", "worker-1.log", "worker-2.log"] {
            let text = fs::read_to_string(logs.join(log)).unwrap();
            assert!(text.contains("drained"), "{log}: {text}");
        }
    }

    #[tokio::test]
    async fn a_missing_binary_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = LocalOptions::new(dir.path());
        opts.bin_dir = dir.path().join("nowhere");
        let err = LocalCluster::start(opts).await.unwrap_err().to_string();
        assert!(err.contains("no `boss` binary"), "{err}");
    }
}
