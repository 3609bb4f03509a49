//! A whole local Swarm ([`LocalCluster`]): a nats-server, then the boss,
//! manager and worker processes, waited on until ready; more replicas on
//! demand; an ordered stop (roles first, then the broker).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::config::{DEFAULT_POOL, LocalOptions, absolute_options};
use crate::nats::{NatsProcess, nats_server_bin};
use crate::process::{ManagedProcess, POLL};
use crate::ready::{self, Expected};

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
    /// The A2A gateway, when [`LocalOptions::gateway_port`] asks for one.
    pub gateway: Option<ManagedProcess>,
    /// The gateway's address.
    gateway_addr: Option<std::net::SocketAddr>,
    opts: LocalOptions,
    /// The managers' key for assignment tokens, made for this cluster.
    token_key: String,
    /// Each role's id and the port of its `/metrics`, in start order.
    metrics: Vec<(String, u16)>,
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
            ("gateway", usize::from(opts.gateway_port.is_some())),
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
            gateway: None,
            gateway_addr: None,
            opts,
            token_key: random_key()?,
            metrics: Vec::new(),
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
        if let Some(port) = cluster.opts.gateway_port {
            cluster.spawn_gateway(port)?;
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
        let mut args = self.common_args(&id)?;
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
        let args = self.common_args(&id)?;
        let process = self.spawn_role("manager", &id, args)?;
        self.managers.push(process);
        Ok(())
    }

    /// Starts one more worker replica with `extra_args` after the usual
    /// flags. It joins pool [`DEFAULT_POOL`] unless `extra_args` names
    /// another with `--pool`.
    pub fn spawn_worker(&mut self, extra_args: &[&str]) -> anyhow::Result<()> {
        let id = format!("worker-{}", self.workers.len() + 1);
        let mut args = self.common_args(&id)?;
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

    /// Starts the A2A gateway on 127.0.0.1 at `port` (0: a free one).
    fn spawn_gateway(&mut self, port: u16) -> anyhow::Result<()> {
        let port = if port == 0 {
            // Asked of the system and released: the gateway binds it next.
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .context("finding a free port for the gateway")?
                .port()
        } else {
            port
        };
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let mut args = self.common_args("gateway-1")?;
        args.extend(["--listen".into(), addr.to_string().into()]);
        let process = self.spawn_role("gateway", "gateway-1", args)?;
        self.gateway = Some(process);
        self.gateway_addr = Some(addr);
        Ok(())
    }

    /// The gateway's base URL (its agent card is at
    /// `<url>/.well-known/agent-card.json`), if one runs.
    pub fn gateway_url(&self) -> Option<String> {
        self.gateway_addr.map(|a| format!("http://{a}"))
    }

    /// The flags every role gets; with metrics on, the next port for role
    /// `id`'s health server, recorded for [`Self::metrics_endpoints`].
    fn common_args(&mut self, id: &str) -> anyhow::Result<Vec<OsString>> {
        let mut args: Vec<OsString> = vec![
            "--nats-url".into(),
            self.url().into(),
            "--agent-id".into(),
            id.into(),
        ];
        if let Some(base) = self.opts.metrics_base_port {
            let port = u16::try_from(self.metrics.len())
                .ok()
                .and_then(|n| base.checked_add(n))
                .with_context(|| format!("no metrics port is left above {base} for {id}"))?;
            args.extend([
                "--health-port".into(),
                port.to_string().into(),
                "--health-addr".into(),
                "127.0.0.1".into(),
            ]);
            self.metrics.push((id.to_owned(), port));
        }
        Ok(args)
    }

    /// Each role's id and the port on 127.0.0.1 that serves its
    /// `/metrics`, in start order; empty unless
    /// [`LocalOptions::metrics_base_port`] is set.
    pub fn metrics_endpoints(&self) -> &[(String, u16)] {
        &self.metrics
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
            .chain(self.gateway.iter_mut())
    }

    /// Waits until [`ready::missing`] finds nothing missing, failing at
    /// once if a role exits and after `ready_timeout` otherwise.
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
            let expected = Expected {
                boss: !self.bosses.is_empty(),
                managers: !self.managers.is_empty(),
                workers: !self.workers.is_empty(),
            };
            let mut missing = ready::missing(&client, &expected).await;
            if missing.is_none()
                && let Some(addr) = self.gateway_addr
                && tokio::net::TcpStream::connect(addr).await.is_err()
            {
                missing = Some(format!("the A2A gateway on {addr}"));
            }
            let Some(missing) = missing else {
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

    /// The last `lines` lines of every process's log, each under a header
    /// naming the process: for test failure messages.
    pub fn log_tails(&self, lines: usize) -> String {
        let processes = std::iter::once(self.nats.process())
            .chain(&self.bosses)
            .chain(&self.managers)
            .chain(&self.workers)
            .chain(&self.gateway);
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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

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
