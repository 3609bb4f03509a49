//! The local nats-server: finding or installing the binary
//! ([`nats_server_bin`]), and running one on 127.0.0.1 with JetStream in a
//! store of its own ([`NatsProcess`]): on a port it picks and reports (or
//! the one asked for), on the CPUs [`NatsCpus`] chooses, with as many Go
//! threads as suit a server that shares the machine with the roles.

use std::ffi::OsString;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};

use crate::cpus::{NatsCpus, available_cpus};
use crate::process::{ManagedProcess, POLL};

/// The installer script of the source tree this binary was built from.
const INSTALLER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/nats-server.sh");
/// The dev nats-server configuration of the source tree this binary was built from.
pub(crate) const DEV_NATS_CONF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../nats.conf");
/// How long a started nats-server may take to accept connections.
const NATS_START_TIMEOUT: Duration = Duration::from_secs(10);

/// The path of a nats-server >= 2.12, installing one if needed.
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
            "cannot find the nats-server installer {}: set NATS_SERVER_BIN to a nats-server >= 2.12 \
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
            "{} failed ({}) to provide a nats-server >= 2.12:\n{}",
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
    /// after its defaults (see [`LocalOptions::nats_env`](crate::LocalOptions::nats_env)).
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
    /// this process may run on (see [`LocalOptions::nats_cpus`](crate::LocalOptions::nats_cpus)).
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
        nats.process.set_args(with_port(&nats.port.to_string()));
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
                self.process.log_path().display(),
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
                    self.process.log_path().display(),
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

#[cfg(test)]
mod tests {
    use nix::sched::sched_getaffinity;
    use nix::unistd::Pid;

    use super::*;
    use crate::cpus::allowed_cpus;

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
}
