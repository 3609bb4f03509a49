//! The `swarm` command: submit missions and follow them, inspect and cancel
//! swarms, fetch reports, and run a whole local cluster.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use swarm_cli::{client, display, local};
use swarm_common::{SwarmDeploymentPlan, SwarmStatus, mission::MissionRequest};
use swarm_runtime::NatsArgs;

/// Swarm: hierarchical swarms of AI agents on NATS.
#[derive(Debug, Parser)]
#[command(name = "swarm", version, about)]
struct Cli {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Submit a mission; with --wait, follow it to its final report.
    Mission {
        /// The mission text (numbered steps run in order, lines and bullets in parallel, "then" orders).
        text: Option<String>,
        /// A JSON file with the whole mission (`{"mission": ..., "plan": ...}`) instead of text.
        #[arg(long, conflicts_with = "text")]
        file: Option<PathBuf>,
        /// A JSON file with an explicit plan (workers and tasks) to deploy as given.
        #[arg(long)]
        plan: Option<PathBuf>,
        /// Your id for the mission: submitting the same id again makes no second swarm.
        #[arg(long)]
        mission_id: Option<String>,
        /// How long the swarm may run.
        #[arg(long)]
        max_minutes: Option<u32>,
        /// Follow the mission to its final report.
        #[arg(long)]
        wait: bool,
        /// Seconds to wait for the final report.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Also copy the HTML report here (a file or a folder).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Follow a swarm's progress (from its start) until its final report.
    Watch {
        /// The swarm id.
        swarm_id: String,
        /// Seconds to wait for the final report.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Show a swarm's state: every task, its worker, attempts and revisions.
    Status {
        /// The swarm id.
        swarm_id: String,
        /// Print the stored state as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a swarm: no new assignments; its report says Cancelled.
    Cancel {
        /// The swarm id.
        swarm_id: String,
        /// Why, for the report.
        #[arg(long, default_value = "cancelled from the swarm CLI")]
        reason: String,
    },
    /// List approval requests of destructive tool calls (pending ones unless --all).
    Approvals {
        /// Also the decided and expired ones.
        #[arg(long)]
        all: bool,
    },
    /// Let a waiting destructive tool call run.
    Approve {
        /// The approval id (from `swarm approvals` or the task's progress).
        approval_id: String,
        /// Why, for the record.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Refuse a waiting destructive tool call.
    Deny {
        /// The approval id.
        approval_id: String,
        /// Why, for the record and the agent.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Answer the question a task asked (it waits, InputRequired, until you do).
    Answer {
        /// The swarm id.
        swarm_id: String,
        /// The task id.
        task_id: String,
        /// The answer.
        text: String,
    },
    /// Fetch a swarm's HTML report from the object store.
    Report {
        /// The swarm id.
        swarm_id: String,
        /// Where to write it (a file or a folder).
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Start a local cluster (nats-server, bosses, managers, workers) until Ctrl-C.
    Up(UpArgs),
    /// Start a local cluster, run a sample mission end to end, print the report, stop.
    Demo(UpArgs),
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    /// Folder for the NATS store, logs and reports.
    #[arg(long, default_value = ".swarm")]
    data_dir: PathBuf,
    /// NATS client port (default 4222 for `up`, a free port for `demo`).
    #[arg(long)]
    port: Option<u16>,
    /// Boss replicas.
    #[arg(long, default_value_t = 1)]
    bosses: usize,
    /// Manager replicas.
    #[arg(long, default_value_t = 2)]
    managers: usize,
    /// Worker replicas (pool `general`).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Root folder of the workers' file tools.
    #[arg(long, default_value = ".")]
    workspace: PathBuf,
    /// CPUs of the nats-server: `own` (the last half of those this process
    /// may use, at least one, when there are two or more; the rest are the
    /// roles'), `shared` (any, beside the roles) or a list such as `3` or `2,3`.
    #[arg(long, default_value = "own")]
    nats_cpus: local::NatsCpus,
}

/// The demo's mission: real tools on this repository's own files.
const DEMO_MISSION: &str = "\
1. List the files in common/src
2. Count the words in README.md
3. Compute (17 * 23) + 2^10, then checksum the previous result
";

fn options(
    args: &UpArgs,
    data_dir: PathBuf,
    port: Option<u16>,
) -> anyhow::Result<local::LocalOptions> {
    let mut opts = local::LocalOptions::new(data_dir);
    opts.port = port;
    opts.bosses = args.bosses;
    opts.managers = args.managers;
    opts.workers = args.workers;
    opts.nats_cpus = args.nats_cpus.clone();
    opts.workspace_root = std::fs::canonicalize(&args.workspace)
        .with_context(|| format!("workspace {}", args.workspace.display()))?;
    Ok(opts)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Cli::parse()).await {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs one command; returns the exit code.
async fn run(cli: Cli) -> anyhow::Result<u8> {
    swarm_runtime::telemetry::init_with(swarm_runtime::config::LogFormat::Text, "warn");
    match cli.command {
        Command::Mission {
            text,
            file,
            plan,
            mission_id,
            max_minutes,
            wait,
            timeout,
            out,
        } => {
            let mut request = match (text, file) {
                (_, Some(f)) => {
                    let raw =
                        std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
                    serde_json::from_slice::<MissionRequest>(&raw)
                        .with_context(|| format!("{} is not a mission", f.display()))?
                }
                (Some(t), None) => MissionRequest::text(t),
                (None, None) => anyhow::bail!("give the mission's text, or --file"),
            };
            if let Some(p) = plan {
                let raw = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
                request.plan = Some(
                    serde_json::from_slice::<SwarmDeploymentPlan>(&raw)
                        .with_context(|| format!("{} is not a plan", p.display()))?,
                );
            }
            if mission_id.is_some() {
                request.mission_id = mission_id;
            }
            if max_minutes.is_some() {
                request.max_execution_minutes = max_minutes;
            }
            let nc = cli.nats.connect("swarm-cli").await?;
            return run_mission(
                &nc,
                &request,
                wait,
                Duration::from_secs(timeout),
                out.as_deref(),
            )
            .await;
        }
        Command::Status { swarm_id, json } => {
            let nc = cli.nats.connect("swarm-cli").await?;
            let record = client::mission(&nc, &swarm_id).await?;
            match client::state(&nc, &swarm_id).await? {
                Some(state) if json => println!("{}", serde_json::to_string_pretty(&state)?),
                Some(state) => print!("{}", display::status_table(&state, record.as_ref())),
                None => match record {
                    Some(r) => {
                        println!(
                            "swarm {swarm_id}: mission {:?}, no manager state yet",
                            r.status
                        );
                        if let Some(e) = r.error {
                            println!("error: {} ({})", e.message, e.code);
                        }
                    }
                    None => anyhow::bail!("no swarm {swarm_id}"),
                },
            }
        }
        Command::Watch { swarm_id, timeout } => {
            let nc = cli.nats.connect("swarm-cli").await?;
            let report = client::watch(&nc, &swarm_id, Duration::from_secs(timeout), |u| {
                println!("{}", display::update_line(u))
            })
            .await?;
            print!("{}", display::report_summary(&report));
            return Ok(if report.overall_status == SwarmStatus::Completed {
                0
            } else {
                1
            });
        }
        Command::Approvals { all } => {
            let nc = cli.nats.connect("swarm-cli").await?;
            let list = client::approvals(&nc, all).await?;
            if list.is_empty() {
                println!("no {}approval requests", if all { "" } else { "pending " });
            }
            for r in list {
                println!(
                    "{}  {:?}  {} {}  (swarm {}, task {}, asked by {} at {}, expires {})",
                    r.approval_id,
                    r.status,
                    r.tool,
                    r.arguments,
                    r.swarm_id.as_deref().unwrap_or("-"),
                    r.task_id.as_deref().unwrap_or("-"),
                    r.requested_by,
                    r.requested_at.format("%H:%M:%S"),
                    r.expires_at.format("%H:%M:%S"),
                );
            }
        }
        Command::Approve {
            approval_id,
            reason,
        } => decide(&cli.nats, &approval_id, true, reason).await?,
        Command::Deny {
            approval_id,
            reason,
        } => decide(&cli.nats, &approval_id, false, reason).await?,
        Command::Answer {
            swarm_id,
            task_id,
            text,
        } => {
            let nc = cli.nats.connect("swarm-cli").await?;
            let by = std::env::var("USER").unwrap_or_else(|_| "swarm-cli".into());
            let r = client::answer(&nc, &swarm_id, &task_id, &text, &by).await?;
            println!("answered {}/{}: {:?}", swarm_id, task_id, r.question);
        }
        Command::Cancel { swarm_id, reason } => {
            let nc = cli.nats.connect("swarm-cli").await?;
            client::cancel(&nc, &swarm_id, &reason).await?;
            println!("cancel sent to swarm {swarm_id}");
        }
        Command::Report { swarm_id, out } => {
            let nc = cli.nats.connect("swarm-cli").await?;
            let path = client::fetch_report(&nc, &swarm_id, &out).await?;
            println!("{}", path.display());
        }
        Command::Up(args) => {
            let opts = options(
                &args,
                args.data_dir.clone(),
                Some(args.port.unwrap_or(4222)),
            )?;
            let cluster = local::LocalCluster::start(opts).await?;
            println!("Swarm is up at {}", cluster.url());
            println!("  logs:    {}", cluster.logs_dir().display());
            println!("  reports: {}", cluster.reports_dir().display());
            println!(
                "  try:     swarm --nats-url {} mission \"1. Count the words in README.md\" --wait",
                cluster.url()
            );
            println!("Ctrl-C stops everything.");
            swarm_runtime::shutdown::signal().await;
            cluster.stop(Duration::from_secs(15)).await;
        }
        Command::Demo(args) => {
            let data_dir = args.data_dir.join("demo");
            // A fresh store each run, so the demo shows one mission from the start.
            let _ = std::fs::remove_dir_all(&data_dir);
            let opts = options(&args, data_dir, args.port)?;
            let cluster = local::LocalCluster::start(opts).await?;
            println!(
                "local cluster up at {} (logs in {})",
                cluster.url(),
                cluster.logs_dir().display()
            );
            println!("mission:\n{DEMO_MISSION}");
            let nc = NatsArgs::local(cluster.url()).connect("swarm-demo").await?;
            let outcome = run_mission(
                &nc,
                &MissionRequest::text(DEMO_MISSION),
                true,
                Duration::from_secs(300),
                None,
            )
            .await;
            drop(nc);
            cluster.stop(Duration::from_secs(15)).await;
            return outcome;
        }
    }
    Ok(0)
}

/// Approves or denies one approval request and says what it was.
async fn decide(
    nats: &NatsArgs,
    approval_id: &str,
    approve: bool,
    reason: Option<String>,
) -> anyhow::Result<()> {
    let nc = nats.connect("swarm-cli").await?;
    let by = std::env::var("USER").unwrap_or_else(|_| "swarm-cli".into());
    let r = client::decide(&nc, approval_id, approve, &by, reason).await?;
    println!(
        "{} {:?}: {} {}",
        r.approval_id, r.status, r.tool, r.arguments
    );
    Ok(())
}

/// Submits and, with `wait`, follows a mission; returns the exit code
/// (0 when it completed or was only submitted, 1 otherwise).
async fn run_mission(
    nc: &async_nats::Client,
    request: &MissionRequest,
    wait: bool,
    timeout: Duration,
    out: Option<&std::path::Path>,
) -> anyhow::Result<u8> {
    let reply = client::submit(nc, request, Duration::from_secs(15)).await?;
    println!("{}", reply.swarm_id);
    if reply.duplicate {
        println!("(this mission id was accepted before: same swarm)");
    }
    if !wait {
        return Ok(0);
    }
    let report = client::watch(nc, &reply.swarm_id, timeout, |u| {
        println!("{}", display::update_line(u))
    })
    .await?;
    print!("{}", display::report_summary(&report));
    let record = client::wait_for_rendering(nc, &reply.swarm_id, Duration::from_secs(30)).await?;
    if let Some(file) = &record.report_file {
        println!("HTML report: {file}");
    }
    if let Some(obj) = &record.report_object {
        println!(
            "  (object store: reports/{obj}; `swarm report {}` fetches it)",
            reply.swarm_id
        );
    }
    if let Some(dir) = out {
        let path = client::fetch_report(nc, &reply.swarm_id, dir).await?;
        println!("copied to {}", path.display());
    }
    Ok(if report.overall_status == SwarmStatus::Completed {
        0
    } else {
        1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up_args(args: &[&str]) -> Result<UpArgs, clap::Error> {
        let cli = Cli::try_parse_from(["swarm", "up"].iter().chain(args))?;
        match cli.command {
            Command::Up(up) => Ok(up),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_local_server_gets_cpus_of_its_own_unless_told_otherwise() {
        assert_eq!(up_args(&[]).unwrap().nats_cpus, local::NatsCpus::Own);
        assert_eq!(
            up_args(&["--nats-cpus", "shared"]).unwrap().nats_cpus,
            local::NatsCpus::Shared
        );
        assert_eq!(
            up_args(&["--nats-cpus", "2,3"]).unwrap().nats_cpus,
            local::NatsCpus::List(vec![2, 3])
        );
        let err = up_args(&["--nats-cpus", "half"]).unwrap_err().to_string();
        assert!(err.contains("`shared`, `own` or a list"), "{err}");
    }
}
