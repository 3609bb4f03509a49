//! The A2A v1.0 data model the gateway reads and writes, in ProtoJSON
//! (camelCase fields, enums as their proto names), hand-written from
//! `specification/a2a.proto` for the messages the gateway serves.
//!
//! Requests ignore fields they do not know (the spec asks servers to, for
//! forward compatibility); responses leave out what is unset, as ProtoJSON
//! does.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Who sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Role {
    /// Unset.
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The agent (here: the swarm).
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // ProtoJSON parsers take an enum's name or its number.
        match ProtoEnum::deserialize(d)? {
            ProtoEnum::Name(n) => match n.as_str() {
                "ROLE_UNSPECIFIED" => Ok(Role::Unspecified),
                "ROLE_USER" => Ok(Role::User),
                "ROLE_AGENT" => Ok(Role::Agent),
                _ => Err(serde::de::Error::custom(format!("unknown role {n:?}"))),
            },
            ProtoEnum::Number(0) => Ok(Role::Unspecified),
            ProtoEnum::Number(1) => Ok(Role::User),
            ProtoEnum::Number(2) => Ok(Role::Agent),
            ProtoEnum::Number(n) => Err(serde::de::Error::custom(format!("unknown role {n}"))),
        }
    }
}

/// An enum value as ProtoJSON may spell it.
#[derive(Deserialize)]
#[serde(untagged)]
enum ProtoEnum {
    Name(String),
    Number(i64),
}

/// A task's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TaskState {
    /// Unset (a filter that filters nothing).
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    Unspecified,
    /// Accepted, not yet started.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Being worked on.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Done, every part of it.
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Ended without doing what was asked.
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Cancelled before it ended.
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Waits for the client's (a person's) input.
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// The agent declined the task.
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Waits for authentication.
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    const ALL: [(TaskState, &'static str); 9] = [
        (TaskState::Unspecified, "TASK_STATE_UNSPECIFIED"),
        (TaskState::Submitted, "TASK_STATE_SUBMITTED"),
        (TaskState::Working, "TASK_STATE_WORKING"),
        (TaskState::Completed, "TASK_STATE_COMPLETED"),
        (TaskState::Failed, "TASK_STATE_FAILED"),
        (TaskState::Canceled, "TASK_STATE_CANCELED"),
        (TaskState::InputRequired, "TASK_STATE_INPUT_REQUIRED"),
        (TaskState::Rejected, "TASK_STATE_REJECTED"),
        (TaskState::AuthRequired, "TASK_STATE_AUTH_REQUIRED"),
    ];

    /// The state of a proto name or number.
    pub fn parse(s: &str) -> Option<TaskState> {
        let s = s.trim();
        Self::ALL
            .iter()
            .position(|(_, name)| *name == s)
            .or_else(|| s.parse::<usize>().ok().filter(|n| *n < Self::ALL.len()))
            .map(|i| Self::ALL[i].0)
    }

    /// Whether the task can change no more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }
}

impl<'de> Deserialize<'de> for TaskState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = match ProtoEnum::deserialize(d)? {
            ProtoEnum::Name(n) => n,
            ProtoEnum::Number(n) => n.to_string(),
        };
        TaskState::parse(&raw)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown task state {raw:?}")))
    }
}

/// A piece of content: exactly one of text, raw bytes (base64), a URL or
/// JSON data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Bytes, base64 in JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// A URL of the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Any JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Extra information about the part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// A file name for the content.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub filename: String,
    /// The content's media type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part {
            text: Some(text.into()),
            media_type: "text/plain".into(),
            ..Part::default()
        }
    }

    /// A JSON data part.
    pub fn data(value: Value) -> Part {
        Part {
            data: Some(value),
            media_type: "application/json".into(),
            ..Part::default()
        }
    }

    /// How many of the oneof's members are set (a valid part has one).
    pub fn contents(&self) -> usize {
        usize::from(self.text.is_some())
            + usize::from(self.raw.is_some())
            + usize::from(self.url.is_some())
            + usize::from(self.data.is_some())
    }
}

/// One turn of communication.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The sender's id for the message.
    #[serde(default)]
    pub message_id: String,
    /// The context it belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    /// The task it belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    /// Who sent it.
    #[serde(default = "unspecified_role")]
    pub role: Role,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Extensions it uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// Tasks it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

fn unspecified_role() -> Role {
    Role::Unspecified
}

/// A task's state, with the agent's word on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// What the agent says of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When it was reached (ISO 8601, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Its id within the task.
    pub artifact_id: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// What it is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its content.
    pub parts: Vec<Part>,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A unit of work: here, one swarm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The task (the swarm id).
    pub id: String,
    /// Its context (the swarm id too).
    pub context_id: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// Its outputs; absent when not asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<Artifact>>,
    /// The messages of the task; absent when not asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<Message>>,
    /// Extra information.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// How a `SendMessage` should be carried out.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    /// Media types the client takes in answers.
    #[serde(default)]
    pub accepted_output_modes: Vec<String>,
    /// A push notification config for the task.
    #[serde(default)]
    pub task_push_notification_config: Option<TaskPushNotificationConfig>,
    /// Most history messages in the answer.
    #[serde(default)]
    pub history_length: Option<i32>,
    /// Answer at once instead of waiting for the task to end.
    #[serde(default)]
    pub return_immediately: bool,
}

/// `SendMessage`'s request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// A tenant (the gateway serves none).
    #[serde(default)]
    pub tenant: String,
    /// The message.
    pub message: Message,
    /// How to carry it out.
    #[serde(default)]
    pub configuration: Option<SendMessageConfiguration>,
    /// Extra information.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// `GetTask`'s request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequest {
    /// A tenant (the gateway serves none).
    #[serde(default)]
    pub tenant: String,
    /// The task.
    pub id: String,
    /// Most history messages in the answer.
    #[serde(default)]
    pub history_length: Option<i32>,
}

/// `ListTasks`'s request.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    /// A tenant (the gateway serves none).
    #[serde(default)]
    pub tenant: String,
    /// Only the tasks of this context.
    #[serde(default)]
    pub context_id: String,
    /// Only tasks in this state.
    #[serde(default)]
    pub status: Option<TaskState>,
    /// Most tasks per page.
    #[serde(default)]
    pub page_size: Option<i32>,
    /// Where the page starts (a previous answer's `nextPageToken`).
    #[serde(default)]
    pub page_token: String,
    /// Most history messages per task.
    #[serde(default)]
    pub history_length: Option<i32>,
    /// Only tasks whose status changed after this time.
    #[serde(default)]
    pub status_timestamp_after: Option<String>,
    /// Whether to include each task's artifacts.
    #[serde(default)]
    pub include_artifacts: Option<bool>,
}

/// `ListTasks`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    /// The page.
    pub tasks: Vec<Task>,
    /// The next page's token; empty on the last page.
    pub next_page_token: String,
    /// The page size used.
    pub page_size: i32,
    /// Matching tasks over every page.
    pub total_size: i32,
}

/// `CancelTask`'s request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskRequest {
    /// A tenant (the gateway serves none).
    #[serde(default)]
    pub tenant: String,
    /// The task.
    pub id: String,
    /// Extra information.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
}

/// `SendMessage`'s answer: the task (the gateway never answers with a bare
/// message).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendMessageResponse {
    /// The task the message started.
    pub task: Task,
}

/// `SubscribeToTask`'s request (and `GetExtendedAgentCard`'s, which has
/// only the tenant).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribeToTaskRequest {
    /// A tenant (the gateway serves none).
    #[serde(default)]
    pub tenant: String,
    /// The task.
    #[serde(default)]
    pub id: String,
}

/// How the gateway authenticates to a webhook: `Authorization: <scheme>
/// <credentials>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationInfo {
    /// An HTTP authentication scheme (`Bearer`, `Basic`, ...).
    pub scheme: String,
    /// Its credentials.
    #[serde(default)]
    pub credentials: String,
}

/// A webhook the gateway posts a task's updates to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    /// A tenant (the gateway serves none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// The config's id (the task's id when none is given).
    #[serde(default)]
    pub id: String,
    /// The task.
    #[serde(default)]
    pub task_id: String,
    /// The webhook.
    pub url: String,
    /// A token sent back in `X-A2A-Notification-Token`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// How to authenticate to the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationInfo>,
}

/// `GetTaskPushNotificationConfig`'s and `DeleteTaskPushNotificationConfig`'s
/// request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfigRequest {
    /// A tenant (the gateway serves none).
    #[serde(default)]
    pub tenant: String,
    /// The task.
    pub task_id: String,
    /// The config.
    pub id: String,
}

/// `ListTaskPushNotificationConfigs`'s request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTaskPushNotificationConfigsRequest {
    /// A tenant (the gateway serves none).
    #[serde(default)]
    pub tenant: String,
    /// The task.
    pub task_id: String,
    /// Most configs per page (a task has few: every one is on the first).
    #[serde(default)]
    pub page_size: Option<i32>,
    /// A page token (there is only ever one page).
    #[serde(default)]
    pub page_token: String,
}

/// `ListTaskPushNotificationConfigs`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTaskPushNotificationConfigsResponse {
    /// The task's configs.
    pub configs: Vec<TaskPushNotificationConfig>,
    /// Always empty: there is one page.
    pub next_page_token: String,
}

/// A change of a task's status, as a stream sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its context.
    pub context_id: String,
    /// Its new status.
    pub status: TaskStatus,
    /// Which swarm task the change concerns, and how far it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// An artifact of a task, as a stream sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its context.
    pub context_id: String,
    /// The artifact, whole.
    pub artifact: Artifact,
    /// Whether it adds to an artifact sent before (never: each is sent whole).
    #[serde(default)]
    pub append: bool,
    /// Whether it is the artifact's last chunk (always: each is sent whole).
    #[serde(default)]
    pub last_chunk: bool,
}

/// One event of a stream: exactly one member is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    /// The task as it stands (the first event of every stream).
    Task(Task),
    /// A status change.
    StatusUpdate(TaskStatusUpdateEvent),
    /// An artifact.
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn enums_are_read_by_name_or_number_and_written_by_name() {
        let m: Message = serde_json::from_value(serde_json::json!({
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]
        }))
        .unwrap();
        assert_eq!(m.role, Role::User);
        let m: Message =
            serde_json::from_value(serde_json::json!({"messageId": "m1", "role": 2})).unwrap();
        assert_eq!(m.role, Role::Agent);
        assert!(
            serde_json::from_value::<Message>(serde_json::json!({"role": "ROLE_BOSS"})).is_err()
        );
        assert_eq!(
            serde_json::to_value(TaskState::InputRequired).unwrap(),
            "TASK_STATE_INPUT_REQUIRED"
        );
        assert_eq!(TaskState::parse("3"), Some(TaskState::Completed));
        assert_eq!(TaskState::parse("TASK_STATE_RUNNING"), None);
        assert_eq!(TaskState::parse("9"), None);
    }

    #[test]
    fn unknown_fields_are_ignored_and_unset_ones_left_out() {
        let r: SendMessageRequest = serde_json::from_value(serde_json::json!({
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "t"}], "future": 1},
            "configuration": {"returnImmediately": true, "blocking": false},
            "somethingNew": true
        }))
        .unwrap();
        assert!(r.configuration.unwrap().return_immediately);
        let json = serde_json::to_value(Part::text("x")).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"text": "x", "mediaType": "text/plain"})
        );
    }
}
