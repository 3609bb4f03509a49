//! Missions in: the `boss.missions` service. A mission is parsed, checked,
//! recorded durably, and only then answered with its swarm id.

use async_nats::{HeaderMap, service::Request};
use bytes::Bytes;
use chrono::Utc;
use swarm_common::{
    Codec, ErrorBody, ErrorCode, Limits, headers as h,
    mission::{
        MissionErrorReply, MissionRecord, MissionReply, MissionStatus, parse_mission, swarm_id_for,
    },
    subjects,
};
use swarm_runtime::{Infra, trace, wire};
use tracing::{Instrument as _, info, warn};

use crate::records;

/// What intake needs.
pub struct Intake {
    /// Streams and buckets.
    pub infra: Infra,
    /// Limits missions are accepted with.
    pub limits: Limits,
    /// This boss's agent id.
    pub agent_id: String,
}

impl Intake {
    /// Handles one request on `boss.missions`: answers it if it has a reply
    /// subject, and records a refused mission sent without one as a dead
    /// letter. Its span is where a mission's trace starts, unless the
    /// request carries one to continue.
    pub async fn handle(&self, request: Request) {
        let span = trace::process(
            "intake",
            "server",
            &request.message.subject,
            subjects::MISSIONS_QUEUE,
            request.message.headers.as_ref(),
        );
        self.respond(request).instrument(span).await
    }

    async fn respond(&self, request: Request) {
        let msg = &request.message;
        let headers = msg.headers.as_ref();
        let parsed = parse_mission(
            wire::header(headers, h::CONTENT_TYPE),
            wire::header(headers, h::PROTOCOL_VERSION),
            &msg.payload,
            &self.limits,
        );
        let (reply, format) = match parsed {
            Ok((mission, format)) => match self.accept(mission).await {
                Ok(reply) => (Ok(reply), format),
                Err(e) => (Err(e), format),
            },
            Err((e, format)) => (Err(e), format),
        };
        match &reply {
            Ok(r) if r.duplicate => swarm_runtime::metrics::mission_duplicate(),
            Ok(_) => swarm_runtime::metrics::mission_accepted(),
            Err(e) => swarm_runtime::metrics::mission_refused(&e.code.to_string()),
        }
        let codec = format.reply_codec();
        let (body, error_headers) = match &reply {
            Ok(r) => (codec.encode(r), None),
            Err(e) => {
                warn!(code = %e.code, reason = %e.message, "mission refused");
                (
                    codec.encode(&MissionErrorReply { error: e.clone() }),
                    Some(e),
                )
            }
        };
        let body = match body {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                warn!(error = %e, "cannot encode mission reply");
                return;
            }
        };
        if msg.reply.is_none() {
            if let Err(e) = &reply
                && let Err(dl) = wire::dead_letter(
                    &self.infra.js,
                    "boss",
                    &msg.subject,
                    e.clone(),
                    &msg.payload,
                    &self.agent_id,
                )
                .await
            {
                warn!(error = %dl, "cannot record a refused mission as a dead letter");
            }
            return;
        }
        let mut hdrs = HeaderMap::new();
        hdrs.insert(h::CONTENT_TYPE, codec.content_type());
        hdrs.insert(h::PROTOCOL_VERSION, swarm_common::PROTOCOL_VERSION);
        if let Some(e) = error_headers {
            // The NATS service convention, so `nats req` and micro clients see an error.
            hdrs.insert(h::SERVICE_ERROR, h::value(&e.message).as_str());
            hdrs.insert(h::SERVICE_ERROR_CODE, e.code.status().to_string().as_str());
        }
        if let Err(e) = request.respond_with_headers(Ok(body), hdrs).await {
            warn!(error = %e, "cannot answer mission request");
        }
    }

    /// Records an accepted mission and returns the reply. A mission with its
    /// own plan (asking for no skills) needs no planner: its record is stored as deployed and the
    /// deployment published from here (at the same time, when it has no
    /// mission id: [`Self::deploy_fresh`]). Any other mission goes to the
    /// missions stream the planners consume. The same mission id gives the
    /// same swarm id and `duplicate: true`.
    async fn accept(
        &self,
        request: swarm_common::mission::MissionRequest,
    ) -> Result<MissionReply, ErrorBody> {
        // Without a mission id the swarm id is new (a random UUID), so no
        // other request can share it and the record has nothing to decide.
        let fresh = request.mission_id.is_none();
        let swarm_id = swarm_id_for(request.mission_id.as_deref());
        let now = Utc::now();
        // A plan whose personas ask for skills goes through the planner,
        // which routes them to pools (from the agent cards) and records a
        // skill no pool offers as the mission's failure.
        let plan = request
            .plan
            .as_ref()
            .filter(|p| p.workers.iter().all(|w| w.skill.is_none()))
            .map(crate::planning::explicit_plan);
        let record = MissionRecord {
            parent: None,
            swarm_id: swarm_id.clone(),
            request,
            status: if plan.is_some() {
                MissionStatus::Deployed
            } else {
                MissionStatus::Accepted
            },
            accepted_at: now,
            updated_at: now,
            plan,
            overall_status: None,
            report_object: None,
            report_file: None,
            error: None,
        };
        let bytes = Bytes::from(Codec::MsgPack.encode(&record).map_err(ErrorBody::from)?);
        if fresh && let Some(plan) = &record.plan {
            return self.deploy_fresh(&record, plan, bytes).await;
        }
        let (record, bytes, mut duplicate) =
            match self.infra.missions.create(&swarm_id, bytes.clone()).await {
                Ok(_) => (record, bytes, false),
                Err(e) if e.kind() == async_nats::jetstream::kv::CreateErrorKind::AlreadyExists => {
                    // Accepted before: go on from the stored record, in case
                    // the earlier attempt failed half-way.
                    let existing = self
                        .infra
                        .missions
                        .get(&swarm_id)
                        .await
                        .map_err(|e| internal("reading the mission record", &e))?
                        .ok_or_else(|| internal("reading the mission record", &"it vanished"))?;
                    let stored: MissionRecord = Codec::MsgPack
                        .decode(&existing)
                        .map_err(|e| internal("decoding the mission record", &e))?;
                    (stored, existing, true)
                }
                Err(e) => return Err(internal("recording the mission", &e)),
            };
        let reply = |duplicate: bool| accepted(&swarm_id, duplicate);
        match (&record.status, &record.plan) {
            (MissionStatus::Accepted, _) => {}
            // Deploying again is safe while the deployment's deduplication
            // window (an hour) surely covers the first one.
            (MissionStatus::Deployed, Some(plan))
                if record.request.plan.is_some()
                    && now - record.accepted_at < chrono::Duration::minutes(30) =>
            {
                crate::planning::deploy(&self.infra, &self.agent_id, &record, plan, &self.limits)
                    .await
                    .map_err(|e| internal("deploying the mission", &format!("{e:#}")))?;
                info!(%swarm_id, duplicate, "mission accepted and deployed");
                return Ok(reply(duplicate));
            }
            _ => {
                info!(%swarm_id, "duplicate mission; already under way");
                return Ok(reply(duplicate));
            }
        }
        // While a stream's leader is being elected the publish fails for a
        // moment: retry it (the message id keeps a retry from landing twice).
        let ack = swarm_runtime::retry::retry(
            || {
                let js = self.infra.js.clone();
                let bytes = bytes.clone();
                let subject = subjects::mission_record(&swarm_id);
                let headers = wire::headers(Codec::MsgPack, Some(&swarm_id));
                async move {
                    js.publish_with_headers(subject, headers, bytes)
                        .await
                        .map_err(|e| e.to_string())?
                        .await
                        .map_err(|e| e.to_string())
                }
            },
            |_| true,
        )
        .await
        .map_err(|e| internal("recording the mission", &e))?;
        duplicate |= ack.duplicate;
        info!(%swarm_id, duplicate, "mission accepted");
        Ok(reply(duplicate))
    }

    /// Deploys a fresh mission (its own plan, no mission id) and stores its
    /// record at the same time, instead of the record first: the managers
    /// start one store round trip sooner. A mission id's record must come
    /// first, since its create-if-absent is what tells a new mission from a
    /// resubmission; a fresh swarm id cannot have been used before.
    async fn deploy_fresh(
        &self,
        record: &MissionRecord,
        plan: &swarm_common::SwarmDeploymentPlan,
        bytes: Bytes,
    ) -> Result<MissionReply, ErrorBody> {
        let swarm_id = &record.swarm_id;
        // The deployment is written first, so the server stores it first.
        let (deployed, recorded) = tokio::join!(
            crate::planning::deploy(&self.infra, &self.agent_id, record, plan, &self.limits),
            self.infra.missions.create(swarm_id, bytes),
        );
        match (deployed, recorded) {
            (Ok(()), Ok(_)) => {
                info!(%swarm_id, "mission accepted and deployed");
                Ok(accepted(swarm_id, false))
            }
            (Ok(()), Err(e)) => {
                // It runs (its deployment is stored), so a resubmission
                // would run it twice: say so, and refuse a retry.
                warn!(%swarm_id, error = %e, "mission deployed but not recorded");
                let mut err = ErrorBody::new(
                    ErrorCode::Internal,
                    format!(
                        "swarm {swarm_id} is deployed and runs, and its report comes as usual, \
                         but its mission record could not be stored (recording the mission: \
                         {e}), so `swarm status` will not find it; do not submit the mission \
                         again"
                    ),
                );
                err.retriable = false;
                Err(err.with_detail("swarm_id", swarm_id))
            }
            (Err(e), recorded) => {
                let error = internal("deploying the mission", &format!("{e:#}"))
                    .with_detail("swarm_id", swarm_id);
                if let Ok(revision) = recorded {
                    // Nothing runs: the record says so instead of "deployed"
                    // (changed from the revision just created, not read again).
                    let known = Some((record.clone(), revision));
                    let stored =
                        records::update_from(&self.infra.missions, swarm_id, known, None, |r| {
                            r.status = MissionStatus::Failed;
                            r.error = Some(error.clone());
                        })
                        .await;
                    if let Err(e) = stored {
                        warn!(%swarm_id, error = format!("{e:#}"), "cannot mark the undeployed mission failed");
                    }
                }
                Err(error)
            }
        }
    }
}

/// The answer to an accepted mission, naming the trace of this intake's
/// span (a duplicate's work is in the first submission's trace).
fn accepted(swarm_id: &str, duplicate: bool) -> MissionReply {
    tracing::Span::current().record("swarm.id", swarm_id);
    MissionReply {
        swarm_id: swarm_id.to_string(),
        status: "accepted".into(),
        duplicate,
        trace_id: trace::current_trace_id().filter(|_| !duplicate),
    }
}

/// An error of ours or of the broker's, worth a retry.
fn internal(what: &str, e: &dyn std::fmt::Display) -> ErrorBody {
    let mut err = ErrorBody::new(ErrorCode::Internal, format!("{what}: {e}"));
    err.retriable = true;
    err
}
