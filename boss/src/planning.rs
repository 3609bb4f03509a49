//! Planning: turns each accepted mission into a `SwarmDeployment` for the
//! managers. Boss replicas share one durable consumer on the missions
//! stream, so a boss that dies while planning leaves the mission to another.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, AckKind};
use chrono::Utc;
use swarm_common::skill;
use swarm_common::{
    Envelope, ErrorBody, ErrorCode, ErrorMessage, Limits, SeedPlanFields, SwarmDeployment,
    SwarmDeploymentPlan,
    mission::{MissionRecord, MissionStatus},
    subjects,
    validate::validate_plan_at,
};
use swarm_runtime::{Infra, wire};
use tracing::{Instrument as _, info, warn};

use crate::records;

/// What the planner needs.
pub struct Planner {
    /// Streams and buckets.
    pub infra: Infra,
    /// Limits plans are checked against.
    pub limits: Limits,
    /// This boss's agent id.
    pub agent_id: String,
    /// Tools the workers offer, which plans may name.
    pub tool_names: Vec<String>,
    /// Tools the running workers' cards offer beyond those (from MCP
    /// servers, say), read at most every [`swarm_common::card::CARD_REFRESH`].
    pub card_tools: CardTools,
    /// The model that plans; `None`: the offline planner.
    pub provider: Option<std::sync::Arc<dyn swarm_agent::provider::Provider>>,
    /// The skills learned in earlier missions, for the model's plans.
    pub skills: swarm_runtime::skills::SkillBook,
}

impl Planner {
    /// Plans one recorded mission and acks it once the deployment is stored,
    /// in a span that continues the trace intake started.
    pub async fn handle(&self, msg: jetstream::Message) {
        let span = swarm_runtime::trace::process(
            "plan",
            "consumer",
            &msg.subject,
            subjects::PLANNER_CONSUMER,
            msg.headers.as_ref(),
        );
        self.plan(msg).instrument(span).await
    }

    async fn plan(&self, msg: jetstream::Message) {
        let record: MissionRecord = match wire::codec_of(msg.headers.as_ref())
            .and_then(|c| c.decode(&msg.payload).map_err(ErrorBody::from))
        {
            Ok(r) => r,
            Err(e) => {
                wire::reject(&self.infra.js, "boss", &msg, e, &self.agent_id).await;
                return;
            }
        };
        let swarm_id = record.swarm_id.clone();
        tracing::Span::current().record("swarm.id", swarm_id.as_str());
        let delivered = msg.info().map(|i| i.delivered).unwrap_or(2);
        if delivered >= crate::MAX_TRIES {
            let e = ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "planning was tried {delivered} times without finishing (a boss may have died on this mission)"
                ),
            );
            match self.fail(&record, e).await {
                Ok(()) => {
                    let _ = msg.ack_with(AckKind::Term).await;
                }
                Err(e) => {
                    warn!(%swarm_id, error = format!("{e:#}"), "cannot record that the mission cannot be planned");
                    let _ = msg
                        .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                        .await;
                }
            }
            return;
        }
        match self.plan_and_deploy(&record, delivered).await {
            Ok(()) => {
                let _ = msg.ack().await;
            }
            Err(e) => {
                warn!(%swarm_id, error = format!("{e:#}"), "planning failed; the mission will be retried");
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(1))))
                    .await;
            }
        }
    }

    /// Plans and deploys a mission delivered `delivered` times.
    async fn plan_and_deploy(&self, record: &MissionRecord, delivered: i64) -> anyhow::Result<()> {
        let swarm_id = &record.swarm_id;
        // On a first delivery the message is the record as accepted: the
        // intake hands a mission over once (a resubmission within the
        // stream's day-long deduplication window lands on this message), and
        // only the planner moves the record on. A redelivery may follow a
        // planner that got further before it died: read where it stands.
        if delivered > 1
            && let Some((r, _)) = records::load(&self.infra.missions, swarm_id).await?
            && r.status != MissionStatus::Accepted
        {
            info!(%swarm_id, status = ?r.status, "mission already planned");
            return Ok(());
        }
        let request = &record.request;
        let tool_names = match &request.plan {
            Some(_) => Vec::new(),
            None => self.tool_names().await,
        };
        let plan: SwarmDeploymentPlan = match &request.plan {
            Some(p) => explicit_plan(p),
            None => match &self.provider {
                Some(provider) => {
                    // The skills learned in earlier missions that fit this
                    // one; the offline planner's rules have no use for them.
                    let skills: Vec<(String, String)> = self
                        .skills
                        .best(
                            request
                                .skills_scope
                                .as_deref()
                                .unwrap_or(skill::DEFAULT_SCOPE),
                            &request.mission,
                            skill::FOR_PLANNER,
                        )
                        .await
                        .into_iter()
                        .map(|s| (s.name, s.how_to))
                        .collect();
                    match swarm_agent::planner::plan_with_provider_at(
                        provider.as_ref(),
                        &request.mission,
                        &tool_names,
                        &skills,
                        &self.limits,
                        record.parent.as_ref().map_or(0, |p| p.depth),
                        3,
                    )
                    .await
                    {
                        Ok(plan) => plan,
                        Err(e) => return self.fail(record, e).await,
                    }
                }
                None => swarm_agent::offline_plan(&request.mission, &tool_names),
            },
        };
        let depth = record.parent.as_ref().map_or(0, |p| p.depth);
        if let Err(e) = validate_plan_at(&plan, &self.limits, depth) {
            return self.fail(record, e).await;
        }
        let plan = match route_skills(&self.infra, plan).await {
            Ok(plan) => plan,
            Err(e) => return self.fail(record, e).await,
        };
        deploy(&self.infra, &self.agent_id, record, &plan, &self.limits).await?;
        records::update(&self.infra.missions, swarm_id, Some(record), |r| {
            r.status = MissionStatus::Deployed;
            r.plan = Some(plan.clone());
        })
        .await?;
        Ok(())
    }

    /// The tools a plan may give its personas: the configured ones, then
    /// those the running workers' cards add.
    async fn tool_names(&self) -> Vec<String> {
        let mut names = self.tool_names.clone();
        for tool in self.card_tools.read(&self.infra.agents).await {
            if !names.contains(&tool) {
                names.push(tool);
            }
        }
        names
    }

    /// Records a mission that cannot be planned, and tells its watchers why.
    async fn fail(&self, record: &MissionRecord, error: ErrorBody) -> anyhow::Result<()> {
        let swarm_id = &record.swarm_id;
        warn!(%swarm_id, reason = %error.message, "mission cannot be planned");
        if record.parent.is_some() {
            // A child swarm's parent task waits for its answer: deploy the
            // child as failed, and its manager's report gives the reason.
            let why = format!("planning failed: {}", error.message);
            deploy_as(
                &self.infra,
                &self.agent_id,
                record,
                &unplanned(),
                &self.limits,
                Some(why),
            )
            .await?;
        }
        let env = Envelope::new(
            self.agent_id.as_str(),
            "client",
            swarm_id.as_str(),
            swarm_id.as_str(),
            ErrorMessage {
                token: String::new(),
                task_id: None,
                attempt: None,
                error: ErrorBody {
                    message: format!("planning failed: {}", error.message),
                    ..error.clone()
                },
            },
        );
        wire::publish(
            &self.infra.js,
            subjects::error(swarm_id),
            &env,
            Some(&format!("{swarm_id}.plan-error")),
        )
        .await
        .context("publishing the planning error")?;
        records::update(&self.infra.missions, swarm_id, Some(record), |r| {
            r.status = MissionStatus::Failed;
            r.error = Some(error.clone());
            r.updated_at = Utc::now();
        })
        .await?;
        Ok(())
    }
}

/// A mission's own plan, named as such when it does not say who planned it.
pub fn explicit_plan(plan: &SwarmDeploymentPlan) -> SwarmDeploymentPlan {
    let mut p = plan.clone();
    if p.planner.is_empty() {
        p.planner = "explicit".into();
    }
    p
}

/// Publishes the deployment of `record`'s mission with `plan` to the
/// managers, deduplicated by the swarm's id, and waits until it is stored.
pub async fn deploy(
    infra: &Infra,
    agent_id: &str,
    record: &MissionRecord,
    plan: &SwarmDeploymentPlan,
    limits: &Limits,
) -> anyhow::Result<()> {
    deploy_as(infra, agent_id, record, plan, limits, None).await
}

/// The plan of a child swarm that could not be planned: no one to run it.
fn unplanned() -> SwarmDeploymentPlan {
    SwarmDeploymentPlan {
        seed: Default::default(),
        manager_directive: String::new(),
        workers: Vec::new(),
        tasks: Vec::new(),
        success_criteria: Vec::new(),
        planner: "none".into(),
        sub_managers: Vec::new(),
    }
}

/// `plan` with the seed's fields filled in from the mission it is deployed
/// for, so that a seed peer reading the deployment finds what its plan
/// class says of the mission: the text, the swarm, the time limit (whole
/// minutes, rounded up) and who runs it.
fn with_seed_fields(
    plan: &SwarmDeploymentPlan,
    record: &MissionRecord,
    max_execution: chrono::Duration,
) -> SwarmDeploymentPlan {
    let minutes = (max_execution.num_seconds().max(0) as u64).div_ceil(60);
    let mut plan = plan.clone();
    plan.seed = SeedPlanFields {
        manager_name: Some("manager".into()),
        original_task: Some(record.request.mission.clone()),
        swarm_id: Some(record.swarm_id.clone()),
        max_execution_minutes: Some(u32::try_from(minutes).unwrap_or(u32::MAX)),
    };
    plan
}

/// The plan with each persona that asks for a skill sent to the pool whose
/// running workers offer it (the most of them), as their agent cards say:
/// chosen once, here, so every manager replica and every takeover routes
/// the swarm the same way. A skill no running pool offers fails the
/// mission, saying so.
async fn route_skills(
    infra: &Infra,
    mut plan: SwarmDeploymentPlan,
) -> Result<SwarmDeploymentPlan, ErrorBody> {
    if plan.workers.iter().all(|w| w.skill.is_none()) {
        return Ok(plan);
    }
    let cards = swarm_runtime::cards::read_all(&infra.agents)
        .await
        .map_err(|e| {
            ErrorBody::new(
                ErrorCode::Internal,
                format!("reading the agent cards to route skills: {e:#}"),
            )
        })?;
    for w in &mut plan.workers {
        let Some(skill) = &w.skill else { continue };
        match swarm_common::card::pools_offering(&cards, skill).first() {
            Some(pool) => w.pool = pool.clone(),
            None => {
                return Err(ErrorBody::new(
                    ErrorCode::NotFound,
                    format!(
                        "persona {:?} asks for skill {skill:?}, which no running worker pool \
                         offers (`swarm agents` lists what each offers)",
                        w.name
                    ),
                ));
            }
        }
    }
    Ok(plan)
}

/// [`deploy`], for a child swarm that `failure` says could not be planned.
async fn deploy_as(
    infra: &Infra,
    agent_id: &str,
    record: &MissionRecord,
    plan: &SwarmDeploymentPlan,
    limits: &Limits,
    failure: Option<String>,
) -> anyhow::Result<()> {
    let swarm_id = &record.swarm_id;
    let span = swarm_runtime::otel_span!(
        "deploy",
        otel.name = "deploy",
        otel.kind = "producer",
        messaging.system = swarm_runtime::trace::MESSAGING_SYSTEM,
        messaging.operation.type = "publish",
        messaging.destination.name = %subjects::deploy(swarm_id),
        swarm.id = %swarm_id,
    );
    async move { deploy_in_span(infra, agent_id, record, plan, limits, failure).await }
        .instrument(span)
        .await
}

/// [`deploy_as`] within its span, whose trace the deployment names.
async fn deploy_in_span(
    infra: &Infra,
    agent_id: &str,
    record: &MissionRecord,
    plan: &SwarmDeploymentPlan,
    limits: &Limits,
    failure: Option<String>,
) -> anyhow::Result<()> {
    let swarm_id = &record.swarm_id;
    let request = &record.request;
    let max_execution = chrono::Duration::from_std(request.max_execution(limits))
        .unwrap_or_else(|_| chrono::Duration::minutes(i64::from(limits.max_execution_minutes)));
    let deployment = SwarmDeployment {
        failure,
        parent: record.parent.clone(),
        mission: request.mission.clone(),
        mission_id: request.mission_id.clone(),
        plan: with_seed_fields(plan, record, max_execution),
        limits: limits.clone(),
        budget: request.budget(),
        accepted_at: record.accepted_at,
        deadline: record.accepted_at + max_execution,
        trace_id: swarm_runtime::trace::current_trace_id(),
        skills_scope: request.skills_scope.clone(),
    };
    let env = Envelope::new(
        agent_id,
        "manager",
        swarm_id.as_str(),
        swarm_id.as_str(),
        deployment,
    );
    wire::publish(
        &infra.js,
        subjects::deploy(swarm_id),
        &env,
        Some(&format!("{swarm_id}.deploy")),
    )
    .await
    .context("publishing the deployment")?;
    info!(%swarm_id, tasks = swarm_common::validate::expand_tasks(plan).len(), workers = plan.workers.len(), planner = %plan.planner, "swarm deployed");
    Ok(())
}

/// The tools the running workers' cards list, kept for
/// [`swarm_common::card::CARD_REFRESH`]: planning a mission reads them, and
/// the bucket is not read once per mission.
#[derive(Default)]
pub struct CardTools {
    cached: tokio::sync::Mutex<Option<(std::time::Instant, Vec<String>)>>,
}

impl CardTools {
    /// Every tool a running worker's card lists, sorted; none when no card
    /// can be read (planning goes on with the configured tools).
    pub async fn read(&self, agents: &jetstream::kv::Store) -> Vec<String> {
        let mut cached = self.cached.lock().await;
        if let Some((at, tools)) = &*cached
            && at.elapsed() < swarm_common::card::CARD_REFRESH
        {
            return tools.clone();
        }
        let tools = match swarm_runtime::cards::read_all(agents).await {
            Ok(cards) => {
                let mut tools: Vec<String> = cards
                    .into_iter()
                    .filter(|c| c.role == "worker")
                    .flat_map(|c| c.tools)
                    .collect();
                tools.sort();
                tools.dedup();
                tools
            }
            Err(e) => {
                warn!(error = %format!("{e:#}"), "cannot read the agent cards; planning with the configured tools");
                Vec::new()
            }
        };
        // None yet (no worker up, or the read failed): asked again next time.
        if !tools.is_empty() {
            *cached = Some((std::time::Instant::now(), tools.clone()));
        }
        tools
    }
}
