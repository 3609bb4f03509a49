//! nats-server nodes run from the production configuration
//! (`k8s/base/nats/`), as the Kubernetes StatefulSet runs them: users and
//! permissions, `sync_interval: always`, and for more than one node a
//! cluster whose routes authenticate with the route user's password (in
//! the `--routes` URLs, as the StatefulSet passes them), all on loopback
//! with free ports and a store each.
//!
//! Each node gets its own copy of the config with `cluster.conf`'s
//! `listen` port changed, since nodes on one machine need ports of their
//! own; the `--cluster` flag would do that too, but nats-server then drops
//! the file's route authorization, and the tests would not test it.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use swarm_local::{ManagedProcess, nats_server_bin};

use crate::scratch::Scratch;

/// How long a node may take to listen, and a cluster to elect its
/// JetStream meta leader.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The directory of the production nats-server configuration.
pub fn prod_nats_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../k8s/base/nats"))
}

/// The single-node replacement of `cluster.conf` (the dev overlay's).
pub fn single_node_cluster_conf() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../k8s/overlays/dev/nats/cluster.conf"
    ))
}

/// A Swarm NATS user: its name, the variable its password is read from by
/// nats-server, and the password the test cluster gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    /// The user name (`boss`, `manager`, `worker`, `client`).
    pub user: &'static str,
    /// The environment variable nats.conf reads the password from.
    pub password_var: &'static str,
    /// The password in test clusters.
    pub password: &'static str,
}

/// The user routes between nodes authenticate as (cluster.conf).
pub const ROUTE_USER: &str = "route";

/// The environment variable cluster.conf reads the route password from.
pub const ROUTE_PASSWORD_VAR: &str = "NATS_ROUTE_PASSWORD";

/// The route password in test clusters.
pub const ROUTE_PASSWORD: &str = "test-route-secret";

/// The `listen` line of the production cluster.conf, which each local
/// node's copy changes to a port of its own.
const CLUSTER_LISTEN: &str = "listen: 0.0.0.0:6222";

/// The seven users of the production configuration.
pub const ROLES: [Role; 7] = [
    Role {
        user: "admin",
        password_var: "NATS_ADMIN_PASSWORD",
        password: "test-admin-secret",
    },
    Role {
        user: "boss",
        password_var: "NATS_BOSS_PASSWORD",
        password: "test-boss-secret",
    },
    Role {
        user: "manager",
        password_var: "NATS_MANAGER_PASSWORD",
        password: "test-manager-secret",
    },
    Role {
        user: "worker",
        password_var: "NATS_WORKER_PASSWORD",
        password: "test-worker-secret",
    },
    Role {
        user: "client",
        password_var: "NATS_CLIENT_PASSWORD",
        password: "test-client-secret",
    },
    Role {
        user: "approver",
        password_var: "NATS_APPROVER_PASSWORD",
        password: "test-approver-secret",
    },
    Role {
        user: "gateway",
        password_var: "NATS_GATEWAY_PASSWORD",
        password: "test-gateway-secret",
    },
];

/// The role named `user`. Panics for an unknown user.
pub fn role(user: &str) -> Role {
    *ROLES
        .iter()
        .find(|r| r.user == user)
        .unwrap_or_else(|| panic!("no NATS user {user} in the production config"))
}

/// One node of a [`NatsCluster`] (or a stranger to it, from
/// [`NatsCluster::start_outsider`]). Killed on `Drop`.
#[derive(Debug)]
pub struct NatsNode {
    name: String,
    port: u16,
    monitor_port: u16,
    cluster_port: Option<u16>,
    process: ManagedProcess,
}

impl NatsNode {
    /// The server name (`nats-0`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `nats://127.0.0.1:<client port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The HTTP monitoring address.
    pub fn monitor_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.monitor_port))
    }

    /// The route port, for a clustered node.
    pub fn cluster_port(&self) -> Option<u16> {
        self.cluster_port
    }

    /// The server process.
    pub fn process(&mut self) -> &mut ManagedProcess {
        &mut self.process
    }
}

/// `n` nats-server processes from the production configuration, clustered
/// when `n > 1` (authenticated routes between all of them, as the
/// StatefulSet's `--routes` gives them with pod names), each with its own
/// store. Killed on `Drop`.
#[derive(Debug)]
pub struct NatsCluster {
    // Declared before `dir`: the servers die before their stores are deleted.
    nodes: Vec<NatsNode>,
    dir: Scratch,
}

impl NatsCluster {
    /// Starts `n` nodes and waits until every one reports itself healthy
    /// (`/healthz`: JetStream up and, in a cluster, a meta leader known).
    pub fn start(n: usize) -> anyhow::Result<NatsCluster> {
        Self::start_with_tls(n, None)
    }

    /// Like [`start`](Self::start), with `tls_conf` as the content of
    /// `tls.conf` (as an overlay would replace it) instead of the base's
    /// (TLS off).
    pub fn start_with_tls(n: usize, tls_conf: Option<&str>) -> anyhow::Result<NatsCluster> {
        // Free ports are found by binding and releasing them, so another
        // test's server can take one before a node binds it (the node then
        // exits): start the whole cluster again on fresh ports.
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start(n, tls_conf) {
                Ok(cluster) => return Ok(cluster),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("the cluster was never started")))
    }

    fn try_start(n: usize, tls_conf: Option<&str>) -> anyhow::Result<NatsCluster> {
        assert!(n > 0, "a cluster needs a node");
        let dir = Scratch::new("nats-cluster")?;
        let bin = nats_server_bin()?;
        let ports: Vec<NodePorts> = (0..n)
            .map(|_| NodePorts::free(n > 1))
            .collect::<anyhow::Result<_>>()?;
        let routes: Vec<u16> = ports.iter().filter_map(|p| p.cluster).collect();
        let mut nodes = Vec::new();
        for (i, node_ports) in ports.into_iter().enumerate() {
            let spec = NodeSpec {
                name: format!("nats-{i}"),
                ports: node_ports,
                tls_conf,
                route_password: ROUTE_PASSWORD,
                routes: route_urls(Some(ROUTE_PASSWORD), &routes),
            };
            nodes.push(spawn_node(dir.path(), &bin, spec)?);
        }
        let mut cluster = NatsCluster { nodes, dir };
        for i in 0..n {
            cluster.wait_healthy(i)?;
        }
        Ok(cluster)
    }

    /// Starts a node named `name` from the same production config that
    /// tries to route to every node of this (clustered) one: with
    /// `route_password` in its route URLs and as its own route password,
    /// or with no credentials in the URLs (and a route password of its own
    /// that is not the cluster's). The configured cluster must refuse it
    /// unless the password is the cluster's. Returns once the node serves
    /// its monitoring port; it is not waited on to be healthy, which a
    /// refused node never is.
    pub fn start_outsider(
        &self,
        name: &str,
        route_password: Option<&str>,
    ) -> anyhow::Result<NatsNode> {
        let routes: Vec<u16> = self.nodes.iter().filter_map(|n| n.cluster_port).collect();
        anyhow::ensure!(!routes.is_empty(), "a single node has no routes to try");
        let bin = nats_server_bin()?;
        let spec = NodeSpec {
            name: name.to_owned(),
            ports: NodePorts::free(true)?,
            tls_conf: None,
            route_password: route_password.unwrap_or("an-outsiders-own-password"),
            routes: route_urls(route_password, &routes),
        };
        let mut node = spawn_node(self.dir.path(), &bin, spec)?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match http_get(node.monitor_addr(), "/varz") {
                Ok((200, _)) => return Ok(node),
                _ if node.process.is_running() && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => bail!(
                    "{name} does not serve /varz ({other:?}):\n{}",
                    node.process.log_tail(30)
                ),
            }
        }
    }

    /// The nodes.
    pub fn nodes(&self) -> &[NatsNode] {
        &self.nodes
    }

    /// Node `i`.
    pub fn node(&mut self, i: usize) -> &mut NatsNode {
        &mut self.nodes[i]
    }

    /// Every node's URL, comma-separated (what `NATS_URL` takes).
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(NatsNode::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The temporary directory (config, stores, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills node `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].process.kill();
    }

    /// Restarts node `i` (killing it first if it runs) with the same ports
    /// and store, and waits until it is healthy.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].process.restart()?;
        self.wait_healthy(i)
    }

    /// A client connected to every node as `user` with its test password.
    pub async fn connect(&self, user: &str) -> anyhow::Result<async_nats::Client> {
        self.connect_with(user, async_nats::ConnectOptions::new())
            .await
    }

    /// Like [`connect`](Self::connect), with extra options (say an event callback).
    pub async fn connect_with(
        &self,
        user: &str,
        opts: async_nats::ConnectOptions,
    ) -> anyhow::Result<async_nats::Client> {
        let r = role(user);
        let urls: Vec<String> = self.nodes.iter().map(NatsNode::url).collect();
        // Each user reads its own inboxes only, as the roles connect.
        opts.user_and_password(r.user.into(), r.password.into())
            .custom_inbox_prefix(format!("_INBOX.{}", r.user))
            .connect(urls)
            .await
            .with_context(|| format!("cannot connect as {user} to {}", self.urls()))
    }

    /// The last `lines` lines of every node's log.
    pub fn log_tails(&self, lines: usize) -> String {
        self.nodes
            .iter()
            .map(|n| format!("==> {} <==\n{}\n", n.name, n.process.log_tail(lines)))
            .collect()
    }

    fn wait_healthy(&mut self, i: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let running = self.nodes[i].process.is_running();
            let node = &self.nodes[i];
            match http_get(node.monitor_addr(), "/healthz") {
                Ok((200, _)) => return Ok(()),
                Ok(_) | Err(_) if running && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                other => bail!(
                    "{} is not healthy after {START_TIMEOUT:?} ({other:?}):\n{}",
                    node.name,
                    self.log_tails(30)
                ),
            }
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- nats cluster in {} ---\n{}",
                self.dir.path().display(),
                self.log_tails(40)
            );
        }
    }
}

/// The ports of one local node.
#[derive(Debug, Clone, Copy)]
struct NodePorts {
    client: u16,
    monitor: u16,
    /// The route port, for a clustered node.
    cluster: Option<u16>,
}

impl NodePorts {
    fn free(clustered: bool) -> anyhow::Result<NodePorts> {
        Ok(NodePorts {
            client: free_port()?,
            monitor: free_port()?,
            cluster: clustered.then(free_port).transpose()?,
        })
    }
}

/// What a node is started with.
struct NodeSpec<'a> {
    name: String,
    ports: NodePorts,
    /// The content of tls.conf, instead of the base's (TLS off).
    tls_conf: Option<&'a str>,
    /// The node's NATS_ROUTE_PASSWORD: what routes to it must present.
    route_password: &'a str,
    /// Its `--routes` URLs.
    routes: Vec<String>,
}

/// The `--routes` URLs for route ports `ports`, carrying `password` (as the
/// route user) when given, as the StatefulSet's `--routes` does.
fn route_urls(password: Option<&str>, ports: &[u16]) -> Vec<String> {
    ports
        .iter()
        .map(|port| match password {
            Some(p) => format!("nats://{ROUTE_USER}:{p}@127.0.0.1:{port}"),
            None => format!("nats://127.0.0.1:{port}"),
        })
        .collect()
}

/// Writes the node's copy of the overlay's ConfigMap under
/// `<dir>/conf/<name>` (the base files; for one node the dev overlay's
/// empty cluster.conf; for a clustered one the base's with the node's own
/// route port) and starts it with a store and a log under `dir`.
fn spawn_node(dir: &Path, bin: &Path, spec: NodeSpec<'_>) -> anyhow::Result<NatsNode> {
    let conf_dir = dir.join("conf").join(&spec.name);
    std::fs::create_dir_all(&conf_dir)?;
    for file in ["nats.conf", "accounts.conf", "tls.conf"] {
        let from = prod_nats_dir().join(file);
        std::fs::copy(&from, conf_dir.join(file))
            .with_context(|| format!("cannot copy {}", from.display()))?;
    }
    let cluster_conf = match spec.ports.cluster {
        None => std::fs::read_to_string(single_node_cluster_conf())?,
        Some(port) => {
            let from = prod_nats_dir().join("cluster.conf");
            let text = std::fs::read_to_string(&from)
                .with_context(|| format!("cannot read {}", from.display()))?;
            // Exactly one such line, or the node would not be the
            // production config with another port.
            anyhow::ensure!(
                text.matches(CLUSTER_LISTEN).count() == 1,
                "{} has no single `{CLUSTER_LISTEN}` line to give a local port",
                from.display()
            );
            text.replace(CLUSTER_LISTEN, &format!("listen: 127.0.0.1:{port}"))
        }
    };
    std::fs::write(conf_dir.join("cluster.conf"), cluster_conf)?;
    if let Some(tls) = spec.tls_conf {
        std::fs::write(conf_dir.join("tls.conf"), tls)?;
    }
    let store = dir.join(&spec.name).join("store");
    std::fs::create_dir_all(&store)?;
    let mut args: Vec<OsString> = vec![
        "-c".into(),
        conf_dir.join("nats.conf").into(),
        "-n".into(),
        spec.name.clone().into(),
        "-a".into(),
        "127.0.0.1".into(),
        "-p".into(),
        spec.ports.client.to_string().into(),
        "-m".into(),
        spec.ports.monitor.to_string().into(),
    ];
    if !spec.routes.is_empty() {
        args.extend(["--routes".into(), spec.routes.join(",").into()]);
    }
    let mut env = vec![
        ("SERVER_NAME".to_owned(), spec.name.clone()),
        ("NATS_STORE_DIR".to_owned(), store.display().to_string()),
        (
            ROUTE_PASSWORD_VAR.to_owned(),
            spec.route_password.to_owned(),
        ),
    ];
    env.extend(
        ROLES
            .iter()
            .map(|r| (r.password_var.to_owned(), r.password.to_owned())),
    );
    let log = dir.join("logs").join(format!("{}.log", spec.name));
    let process = ManagedProcess::spawn(spec.name.clone(), bin, args, env, log)?;
    Ok(NatsNode {
        name: spec.name,
        port: spec.ports.client,
        monitor_port: spec.ports.monitor,
        cluster_port: spec.ports.cluster,
        process,
    })
}

/// A port of 127.0.0.1 free at the time of asking.
pub fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("no free port")?;
    Ok(l.local_addr()?.port())
}

/// A plain HTTP/1.0 GET of `path` at `addr`: the status and the body. For
/// health, readiness and metrics endpoints in tests.
pub fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status in {raw:?}"))?;
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}
