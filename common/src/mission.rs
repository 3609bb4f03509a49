//! Mission intake: what `boss.missions` accepts, what it answers, and the
//! record the boss keeps of each accepted mission.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::codec::{self, Codec};
use crate::error::{ErrorBody, ErrorCode};
use crate::limits::Limits;
use crate::messages::{SwarmDeploymentPlan, SwarmStatus};

/// A mission as JSON or MessagePack. Plain text is the same with only
/// `mission` set.
///
/// The plan may be the seed's: what it says of its mission fills what the
/// request leaves out. Its `original_task` is the mission's text when
/// `mission` is absent, its `max_execution_minutes` the time limit when the
/// request sets none, and its `swarm_id` the `mission_id` when the request
/// has none (so the same plan sent twice makes one swarm).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MissionRequest {
    /// What the swarm should achieve.
    pub mission: String,
    /// The caller's id for idempotent retries: the same id makes the same swarm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
    /// How long the swarm may run, in minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_execution_minutes: Option<u32>,
    /// How long the swarm may run, in seconds (for short missions; wins over minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_execution_seconds: Option<u32>,
    /// Most tokens the mission may use (models of every role together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Most estimated model cost, in US dollars, the mission may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// An explicit plan, deployed as given with no planner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<SwarmDeploymentPlan>,
    /// The A2AP version the caller speaks (also accepted as the `A2ap-Version` header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// The scope of learned skills the mission's tasks and planner are
    /// offered and its tasks record ([`crate::skill`]); none: the
    /// deployment's, [`crate::skill::DEFAULT_SCOPE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_scope: Option<String>,
}

impl<'de> Deserialize<'de> for MissionRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct OnWire {
            #[serde(default)]
            mission: Option<String>,
            #[serde(default)]
            mission_id: Option<String>,
            #[serde(default)]
            max_execution_minutes: Option<u32>,
            #[serde(default)]
            max_execution_seconds: Option<u32>,
            #[serde(default)]
            max_tokens: Option<u64>,
            #[serde(default)]
            max_cost_usd: Option<f64>,
            #[serde(default)]
            plan: Option<SwarmDeploymentPlan>,
            #[serde(default)]
            protocol_version: Option<String>,
            #[serde(default)]
            skills_scope: Option<String>,
        }
        let mut w = OnWire::deserialize(d)?;
        let (original_task, minutes, swarm_id) = match &mut w.plan {
            Some(plan) => {
                plan.adopt_seed_fields();
                (
                    plan.seed.original_task.clone(),
                    plan.seed.max_execution_minutes,
                    plan.seed.swarm_id.clone(),
                )
            }
            None => (None, None, None),
        };
        Ok(MissionRequest {
            mission: w
                .mission
                .or(original_task)
                .ok_or_else(|| serde::de::Error::missing_field("mission"))?,
            mission_id: w.mission_id.or(swarm_id),
            max_execution_minutes: w.max_execution_minutes.or(
                // The plan's limit, unless the request set one of its own.
                minutes.filter(|_| w.max_execution_seconds.is_none()),
            ),
            max_execution_seconds: w.max_execution_seconds,
            max_tokens: w.max_tokens,
            max_cost_usd: w.max_cost_usd,
            plan: w.plan,
            protocol_version: w.protocol_version,
            skills_scope: w.skills_scope,
        })
    }
}

impl MissionRequest {
    /// A plain-text mission.
    pub fn text(mission: impl Into<String>) -> Self {
        Self {
            mission: mission.into(),
            mission_id: None,
            max_execution_minutes: None,
            max_execution_seconds: None,
            max_tokens: None,
            max_cost_usd: None,
            plan: None,
            protocol_version: None,
            skills_scope: None,
        }
    }
}

/// How a mission arrived; the reply goes back the same way (JSON for text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissionFormat {
    /// Plain UTF-8 text.
    Text,
    /// JSON.
    Json,
    /// MessagePack.
    MsgPack,
    /// Protobuf (`MissionRequest` of `proto/a2ap.proto`).
    Protobuf,
}

impl MissionFormat {
    /// The codec of the reply.
    pub fn reply_codec(self) -> Codec {
        match self {
            MissionFormat::MsgPack => Codec::MsgPack,
            MissionFormat::Protobuf => Codec::Protobuf,
            MissionFormat::Text | MissionFormat::Json => Codec::Json,
        }
    }
}

/// The answer to an accepted mission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MissionReply {
    /// The swarm that carries out the mission.
    pub swarm_id: String,
    /// Always `accepted`.
    pub status: String,
    /// True when this mission id had been accepted before: the same swarm.
    #[serde(default)]
    pub duplicate: bool,
    /// The trace the mission's spans are in (32 lowercase hex digits), when
    /// the boss exports traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// The answer to a refused mission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MissionErrorReply {
    /// Why it was refused.
    pub error: ErrorBody,
}

/// Parses and checks a mission. `content_type` and `protocol_header` are the
/// request's headers. On failure the error comes with the format to answer in.
pub fn parse_mission(
    content_type: Option<&str>,
    protocol_header: Option<&str>,
    bytes: &[u8],
    limits: &Limits,
) -> Result<(MissionRequest, MissionFormat), (ErrorBody, MissionFormat)> {
    let format = detect_format(content_type, bytes).map_err(|e| (e, MissionFormat::Json))?;
    let fail = |e: ErrorBody| (e, format);
    if bytes.len() > limits.max_mission_bytes {
        return Err(fail(
            ErrorBody::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "the mission is {} bytes; the limit is {}",
                    bytes.len(),
                    limits.max_mission_bytes
                ),
            )
            .with_detail("limit", limits.max_mission_bytes),
        ));
    }
    if let Some(v) = protocol_header {
        check_version(v).map_err(fail)?;
    }
    let request = match format {
        MissionFormat::Text => {
            let text = std::str::from_utf8(bytes).map_err(|_| {
                fail(ErrorBody::new(
                    ErrorCode::DecodeFailed,
                    "the mission is neither UTF-8 text, JSON nor MessagePack",
                ))
            })?;
            MissionRequest::text(text.trim())
        }
        MissionFormat::Json => Codec::Json
            .decode::<MissionRequest>(bytes)
            .map_err(|e| fail(e.into()))?,
        MissionFormat::Protobuf => Codec::Protobuf
            .decode::<MissionRequest>(bytes)
            .map_err(|e| fail(e.into()))?,
        // Bytes that came with no Content-Type and are neither text nor
        // MessagePack get their error in JSON, the format people read.
        MissionFormat::MsgPack => Codec::MsgPack
            .decode::<MissionRequest>(bytes)
            .map_err(|e| {
                let format = if content_type.is_none() {
                    MissionFormat::Json
                } else {
                    format
                };
                (ErrorBody::from(e), format)
            })?,
    };
    check_request(&request, limits).map_err(fail)?;
    Ok((request, format))
}

fn detect_format(content_type: Option<&str>, bytes: &[u8]) -> Result<MissionFormat, ErrorBody> {
    if let Some(ct) = content_type {
        if codec::essence(ct) == codec::TEXT {
            return Ok(MissionFormat::Text);
        }
        return match Codec::from_content_type(Some(ct))? {
            Codec::Json => Ok(MissionFormat::Json),
            Codec::MsgPack => Ok(MissionFormat::MsgPack),
            Codec::Protobuf => Ok(MissionFormat::Protobuf),
        };
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        Ok(MissionFormat::Json)
    } else if std::str::from_utf8(bytes).is_ok() {
        Ok(MissionFormat::Text)
    } else {
        Ok(MissionFormat::MsgPack)
    }
}

fn check_version(v: &str) -> Result<(), ErrorBody> {
    if crate::protocol_supported(v) {
        Ok(())
    } else {
        Err(crate::unsupported_protocol(v))
    }
}

fn check_request(r: &MissionRequest, limits: &Limits) -> Result<(), ErrorBody> {
    if let Some(v) = &r.protocol_version {
        check_version(v)?;
    }
    if r.mission.trim().is_empty() {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            "the mission is empty",
        ));
    }
    if let Some(id) = &r.mission_id
        && (id.is_empty() || id.len() > 256)
    {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            "mission_id must be 1 to 256 bytes",
        ));
    }
    if let Some(m) = r.max_execution_minutes
        && (m == 0 || m > limits.max_execution_minutes)
    {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "max_execution_minutes must be 1 to {}",
                limits.max_execution_minutes
            ),
        ));
    }
    if let Some(s) = r.max_execution_seconds
        && (s == 0 || u64::from(s) > u64::from(limits.max_execution_minutes) * 60)
    {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            format!(
                "max_execution_seconds must be 1 to {}",
                u64::from(limits.max_execution_minutes) * 60
            ),
        ));
    }
    if let Some(c) = r.max_cost_usd
        && !(c.is_finite() && c > 0.0)
    {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            "max_cost_usd must be a positive number",
        ));
    }
    if r.max_tokens == Some(0) {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            "max_tokens must be positive",
        ));
    }
    if let Some(scope) = &r.skills_scope
        && (scope.trim().is_empty() || scope.len() > 64)
    {
        return Err(ErrorBody::new(
            ErrorCode::ValidationFailed,
            "skills_scope must be 1 to 64 bytes",
        ));
    }
    if let Some(plan) = &r.plan {
        crate::validate::validate_plan(plan, limits)?;
    }
    Ok(())
}

impl MissionRequest {
    /// The mission's budget for model use.
    pub fn budget(&self) -> crate::messages::MissionBudget {
        crate::messages::MissionBudget {
            max_tokens: self.max_tokens,
            max_cost_usd: self.max_cost_usd,
        }
    }

    /// How long the swarm may run: seconds if given, else minutes, else `limits`.
    pub fn max_execution(&self, limits: &Limits) -> std::time::Duration {
        let secs = match (self.max_execution_seconds, self.max_execution_minutes) {
            (Some(s), _) => u64::from(s),
            (None, Some(m)) => u64::from(m) * 60,
            (None, None) => u64::from(limits.max_execution_minutes) * 60,
        };
        std::time::Duration::from_secs(secs)
    }
}

/// The swarm id for a mission: derived from its `mission_id` (UUID v5), so a
/// retried submission names the same swarm, or random when it has none.
pub fn swarm_id_for(mission_id: Option<&str>) -> String {
    const NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x5f1c_2a8e_7b0d_4c3e_9a61_2d4b_8e0f_a713);
    match mission_id {
        Some(id) => uuid::Uuid::new_v5(&NAMESPACE, id.as_bytes()).to_string(),
        None => uuid::Uuid::new_v4().to_string(),
    }
}

/// Where a mission is in the boss's hands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MissionStatus {
    /// Recorded, waiting for a plan.
    Accepted,
    /// Planned and handed to the managers.
    Deployed,
    /// The final report is rendered.
    Reported,
    /// Planning failed.
    Failed,
}

/// What the boss keeps of a mission (stream `MISSIONS`, bucket `missions`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MissionRecord {
    /// The swarm.
    pub swarm_id: String,
    /// The mission as accepted.
    pub request: MissionRequest,
    /// Where it is.
    pub status: MissionStatus,
    /// When it was accepted.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub accepted_at: DateTime<Utc>,
    /// When this record last changed.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub updated_at: DateTime<Utc>,
    /// The deployed plan.
    #[serde(default)]
    pub plan: Option<SwarmDeploymentPlan>,
    /// How the swarm went, once reported.
    #[serde(default)]
    pub overall_status: Option<SwarmStatus>,
    /// Name of the HTML report in the `reports` object store.
    #[serde(default)]
    pub report_object: Option<String>,
    /// Path of the HTML report on the boss's disk.
    #[serde(default)]
    pub report_file: Option<String>,
    /// Why planning failed.
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// The parent task, for a child swarm's mission ([`crate::hierarchy`]).
    /// Only the boss sets it, from a sub-manager's assignment: a mission
    /// sent to `boss.missions` never has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::hierarchy::ParentTask>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(ct: Option<&str>, bytes: &[u8]) -> Result<MissionRequest, ErrorBody> {
        parse_mission(ct, None, bytes, &Limits::default())
            .map(|(r, _)| r)
            .map_err(|(e, _)| e)
    }

    #[test]
    fn formats_are_detected() {
        assert_eq!(parse(None, b"count words").unwrap().mission, "count words");
        assert_eq!(
            parse(None, br#"{"mission":"m","mission_id":"x"}"#)
                .unwrap()
                .mission_id
                .as_deref(),
            Some("x")
        );
        let mp = Codec::MsgPack.encode(&MissionRequest::text("hi")).unwrap();
        assert_eq!(parse(Some(codec::MSGPACK), &mp).unwrap().mission, "hi");
        assert_eq!(
            parse(Some("text/plain; charset=utf-8"), b"{not json")
                .unwrap()
                .mission,
            "{not json"
        );
    }

    #[test]
    fn bad_missions_get_typed_errors() {
        assert_eq!(
            parse(None, b"{\"mission\": ").unwrap_err().code,
            ErrorCode::DecodeFailed
        );
        assert_eq!(
            parse(None, br#"{"mission": 5}"#).unwrap_err().code,
            ErrorCode::DecodeFailed
        );
        assert_eq!(
            parse(None, br#"{"mision": "typo"}"#).unwrap_err().code,
            ErrorCode::DecodeFailed
        );
        assert_eq!(
            parse(None, &[0xff, 0xfe, 0x00, 0x81]).unwrap_err().code,
            ErrorCode::DecodeFailed
        );
        assert_eq!(
            parse(None, b"   ").unwrap_err().code,
            ErrorCode::ValidationFailed
        );
        assert_eq!(
            parse(None, br#"{"mission":"m","protocol_version":"9.9"}"#)
                .unwrap_err()
                .code,
            ErrorCode::UnsupportedProtocol
        );
        let big = vec![b'a'; Limits::default().max_mission_bytes + 1];
        assert_eq!(
            parse(None, &big).unwrap_err().code,
            ErrorCode::PayloadTooLarge
        );
        assert_eq!(
            parse(Some("image/png"), b"x").unwrap_err().code,
            ErrorCode::ValidationFailed
        );
    }

    #[test]
    fn mission_id_fixes_the_swarm_id() {
        assert_eq!(swarm_id_for(Some("a")), swarm_id_for(Some("a")));
        assert_ne!(swarm_id_for(Some("a")), swarm_id_for(Some("b")));
        assert_ne!(swarm_id_for(None), swarm_id_for(None));
    }
}
