//! The scenarios: each starts what it needs on a [`BenchCluster`], measures,
//! and returns its figures as [`Table`]s, each figure beside the floor
//! measured on the same server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use swarm_common::{FinalReport, SwarmStatus, TaskOutcome, subjects};

use crate::cluster::BenchCluster;
use crate::floor::Floor;
use crate::peers::{Peer, PeerDriver, Shape};
use crate::plans;
use crate::stats::{Summary, fmt_bytes, fmt_ms, fmt_rate, fmt_x, ms};
use crate::table::Table;

/// How big each scenario is.
#[derive(Debug, Clone)]
pub struct Scale {
    /// Samples per floor measurement.
    pub floor_samples: usize,
    /// Independent tasks in the fan-out mission (plus one join).
    pub fan_out: usize,
    /// Tasks in the chain.
    pub chain: usize,
    /// Runs of the fan-out and chain missions.
    pub runs: usize,
    /// Runs of the one-task mission.
    pub one_task_runs: usize,
    /// Missions of the sustained load.
    pub sustained_missions: usize,
    /// Tasks per sustained mission.
    pub sustained_tasks: usize,
    /// Submissions in flight at once during the sustained load.
    pub submit_concurrency: usize,
    /// Pairs of sustained loads beside a peer (`--peers`).
    pub sustained_pairs: usize,
    /// Mission sizes of the growth scenario.
    pub growth: Vec<usize>,
    /// Active swarm counts at which the managers' memory is read.
    pub memory_levels: Vec<usize>,
    /// Swarms running when a manager is killed.
    pub failover_swarms: usize,
    /// Length of each of their chains.
    pub failover_chain: usize,
    /// Manager `ack_wait`s to measure failover with, in seconds.
    pub failover_ack_waits: Vec<f64>,
    /// How long a growth mission of 5,000 tasks or more may run before it
    /// is measured as far as it got.
    pub huge_cap: Duration,
    /// How the latency runs follow each other (each pacing gets its rows).
    pub pacing: Vec<Pacing>,
}

/// How one latency run follows the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pacing {
    /// Once the previous mission is closed: its report page rendered and
    /// stored and its record updated by the boss, so no run shares the
    /// machine with the last one's report work.
    Settled,
    /// As soon as the previous `FinalReport` arrives, while the boss still
    /// renders and stores that report's page.
    BackToBack,
}

impl Scale {
    /// The issue's sizes (sustained load and growth scaled by the caller).
    pub fn full() -> Scale {
        Scale {
            floor_samples: 1000,
            fan_out: 200,
            chain: 50,
            runs: 30,
            one_task_runs: 210,
            sustained_missions: 1000,
            sustained_tasks: 10,
            submit_concurrency: 64,
            sustained_pairs: 3,
            growth: vec![10, 1_000, 10_000],
            memory_levels: vec![100, 500, 1000],
            failover_swarms: 20,
            failover_chain: 200,
            failover_ack_waits: vec![1.5, 30.0],
            huge_cap: Duration::from_secs(120),
            pacing: vec![Pacing::Settled, Pacing::BackToBack],
        }
    }

    /// A smoke run: every scenario small, well under a minute in all.
    pub fn quick() -> Scale {
        Scale {
            floor_samples: 100,
            fan_out: 20,
            chain: 10,
            runs: 2,
            one_task_runs: 5,
            sustained_missions: 20,
            sustained_tasks: 10,
            submit_concurrency: 16,
            sustained_pairs: 1,
            growth: vec![10, 1_000],
            memory_levels: vec![20],
            failover_swarms: 4,
            failover_chain: 40,
            failover_ack_waits: vec![1.5],
            huge_cap: Duration::from_secs(20),
            pacing: vec![Pacing::Settled, Pacing::BackToBack],
        }
    }
}

/// Missions at least this big are stopped at [`Scale::huge_cap`].
const HUGE: usize = 5000;

/// How long any one mission may take before the run is declared broken.
const MISSION_TIMEOUT: Duration = Duration::from_secs(600);

/// Milliseconds from `a` to `b`.
fn between(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<f64> {
    let d = b? - a?;
    d.num_microseconds().map(|us| us as f64 / 1000.0)
}

/// Time from assignment to acceptance of every task of `report`, in ms.
fn task_latencies(report: &FinalReport) -> impl Iterator<Item = f64> + '_ {
    report
        .task_results
        .iter()
        .filter_map(|t: &TaskOutcome| between(t.assigned_at, t.completed_at))
}

/// Time from assignment until a worker started the task, in ms.
fn queue_waits(report: &FinalReport) -> impl Iterator<Item = f64> + '_ {
    report
        .task_results
        .iter()
        .filter_map(|t| between(t.assigned_at, t.started_at))
}

/// The hops of a chain: from one task's assignment to the next's, in ms,
/// tasks taken in the order they were assigned.
fn hops(report: &FinalReport) -> Vec<f64> {
    let mut assigned: Vec<DateTime<Utc>> = report
        .task_results
        .iter()
        .filter_map(|t| t.assigned_at)
        .collect();
    assigned.sort();
    assigned
        .windows(2)
        .filter_map(|w| between(Some(w[0]), Some(w[1])))
        .collect()
}

fn ensure_completed(report: &FinalReport, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        report.overall_status == SwarmStatus::Completed,
        "{what} ended {:?}: {}",
        report.overall_status,
        report.summary
    );
    Ok(())
}

fn floor_note(floor: &Floor) -> String {
    format!(
        "Floor on this server: request/reply {} · publish-ack {} · KV CAS {} · hop floor {} · JetStream ping-pong {} (medians).",
        fmt_ms(floor.rtt.p50),
        fmt_ms(floor.pub_ack.p50),
        fmt_ms(floor.cas.p50),
        fmt_ms(floor.hop_ms()),
        fmt_ms(floor.ping_pong.p50)
    )
}

/// CPU seconds (user + system) a process has used, from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, in USER_HZ (100) ticks.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// CPU seconds used so far by each kind of process of the cluster.
#[derive(Debug, Clone, Copy, Default)]
struct CpuUse {
    nats: f64,
    boss: f64,
    managers: f64,
    workers: f64,
}

impl CpuUse {
    fn read(c: &BenchCluster) -> CpuUse {
        let sum = |ps: &[swarm_local::ManagedProcess]| {
            ps.iter()
                .filter_map(|p| p.pid())
                .filter_map(cpu_seconds)
                .sum::<f64>()
        };
        CpuUse {
            nats: c
                .local
                .nats
                .process()
                .pid()
                .and_then(cpu_seconds)
                .unwrap_or(0.0),
            boss: sum(&c.local.bosses),
            managers: sum(&c.local.managers),
            workers: sum(&c.local.workers),
        }
    }

    fn since(self, before: CpuUse) -> CpuUse {
        CpuUse {
            nats: self.nats - before.nats,
            boss: self.boss - before.boss,
            managers: self.managers - before.managers,
            workers: self.workers - before.workers,
        }
    }

    /// "nats 1.2 · boss 0.1 · managers 3.4 · workers 0.9 ms" per `per` units.
    fn per(self, per: f64) -> String {
        let f = |s: f64| s * 1000.0 / per.max(1.0);
        format!(
            "nats-server {:.2} · boss {:.2} · managers {:.2} · workers {:.2} ms",
            f(self.nats),
            f(self.boss),
            f(self.managers),
            f(self.workers)
        )
    }
}

/// Runs a one-task mission a few times so the first figures are not the
/// cold start of each process.
pub async fn warm_up(c: &BenchCluster) -> anyhow::Result<()> {
    for _ in 0..3 {
        let req = plans::fresh(&c.mission_id("warmup"), "general", plans::independent(1))?;
        let (_, report) = c.run_mission(&req, MISSION_TIMEOUT).await?;
        ensure_completed(&report, "warm-up")?;
    }
    Ok(())
}

/// One latency scenario: a mission, how often to run it, and the target,
/// Ray's and Celery's figures for it.
#[derive(Clone)]
struct Case {
    name: String,
    tasks: Vec<serde_json::Value>,
    runs: usize,
    /// The issue's figures in ms: the target, Ray 2.60's and Celery 5.7's.
    issue: [f64; 3],
    /// The same mission for a peer.
    shape: Shape,
    chain: bool,
    /// Submitted with a mission id: its record is stored before its
    /// deployment, to tell a new mission from a resubmission.
    named: bool,
}

impl Case {
    /// One run's request on `c`.
    fn request(
        &self,
        c: &BenchCluster,
        label: &str,
    ) -> anyhow::Result<swarm_common::mission::MissionRequest> {
        let label = c.mission_id(label);
        if self.named {
            plans::mission(&label, "general", self.tasks.clone())
        } else {
            plans::fresh(&label, "general", self.tasks.clone())
        }
    }
}

/// The latency missions asked for, at `scale`'s sizes.
fn cases(scale: &Scale, one_task: bool, fan_out: bool, chain: bool) -> Vec<Case> {
    let runs = |n: usize| n.max(1);
    let mut cases: Vec<Case> = Vec::new();
    if one_task {
        for named in [false, true] {
            cases.push(Case {
                name: if named {
                    "one-task mission, with a mission id".into()
                } else {
                    "one-task mission".into()
                },
                tasks: plans::independent(1),
                runs: runs(scale.one_task_runs),
                issue: [2.0, 2.0, 3.0],
                shape: Shape::OneTask,
                chain: false,
                named,
            });
        }
    }
    if fan_out {
        cases.push(Case {
            name: format!("fan-out {} + fan-in", scale.fan_out),
            tasks: plans::fan_out(scale.fan_out),
            runs: runs(scale.runs),
            issue: [40.0, 160.0, 430.0],
            shape: Shape::FanOut(scale.fan_out),
            chain: false,
            named: false,
        });
    }
    if chain {
        cases.push(Case {
            name: format!("chain of {}", scale.chain),
            tasks: plans::chain(scale.chain),
            runs: runs(scale.runs),
            issue: [25.0, 90.0, 155.0],
            shape: Shape::Chain(scale.chain),
            chain: true,
            named: false,
        });
    }
    cases
}

/// The one-task round trip, the fan-out/fan-in and the chain, on one cluster.
pub async fn latency(
    c: &BenchCluster,
    floor: &Floor,
    scale: &Scale,
    one_task: bool,
    fan_out: bool,
    chain: bool,
) -> anyhow::Result<Vec<Table>> {
    let sync = c.spec.sync;
    let mut t = Table::new(
        format!("Latency ({sync})"),
        "one mission at a time with an explicit plan of `echo` tool calls; from just before the \
         request on `boss.missions` until the `FinalReport` arrives on a core NATS subscription \
         (includes intake, planning, deployment, every task and the report). Repeated runs, each \
         submitted once the previous mission is closed (its report page rendered and stored, its \
         record updated), so no run shares the machine with the last one's report work; rows \
         marked \"back to back\" submit each run as the previous report arrives, while the boss \
         still renders and stores that report's page. Nearest-rank percentiles. The multiples \
         divide the p50 by the floor's request/reply p50 and by the hop floor (2 publish-acks + \
         1 CAS). The peers' columns are the issue's figures; `--peers` measures the peers here, \
         run by run beside Swarm.",
        &[
            "scenario",
            "runs",
            "p50",
            "min",
            "max",
            "x RTT",
            "x hop floor",
            "target",
            "Ray 2.60 (issue)",
            "Celery 5.7 (issue)",
        ],
    );
    let mut detail = Table::new(
        format!("Latency breakdown ({sync})"),
        "p50s over all runs, from the report's timestamps (manager and worker clocks, the same \
         machine) and the client's wall clock: submit -> 1st assignment (intake, planning, \
         deployment, state created); queue wait = assigned -> a worker starts it; run + accept = \
         started -> the manager has stored the accepted result (tool, result stored, delivered \
         to the manager, waits in the swarm's queue, state CAS); task = assigned -> accepted; \
         end -> report = last acceptance -> report received (reading every result, building and \
         publishing the report); CPU per task = user + system time each kind of process used over \
         the runs (from `/proc`, with the mission's start and end and, when settled, its report \
         page), divided by the tasks run",
        &[
            "scenario",
            "tasks",
            "submit -> 1st assignment",
            "queue wait",
            "run + accept",
            "task p50",
            "task p99",
            "end -> report",
            "chain: per hop",
            "CPU per task",
        ],
    );
    let cases = cases(scale, one_task, fan_out, chain);
    let paced = cases
        .into_iter()
        .flat_map(|case| scale.pacing.iter().map(move |p| (case.clone(), *p)));
    for (case, pacing) in paced {
        let Case {
            name,
            tasks,
            runs: n,
            issue: [target, ray, celery],
            chain: is_chain,
            ..
        } = case.clone();
        let name = match pacing {
            Pacing::Settled => name,
            Pacing::BackToBack => format!("{name}, back to back"),
        };
        let mut totals = Vec::new();
        let mut task_lat = Vec::new();
        let mut waits = Vec::new();
        let mut accepts = Vec::new();
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        let mut chain_hops = Vec::new();
        let len = tasks.len();
        let cpu_before = CpuUse::read(c);
        for _ in 0..n {
            let req = case.request(c, "lat")?;
            let run = c.run_mission_timed(&req, MISSION_TIMEOUT).await?;
            let report = &run.report;
            ensure_completed(report, &name)?;
            totals.push(ms(run.elapsed));
            task_lat.extend(task_latencies(report));
            waits.extend(queue_waits(report));
            accepts.extend(
                report
                    .task_results
                    .iter()
                    .filter_map(|t| between(t.started_at, t.completed_at)),
            );
            let first = report
                .task_results
                .iter()
                .filter_map(|t| t.assigned_at)
                .min();
            starts.extend(between(Some(run.submitted), first));
            ends.extend(between(Some(report.completed_at), Some(run.arrived)));
            if is_chain {
                chain_hops.extend(hops(report));
            }
            if pacing == Pacing::Settled {
                c.settle(&run.swarm_id, MISSION_TIMEOUT).await?;
            }
        }
        let cpu = CpuUse::read(c).since(cpu_before);
        let s = Summary::of(totals).context("no runs")?;
        t.row(vec![
            name.clone(),
            s.n.to_string(),
            fmt_ms(s.p50),
            fmt_ms(s.min),
            fmt_ms(s.max),
            fmt_x(s.p50, floor.rtt.p50),
            fmt_x(s.p50, floor.hop_ms()),
            format!("{target} ms"),
            format!("{ray} ms"),
            format!("{celery} ms"),
        ]);
        let p50 = |v: Vec<f64>| Summary::of(v).map_or_else(|| "-".to_owned(), |s| fmt_ms(s.p50));
        let tl = Summary::of(task_lat).context("no task timestamps")?;
        detail.row(vec![
            name,
            (tl.n / n).to_string(),
            p50(starts),
            p50(waits),
            p50(accepts),
            fmt_ms(tl.p50),
            fmt_ms(tl.p99),
            p50(ends),
            if let Some(h) = Summary::of(chain_hops) {
                format!(
                    "{} ({} hop floor, {} ping-pong); assignment to assignment p50 {}, p99 {}",
                    fmt_ms(s.p50 / len as f64),
                    fmt_x(s.p50 / len as f64, floor.hop_ms()),
                    fmt_x(s.p50 / len as f64, floor.ping_pong.p50),
                    fmt_ms(h.p50),
                    fmt_ms(h.p99)
                )
            } else {
                "-".into()
            },
            cpu.per((n * len) as f64),
        ]);
    }
    t.note(floor_note(floor));
    Ok(vec![t, detail])
}

/// Times of runs taken in pairs, one on each of two sides, and each
/// pair's ratio, second side over first.
#[derive(Default)]
struct Pairs {
    times: [Vec<f64>; 2],
    ratios: Vec<f64>,
}

impl Pairs {
    /// The order of the sides in pair `i`: each goes first in every other
    /// pair (ABBA), so neither always runs on the machine the other left.
    fn order(i: usize) -> [usize; 2] {
        if i.is_multiple_of(2) { [0, 1] } else { [1, 0] }
    }

    fn push(&mut self, pair: [f64; 2]) {
        self.times[0].push(pair[0]);
        self.times[1].push(pair[1]);
        self.ratios.push(pair[1] / pair[0]);
    }

    /// Table cells: pairs, each side's p50, the median of the ratios, and
    /// in how many pairs the second side was faster.
    fn cells(self) -> anyhow::Result<[String; 5]> {
        let faster = self.ratios.iter().filter(|r| **r < 1.0).count();
        let n = self.ratios.len();
        let [first, second] = self.times;
        let (s1, s2, sr) = (
            Summary::of(first).context("no runs")?,
            Summary::of(second).context("no runs")?,
            Summary::of(self.ratios).context("no runs")?,
        );
        Ok([
            n.to_string(),
            fmt_ms(s1.p50),
            fmt_ms(s2.p50),
            format!("{:.3}", sr.p50),
            format!("{faster} of {n}"),
        ])
    }
}

/// One run of `case` on `c`, in milliseconds to its report, once the
/// mission before it is closed; returns once this one is closed too.
async fn settled_run(c: &BenchCluster, case: &Case, label: &str) -> anyhow::Result<f64> {
    let req = case.request(c, label)?;
    let run = c.run_mission_timed(&req, MISSION_TIMEOUT).await?;
    ensure_completed(&run.report, &case.name)?;
    c.settle(&run.swarm_id, MISSION_TIMEOUT).await?;
    Ok(ms(run.elapsed))
}

/// The latency missions on two clusters at once, one built from binaries A
/// and one from binaries B, a mission on each in turn (ABBA order), each
/// submitted once the one before it on either cluster is closed. The host
/// of a shared VM changes speed from one minute to the next; two missions
/// run back to back see the same host, so the ratio of each pair's times
/// says which build is faster where runs minutes apart cannot.
pub async fn compare(
    a: (&BenchCluster, &Floor),
    b: (&BenchCluster, &Floor),
    scale: &Scale,
    one_task: bool,
    fan_out: bool,
    chain: bool,
) -> anyhow::Result<Table> {
    let sync = a.0.spec.sync;
    let mut t = Table::new(
        format!("A/B, mission by mission ({sync})"),
        "two clusters side by side, A from the first binaries, B from the second (`--against`); \
         each mission of the table in turn on A and on B, in ABBA order, each submitted once the \
         one before it is closed (report page stored); p50 of each side's times, and the median \
         of the ratios B / A of the pairs (two missions run one after the other, on the same host \
         speed). The ping-pong column is each side's JetStream ping-pong floor.",
        &[
            "scenario",
            "pairs",
            "A p50",
            "B p50",
            "B / A, median of pairs",
            "B faster in",
            "ping-pong A / B",
        ],
    );
    for case in cases(scale, one_task, fan_out, chain) {
        let mut pairs = Pairs::default();
        for i in 0..case.runs {
            let mut pair = [0.0; 2];
            for side in Pairs::order(i) {
                pair[side] = settled_run(if side == 0 { a.0 } else { b.0 }, &case, "ab").await?;
            }
            pairs.push(pair);
        }
        let mut row = vec![case.name];
        row.extend(pairs.cells()?);
        row.push(format!(
            "{} / {}",
            fmt_ms(a.1.ping_pong.p50),
            fmt_ms(b.1.ping_pong.p50)
        ));
        t.row(row);
    }
    Ok(t)
}

/// Runs of each shape a peer gets before it is measured: Ray starts its
/// worker processes on first use and takes ten or so runs to settle.
fn peer_warm_up(scale: &Scale, shape: Shape) -> usize {
    match (scale.runs, shape) {
        (0..=2, _) => 1,
        (_, Shape::OneTask) => 30,
        _ => 10,
    }
}

/// The latency missions (and, with `missions.sustained`, the sustained
/// load) on Swarm and on each peer in turn, run by run (Swarm first in one
/// pair, the peer first in the next), each Swarm run
/// submitted once the one before it is closed, so each pair's ratio is
/// taken on one host speed. One peer runs at a time: each is started,
/// warmed up, measured on every mission and stopped before the next, so
/// no other peer's idle processes share the machine with a pair. The
/// one-task mission runs without a mission id, as `swarm run` sends it.
pub async fn versus_peers(
    c: &BenchCluster,
    floor: &Floor,
    peers: &[Peer],
    scale: &Scale,
    missions: PeerMissions,
) -> anyhow::Result<Table> {
    let sync = c.spec.sync;
    let mut t = Table::new(
        format!("Swarm and its peers, run by run ({sync})"),
        "the latency missions and the sustained load on Swarm and the same shapes on each peer \
         (`--peers`; bench/peers/driver.py: each task returns its input), one run on each in \
         turn, the order swapped from one pair to the next, one peer at a time (started, warmed \
         up, measured, stopped); Swarm from the request on `boss.missions` to its `FinalReport`, each run \
         submitted once the one before is closed; a peer from submission to the last result in \
         its client's hands. p50 of each side, and the median of the pairs' ratios Swarm / peer. \
         The last column is what the issue's targets ask of that ratio: the target over the \
         issue's figure for that peer.",
        &[
            "scenario",
            "peer",
            "pairs",
            "peer p50",
            "Swarm p50",
            "Swarm / peer, median of pairs",
            "Swarm faster in",
            "issue: target / peer",
        ],
    );
    let PeerMissions {
        one_task,
        fan_out,
        chain,
        sustained,
    } = missions;
    let cases: Vec<Case> = cases(scale, one_task, fan_out, chain)
        .into_iter()
        .filter(|case| !case.named)
        .collect();
    for &peer in peers {
        let mut d = PeerDriver::start(peer)
            .await
            .with_context(|| format!("starting the peer {}", peer.name()))?;
        let mut measured = versus_one_peer(c, &mut d, &cases, scale, &mut t).await;
        if sustained && measured.is_ok() {
            measured = load_versus_one_peer(c, &mut d, scale, &mut t).await;
        }
        t.note(format!("{}: {}", d.label(), d.setup));
        d.stop().await;
        measured?;
    }
    t.note(
        "Swarm stores every state change in JetStream before it goes on; how each peer keeps \
         its results is in its line above.",
    );
    t.note(floor_note(floor));
    Ok(t)
}

/// What `versus_peers` runs.
#[derive(Debug, Clone, Copy)]
pub struct PeerMissions {
    /// The one-task mission.
    pub one_task: bool,
    /// The fan-out and its fan-in.
    pub fan_out: bool,
    /// The chain.
    pub chain: bool,
    /// The sustained load.
    pub sustained: bool,
}

/// The sustained load on Swarm and on one peer, in pairs: a row of wall
/// times, and a note of each side's tasks per second. Each Swarm run is
/// followed by its missions' closing (report pages stored), so the peer's
/// next run does not share the machine with them.
async fn load_versus_one_peer(
    c: &BenchCluster,
    d: &mut PeerDriver,
    scale: &Scale,
    t: &mut Table,
) -> anyhow::Result<()> {
    let (m, k) = (scale.sustained_missions, scale.sustained_tasks);
    let shape = Shape::Load {
        missions: m,
        tasks: k,
    };
    let mut pairs = Pairs::default();
    for i in 0..scale.sustained_pairs {
        let mut pair = [0.0; 2];
        for side in Pairs::order(i) {
            pair[side] = if side == 0 {
                d.run(shape).await?
            } else {
                let (elapsed, missions) = load(c, scale).await?;
                for done in &missions {
                    c.settle(&done.swarm_id, MISSION_TIMEOUT).await?;
                }
                ms(elapsed)
            };
        }
        pairs.push(pair);
    }
    let rate = |times: &[f64]| {
        Summary::of(times.to_vec()).map_or_else(
            || "-".to_owned(),
            |s| fmt_rate((m * k) as f64 / (s.p50 / 1000.0)),
        )
    };
    t.note(format!(
        "sustained load beside {}, tasks per second from the p50 wall times: Swarm {}, the \
         peer {}",
        d.label(),
        rate(&pairs.times[1]),
        rate(&pairs.times[0]),
    ));
    let mut row = vec![
        format!("sustained, {m} missions x {k} tasks (wall time)"),
        d.label(),
    ];
    row.extend(pairs.cells()?);
    row.push("-".to_owned());
    t.row(row);
    Ok(())
}

/// `versus_peers` for one peer: its warm-up, then a row per mission.
async fn versus_one_peer(
    c: &BenchCluster,
    d: &mut PeerDriver,
    cases: &[Case],
    scale: &Scale,
    t: &mut Table,
) -> anyhow::Result<()> {
    for case in cases {
        for _ in 0..peer_warm_up(scale, case.shape) {
            d.run(case.shape).await?;
        }
    }
    for case in cases {
        // Side 0 the peer, side 1 Swarm: the ratio is Swarm / peer.
        let mut pairs = Pairs::default();
        for i in 0..case.runs {
            let mut pair = [0.0; 2];
            for side in Pairs::order(i) {
                pair[side] = if side == 0 {
                    d.run(case.shape).await?
                } else {
                    settled_run(c, case, "peer").await?
                };
            }
            pairs.push(pair);
        }
        let [target, ray, celery] = case.issue;
        let asked = match d.peer {
            Peer::Ray => format!("{:.3}", target / ray),
            Peer::Celery => format!("{:.3}", target / celery),
            Peer::Threads => "-".to_owned(),
        };
        let mut row = vec![case.name.clone(), d.label()];
        row.extend(pairs.cells()?);
        row.push(asked);
        t.row(row);
    }
    Ok(())
}

/// One mission of the sustained load: its swarm, time and report.
struct Loaded {
    swarm_id: String,
    elapsed: Duration,
    report: FinalReport,
}

/// The sustained load once: `scale`'s missions submitted as fast as its
/// concurrency allows; the wall time from the first submission to the last
/// report, and each mission (every one completed).
async fn load(c: &BenchCluster, scale: &Scale) -> anyhow::Result<(Duration, Vec<Loaded>)> {
    let k = scale.sustained_tasks;
    let start = Instant::now();
    let results: Vec<anyhow::Result<Loaded>> = futures::stream::iter(0..scale.sustained_missions)
        .map(|_| async {
            let id = c.mission_id("load");
            let req = plans::mission(&id, "general", plans::independent(k))?;
            let (elapsed, report) = c.run_mission(&req, MISSION_TIMEOUT).await?;
            ensure_completed(&report, "a sustained-load mission")?;
            Ok(Loaded {
                swarm_id: swarm_common::mission::swarm_id_for(Some(&id)),
                elapsed,
                report,
            })
        })
        .buffer_unordered(scale.submit_concurrency.max(1))
        .collect()
        .await;
    let elapsed = start.elapsed();
    Ok((elapsed, results.into_iter().collect::<anyhow::Result<_>>()?))
}

/// Many missions at once: tasks per second and task latency.
pub async fn sustained(c: &BenchCluster, floor: &Floor, scale: &Scale) -> anyhow::Result<Table> {
    let sync = c.spec.sync;
    let m = scale.sustained_missions;
    let k = scale.sustained_tasks;
    let mut t = Table::new(
        format!("Sustained load: {m} missions of {k} independent tasks ({sync})"),
        format!(
            "all missions submitted as fast as {} concurrent requests allow (open loop); tasks/s = \
             tasks / (first submission -> last report); task latency from each report's \
             assigned_at -> completed_at; mission latency submission -> report; CPU from \
             /proc/<pid>/stat before and after",
            scale.submit_concurrency
        ),
        &["measure", "value", "vs floor"],
    );
    let before = CpuUse::read(c);
    let (elapsed, results) = load(c, scale).await?;
    let cpu = CpuUse::read(c).since(before);
    let mut missions = Vec::new();
    let mut tasks = Vec::new();
    let mut waits = Vec::new();
    for Loaded {
        elapsed: d, report, ..
    } in results
    {
        missions.push(ms(d));
        tasks.extend(task_latencies(&report));
        waits.extend(queue_waits(&report));
    }
    let total_tasks = (m * k) as f64;
    let rate = total_tasks / elapsed.as_secs_f64();
    let tl = Summary::of(tasks).context("no tasks")?;
    let qw = Summary::of(waits).context("no tasks")?;
    let ml = Summary::of(missions).context("no missions")?;
    t.row(vec![
        "tasks per second".into(),
        fmt_rate(rate),
        format!(
            "{:.1}% of the publish-ack rate, {:.1}% of the CAS rate (target 2,000/s)",
            100.0 * rate / floor.pub_rate,
            100.0 * rate / floor.cas_rate
        ),
    ]);
    t.row(vec![
        "missions per second".into(),
        fmt_rate(m as f64 / elapsed.as_secs_f64()),
        "".into(),
    ]);
    t.row(vec!["wall time".into(), fmt_ms(ms(elapsed)), "".into()]);
    for (name, s) in [
        ("task latency", tl),
        ("queue wait (assigned -> started)", qw),
        ("mission latency", ml),
    ] {
        t.row(vec![
            format!("{name} p50"),
            fmt_ms(s.p50),
            fmt_x(s.p50, floor.hop_ms()) + " hop floor",
        ]);
        t.row(vec![
            format!("{name} p99"),
            fmt_ms(s.p99),
            fmt_x(s.p99, floor.hop_ms()) + " hop floor",
        ]);
    }
    t.row(vec!["CPU per task".into(), cpu.per(total_tasks), "".into()]);
    t.note(floor_note(floor));
    Ok(t)
}

/// The sustained load on the cluster's manager replicas: one row of
/// [`managers_table`] (replicas, tasks/s, tasks per CPU-second of every
/// process and of the managers alone, task latency).
pub async fn managers_row(c: &BenchCluster, scale: &Scale) -> anyhow::Result<Vec<String>> {
    let before = CpuUse::read(c);
    let (elapsed, results) = load(c, scale).await?;
    let cpu = CpuUse::read(c).since(before);
    let tasks: Vec<f64> = results
        .iter()
        .flat_map(|l| task_latencies(&l.report).collect::<Vec<_>>())
        .collect();
    let tl = Summary::of(tasks).context("no tasks")?;
    let total = (scale.sustained_missions * scale.sustained_tasks) as f64;
    let all = cpu.nats + cpu.boss + cpu.managers + cpu.workers;
    let per = |secs: f64| {
        if secs > 0.0 {
            format!("{:.0}", total / secs)
        } else {
            "-".into()
        }
    };
    Ok(vec![
        c.local.managers.len().to_string(),
        fmt_rate(total / elapsed.as_secs_f64()),
        per(all),
        per(cpu.managers),
        fmt_ms(tl.p50),
        fmt_ms(tl.p99),
    ])
}

/// The table of [`managers_row`]s, one per number of manager replicas.
pub fn managers_table(
    sync: crate::cluster::SyncMode,
    scale: &Scale,
    rows: Vec<Vec<String>>,
) -> Table {
    let mut t = Table::new(
        format!("Manager replicas: sustained load on 1, 2 and 3 managers ({sync})"),
        format!(
            "{} missions of {} independent tasks, as in the sustained load, on a fresh cluster \
             for each number of manager replicas; the replicas share the A2AP stream's manager \
             partitions (8). Tasks per CPU-second divide the tasks by the CPU time the processes \
             used (/proc/<pid>/stat before and after): on a machine with fewer cores than \
             processes, tasks/s is bounded by the cores, and tasks per CPU-second says what each \
             replica's share of the work costs",
            scale.sustained_missions, scale.sustained_tasks
        ),
        &[
            "managers",
            "tasks/s",
            "tasks per CPU-second (all processes)",
            "tasks per manager CPU-second",
            "task latency p50",
            "task latency p99",
        ],
    );
    for r in rows {
        t.row(r);
    }
    t
}

/// What a swarm's state writes stored, as seen on their subjects.
#[derive(Default)]
struct Written {
    messages: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
}

/// Counts every message stored under `swarm_id`'s entry and chunks in the
/// `swarms` bucket from now on, until the returned task is aborted.
async fn count_writes(
    c: &BenchCluster,
    swarm_id: &str,
) -> anyhow::Result<(std::sync::Arc<Written>, tokio::task::JoinHandle<()>)> {
    use std::sync::atomic::Ordering::Relaxed;
    let bucket = subjects::SWARMS_BUCKET;
    let mut entry = c
        .client
        .subscribe(format!("$KV.{bucket}.{swarm_id}"))
        .await?;
    let mut chunks = c
        .client
        .subscribe(format!("$KV.{bucket}.{swarm_id}.>"))
        .await?;
    c.client.flush().await?;
    let written = std::sync::Arc::new(Written::default());
    let w = written.clone();
    let task = tokio::spawn(async move {
        loop {
            let m = tokio::select! {
                Some(m) = entry.next() => m,
                Some(m) = chunks.next() => m,
                else => return,
            };
            w.messages.fetch_add(1, Relaxed);
            w.bytes.fetch_add(m.payload.len() as u64, Relaxed);
        }
    });
    Ok((written, task))
}

/// Time, state bytes written, manager memory and CPU per task as missions
/// grow.
pub async fn growth(c: &BenchCluster, floor: &Floor, scale: &Scale) -> anyhow::Result<Table> {
    use std::sync::atomic::Ordering::Relaxed;
    let sync = c.spec.sync;
    let mut t = Table::new(
        format!("Growth: one mission of N tasks ({sync})"),
        "one mission at a time, as a user sends 100,000 tasks: lists of up to 9,998 numbers read \
         from files, each fanned out by a map task (64 children at a time) whose children echo \
         their item (N counts every task); time = submission -> report; state writes and bytes = \
         the messages stored under the swarm's entry and chunks in the `swarms` bucket, counted \
         on their subjects; manager memory = VmRSS after the report and VmHWM (the peak so far) \
         from /proc/<pid>/status; CPU from /proc/<pid>/stat",
        &[
            "N",
            "time",
            "per task",
            "per task / CAS",
            "state writes",
            "bytes written",
            "per task",
            "manager RSS",
            "manager peak",
            "CPU per task",
        ],
    );
    for &n in &scale.growth {
        let tasks = plans::mapped(n, &c.workspace(), &format!("grow{n}"))?;
        let req = plans::mission(&c.mission_id("grow"), "general", tasks)?;
        let swarm_id = swarm_common::mission::swarm_id_for(req.mission_id.as_deref());
        let (written, counter) = count_writes(c, &swarm_id).await?;
        let cpu0 = CpuUse::read(c);
        // A huge mission may not finish in reasonable time: stop waiting at
        // the cap and measure how far it got.
        let cap = if n >= HUGE {
            scale.huge_cap
        } else {
            MISSION_TIMEOUT
        };
        let started = Instant::now();
        let (elapsed, done, finished) = match c.run_mission(&req, cap).await {
            Ok((d, report)) => {
                ensure_completed(&report, "a growth mission")?;
                (d, n, true)
            }
            Err(e) if n >= HUGE => {
                let elapsed = started.elapsed();
                let state = swarm_client::client::state(&c.client, &swarm_id)
                    .await
                    .with_context(|| format!("after {e:#}"))?;
                let done = state.map_or(0, |s| {
                    s.tasks
                        .iter()
                        .filter(|t| t.status == swarm_common::TaskStatus::Completed)
                        .count()
                });
                (elapsed, done, false)
            }
            Err(e) => return Err(e),
        };
        let cpu = CpuUse::read(c).since(cpu0);
        // The manager records `report_published` just after publishing: let it land.
        tokio::time::sleep(Duration::from_millis(200)).await;
        counter.abort();
        let (writes, bytes) = (written.messages.load(Relaxed), written.bytes.load(Relaxed));
        let per_task = ms(elapsed) / done.max(1) as f64;
        t.row(vec![
            if finished {
                n.to_string()
            } else {
                format!(
                    "{n} (stopped after {:.0} s: {done} done)",
                    elapsed.as_secs_f64()
                )
            },
            fmt_ms(ms(elapsed)),
            fmt_ms(per_task),
            fmt_x(per_task, floor.cas.p50),
            writes.to_string(),
            fmt_bytes(bytes as f64),
            fmt_bytes(bytes as f64 / done.max(1) as f64),
            fmt_bytes(c.managers_rss() as f64),
            fmt_bytes(c.managers_peak_rss() as f64),
            cpu.per(done.max(1) as f64),
        ]);
    }
    t.note(floor_note(floor));
    Ok(t)
}

/// Managers' resident memory as swarms stay active.
pub async fn memory(c: &BenchCluster, scale: &Scale) -> anyhow::Result<Table> {
    let sync = c.spec.sync;
    let mut t = Table::new(
        format!("Manager memory per active swarm ({sync})"),
        "missions of 10 tasks whose persona is in a pool no worker serves, so every swarm is \
         deployed, assigns its tasks and stays Running; VmRSS of both manager processes (and of \
         nats-server) from /proc/<pid>/status once the `swarms` bucket holds every state, minus \
         the figure after the warm-up",
        &[
            "active swarms",
            "managers RSS",
            "per swarm",
            "nats-server RSS",
        ],
    );
    let store =
        c.js.get_key_value(subjects::SWARMS_BUCKET)
            .await
            .context("opening the swarms bucket")?;
    let keys_now = || async {
        let mut s =
            c.js.get_stream(format!("KV_{}", subjects::SWARMS_BUCKET))
                .await?;
        anyhow::Ok(s.info().await?.state.messages)
    };
    let _ = &store;
    let base_keys = keys_now().await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss0 = c.managers_rss() as f64;
    t.row(vec![
        "0".into(),
        fmt_bytes(rss0),
        "".into(),
        fmt_bytes(c.nats_rss() as f64),
    ]);
    let mut active = 0usize;
    for &level in &scale.memory_levels {
        let add = level.saturating_sub(active);
        let replies: Vec<anyhow::Result<()>> = futures::stream::iter(0..add)
            .map(|_| async {
                let req = plans::mission(&c.mission_id("idle"), "idle", plans::independent(10))?;
                swarm_client::client::submit(&c.client, &req, MISSION_TIMEOUT)
                    .await
                    .map(|_| ())
            })
            .buffer_unordered(32)
            .collect()
            .await;
        for r in replies {
            r?;
        }
        active = level;
        let deadline = Instant::now() + MISSION_TIMEOUT;
        while keys_now().await? < base_keys + active as u64 {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the swarms were not all deployed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = c.managers_rss() as f64;
        t.row(vec![
            active.to_string(),
            fmt_bytes(rss),
            fmt_bytes((rss - rss0) / active as f64),
            fmt_bytes(c.nats_rss() as f64),
        ]);
    }
    Ok(t)
}

/// SIGKILL of a manager that owns running swarms: how long until they all progress again.
pub async fn failover(
    c: &mut BenchCluster,
    scale: &Scale,
    ack_wait: f64,
) -> anyhow::Result<Vec<String>> {
    let s = scale.failover_swarms;
    let l = scale.failover_chain;
    // Every assignment is a state change made visible: record when each swarm's arrive.
    let seen: Arc<Mutex<HashMap<String, Vec<Instant>>>> = Arc::default();
    let mut sub = c
        .client
        .subscribe(subjects::work_filter("general"))
        .await
        .context("subscribing to assignments")?;
    let sink = seen.clone();
    // A manager sends the assignments of the swarms it owns.
    let active: Arc<Mutex<String>> = Arc::default();
    let sender = active.clone();
    let watcher = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let at = Instant::now();
            if let Ok(env) = swarm_common::Envelope::<swarm_common::TaskAssignment>::decode(
                swarm_common::Codec::MsgPack,
                &msg.payload,
            ) {
                *sender.lock().unwrap_or_else(PoisonError::into_inner) = env.sender_agent;
            }
            if let Some(subjects::Subject::Work { swarm_id, .. }) =
                subjects::Subject::parse(&msg.subject)
            {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(swarm_id.to_owned())
                    .or_default()
                    .push(at);
            }
        }
    });
    c.client.flush().await?;
    let mut swarms = Vec::new();
    for _ in 0..s {
        let req = plans::mission(&c.mission_id("failover"), "general", plans::chain(l))?;
        let swarm_id = swarm_common::mission::swarm_id_for(req.mission_id.as_deref());
        let report = c.reports.expect(&swarm_id);
        swarm_client::client::submit(&c.client, &req, MISSION_TIMEOUT).await?;
        swarms.push((swarm_id, report));
    }
    // Let every swarm get going, then kill the first manager.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let started = {
            let seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
            swarms
                .iter()
                .filter(|(id, _)| seen.get(id).is_some_and(|v| v.len() >= 3))
                .count()
        };
        if started == s || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Kill a manager that owns running swarms (the sender of the latest
    // assignment): one that owns none would change nothing.
    let victim = {
        let id = active
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        id.strip_prefix("manager-")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1))
            .filter(|i| *i < c.local.managers.len())
            .unwrap_or(0)
    };
    let killed_at = Instant::now();
    c.local.managers[victim].kill();
    let wait_limit = Duration::from_secs_f64(ack_wait + 60.0);
    let mut finished_at: HashMap<String, Instant> = HashMap::new();
    let mut pending = Vec::new();
    for (id, rx) in swarms {
        pending.push((id, rx));
    }
    // Collect every report (or give up), then look at the assignments seen.
    let mut all_done = true;
    for (id, rx) in pending {
        let left = wait_limit.saturating_sub(killed_at.elapsed());
        match tokio::time::timeout(left, rx).await {
            Ok(Ok(a)) => {
                finished_at.insert(id, a.at);
            }
            _ => all_done = false,
        }
    }
    watcher.abort();
    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    let mut gaps = Vec::new();
    let mut running_at_kill = 0;
    for (id, times) in seen.iter() {
        let done = finished_at.get(id).copied();
        if done.is_some_and(|d| d <= killed_at) {
            continue;
        }
        running_at_kill += 1;
        let next = times
            .iter()
            .copied()
            .filter(|t| *t > killed_at)
            .chain(done)
            .min();
        if let Some(next) = next {
            gaps.push(ms(next.duration_since(killed_at)));
        }
    }
    let g = Summary::of(gaps.iter().copied()).context("no swarm was running at the kill")?;
    let stalled = gaps.iter().filter(|g| **g > 500.0).count();
    let last_done = finished_at
        .values()
        .max()
        .map(|t| ms(t.duration_since(killed_at)));
    Ok(vec![
        format!("{ack_wait} s"),
        running_at_kill.to_string(),
        stalled.to_string(),
        fmt_ms(g.p50),
        fmt_ms(g.max),
        if all_done {
            last_done.map_or("-".into(), fmt_ms)
        } else {
            "not all finished".into()
        },
    ])
}

/// The failover table for rows from [`failover`].
pub fn failover_table(
    sync: crate::cluster::SyncMode,
    scale: &Scale,
    rows: Vec<Vec<String>>,
) -> Table {
    let mut t = Table::new(
        format!("Failover: SIGKILL of one of two managers ({sync})"),
        format!(
            "{} chains of {} tasks running on 2 managers that share the manager partitions (each \
             partition's consumer pinned to its owner); once each swarm has had 3 assignments, the \
             sender of the latest assignment gets SIGKILL; for every swarm still running, the gap \
             from the kill to its next state change (an assignment published, seen on a core \
             subscription to `a2ap.work.general.>`, or its report). Only the killed manager's \
             swarms stall. The takeover is the largest gap: the survivor misses the dead one's \
             heartbeat after 1 s and pulls its partitions, each pinned to it once the dead one's \
             pin lapses (1 s), and the events the dead replica held wait for `ack_wait` to expire",
            scale.failover_swarms, scale.failover_chain
        ),
        &[
            "manager ack_wait",
            "swarms running",
            "stalled > 500 ms",
            "gap p50",
            "takeover (max gap)",
            "kill -> last report",
        ],
    );
    for r in rows {
        t.row(r);
    }
    t.note("Target: takeover under 2 s.");
    t
}
