//! The Swarm boss: serves `boss.missions`, records each accepted mission
//! before answering, plans a team for it (explicit plan or the offline
//! planner), deploys it to the managers, and renders each `FinalReport` into
//! a self-contained HTML report.
//!
//! Three loops: [`intake`] (a NATS service in a queue group across boss
//! replicas) and [`planning`] share one connection; [`reports`] runs on a
//! thread of its own at a lower CPU priority, with its own connection (see
//! [`reports_thread`]). Planning and reports are durable consumers shared by
//! the replicas, so any boss finishes what another began.
//!
//! The report page is public API: [`render_html`] turns a swarm's
//! `FinalReport` ([`ReportInput`]) into the self-contained HTML page the
//! boss stores (the report benchmark times it).

pub mod children;
pub mod desk;
pub mod graph;
pub mod intake;
pub mod planning;
pub mod records;
mod report;
pub mod reports;

pub use report::{ReportError, ReportInput, render_html};

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::service::ServiceExt;
use futures::StreamExt;
use swarm_common::{Limits, subjects};
use swarm_runtime::{Infra, NatsArgs, retry::pull_again};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tracing::{info, warn};

/// The name the boss registers its NATS service under (`nats micro ls` shows it).
pub const SERVICE_NAME: &str = "boss";

/// How a boss replica runs.
#[derive(Clone)]
pub struct BossConfig {
    /// NATS connection.
    pub nats: NatsArgs,
    /// This replica's agent id.
    pub agent_id: String,
    /// Where HTML reports are written.
    pub reports_dir: PathBuf,
    /// Limits missions are accepted with.
    pub limits: Limits,
    /// How long to finish in-flight work after shutdown is asked for.
    pub drain_timeout: Duration,
    /// Copies of each stream and bucket.
    pub replicas: usize,
    /// The model that plans missions; `None`: the offline planner.
    pub planner: Option<Arc<dyn swarm_agent::provider::Provider>>,
    /// The tools the workers offer, which plans may name.
    pub tool_names: Vec<String>,
    /// NATS users who may approve, deny and answer at the desk.
    pub approvers: Vec<String>,
    /// NATS users who may record and close requests at the desk.
    pub desk_workers: Vec<String>,
}

impl BossConfig {
    /// Defaults for a boss.
    pub fn new(nats: NatsArgs, agent_id: impl Into<String>) -> Self {
        Self {
            nats,
            agent_id: agent_id.into(),
            reports_dir: PathBuf::from("reports"),
            limits: Limits::default(),
            drain_timeout: Duration::from_secs(10),
            replicas: 1,
            planner: None,
            tool_names: worker_tool_names(&swarm_agent::tools::ToolArgs::default()),
            approvers: vec!["client".into()],
            desk_workers: vec!["worker".into()],
        }
    }
}

/// The tools a worker configured with `tool_args` offers: the built-ins,
/// the optional ones switched on, `memory` and `sleep`.
pub fn worker_tool_names(tool_args: &swarm_agent::tools::ToolArgs) -> Vec<String> {
    let memory: Arc<dyn swarm_agent::tools::MemoryStore> =
        Arc::new(swarm_agent::tools::InMemoryStore::new());
    let mut names =
        swarm_agent::tools::ToolRegistry::with_config(".", &tool_args.tools_config(Some(memory)))
            .names();
    names.push("sleep".into());
    names.sort();
    names.dedup();
    names
}

/// Deliveries after which the boss gives up on a mission it could not plan
/// or a report it could not render, with the reason, instead of trying
/// again for ever (a boss may have died on it each time).
pub const MAX_TRIES: i64 = 8;

async fn durable(
    infra: &Infra,
    stream: &str,
    name: &str,
    filter: &str,
    ack_wait: Duration,
) -> anyhow::Result<PullConsumer> {
    let stream = infra
        .js
        .get_stream(stream)
        .await
        .with_context(|| format!("opening stream {stream}"))?;
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(name.into()),
            filter_subject: filter.into(),
            ack_policy: AckPolicy::Explicit,
            ack_wait,
            deliver_policy: DeliverPolicy::All,
            // A backstop: the planner and the renderer give a message up
            // themselves after `MAX_TRIES` deliveries.
            max_deliver: MAX_TRIES + 2,
            ..Default::default()
        })
        .await
        .with_context(|| format!("creating consumer {name}"))?;
    Ok(consumer)
}

/// The boss service's metadata (`$SRV.INFO.boss`): the protocol versions
/// and codecs it speaks, and its handshake subject.
pub fn service_metadata() -> std::collections::HashMap<String, String> {
    std::collections::HashMap::from([
        (
            "protocol_versions".to_string(),
            swarm_runtime::hello::versions().join(","),
        ),
        (
            "codecs".to_string(),
            swarm_runtime::hello::codecs().join(","),
        ),
        ("hello".to_string(), subjects::hello(SERVICE_NAME)),
    ])
}

/// Runs a boss replica until `shutdown` resolves.
pub async fn run(config: BossConfig, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    swarm_runtime::health::starting();
    let client = config.nats.connect(&config.agent_id).await?;
    let infra = Infra::open(&client, config.replicas).await?;
    swarm_runtime::hello::spawn(&client, "boss", &config.agent_id).await?;
    let (stop_reports, stopped) = watch::channel(false);
    let (ready, reports_ready) = oneshot::channel();
    let reports = reports_thread(config.clone(), stopped, ready)?;
    reports_ready
        .await
        .context("the reports thread ended before it started")??;

    let planner_consumer = durable(
        &infra,
        subjects::MISSIONS_STREAM,
        subjects::PLANNER_CONSUMER,
        subjects::MISSIONS_STREAM_SUBJECTS,
        Duration::from_secs(60),
    )
    .await?;

    // Sub-manager tasks: the boss starts each as a child swarm. Its
    // `ack_wait` covers recording one child, not running it.
    let children_consumer = durable(
        &infra,
        subjects::WORK_STREAM,
        &children::consumer_name(),
        &subjects::work_filter(swarm_common::hierarchy::SUB_MANAGER_POOL),
        Duration::from_secs(30),
    )
    .await?;
    let children = Arc::new(children::Children {
        infra: infra.clone(),
        limits: config.limits.clone(),
        agent_id: config.agent_id.clone(),
    });

    let intake = Arc::new(intake::Intake {
        infra: infra.clone(),
        limits: config.limits.clone(),
        agent_id: config.agent_id.clone(),
    });
    let planner = Arc::new(planning::Planner {
        infra: infra.clone(),
        limits: config.limits.clone(),
        agent_id: config.agent_id.clone(),
        tool_names: config.tool_names.clone(),
        card_tools: Default::default(),
        provider: config.planner.clone(),
        skills: swarm_runtime::skills::SkillBook::new(infra.skills.clone()),
    });

    let service = client
        .service_builder()
        .description("Swarm mission intake: submit a mission, get a swarm id")
        .queue_group(subjects::MISSIONS_QUEUE)
        .metadata(service_metadata())
        .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
        .await
        .map_err(|e| anyhow::anyhow!("starting the boss service: {e}"))?;
    let mut endpoint = service
        .endpoint(subjects::MISSIONS)
        .await
        .map_err(|e| anyhow::anyhow!("serving {}: {e}", subjects::MISSIONS))?;
    let desk = Arc::new(desk::Desk {
        infra: infra.clone(),
        approvers: config.approvers.clone(),
        workers: config.desk_workers.clone(),
    });
    let mut desk_requests = client
        .queue_subscribe(subjects::DESK_FILTER, subjects::MISSIONS_QUEUE.into())
        .await
        .context("serving the desk")?;
    let mut planned = planner_consumer
        .messages()
        .await
        .context("pulling missions")?;
    let mut assigned = children_consumer
        .messages()
        .await
        .context("pulling sub-manager tasks")?;
    let mut card = swarm_runtime::cards::card(SERVICE_NAME, &config.agent_id);
    card.skills = vec![
        "plan-missions".into(),
        "render-reports".into(),
        "approvals-desk".into(),
    ];
    let card = swarm_runtime::cards::publish(&infra.agents, card).await;
    info!(agent_id = %config.agent_id, reports_dir = %config.reports_dir.display(), "boss ready");
    swarm_runtime::health::started();

    let mut inflight = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = inflight.join_next(), if !inflight.is_empty() => {}
            Some(request) = endpoint.next() => {
                let intake = intake.clone();
                inflight.spawn(async move { intake.handle(request).await });
            }
            Some(request) = desk_requests.next() => {
                let (desk, client) = (desk.clone(), client.clone());
                inflight.spawn(async move { desk.respond(&client, request).await });
            }
            Some(next) = assigned.next() => match next {
                Ok(msg) => {
                    let children = children.clone();
                    inflight.spawn(async move { children.handle(msg).await });
                }
                Err(e) => {
                    if let Some(fresh) = pull_again("sub-manager tasks", &e, children_consumer.messages()).await {
                        assigned = fresh;
                    }
                }
            },
            Some(next) = planned.next() => match next {
                Ok(msg) => {
                    let planner = planner.clone();
                    inflight.spawn(async move { planner.handle(msg).await });
                }
                Err(e) => {
                    if let Some(fresh) = pull_again("missions", &e, planner_consumer.messages()).await {
                        planned = fresh;
                    }
                }
            },
        }
    }
    info!("boss draining");
    swarm_runtime::health::stopping();
    let _ = endpoint.stop().await;
    let _ = desk_requests.unsubscribe().await;
    let _ = service.stop().await;
    card.withdraw().await;
    swarm_runtime::shutdown::drain(&mut inflight, config.drain_timeout, "missions").await;
    client.drain().await.ok();
    stop_reports.send_replace(true);
    match tokio::task::spawn_blocking(move || reports.join()).await {
        Ok(Ok(result)) => result?,
        _ => warn!("the reports thread panicked"),
    }
    Ok(())
}

/// Starts the report loop on a thread of its own, with its own runtime and
/// connection, at a lower CPU priority (nice raised by [`REPORTS_NICE`] on
/// Linux). Pages are rendered and written on this thread itself, with no
/// hand-off to a blocking pool: it serves nothing but reports.
///
/// A report is background work: decoding a 50-task `FinalReport`, rendering
/// and storing the page took about 5 ms (rendering 1,000 tasks alone takes
/// 14 ms of CPU), and on the boss's one thread it held up the next mission's
/// intake by up to as long (docs/decisions.md, "Single-threaded roles").
/// Here intake answers first and reports take the CPU that is left. `ready`
/// gets the outcome of start-up; the loop drains and returns once `stop`
/// turns true.
fn reports_thread(
    config: BossConfig,
    stop: watch::Receiver<bool>,
    ready: oneshot::Sender<anyhow::Result<()>>,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<()>>> {
    std::thread::Builder::new()
        .name("reports".into())
        .spawn(move || {
            lower_priority();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("building the reports runtime")?;
            runtime.block_on(report_loop(config, stop, ready))
        })
        .context("starting the reports thread")
}

/// Lowers the calling thread's CPU priority; threads it starts inherit it.
fn lower_priority() {
    // On Linux a nice value belongs to one thread: the one named here.
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{getpriority_process, setpriority_process};
        let tid = Some(rustix::thread::gettid());
        let lowered = getpriority_process(tid)
            .and_then(|now| setpriority_process(tid, (now + REPORTS_NICE).min(19)));
        if let Err(e) = lowered {
            warn!(error = %e, "cannot lower the reports thread's priority; reports compete with intake");
        }
    }
}

/// How far the reports thread's nice value is raised above the process's:
/// below intake, planning and the other roles, and still well clear of
/// starving (nice 19 is the floor).
const REPORTS_NICE: i32 = 10;

/// The report loop: renders each `FinalReport` until `stop` turns true.
async fn report_loop(
    config: BossConfig,
    mut stop: watch::Receiver<bool>,
    ready: oneshot::Sender<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let started = async {
        let client = config
            .nats
            .connect(&format!("{}-reports", config.agent_id))
            .await?;
        let infra = Infra::open(&client, config.replicas).await?;
        let consumer = durable(
            &infra,
            subjects::A2AP_STREAM,
            subjects::REPORTS_CONSUMER,
            subjects::STORED_REPORT_FILTER,
            Duration::from_secs(60),
        )
        .await?;
        let reported = consumer.messages().await.context("pulling reports")?;
        let reporter = Arc::new(reports::Reporter {
            infra,
            reports_dir: config.reports_dir.clone(),
            agent_id: config.agent_id.clone(),
            rendering: Default::default(),
        });
        anyhow::Ok((client, consumer, reported, reporter))
    }
    .await;
    let (client, consumer, mut reported, reporter) = match started {
        Ok(parts) => {
            let _ = ready.send(Ok(()));
            parts
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return Ok(());
        }
    };
    let mut inflight = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            Some(_) = inflight.join_next(), if !inflight.is_empty() => {}
            Some(next) = reported.next() => match next {
                Ok(msg) => {
                    let reporter = reporter.clone();
                    inflight.spawn(async move { reporter.handle(msg).await });
                }
                Err(e) => {
                    if let Some(fresh) = pull_again("reports", &e, consumer.messages()).await {
                        reported = fresh;
                    }
                }
            },
        }
    }
    swarm_runtime::shutdown::drain(&mut inflight, config.drain_timeout, "reports").await;
    client.drain().await.ok();
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_reports_thread_runs_below_the_rest_and_its_threads_inherit_it() {
        let nice =
            |tid| rustix::process::getpriority_process(Some(tid)).expect("reads the nice value");
        let outer = nice(rustix::thread::gettid());
        let (lowered, inherited) = std::thread::spawn(move || {
            lower_priority();
            let lowered = nice(rustix::thread::gettid());
            let inherited = std::thread::spawn(move || nice(rustix::thread::gettid()))
                .join()
                .expect("the child thread runs");
            (lowered, inherited)
        })
        .join()
        .expect("the thread runs");
        assert_eq!(lowered, (outer + REPORTS_NICE).min(19));
        assert_eq!(
            inherited, lowered,
            "threads started by the reports thread (rendering) inherit it"
        );
        assert_eq!(
            nice(rustix::thread::gettid()),
            outer,
            "the rest of the process keeps its priority"
        );
    }
}
