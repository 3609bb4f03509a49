//! Swarm to A2A and back, with no I/O: an A2A message becomes a
//! [`MissionRequest`] ([`mission_of`]), and what JetStream holds of a swarm
//! (its mission record, its state, its final report) becomes an A2A
//! [`Task`] ([`task_of`]).
//!
//! **Invariant:** the task's state says how the swarm went, never better:
//! a swarm that failed or timed out is `TASK_STATE_FAILED` with the
//! report's summary (which names the failing task and why) as the status
//! message; a swarm whose state has ended but whose final report is not
//! published yet is still `TASK_STATE_WORKING`, so a client that sees a
//! terminal state always finds the artifacts beside it.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value, json};
use swarm_common::approval::{ApprovalRecord, InputRecord};
use swarm_common::mission::{MissionRecord, MissionRequest, MissionStatus};
use swarm_common::{FinalReport, Limits, SwarmState, SwarmStatus, TaskStatus as SwarmTaskStatus};

use crate::error::{A2aError, ErrorKind};
use crate::types::{Artifact, Message, Part, Role, Task, TaskState, TaskStatus};

/// The prefix of the mission ids the gateway gives missions.
pub const MISSION_ID_PREFIX: &str = "a2a:";

/// Where a swarm the gateway started came from: the caller (the name of
/// its token; empty when the gateway takes anonymous callers), the A2A
/// context it named (empty: the swarm is its own context) and the id of the
/// message that started it.
///
/// It is kept as the mission id (`a2a:` and a JSON array of the three), so
/// a message sent again names the same swarm (the boss derives the swarm id
/// from the mission id), one caller's message ids never name another's
/// swarms, and the context survives with nothing stored beside the swarm.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    /// The caller.
    pub caller: String,
    /// The context the caller named.
    pub context_id: String,
    /// The message.
    pub message_id: String,
}

impl Origin {
    /// The mission id.
    pub fn mission_id(&self) -> String {
        let parts = [&self.caller, &self.context_id, &self.message_id];
        format!(
            "{MISSION_ID_PREFIX}{}",
            serde_json::to_string(&parts).unwrap_or_default()
        )
    }

    /// The context of swarm `swarm_id` started from `mission_id`: the one
    /// its first message named, else the swarm itself.
    pub fn context_of(mission_id: Option<&str>, swarm_id: &str) -> String {
        mission_id
            .and_then(Origin::of_mission_id)
            .map(|o| o.context_id)
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| swarm_id.to_owned())
    }

    /// The origin a mission id records, if the gateway made it.
    pub fn of_mission_id(mission_id: &str) -> Option<Origin> {
        let rest = mission_id.strip_prefix(MISSION_ID_PREFIX)?;
        let [caller, context_id, message_id]: [String; 3] = serde_json::from_str(rest).ok()?;
        Some(Origin {
            caller,
            context_id,
            message_id,
        })
    }
}

/// The mission an A2A message asks for.
///
/// Text parts are the mission's text (joined by blank lines). One data part
/// may hold a mission request as `boss.missions` takes it
/// (`{"mission": ..., "plan": {...}, "max_execution_seconds": ...}`); text
/// parts beside it give its `mission` when it has none. Raw bytes and URLs
/// are refused: the workers read no attachments. The mission id records
/// the message's [`Origin`].
pub fn mission_of(
    message: &Message,
    caller: &str,
    limits: &Limits,
) -> Result<MissionRequest, A2aError> {
    if message.message_id.trim().is_empty() {
        return Err(A2aError::invalid_params("message.messageId is required"));
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid_params(
            "message.parts: at least one part is required",
        ));
    }
    let mut texts = Vec::new();
    let mut data: Option<&Value> = None;
    for (i, part) in message.parts.iter().enumerate() {
        if part.contents() != 1 {
            return Err(A2aError::invalid_params(format!(
                "message.parts[{i}] must have exactly one of text, raw, url or data"
            )));
        }
        if let Some(t) = &part.text {
            texts.push(t.as_str());
        } else if let Some(d) = &part.data {
            if data.is_some() {
                return Err(A2aError::invalid_params(
                    "message.parts: at most one data part (a mission request) is taken",
                ));
            }
            data = Some(d);
        } else {
            return Err(A2aError::new(
                ErrorKind::ContentTypeNotSupported,
                format!(
                    "message.parts[{i}]: raw bytes and URLs are not taken; send the mission as \
                     text, or a mission request as a data part"
                ),
            ));
        }
    }
    let text = texts.join("\n\n");
    let mut request = match data {
        None => {
            let mut object = Map::new();
            object.insert("mission".into(), Value::String(text.trim().to_owned()));
            object
        }
        Some(Value::Object(object)) => {
            let mut object = object.clone();
            if !object.contains_key("mission") && !text.trim().is_empty() {
                object.insert("mission".into(), Value::String(text.trim().to_owned()));
            }
            object
        }
        Some(_) => {
            return Err(A2aError::invalid_params(
                "message.parts: a data part must be a JSON object (a mission request)",
            ));
        }
    };
    // The origin is the mission id, always: a data part may not name
    // another caller's swarm.
    let origin = Origin {
        caller: caller.to_owned(),
        context_id: message.context_id.clone(),
        message_id: message.message_id.clone(),
    };
    request.insert("mission_id".into(), Value::String(origin.mission_id()));
    // The boss's own parser and checks, so what it would refuse is refused
    // here with its reason.
    let bytes = serde_json::to_vec(&Value::Object(request))
        .map_err(|e| A2aError::invalid_params(format!("message.parts: {e}")))?;
    swarm_common::mission::parse_mission(Some(swarm_common::codec::JSON), None, &bytes, limits)
        .map(|(r, _)| r)
        .map_err(|(e, _)| A2aError::invalid_params(format!("the mission: {}", e.message)))
}

/// What JetStream holds of one swarm.
#[derive(Debug, Clone, Default)]
pub struct SwarmView {
    /// The swarm.
    pub swarm_id: String,
    /// The boss's record of its mission.
    pub record: Option<MissionRecord>,
    /// The manager's state.
    pub state: Option<SwarmState>,
    /// The final report, once published.
    pub report: Option<FinalReport>,
    /// The swarm's approval requests that wait for a person.
    pub approvals: Vec<ApprovalRecord>,
    /// The swarm's questions that wait for an answer.
    pub questions: Vec<InputRecord>,
    /// Where the gateway serves the HTML report, once rendered.
    pub report_url: Option<String>,
}

impl SwarmView {
    /// Where the swarm came from, if the gateway started it.
    pub fn origin(&self) -> Option<Origin> {
        self.record
            .as_ref()
            .and_then(|r| r.request.mission_id.as_deref())
            .and_then(Origin::of_mission_id)
    }

    /// The task's context: the one its first message named, else the swarm.
    pub fn context_id(&self) -> String {
        Origin::context_of(
            self.record
                .as_ref()
                .and_then(|r| r.request.mission_id.as_deref()),
            &self.swarm_id,
        )
    }
}

/// How much of a task to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Most history messages (`None`: all).
    pub history_length: Option<usize>,
    /// Whether to include the artifacts.
    pub artifacts: bool,
}

impl Shape {
    /// Everything: what `GetTask` and `SendMessage` show unless told less.
    pub const FULL: Shape = Shape {
        history_length: None,
        artifacts: true,
    };
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A message of the swarm's (the agent's) on task `swarm_id` in `context_id`.
pub fn agent_message(swarm_id: &str, context_id: &str, id: &str, text: String) -> Message {
    Message {
        message_id: format!("{swarm_id}-{id}"),
        context_id: context_id.to_owned(),
        task_id: swarm_id.to_owned(),
        role: Role::Agent,
        parts: vec![Part::text(text)],
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    }
}

/// The A2A state, the agent's sentence on it and the time it was reached.
fn status_of(view: &SwarmView) -> (TaskState, String, Option<DateTime<Utc>>) {
    if let Some(report) = &view.report {
        let (state, word) = match report.overall_status {
            SwarmStatus::Completed => (TaskState::Completed, "completed"),
            SwarmStatus::Failed => (TaskState::Failed, "failed"),
            SwarmStatus::TimedOut => (TaskState::Failed, "timed out"),
            SwarmStatus::Cancelled => (TaskState::Canceled, "was cancelled"),
            // A report is only published for an ended swarm; a running one
            // would be a bug elsewhere, shown as what it says.
            SwarmStatus::Running => (TaskState::Working, "is running"),
        };
        let mut text = format!("The mission {word}. {}", report.summary.trim());
        if let Some(reason) = view.state.as_ref().and_then(|s| s.cancel_reason.as_ref()) {
            text.push_str(&format!(" (cancelled: {reason})"));
        }
        return (state, text, Some(report.completed_at));
    }
    if let Some(state) = &view.state {
        let done = state
            .tasks
            .iter()
            .filter(|t| {
                matches!(
                    t.status,
                    SwarmTaskStatus::Completed | SwarmTaskStatus::Skipped
                )
            })
            .count();
        let total = state.tasks.len();
        if state.status.is_terminal() {
            return (
                TaskState::Working,
                format!(
                    "The swarm has ended ({:?}); its final report is being published.",
                    state.status
                ),
                state.completed_at,
            );
        }
        if let Some(q) = view.questions.first() {
            let title = state
                .tasks
                .iter()
                .find(|t| t.definition.task_id == q.task_id)
                .map_or("", |t| t.definition.title.as_str());
            return (
                TaskState::InputRequired,
                format!(
                    "Task {} ({title}) asks: {} (answer it by sending a message on this task)",
                    q.task_id, q.question
                ),
                Some(q.asked_at),
            );
        }
        if let Some(a) = view.approvals.first() {
            return (
                TaskState::InputRequired,
                format!(
                    "Task {} waits for approval to call {} with {}; send a message on this task \
                     saying \"approve\" or \"deny\" (a reason may follow).",
                    a.task_id.as_deref().unwrap_or("?"),
                    a.tool,
                    a.arguments
                ),
                Some(a.requested_at),
            );
        }
        return (
            TaskState::Working,
            format!("{done} of {total} tasks done."),
            Some(state.started_at),
        );
    }
    match &view.record {
        Some(r) if r.status == MissionStatus::Failed => {
            let why = r
                .error
                .as_ref()
                .map_or("no reason recorded", |e| e.message.as_str());
            (
                TaskState::Failed,
                format!("The mission failed before it started: {why}"),
                Some(r.updated_at),
            )
        }
        Some(r) if r.status == MissionStatus::Deployed => (
            TaskState::Working,
            "The boss deployed the swarm; a manager is taking it.".into(),
            Some(r.updated_at),
        ),
        Some(r) => (
            TaskState::Submitted,
            "The boss accepted the mission and is planning it.".into(),
            Some(r.updated_at),
        ),
        None => (TaskState::Submitted, "Submitted.".into(), None),
    }
}

/// The artifacts of a reported swarm: the summary, each task's accepted
/// result, the whole final report as JSON, and the HTML report's URL once
/// the boss has rendered it.
pub fn artifacts_of(report: &FinalReport, report_url: Option<&str>) -> Vec<Artifact> {
    let mut summary = report.summary.trim().to_owned();
    for insight in &report.insights {
        summary.push_str(&format!("\n- {insight}"));
    }
    let mut out = vec![Artifact {
        artifact_id: "summary".into(),
        name: "Summary".into(),
        description: format!("How the mission went: {:?}", report.overall_status),
        parts: vec![Part::text(summary)],
        metadata: None,
    }];
    for t in &report.task_results {
        if t.result.is_empty() {
            continue;
        }
        let mut metadata = Map::new();
        metadata.insert("status".into(), json!(format!("{:?}", t.status)));
        metadata.insert("persona".into(), json!(t.assigned_to));
        metadata.insert("attempts".into(), json!(t.attempts));
        metadata.insert("resultTruncated".into(), json!(t.result_truncated));
        out.push(Artifact {
            artifact_id: format!("task-{}", t.task_id),
            name: t.title.clone(),
            description: format!("The result of task {}", t.task_id),
            parts: vec![Part::text(t.result.clone())],
            metadata: Some(metadata),
        });
    }
    let report_json = serde_json::to_value(report).unwrap_or(Value::Null);
    out.push(Artifact {
        artifact_id: "final-report".into(),
        name: "Final report".into(),
        description: "The swarm's FinalReport as the manager published it".into(),
        parts: vec![Part::data(report_json)],
        metadata: None,
    });
    if let Some(url) = report_url {
        out.push(Artifact {
            artifact_id: "report-html".into(),
            name: "HTML report".into(),
            description: "The swarm's report as one self-contained HTML page".into(),
            parts: vec![Part {
                url: Some(url.to_owned()),
                media_type: "text/html".into(),
                filename: "report.html".into(),
                ..Part::default()
            }],
            metadata: None,
        });
    }
    out
}

/// The A2A task of a swarm.
pub fn task_of(view: &SwarmView, shape: Shape) -> Task {
    let id = view.swarm_id.clone();
    let context_id = view.context_id();
    let (state, text, at) = status_of(view);
    let status_message = agent_message(&id, &context_id, "status", text);
    let mission = view
        .record
        .as_ref()
        .map(|r| r.request.mission.clone())
        .or_else(|| view.state.as_ref().map(|s| s.mission.clone()));
    let mut history = Vec::new();
    if let Some(mission) = mission {
        history.push(Message {
            message_id: view
                .origin()
                .map_or_else(|| format!("{id}-mission"), |o| o.message_id),
            context_id: context_id.clone(),
            task_id: id.clone(),
            role: Role::User,
            parts: vec![Part::text(mission)],
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        });
    }
    history.push(status_message.clone());
    let history = match shape.history_length {
        Some(0) => None,
        Some(n) => Some(history.split_off(history.len().saturating_sub(n))),
        None => Some(history),
    };
    let artifacts = shape
        .artifacts
        .then(|| match (&view.report, state.is_terminal()) {
            (Some(report), true) => artifacts_of(report, view.report_url.as_deref()),
            _ => Vec::new(),
        });
    let mut metadata = Map::new();
    if let Some(s) = &view.state {
        metadata.insert("swarmStatus".into(), json!(format!("{:?}", s.status)));
        metadata.insert("tasksTotal".into(), json!(s.tasks.len()));
    } else if let Some(r) = &view.report {
        metadata.insert(
            "swarmStatus".into(),
            json!(format!("{:?}", r.overall_status)),
        );
    }
    Task {
        id,
        context_id,
        status: TaskStatus {
            state,
            message: Some(status_message),
            timestamp: at.map(stamp),
        },
        artifacts,
        history,
        metadata: (!metadata.is_empty()).then_some(metadata),
    }
}

/// The swarm statuses a `ListTasks` status filter may match (before the
/// finer look of [`task_of`] for the states a running swarm can be in).
pub fn swarm_statuses_for(state: TaskState) -> Vec<SwarmStatus> {
    match state {
        TaskState::Unspecified => Vec::new(),
        TaskState::Submitted | TaskState::Working | TaskState::InputRequired => {
            vec![SwarmStatus::Running]
        }
        TaskState::Completed => vec![SwarmStatus::Completed],
        TaskState::Failed => vec![SwarmStatus::Failed, SwarmStatus::TimedOut],
        TaskState::Canceled => vec![SwarmStatus::Cancelled],
        // Nothing the gateway does ends in these.
        TaskState::Rejected | TaskState::AuthRequired => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use swarm_common::TaskOutcome;

    fn message(parts: Vec<Part>) -> Message {
        Message {
            message_id: "m-1".into(),
            context_id: String::new(),
            task_id: String::new(),
            role: Role::User,
            parts,
            metadata: None,
            extensions: Vec::new(),
            reference_task_ids: Vec::new(),
        }
    }

    #[test]
    fn a_text_part_is_a_text_mission_named_by_the_message_id() {
        let r = mission_of(
            &message(vec![Part::text("Count the words in README.md")]),
            "",
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(r.mission, "Count the words in README.md");
        let origin = Origin::of_mission_id(r.mission_id.as_deref().unwrap()).unwrap();
        assert_eq!(origin.message_id, "m-1");
        assert_eq!(origin.caller, "");
        assert!(r.plan.is_none());
    }

    #[test]
    fn a_data_part_carries_a_plan_and_the_text_names_it() {
        let plan = json!({
            "plan": {
                "manager_directive": "d",
                "workers": [{"name": "analyst", "role": "r", "system_prompt": "p", "tools": []}],
                "tasks": [{"task_id": "a", "title": "A", "description": "echo \"x\"", "assigned_to": "analyst"}]
            },
            "max_execution_seconds": 30
        });
        let r = mission_of(
            &message(vec![Part::text("Echo x"), Part::data(plan)]),
            "ops",
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(r.mission, "Echo x");
        assert_eq!(r.max_execution_seconds, Some(30));
        assert_eq!(r.plan.unwrap().tasks[0].task_id, "a");
        assert_eq!(
            Origin::of_mission_id(r.mission_id.as_deref().unwrap())
                .unwrap()
                .caller,
            "ops"
        );
    }

    #[test]
    fn bad_messages_get_the_errors_of_the_spec() {
        let limits = Limits::default();
        let kind = |parts: Vec<Part>| mission_of(&message(parts), "", &limits).unwrap_err().kind;
        assert_eq!(kind(vec![]), ErrorKind::InvalidParams);
        let url = Part {
            url: Some("https://example.com/x.pdf".into()),
            ..Part::default()
        };
        assert_eq!(kind(vec![url]), ErrorKind::ContentTypeNotSupported);
        assert_eq!(kind(vec![Part::default()]), ErrorKind::InvalidParams);
        let two = Part {
            text: Some("a".into()),
            data: Some(json!({})),
            ..Part::default()
        };
        assert_eq!(kind(vec![two]), ErrorKind::InvalidParams);
        assert_eq!(
            kind(vec![Part::data(json!([1, 2]))]),
            ErrorKind::InvalidParams
        );
        assert_eq!(kind(vec![Part::text("   ")]), ErrorKind::InvalidParams);
        // What the boss would refuse, with its reason.
        let e = mission_of(
            &message(vec![Part::data(
                json!({"mission": "m", "max_execution_seconds": 0}),
            )]),
            "",
            &limits,
        )
        .unwrap_err();
        assert!(e.message.contains("max_execution_seconds"), "{}", e.message);
        let mut no_id = message(vec![Part::text("x")]);
        no_id.message_id.clear();
        assert_eq!(
            mission_of(&no_id, "", &limits).unwrap_err().kind,
            ErrorKind::InvalidParams
        );
    }

    fn report(status: SwarmStatus, summary: &str) -> FinalReport {
        let at = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05.250Z")
            .unwrap()
            .with_timezone(&Utc);
        FinalReport {
            skills: Default::default(),
            trace_id: None,
            overall_status: status,
            mission: "m".into(),
            summary: summary.into(),
            insights: vec![],
            task_results: vec![TaskOutcome {
                skills: Default::default(),
                task_id: "t1".into(),
                title: "Count words".into(),
                description: "d".into(),
                assigned_to: "text-analyst".into(),
                dependencies: vec![],
                status: SwarmTaskStatus::Completed,
                result: "42 words".into(),
                result_truncated: false,
                result_seq: None,
                attempts: 1,
                revisions: 0,
                assigned_at: None,
                started_at: None,
                completed_at: None,
                error: None,
                gate_verdicts: vec![],
                provider: "offline".into(),
                child_swarm: None,
                asked_by: None,
            }],
            metrics: Default::default(),
            started_at: at,
            completed_at: at,
        }
    }

    fn view(report: Option<FinalReport>) -> SwarmView {
        SwarmView {
            swarm_id: "s-1".into(),
            record: None,
            state: None,
            report,
            approvals: vec![],
            questions: vec![],
            report_url: None,
        }
    }

    #[test]
    fn a_completed_swarm_is_a_completed_task_with_its_results_as_artifacts() {
        let t = task_of(
            &view(Some(report(SwarmStatus::Completed, "All done."))),
            Shape::FULL,
        );
        assert_eq!(t.status.state, TaskState::Completed);
        assert_eq!(
            t.status.timestamp.as_deref(),
            Some("2026-01-02T03:04:05.250Z")
        );
        let artifacts = t.artifacts.clone().unwrap();
        let ids: Vec<&str> = artifacts.iter().map(|a| a.artifact_id.as_str()).collect();
        assert_eq!(ids, ["summary", "task-t1", "final-report"]);
        assert_eq!(artifacts[1].parts[0].text.as_deref(), Some("42 words"));
        assert_eq!(
            artifacts[2].parts[0].data.as_ref().unwrap()["overall_status"],
            "Completed"
        );
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["contextId"], "s-1");
        assert_eq!(json["status"]["state"], "TASK_STATE_COMPLETED");
        assert_eq!(json["status"]["message"]["role"], "ROLE_AGENT");
    }

    #[test]
    fn failed_and_timed_out_swarms_are_failed_tasks_with_the_reason() {
        for status in [SwarmStatus::Failed, SwarmStatus::TimedOut] {
            let t = task_of(
                &view(Some(report(status, "Task t2 failed: no such file."))),
                Shape::FULL,
            );
            assert_eq!(t.status.state, TaskState::Failed, "{status:?}");
            let said = t.status.message.unwrap().parts[0].text.clone().unwrap();
            assert!(said.contains("Task t2 failed: no such file."), "{said}");
        }
        let t = task_of(
            &view(Some(report(SwarmStatus::Cancelled, "Cancelled."))),
            Shape::FULL,
        );
        assert_eq!(t.status.state, TaskState::Canceled);
    }

    #[test]
    fn a_failed_planning_is_a_failed_task_and_an_ended_swarm_without_report_still_works() {
        let now = Utc::now();
        let mut record = MissionRecord {
            swarm_id: "s-1".into(),
            request: MissionRequest::text("do it"),
            status: MissionStatus::Failed,
            accepted_at: now,
            updated_at: now,
            plan: None,
            overall_status: None,
            report_object: None,
            report_file: None,
            error: Some(swarm_common::ErrorBody::new(
                swarm_common::ErrorCode::ValidationFailed,
                "no persona for task t1",
            )),
            parent: None,
        };
        let mut v = view(None);
        v.record = Some(record.clone());
        let t = task_of(&v, Shape::FULL);
        assert_eq!(t.status.state, TaskState::Failed);
        assert!(
            t.status.message.unwrap().parts[0]
                .text
                .as_deref()
                .unwrap()
                .contains("no persona for task t1")
        );
        assert_eq!(t.artifacts, Some(vec![]));
        let history = t.history.unwrap();
        assert_eq!(history[0].role, Role::User);
        assert_eq!(history[0].parts[0].text.as_deref(), Some("do it"));

        record.status = MissionStatus::Accepted;
        v.record = Some(record);
        assert_eq!(task_of(&v, Shape::FULL).status.state, TaskState::Submitted);
    }

    #[test]
    fn history_length_and_artifacts_shape_the_answer() {
        let v = view(Some(report(SwarmStatus::Completed, "ok")));
        let none = task_of(
            &v,
            Shape {
                history_length: Some(0),
                artifacts: false,
            },
        );
        assert!(none.history.is_none() && none.artifacts.is_none());
        let json = serde_json::to_value(&none).unwrap();
        assert!(json.get("artifacts").is_none() && json.get("history").is_none());
        let one = task_of(
            &v,
            Shape {
                history_length: Some(1),
                artifacts: true,
            },
        );
        assert_eq!(one.history.unwrap()[0].role, Role::Agent);
    }

    #[test]
    fn the_origin_round_trips_through_the_mission_id_whatever_its_characters() {
        let o = Origin {
            caller: "ops".into(),
            context_id: "ctx:\"1\"]".into(),
            message_id: "m,2".into(),
        };
        assert_eq!(Origin::of_mission_id(&o.mission_id()), Some(o.clone()));
        assert_eq!(Origin::of_mission_id("order-17"), None);
        assert_eq!(Origin::of_mission_id("a2a:[\"x\"]"), None);
        // A data part cannot name another caller's swarm.
        let m = mission_of(
            &message(vec![Part::data(
                json!({"mission": "m", "mission_id": o.mission_id()}),
            )]),
            "intruder",
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(
            Origin::of_mission_id(m.mission_id.as_deref().unwrap())
                .unwrap()
                .caller,
            "intruder"
        );
    }

    #[test]
    fn status_filters_map_onto_swarm_statuses() {
        assert_eq!(
            swarm_statuses_for(TaskState::Failed),
            [SwarmStatus::Failed, SwarmStatus::TimedOut]
        );
        assert_eq!(
            swarm_statuses_for(TaskState::Working),
            [SwarmStatus::Running]
        );
        assert!(swarm_statuses_for(TaskState::Rejected).is_empty());
    }
}
