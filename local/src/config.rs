//! What a local cluster runs and where it keeps its files
//! ([`LocalOptions`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use crate::cpus::NatsCpus;
use crate::nats::DEV_NATS_CONF;

/// The worker pool a local cluster's workers join unless told otherwise.
pub const DEFAULT_POOL: &str = "general";

/// What a [`LocalCluster`](crate::LocalCluster) runs and where it keeps its files.
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
    /// How long [`LocalCluster::start`](crate::LocalCluster::start) waits for the roles to be ready.
    pub ready_timeout: Duration,
    /// Serve each role's `/metrics` (and `/healthz`, `/readyz`) on
    /// 127.0.0.1 at consecutive ports from this one, in the order the roles
    /// start (bosses, managers, workers, then replicas added later); `None`
    /// serves none.
    pub metrics_base_port: Option<u16>,
    /// Run an A2A gateway on 127.0.0.1 at this port (0: a free one);
    /// `None` runs none.
    pub gateway_port: Option<u16>,
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
            metrics_base_port: None,
            gateway_port: None,
        }
    }
}

/// The options with every path absolute, since the children may not share
/// the supervisor's working directory forever.
pub(crate) fn absolute_options(mut opts: LocalOptions) -> anyhow::Result<LocalOptions> {
    let abs =
        |p: &Path| std::path::absolute(p).with_context(|| format!("bad path {}", p.display()));
    opts.data_dir = abs(&opts.data_dir)?;
    opts.reports_dir = abs(&opts.reports_dir)?;
    opts.workspace_root = abs(&opts.workspace_root)?;
    opts.bin_dir = abs(&opts.bin_dir)?;
    opts.nats_conf = opts.nats_conf.as_deref().map(abs).transpose()?;
    Ok(opts)
}
