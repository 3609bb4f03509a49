//! The `swarm` command: submit missions and follow them, list, inspect and
//! cancel swarms, fetch reports, and run a whole local cluster.

mod demo;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::parser::ValueSource;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use swarm_cli::display;
use swarm_cli::progress::Follow;
use swarm_client::exit::{self, Exit, fail};
use swarm_client::{client, inspect, list};
use swarm_common::{
    FinalReport, SwarmDeploymentPlan, SwarmState, SwarmStatus, mission::MissionRequest,
};
use swarm_runtime::{NatsArgs, config::DEFAULT_NATS_URL};

/// Swarm: hierarchical swarms of AI agents on NATS.
#[derive(Debug, Parser)]
#[command(name = "swarm", version, about, after_help = after_help())]
struct Cli {
    #[command(flatten)]
    nats: NatsArgs,
    #[command(subcommand)]
    command: Command,
}

/// `swarm --help`'s closing section: the exit codes.
fn after_help() -> String {
    let mut out = String::from(
        "Exit codes (of `mission --wait`, `watch` and `demo`; other commands use 0, 1, 2 and 6):\n",
    );
    for e in Exit::ALL {
        out.push_str(&format!("  {}  {}\n", e.code(), e.meaning()));
    }
    out
}

#[derive(Debug, Subcommand)]
enum SkillsAction {
    /// Remove a learned skill (at the boss's desk: the approver's right).
    Remove {
        /// Its key, as `swarm skills` lists it (`<scope>.<name>`).
        key: String,
    },
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
        /// The scope of learned skills the mission is offered and records
        /// (default: the deployment's, `deployment`).
        #[arg(long)]
        skills_scope: Option<String>,
        /// Follow the mission to its final report (exit code: see below).
        #[arg(long)]
        wait: bool,
        /// Seconds to wait for the final report.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Also copy the HTML report here (a file or a folder).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the boss's reply as JSON (with --wait, then one JSON object per update).
        #[arg(long)]
        json: bool,
    },
    /// Follow a swarm's progress (from its start) until its final report.
    Watch {
        /// The swarm id.
        swarm_id: String,
        /// Seconds to wait for the final report.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// One JSON object per update, the final report last.
        #[arg(long)]
        json: bool,
    },
    /// Show a swarm's state: every task, its worker, attempts and revisions.
    Status {
        /// The swarm id.
        swarm_id: String,
        /// Print the stored state as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List swarms, newest first: status, tasks, age, start and end, the mission's first line.
    #[command(visible_alias = "ls")]
    List {
        /// Only swarms in this state: running, completed, failed, cancelled,
        /// timedout (repeat the flag or separate with commas).
        #[arg(long, value_delimiter = ',', value_parser = list::parse_status)]
        status: Vec<SwarmStatus>,
        /// Only swarms accepted within this span before now: 90s, 30m, 1h, 2d.
        #[arg(long, value_parser = list::parse_since)]
        since: Option<Duration>,
        /// At most this many swarms.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print a JSON array of objects.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a running swarm: no new assignments; its report says Cancelled.
    Cancel {
        /// The swarm id.
        swarm_id: String,
        /// Why, for the report.
        #[arg(long, default_value = "cancelled from the swarm CLI")]
        reason: String,
    },
    /// List the running boss, manager, worker and gateway replicas from their agent cards: role, id, pool, skills, version.
    Agents {
        /// Only this role: boss, manager, worker or gateway.
        #[arg(long, value_parser = ["boss", "manager", "worker", "gateway"])]
        role: Option<String>,
        /// Print a JSON array of the cards.
        #[arg(long)]
        json: bool,
    },
    /// Ask every boss, manager and worker replica for its handshake: protocol versions, codecs, id.
    Hello {
        /// Only this role: boss, manager or worker.
        #[arg(long, value_parser = ["boss", "manager", "worker"])]
        role: Option<String>,
        /// How long to gather answers, in milliseconds.
        #[arg(long, default_value_t = 500)]
        wait_ms: u64,
        /// Print a JSON array of the answers.
        #[arg(long)]
        json: bool,
    },
    /// Create or update the streams and buckets (run once per deployment and after an upgrade, as the admin user).
    Setup {
        /// Copies of each stream and bucket (3 on a three-node cluster).
        #[arg(long, env = "SWARM_REPLICAS", default_value_t = 1)]
        replicas: usize,
    },
    /// Remove everything a finished swarm left in JetStream (needs a login allowed to purge).
    Gc {
        /// The swarm id.
        swarm_id: String,
        /// Print what was removed as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the skills agents learned (best first in each scope), or remove one.
    Skills {
        /// Only this scope's (a mission's `skills_scope`; `deployment` by default).
        #[arg(long)]
        scope: Option<String>,
        /// Print a JSON array of the skills.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        action: Option<SkillsAction>,
    },
    /// List approval requests of destructive tool calls (pending ones of running swarms unless --all).
    Approvals {
        /// Also the decided and expired ones, and those of ended swarms.
        #[arg(long)]
        all: bool,
        /// Print a JSON array of the records.
        #[arg(long)]
        json: bool,
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
    /// Fetch a swarm's HTML report from the object store (or, with --json, print its final report).
    Report {
        /// The swarm id.
        swarm_id: String,
        /// Where to write it (a file or a folder).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Print the final report as JSON instead of writing the HTML page.
        #[arg(long)]
        json: bool,
    },
    /// Decode a stored message or bucket value to JSON, whatever its codec.
    Inspect {
        #[command(subcommand)]
        what: Inspect,
    },
    /// Serve Swarm to MCP clients (Claude Desktop, IDEs, other agents):
    /// tools to submit, follow, list and cancel swarms and decide approvals,
    /// each swarm's reports and state as resources. Over stdio, or
    /// streamable HTTP at http://ADDR/mcp with --http.
    Mcp {
        /// Serve streamable HTTP on this address instead of stdio (e.g. 127.0.0.1:8090).
        #[arg(long)]
        http: Option<std::net::SocketAddr>,
        /// With --http: the bearer token every request must carry (at least
        /// 16 characters); required on an address that is not loopback.
        #[arg(long, env = "SWARM_MCP_HTTP_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// With --http: a Host header to accept besides localhost (the name
        /// the server is reached by); repeatable.
        #[arg(long = "allowed-host")]
        allowed_hosts: Vec<String>,
    },
    /// Start a local cluster (nats-server, bosses, managers, workers) until Ctrl-C.
    Up(UpArgs),
    /// Start a local cluster, run a sample mission end to end, print the report, stop.
    Demo(ClusterArgs),
}

/// What `swarm inspect` reads. It prints the value as JSON, and on standard
/// error where it was, what it is and the codec it was stored in.
#[derive(Debug, Subcommand)]
enum Inspect {
    /// A swarm's state, as its manager stored it in the `swarms` bucket.
    State {
        /// The swarm id.
        swarm_id: String,
    },
    /// A message of a stream by its sequence number (the A2AP stream unless --stream).
    Msg {
        /// The message's sequence number in the stream.
        seq: u64,
        /// The stream: A2AP, WORK (assignments), MISSIONS, DEADLETTER, or a bucket's KV_<bucket>.
        #[arg(long, default_value = swarm_common::subjects::A2AP_STREAM)]
        stream: String,
    },
    /// A bucket's value by its key (swarms, missions, journal, approvals, inputs, memory).
    Kv {
        /// The bucket.
        bucket: String,
        /// The key.
        key: String,
    },
}

#[derive(Debug, clap::Args)]
struct ClusterArgs {
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
    /// CPUs of the nats-server: `own` (the last half of those this process
    /// may use, at least one, when there are two or more; the rest are the
    /// roles'), `shared` (any, beside the roles) or a list such as `3` or `2,3`.
    #[arg(long, default_value = "own")]
    nats_cpus: swarm_local::NatsCpus,
}

#[derive(Debug, clap::Args)]
struct UpArgs {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Root folder of the workers' file tools.
    #[arg(long, default_value = ".")]
    workspace: PathBuf,
    /// First of the consecutive ports on 127.0.0.1 that serve each role's
    /// `/metrics` (Prometheus text), `/healthz` and `/readyz`, in start
    /// order (bosses, managers, workers, then the gateway); 0 serves none.
    #[arg(long, default_value_t = 9310)]
    metrics_port: u16,
    /// Port on 127.0.0.1 of the A2A gateway (the swarm as an A2A v1.0
    /// agent, docs/a2a.md); 0 runs none.
    #[arg(long, default_value_t = 8080)]
    a2a_port: u16,
}

fn options(
    args: &ClusterArgs,
    data_dir: PathBuf,
    port: Option<u16>,
    workspace: &Path,
) -> anyhow::Result<swarm_local::LocalOptions> {
    let mut opts = swarm_local::LocalOptions::new(data_dir);
    opts.port = port;
    opts.bosses = args.bosses;
    opts.managers = args.managers;
    opts.workers = args.workers;
    opts.nats_cpus = args.nats_cpus.clone();
    opts.workspace_root = std::fs::canonicalize(workspace)
        .with_context(|| format!("workspace {}", workspace.display()))?;
    Ok(opts)
}

/// How to reach NATS, and whether the user named the server (a flag or
/// `NATS_URL`) or left the default.
struct Connection {
    nats: NatsArgs,
    url_given: bool,
}

impl Connection {
    /// The user the boss's desk knows this login as: the NATS user, or
    /// `client` on a server without users.
    fn desk_user(&self) -> String {
        swarm_runtime::desk::user_or(self.nats.user.as_deref(), "client")
    }

    async fn connect(&self) -> anyhow::Result<async_nats::Client> {
        match self.nats.connect("swarm-cli").await {
            Ok(nc) => Ok(nc),
            Err(swarm_runtime::RuntimeError::Connect { .. })
                if !self.url_given && self.nats.url == DEFAULT_NATS_URL && default_refused() =>
            {
                Err(fail(
                    Exit::Unreachable,
                    format!(
                        "no NATS server at {DEFAULT_NATS_URL}; start a local one with `swarm up` \
                         (or name another with -s/--nats-url)"
                    ),
                ))
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether the default server's port refuses connections: nothing listens
/// there (as opposed to a server that is slow, or refuses our credentials).
fn default_refused() -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 4222));
    matches!(
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Parsed in two steps to learn whether the server URL was given.
    let matches = Cli::command().get_matches();
    let url_given = matches
        .value_source("url")
        .is_some_and(|s| s != ValueSource::DefaultValue);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    swarm_runtime::telemetry::init_with(swarm_runtime::config::LogFormat::Text, "warn", None);
    let connection = Connection {
        nats: cli.nats,
        url_given,
    };
    match run(cli.command, &connection).await {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            exit::of_error(&e).into()
        }
    }
}

/// Runs one command; returns how it ended.
async fn run(command: Command, conn: &Connection) -> anyhow::Result<Exit> {
    match command {
        Command::Mission {
            text,
            file,
            plan,
            mission_id,
            max_minutes,
            skills_scope,
            wait,
            timeout,
            out,
            json,
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
            if skills_scope.is_some() {
                request.skills_scope = skills_scope;
            }
            let nc = conn.connect().await?;
            let reply = client::submit(&nc, &request, Duration::from_secs(15)).await?;
            if json {
                println!("{}", serde_json::to_string(&reply)?);
            } else {
                println!("{}", reply.swarm_id);
                if reply.duplicate {
                    println!("(this mission id was accepted before: same swarm)");
                }
                // On stderr: stdout stays the swarm id alone, for scripts.
                if let Some(trace_id) = &reply.trace_id {
                    eprintln!("trace {trace_id}");
                }
            }
            if !wait {
                return Ok(Exit::Completed);
            }
            let report = follow(
                &nc,
                &reply.swarm_id,
                None,
                Utc::now(),
                Duration::from_secs(timeout),
                json,
            )
            .await?;
            if !json {
                show_rendering(&nc, &reply.swarm_id, true).await;
            }
            if let Some(dir) = out {
                client::wait_for_rendering(&nc, &reply.swarm_id, Duration::from_secs(30)).await?;
                let path = client::fetch_report(&nc, &reply.swarm_id, &dir).await?;
                if !json {
                    println!("copied to {}", path.display());
                }
            }
            Ok(Exit::of_status(report.overall_status))
        }
        Command::Mcp {
            http,
            token,
            allowed_hosts,
        } => {
            let nc = conn.connect().await?;
            let server = swarm_cli::mcp::SwarmMcp::new(nc, conn.desk_user());
            let Some(addr) = http else {
                swarm_cli::mcp::serve_stdio(server).await?;
                return Ok(Exit::Completed);
            };
            let token = token.filter(|t| !t.is_empty());
            if !addr.ip().is_loopback() && token.is_none() {
                return Err(fail(
                    Exit::Error,
                    format!(
                        "{addr} is not a loopback address: give a --token (SWARM_MCP_HTTP_TOKEN) callers must send"
                    ),
                ));
            }
            if token.as_ref().is_some_and(|t| t.len() < 16) {
                return Err(fail(
                    Exit::Error,
                    "the --token must be at least 16 characters",
                ));
            }
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr}"))?;
            let mut hosts = allowed_hosts;
            if !hosts.is_empty() {
                hosts.extend(["localhost", "127.0.0.1", "::1"].map(String::from));
            }
            println!("MCP server at http://{}/mcp", listener.local_addr()?);
            swarm_cli::mcp::serve_http(
                server,
                listener,
                token,
                hosts,
                swarm_runtime::shutdown::signal(),
            )
            .await?;
            Ok(Exit::Completed)
        }
        Command::Status { swarm_id, json } => {
            let nc = conn.connect().await?;
            let known = client::lookup(&nc, &swarm_id).await?;
            match (&known.state, &known.record) {
                (Some(state), _) if json => println!("{}", serde_json::to_string_pretty(state)?),
                (Some(state), record) => {
                    print!(
                        "{}",
                        display::status_table(
                            state,
                            record.as_ref(),
                            Utc::now(),
                            display::stdout_width()
                        )
                    );
                    let children = client::descendants(&nc, state).await?;
                    print!("{}", display::child_tree(state, &children));
                }
                (None, Some(r)) if json => println!("{}", serde_json::to_string_pretty(r)?),
                (None, Some(r)) => {
                    println!(
                        "swarm {swarm_id}: mission {:?}, no manager state yet",
                        r.status
                    );
                    if let Some(e) = &r.error {
                        println!("error: {} ({})", e.message, e.code);
                    }
                }
                (None, None) => {
                    return Err(fail(Exit::Error, format!("no such swarm {swarm_id}")));
                }
            }
            Ok(Exit::Completed)
        }
        Command::List {
            status,
            since,
            limit,
            json,
        } => {
            let nc = conn.connect().await?;
            let now = Utc::now();
            let query = list::Query {
                statuses: status,
                since,
                limit,
            };
            let listing = list::list(&nc, &query, now).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&listing.rows)?);
            } else if listing.rows.is_empty() {
                println!("no swarms");
            } else {
                print!(
                    "{}",
                    display::list_table(&listing.rows, now, display::stdout_width())
                );
            }
            Ok(Exit::Completed)
        }
        Command::Watch {
            swarm_id,
            timeout,
            json,
        } => {
            let nc = conn.connect().await?;
            let known = client::lookup(&nc, &swarm_id).await?;
            let accepted_at = known
                .state
                .as_ref()
                .map(|s| s.accepted_at)
                .or(known.record.as_ref().map(|r| r.accepted_at))
                .unwrap_or_else(Utc::now);
            let report = follow(
                &nc,
                &swarm_id,
                known.state.as_ref(),
                accepted_at,
                Duration::from_secs(timeout),
                json,
            )
            .await?;
            Ok(Exit::of_status(report.overall_status))
        }
        Command::Skills {
            scope,
            json,
            action: None,
        } => {
            let nc = conn.connect().await?;
            let skills = client::skills(&nc, scope.as_deref()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&skills)?);
            } else if skills.is_empty() {
                println!("no learned skills");
            } else {
                print!(
                    "{}",
                    display::skills_table(&skills, display::stdout_width())
                );
            }
            Ok(Exit::Completed)
        }
        Command::Skills {
            action: Some(SkillsAction::Remove { key }),
            ..
        } => {
            let nc = conn.connect().await?;
            let by = std::env::var("USER").unwrap_or_else(|_| "swarm-cli".into());
            let removed = client::remove_skill_as(&nc, &conn.desk_user(), &key, &by).await?;
            println!("removed {} (score {})", removed.key(), removed.score);
            Ok(Exit::Completed)
        }
        Command::Approvals { all, json } => {
            let nc = conn.connect().await?;
            let records = client::approvals(&nc, all).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&records)?);
            } else if records.is_empty() {
                println!("no {}approval requests", if all { "" } else { "pending " });
            } else {
                print!(
                    "{}",
                    display::approvals_table(&records, display::stdout_width())
                );
            }
            Ok(Exit::Completed)
        }
        Command::Approve {
            approval_id,
            reason,
        } => decide(conn, &approval_id, true, reason).await,
        Command::Deny {
            approval_id,
            reason,
        } => decide(conn, &approval_id, false, reason).await,
        Command::Answer {
            swarm_id,
            task_id,
            text,
        } => {
            let nc = conn.connect().await?;
            let by = std::env::var("USER").unwrap_or_else(|_| "swarm-cli".into());
            let r =
                client::answer_as(&nc, &conn.desk_user(), &swarm_id, &task_id, &text, &by).await?;
            println!("answered {}/{}: {:?}", swarm_id, task_id, r.question);
            Ok(Exit::Completed)
        }
        Command::Agents { role, json } => {
            let nc = conn.connect().await?;
            let cards: Vec<_> = swarm_client::agents::list(&nc)
                .await?
                .into_iter()
                .filter(|c| role.as_deref().is_none_or(|r| c.role == r))
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&cards)?);
            } else {
                print!("{}", display::agents_table(&cards, chrono::Utc::now()));
            }
            if cards.is_empty() {
                Err(fail(
                    Exit::Unreachable,
                    match role {
                        Some(r) => format!("no running {r} has a card in the agents bucket"),
                        None => "no running replica has a card in the agents bucket".to_owned(),
                    },
                ))
            } else {
                Ok(Exit::Completed)
            }
        }
        Command::Hello {
            role,
            wait_ms,
            json,
        } => {
            let nc = conn.connect().await?;
            let roles: Vec<&str> = match role.as_deref() {
                Some(r) => vec![r],
                None => client::HELLO_ROLES.to_vec(),
            };
            let answers = client::hello(&nc, &roles, Duration::from_millis(wait_ms)).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&answers)?);
            } else {
                for h in &answers {
                    println!(
                        "{:<8} {:<24} protocol {:<6} codecs {}",
                        h.role,
                        h.id,
                        h.protocol_versions.join(","),
                        h.codecs.join(",")
                    );
                }
            }
            let silent: Vec<&str> = roles
                .iter()
                .copied()
                .filter(|r| !answers.iter().any(|h| h.role == *r))
                .collect();
            if silent.is_empty() {
                Ok(Exit::Completed)
            } else {
                Err(fail(
                    Exit::Unreachable,
                    format!("no {} answered within {wait_ms} ms", silent.join(", no ")),
                ))
            }
        }
        Command::Setup { replicas } => {
            let nc = conn.connect().await?;
            let infra = swarm_runtime::Infra::ensure(&nc, replicas)
                .await
                .context("setting up the streams and buckets")?;
            let mut names = Vec::new();
            let mut streams = infra.js.stream_names();
            while let Some(name) = futures::StreamExt::next(&mut streams).await {
                names.push(name.context("listing the streams")?);
            }
            names.sort();
            println!(
                "set up {} streams and buckets with {replicas} replica(s): {}",
                names.len(),
                names.join(", ")
            );
            Ok(Exit::Completed)
        }
        Command::Gc { swarm_id, json } => {
            let nc = conn.connect().await?;
            let collected = client::gc(&nc, &swarm_id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&collected)?);
            } else {
                println!(
                    "removed swarm {swarm_id}: {} message(s), {} stored entries, {} approval request(s){}",
                    collected.messages,
                    collected.entries,
                    collected.approvals,
                    if collected.report {
                        ", its HTML report"
                    } else {
                        ""
                    }
                );
            }
            Ok(Exit::Completed)
        }
        Command::Cancel { swarm_id, reason } => {
            let nc = conn.connect().await?;
            client::cancel(&nc, &swarm_id, &reason).await?;
            println!("cancel sent to swarm {swarm_id}");
            Ok(Exit::Completed)
        }
        Command::Report {
            swarm_id,
            out,
            json,
        } => {
            let nc = conn.connect().await?;
            let known = client::lookup(&nc, &swarm_id).await?;
            if json {
                match client::final_report(&nc, &swarm_id).await? {
                    Some(report) => println!("{}", serde_json::to_string_pretty(&report)?),
                    None => {
                        return Err(fail(
                            Exit::Error,
                            format!(
                                "swarm {swarm_id} has no final report yet ({:?})",
                                known.status()
                            ),
                        ));
                    }
                }
            } else {
                let path = client::fetch_report(&nc, &swarm_id, &out).await?;
                println!("{}", path.display());
            }
            Ok(Exit::Completed)
        }
        Command::Inspect { what } => {
            let nc = conn.connect().await?;
            let found = match what {
                Inspect::State { swarm_id } => inspect::state(&nc, &swarm_id).await?,
                Inspect::Msg { seq, stream } => inspect::message(&nc, &stream, seq).await?,
                Inspect::Kv { bucket, key } => inspect::kv(&nc, &bucket, &key).await?,
            };
            eprintln!("{}: {} ({})", found.source, found.kind, found.content_type);
            if let Some(problem) = &found.problem {
                eprintln!("warning: {problem}; shown as its codec alone reads it");
            }
            println!("{}", serde_json::to_string_pretty(&found.value)?);
            Ok(Exit::Completed)
        }
        Command::Up(args) => {
            let mut opts = options(
                &args.cluster,
                args.cluster.data_dir.clone(),
                Some(args.cluster.port.unwrap_or(4222)),
                &args.workspace,
            )?;
            opts.metrics_base_port = (args.metrics_port != 0).then_some(args.metrics_port);
            opts.gateway_port = (args.a2a_port != 0).then_some(args.a2a_port);
            let cluster = swarm_local::LocalCluster::start(opts).await?;
            println!("Swarm is up at {}", cluster.url());
            if let Some(url) = cluster.gateway_url() {
                println!("  console: {url}/");
                println!("  A2A:     {url} (card: {url}/.well-known/agent-card.json)");
            }
            println!("  logs:    {}", cluster.logs_dir().display());
            println!("  reports: {}", cluster.reports_dir().display());
            for (id, port) in cluster.metrics_endpoints() {
                println!("  metrics: http://127.0.0.1:{port}/metrics ({id})");
            }
            println!(
                "  try:     swarm mission \"1. Count the words in README.md\" --wait -s {}",
                cluster.url()
            );
            println!("Ctrl-C stops everything.");
            swarm_runtime::shutdown::signal().await;
            cluster.stop(Duration::from_secs(15)).await;
            Ok(Exit::Completed)
        }
        Command::Demo(args) => run_demo(&args).await,
    }
}

/// Follows a swarm to its final report as `Follow` shows it, then (unless
/// `json`) prints the report's summary.
async fn follow(
    nc: &async_nats::Client,
    swarm_id: &str,
    state: Option<&SwarmState>,
    accepted_at: DateTime<Utc>,
    timeout: Duration,
    json: bool,
) -> anyhow::Result<FinalReport> {
    let mut view = Follow::new(json, state, accepted_at);
    let report = client::watch(nc, swarm_id, timeout, |u| view.update(u)).await;
    view.finish();
    let report = report?;
    if !json {
        print!("{}", display::report_summary(&report));
    }
    Ok(report)
}

/// Says where the swarm's HTML report is once the boss has rendered it;
/// `fetchable` when the cluster stays up for `swarm report` to fetch it.
async fn show_rendering(nc: &async_nats::Client, swarm_id: &str, fetchable: bool) {
    match client::wait_for_rendering(nc, swarm_id, Duration::from_secs(30)).await {
        Ok(record) => {
            if let Some(file) = &record.report_file {
                println!("HTML report: {file}");
            }
            if fetchable && let Some(obj) = &record.report_object {
                println!("  (object store: reports/{obj}; `swarm report {swarm_id}` fetches it)");
            }
        }
        // The mission's outcome is known and decides the exit code; a boss
        // slow to render does not change it.
        Err(e) => eprintln!("warning: {e:#}"),
    }
}

/// `swarm demo`: a local cluster, one mission on files that exist, the
/// report, and the cluster stopped.
async fn run_demo(args: &ClusterArgs) -> anyhow::Result<Exit> {
    let data_dir = args.data_dir.join("demo");
    // A fresh store each run, so the demo shows one mission from the start.
    let _ = std::fs::remove_dir_all(&data_dir);
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    let cwd = std::env::current_dir().context("the current directory")?;
    let setup = demo::prepare(&cwd, &data_dir)?;
    let mut opts = options(args, data_dir, args.port, &setup.workspace)?;
    // A free port: the demo must not fail because 8080 is taken.
    opts.gateway_port = Some(0);
    let cluster = swarm_local::LocalCluster::start(opts).await?;
    println!(
        "local cluster up at {} (logs in {})",
        cluster.url(),
        cluster.logs_dir().display()
    );
    if let Some(url) = cluster.gateway_url() {
        println!("A2A agent: {url} (card: {url}/.well-known/agent-card.json)");
    }
    println!(
        "workspace: {} ({})",
        setup.workspace.display(),
        if setup.repository {
            "this repository"
        } else {
            "sample files written for the demo"
        }
    );
    println!("mission:\n{}", setup.mission);
    let outcome = async {
        let nc = NatsArgs::local(cluster.url()).connect("swarm-demo").await?;
        let reply = client::submit(
            &nc,
            &MissionRequest::text(setup.mission),
            Duration::from_secs(15),
        )
        .await?;
        println!("swarm {}", reply.swarm_id);
        let report = follow(
            &nc,
            &reply.swarm_id,
            None,
            Utc::now(),
            Duration::from_secs(300),
            false,
        )
        .await?;
        let file = client::wait_for_rendering(&nc, &reply.swarm_id, Duration::from_secs(30))
            .await
            .map(|r| r.report_file);
        anyhow::Ok((report.overall_status, file))
    }
    .await;
    cluster.stop(Duration::from_secs(15)).await;
    let (status, file) = outcome?;
    match file {
        Ok(Some(file)) => println!("HTML report: {file}"),
        Ok(None) => println!("HTML report: (none written to disk)"),
        Err(e) => eprintln!("warning: {e:#}"),
    }
    println!(
        "The demo's cluster has stopped. To keep one running, start `swarm up` and, in another terminal,\n  \
         swarm mission \"1. Count the words in README.md\" --wait"
    );
    Ok(Exit::of_status(status))
}

/// Approves or denies one approval request and says what it was.
async fn decide(
    conn: &Connection,
    approval_id: &str,
    approve: bool,
    reason: Option<String>,
) -> anyhow::Result<Exit> {
    let nc = conn.connect().await?;
    let by = std::env::var("USER").unwrap_or_else(|_| "swarm-cli".into());
    let r = client::decide_as(&nc, &conn.desk_user(), approval_id, approve, &by, reason).await?;
    println!(
        "{} {:?}: {} {}",
        r.approval_id, r.status, r.tool, r.arguments
    );
    Ok(Exit::Completed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up_args(args: &[&str]) -> Result<ClusterArgs, clap::Error> {
        let cli = Cli::try_parse_from(["swarm", "up"].iter().chain(args))?;
        match cli.command {
            Command::Up(up) => Ok(up.cluster),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn connection_flags_go_anywhere_and_s_is_the_url() {
        for args in [
            vec!["swarm", "list", "-s", "nats://a:1"],
            vec!["swarm", "-s", "nats://a:1", "list"],
            vec!["swarm", "--nats-url", "nats://a:1", "list", "--json"],
            vec![
                "swarm",
                "mission",
                "x",
                "--wait",
                "--nats-url",
                "nats://a:1",
            ],
        ] {
            let matches = Cli::command().try_get_matches_from(&args).unwrap();
            assert_eq!(
                matches.value_source("url"),
                Some(ValueSource::CommandLine),
                "{args:?}"
            );
            let cli = Cli::from_arg_matches(&matches).unwrap();
            assert_eq!(cli.nats.url, "nats://a:1", "{args:?}");
        }
        let matches = Cli::command()
            .try_get_matches_from(["swarm", "list"])
            .unwrap();
        if std::env::var_os("NATS_URL").is_none() {
            assert_eq!(matches.value_source("url"), Some(ValueSource::DefaultValue));
        }
    }

    #[test]
    fn list_filters_parse() {
        let cli = Cli::try_parse_from([
            "swarm",
            "ls",
            "--status",
            "failed,cancelled",
            "--status",
            "timedout",
            "--since",
            "30m",
        ])
        .unwrap();
        match cli.command {
            Command::List {
                status,
                since,
                limit,
                json,
            } => {
                assert_eq!(
                    status,
                    [
                        SwarmStatus::Failed,
                        SwarmStatus::Cancelled,
                        SwarmStatus::TimedOut
                    ]
                );
                assert_eq!(since, Some(Duration::from_secs(1800)));
                assert_eq!(limit, 20);
                assert!(!json);
            }
            other => panic!("parsed as {other:?}"),
        }
        let err = Cli::try_parse_from(["swarm", "list", "--since", "soon"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn inspect_reads_the_a2ap_stream_unless_told_another() {
        let msg = |args: &[&str]| {
            let cli = Cli::try_parse_from(["swarm", "inspect", "msg"].iter().chain(args)).unwrap();
            match cli.command {
                Command::Inspect {
                    what: Inspect::Msg { seq, stream },
                } => (seq, stream),
                other => panic!("parsed as {other:?}"),
            }
        };
        assert_eq!(msg(&["12"]), (12, "A2AP".to_string()));
        assert_eq!(msg(&["7", "--stream", "WORK"]), (7, "WORK".to_string()));
        let cli =
            Cli::try_parse_from(["swarm", "inspect", "kv", "journal", "s.t.a1.r0.i0.s1"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Inspect { what: Inspect::Kv { bucket, key } }
                if bucket == "journal" && key == "s.t.a1.r0.i0.s1"
        ));
        assert!(Cli::try_parse_from(["swarm", "inspect", "msg", "twelve"]).is_err());
    }

    #[test]
    fn help_documents_every_exit_code() {
        let help = after_help();
        for e in Exit::ALL {
            let line = format!("  {}  {}", e.code(), e.meaning());
            assert!(help.contains(&line), "{line:?} missing from the help");
        }
    }

    #[test]
    fn a_local_server_gets_cpus_of_its_own_unless_told_otherwise() {
        assert_eq!(up_args(&[]).unwrap().nats_cpus, swarm_local::NatsCpus::Own);
        assert_eq!(
            up_args(&["--nats-cpus", "shared"]).unwrap().nats_cpus,
            swarm_local::NatsCpus::Shared
        );
        assert_eq!(
            up_args(&["--nats-cpus", "2,3"]).unwrap().nats_cpus,
            swarm_local::NatsCpus::List(vec![2, 3])
        );
        let err = up_args(&["--nats-cpus", "half"]).unwrap_err().to_string();
        assert!(err.contains("`shared`, `own` or a list"), "{err}");
    }

    #[test]
    fn up_serves_metrics_from_9310_unless_told_otherwise() {
        let metrics_port = |args: &[&str]| {
            let cli = Cli::try_parse_from(["swarm", "up"].iter().chain(args))?;
            match cli.command {
                Command::Up(up) => Ok::<_, clap::Error>(up.metrics_port),
                other => panic!("parsed as {other:?}"),
            }
        };
        assert_eq!(metrics_port(&[]).unwrap(), 9310);
        assert_eq!(metrics_port(&["--metrics-port", "0"]).unwrap(), 0);
        assert_eq!(metrics_port(&["--metrics-port", "9400"]).unwrap(), 9400);
        assert!(metrics_port(&["--metrics-port", "70000"]).is_err());
    }
}
