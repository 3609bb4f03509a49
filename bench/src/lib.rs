//! Benchmarks of Swarm: whole local clusters (nats-server and the boss,
//! manager and worker binaries as real processes) driven with explicit plans
//! of `echo` tool calls, so no model time is counted, and every figure
//! printed beside the floor (request/reply, publish-ack, KV compare-and-swap)
//! measured on the same server in the same run.
//!
//! Run it with `cargo bench -p swarm-bench` (everything) or
//! `cargo run --release -p swarm-bench -- <scenario> [--quick]`; see
//! BENCHMARKS.md for the method and the figures.

pub mod cluster;
pub mod floor;
pub mod peers;
pub mod plans;
pub mod scenarios;
pub mod sink;
pub mod stats;
pub mod table;

use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};

use crate::cluster::{BenchCluster, BuildPolicy, ClusterSpec, SyncMode};
use crate::scenarios::Scale;
use crate::table::Table;

/// A scenario to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Every scenario below.
    All,
    /// Request/reply, publish-ack and KV compare-and-swap on a bare server.
    Floor,
    /// A one-task mission's round trip.
    OneTask,
    /// 200 independent tasks and one that depends on them all.
    FanOut,
    /// 50 tasks, each depending on the one before.
    Chain,
    /// Many concurrent missions of 10 tasks.
    Sustained,
    /// Time, state bytes written, manager memory and CPU per task for
    /// missions of 10 to 10,000 tasks (100,000 with --huge).
    Growth,
    /// Managers' memory per active swarm.
    Memory,
    /// SIGKILL of a manager while swarms run.
    Failover,
    /// The sustained load on 1, 2 and 3 manager replicas.
    Managers,
}

/// Which server configurations to run under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    /// The dev `nats.conf` only.
    Default,
    /// `sync_interval: always` only.
    Always,
    /// Both, one after the other.
    Both,
}

/// The benchmark's command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "swarm-bench",
    about = "Benchmarks of a local Swarm against the NATS floor"
)]
pub struct Args {
    /// Scenarios to run.
    #[arg(value_enum, default_value = "all")]
    pub scenarios: Vec<Scenario>,
    /// A smoke run: every scenario small (well under a minute for all).
    #[arg(long)]
    pub quick: bool,
    /// Server configuration(s).
    #[arg(long, value_enum, default_value = "both")]
    pub sync: SyncArg,
    /// Missions of the sustained load (default 1,000; 20 with --quick).
    #[arg(long)]
    pub missions: Option<usize>,
    /// Runs of the fan-out and chain missions (default 30; 2 with --quick);
    /// the one-task mission runs seven times as often. More runs, less noise.
    #[arg(long)]
    pub runs: Option<usize>,
    /// Also run the growth scenario with a mission of 100,000 tasks
    /// (measured as far as it gets within --huge-cap seconds).
    #[arg(long)]
    pub huge: bool,
    /// Seconds a growth mission of 5,000 tasks or more may run.
    #[arg(long, default_value_t = 120)]
    pub huge_cap: u64,
    /// Manager ack_wait(s) in seconds for the failover scenario (default 1.5,
    /// the manager's own default, and 30, its default with a model reviewer;
    /// 1.5 with --quick).
    #[arg(long, value_delimiter = ',')]
    pub ack_wait: Option<Vec<f64>>,
    /// Manager replicas (the failover scenario runs at least 2).
    #[arg(long, default_value_t = 2)]
    pub managers: usize,
    /// Worker replicas.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Extra environment for every role process, `KEY=VALUE` (repeatable),
    /// e.g. `--env SWARM_WORKER_CONCURRENCY=32`.
    #[arg(long = "env", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// Extra environment for every nats-server, `KEY=VALUE` (repeatable),
    /// after the local cluster's defaults, e.g. `--nats-env GOMAXPROCS=2`.
    #[arg(long = "nats-env", value_parser = parse_env)]
    pub nats_env: Vec<(String, String)>,
    /// With `--against`: extra environment for B's nats-server only, after
    /// `--nats-env` (to compare server settings on the same binaries).
    #[arg(long = "b-nats-env", value_parser = parse_env, requires = "against")]
    pub b_nats_env: Vec<(String, String)>,
    /// With `--against`: extra environment for B's roles only, after `--env`
    /// (to compare settings on the same binaries).
    #[arg(long = "b-env", value_parser = parse_env, requires = "against")]
    pub b_env: Vec<(String, String)>,
    /// With `--against`: B's roles export their traces (OTLP/HTTP) to a
    /// local sink that answers and discards; give `--against` the usual
    /// binaries to measure what tracing on costs against tracing off.
    #[arg(long = "b-traces", requires = "against")]
    pub b_traces: bool,
    /// The nats-server's CPUs: `own` (as `swarm up`: the last half of those
    /// the harness may use, at least one, when there are two or more),
    /// `shared` (any, beside the roles) or a list such as `1` or `2,3`.
    #[arg(long, default_value = "own")]
    pub nats_cpus: swarm_local::NatsCpus,
    /// With `--against`: B's nats-server on these CPUs instead (to compare
    /// placements on the same binaries).
    #[arg(long, requires = "against")]
    pub b_nats_cpus: Option<swarm_local::NatsCpus>,
    /// How latency runs follow each other: `settled` (each once the previous
    /// mission is closed, its report page stored), `back-to-back` (each as
    /// the previous report arrives, while the boss still works on its page),
    /// or both (each its own rows).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "settled,back-to-back"
    )]
    pub pacing: Vec<scenarios::Pacing>,
    /// Compare with the role binaries in this directory: the one-task,
    /// fan-out and chain missions run on two clusters side by side, mission
    /// by mission in ABBA order (A: the usual binaries, B: these), and one
    /// table gives the median of the pairs' ratios. Nothing else runs.
    #[arg(long, value_name = "DIR")]
    pub against: Option<std::path::PathBuf>,
    /// Measure these peers beside Swarm (`ray`, `celery`, `threads`; comma-
    /// separated): the one-task, fan-out and chain missions and the
    /// sustained load on Swarm and the same shapes on each peer, run by run
    /// in turns, and one table gives the median of the pairs' ratios. Ray
    /// and Celery are installed on first use (bench/peers/setup.sh). Nothing
    /// else runs.
    #[arg(long, value_enum, value_delimiter = ',', conflicts_with = "against")]
    pub peers: Vec<peers::Peer>,
    /// Use the role binaries as they are; do not run `cargo build` for them first.
    #[arg(long)]
    pub no_build: bool,
}

impl Args {
    /// The sizes the arguments ask for.
    pub fn scale(&self) -> Scale {
        let mut s = if self.quick {
            Scale::quick()
        } else {
            Scale::full()
        };
        if let Some(m) = self.missions {
            s.sustained_missions = m;
        }
        if let Some(r) = self.runs {
            s.runs = r.max(1);
            s.one_task_runs = s.runs * 7;
        }
        if self.huge {
            s.growth.push(100_000);
            s.huge_cap = Duration::from_secs(self.huge_cap);
        }
        if let Some(w) = &self.ack_wait {
            s.failover_ack_waits = w.clone();
        }
        s.pacing = self.pacing.clone();
        s
    }

    fn wants(&self, s: Scenario) -> bool {
        self.scenarios.contains(&Scenario::All) || self.scenarios.contains(&s)
    }

    /// Which latency missions to run: one-task, fan-out, chain.
    fn latency_missions(&self) -> (bool, bool, bool) {
        (
            self.wants(Scenario::OneTask),
            self.wants(Scenario::FanOut),
            self.wants(Scenario::Chain),
        )
    }

    fn spec(&self, sync: SyncMode) -> ClusterSpec {
        let mut spec = ClusterSpec::standard(sync);
        spec.managers = self.managers.max(1);
        spec.workers = self.workers.max(1);
        spec.env.extend(self.env.iter().cloned());
        spec.nats_env.extend(self.nats_env.iter().cloned());
        spec.nats_cpus = self.nats_cpus.clone();
        spec
    }

    fn syncs(&self) -> Vec<SyncMode> {
        match self.sync {
            SyncArg::Default => vec![SyncMode::Default],
            SyncArg::Always => vec![SyncMode::Always],
            SyncArg::Both => vec![SyncMode::Default, SyncMode::Always],
        }
    }
}

/// `own (1)`: the setting and the CPUs it gives a server here.
fn describe_cpus(cpus: &swarm_local::NatsCpus) -> String {
    match cpus.here() {
        // A list prints as the CPU numbers, comma-separated.
        Some(list) => format!("{cpus} ({})", swarm_local::NatsCpus::List(list)),
        None => format!("{cpus} (any)"),
    }
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

fn emit(tables: &mut Vec<Table>, t: Table) {
    println!("{t}");
    tables.push(t);
}

/// Starts a cluster and measures its floor.
async fn start(
    spec: ClusterSpec,
    bin_dir: &std::path::Path,
    scale: &Scale,
) -> anyhow::Result<(BenchCluster, floor::Floor)> {
    let c = BenchCluster::start(spec, bin_dir).await?;
    let f = tokio::time::timeout(
        floor::TIMEOUT,
        floor::measure(&c.client, &c.local.url(), scale.floor_samples),
    )
    .await
    .context("measuring the floor timed out")??;
    scenarios::warm_up(&c).await?;
    Ok((c, f))
}

/// Runs the scenarios `args` asks for, printing each table as it is done,
/// and returns the tables.
pub async fn run(args: &Args, build: BuildPolicy) -> anyhow::Result<Vec<Table>> {
    let bin_dir = cluster::bin_dir(if args.no_build {
        BuildPolicy::Never
    } else {
        build
    })?;
    let scale = args.scale();
    let mut tables = Vec::new();
    println!(
        "# swarm-bench{}: {} CPUs, nats-server CPUs {}, {} manager(s), {} worker(s), binaries from {}\n",
        if args.quick { " (quick)" } else { "" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        describe_cpus(&args.nats_cpus),
        args.managers,
        args.workers,
        bin_dir.display()
    );
    if let Some(other) = &args.against {
        let server: String = args
            .b_nats_env
            .iter()
            .map(|(k, v)| format!(" {k}={v}"))
            .collect();
        let mut server = if server.is_empty() {
            server
        } else {
            format!(", nats-server with{server}")
        };
        if let Some(cpus) = &args.b_nats_cpus {
            server.push_str(&format!(", nats-server CPUs {}", describe_cpus(cpus)));
        }
        let sink = if args.b_traces {
            Some(sink::Sink::start().await?)
        } else {
            None
        };
        if let Some(sink) = &sink {
            server.push_str(&format!(
                ", traces exported to a discarding sink at {}",
                sink.url
            ));
        }
        for (k, v) in &args.b_env {
            server.push_str(&format!(", roles with {k}={v}"));
        }
        println!("# B: binaries from {}{server}\n", other.display());
        let (one, fan, chain) = args.latency_missions();
        for sync in args.syncs() {
            let (a, fa) = start(args.spec(sync), &bin_dir, &scale).await?;
            let mut b_spec = args.spec(sync);
            b_spec.nats_env.extend(args.b_nats_env.iter().cloned());
            b_spec.env.extend(args.b_env.iter().cloned());
            if let Some(sink) = &sink {
                b_spec
                    .env
                    .push(("OTEL_EXPORTER_OTLP_ENDPOINT".into(), sink.url.clone()));
            }
            if let Some(cpus) = &args.b_nats_cpus {
                b_spec.nats_cpus = cpus.clone();
            }
            let (b, fb) = start(b_spec, other, &scale).await?;
            let t = scenarios::compare((&a, &fa), (&b, &fb), &scale, one, fan, chain).await;
            a.stop().await;
            b.stop().await;
            emit(&mut tables, t?);
        }
        if let Some(sink) = &sink {
            println!("# B's roles sent the sink {} exports\n", sink.exports());
        }
        return Ok(tables);
    }
    if !args.peers.is_empty() {
        let (one_task, fan_out, chain) = args.latency_missions();
        println!(
            "# peers: {}\n",
            args.peers
                .iter()
                .map(|p| p.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for sync in args.syncs() {
            let (c, f) = start(args.spec(sync), &bin_dir, &scale).await?;
            let missions = scenarios::PeerMissions {
                one_task,
                fan_out,
                chain,
                sustained: args.wants(Scenario::Sustained),
            };
            let t = scenarios::versus_peers(&c, &f, &args.peers, &scale, missions).await;
            c.stop().await;
            emit(&mut tables, t?);
        }
        return Ok(tables);
    }
    for sync in args.syncs() {
        let (one, fan, chain) = args.latency_missions();
        if args.wants(Scenario::Floor) || one || fan || chain {
            let (c, f) = start(args.spec(sync), &bin_dir, &scale).await?;
            if args.wants(Scenario::Floor) {
                emit(&mut tables, f.table(&sync.to_string()));
            }
            if one || fan || chain {
                for t in scenarios::latency(&c, &f, &scale, one, fan, chain).await? {
                    emit(&mut tables, t);
                }
            }
            c.stop().await;
        }
        if args.wants(Scenario::Sustained) {
            let (c, f) = start(args.spec(sync), &bin_dir, &scale).await?;
            emit(&mut tables, scenarios::sustained(&c, &f, &scale).await?);
            c.stop().await;
        }
        if args.wants(Scenario::Growth) {
            // The default limits hold a mission of 100,000 tasks.
            let (c, f) = start(args.spec(sync), &bin_dir, &scale).await?;
            emit(&mut tables, scenarios::growth(&c, &f, &scale).await?);
            c.stop().await;
        }
        if args.wants(Scenario::Memory) {
            let (c, _) = start(args.spec(sync), &bin_dir, &scale).await?;
            emit(&mut tables, scenarios::memory(&c, &scale).await?);
            c.stop().await;
        }
        if args.wants(Scenario::Managers) {
            let mut rows = Vec::new();
            for n in 1..=3 {
                let mut spec = args.spec(sync);
                spec.managers = n;
                let (c, _) = start(spec, &bin_dir, &scale).await?;
                rows.push(scenarios::managers_row(&c, &scale).await?);
                c.stop().await;
            }
            emit(&mut tables, scenarios::managers_table(sync, &scale, rows));
        }
        if args.wants(Scenario::Failover) {
            let mut rows = Vec::new();
            for &w in &scale.failover_ack_waits {
                let mut spec = args
                    .spec(sync)
                    .with_env("SWARM_MANAGER_ACK_WAIT", w.to_string());
                spec.managers = spec.managers.max(2);
                let (mut c, _) = start(spec, &bin_dir, &scale).await?;
                rows.push(scenarios::failover(&mut c, &scale, w).await?);
                c.stop().await;
            }
            emit(&mut tables, scenarios::failover_table(sync, &scale, rows));
        }
    }
    Ok(tables)
}

/// The entry point of the `swarm-bench` binary and the `cargo bench` target:
/// parses `args` (the program name first), runs, and reports errors.
pub fn main_with_args(
    args: impl IntoIterator<Item = String>,
    build: BuildPolicy,
) -> anyhow::Result<()> {
    let args = Args::parse_from(args);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let started = std::time::Instant::now();
    runtime.block_on(run(&args, build))?;
    println!("(done in {:.1} s)", started.elapsed().as_secs_f64());
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}
