//! The A2AP messages: the envelope, the seed's six payloads and the plan types.
//!
//! Field names are the seed's snake_case names and enums travel as strings,
//! so a peer of the original C# A2AP reads our JSON. The envelope's fields sit
//! beside the payload's fields in one flat object, as the seed's message
//! classes inherit them from one base class.
//!
//! What the seed's classes name or type differently is written both ways,
//! the seed's field beside ours, and read from either (`common/src/seed.rs`): a
//! seed peer finds its fields with its types in everything Swarm sends
//! (status fields in the seed's five values, our finer status beside them),
//! and Swarm reads what a seed peer sends (`common/tests/seed.rs` checks
//! both directions).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::codec::{Codec, CodecError};
use crate::error::{ErrorBody, ErrorCode};
use crate::gates::GateSpec;
use crate::limits::Limits;
use crate::seed;

/// The kind of an A2AP message, written as the variant's name
/// (`"ProgressUpdate"`); the snake_case spelling (`"progress_update"`) is read
/// too, for peers whose JSON policy lower-cases enums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum MessageType {
    /// A plan handed from the boss to the managers.
    #[serde(alias = "swarm_deployment")]
    SwarmDeployment,
    /// A task handed from a manager to a worker pool.
    #[serde(alias = "task_assignment")]
    TaskAssignment,
    /// A worker's report of how far a task has come.
    #[serde(alias = "progress_update")]
    ProgressUpdate,
    /// A worker's result for a task.
    #[serde(alias = "result_submission")]
    ResultSubmission,
    /// A manager's one and only report for a finished swarm.
    #[serde(alias = "final_report")]
    FinalReport,
    /// A typed error.
    #[serde(alias = "error")]
    Error,
    /// A command to a swarm (cancel, ...).
    #[serde(alias = "control")]
    Control,
    /// A worker's ask for help from a collaborator persona
    /// ([`crate::collaborate`]).
    #[serde(alias = "collaboration_request")]
    CollaborationRequest,
    /// The manager's model's tasks for a task that failed for good
    /// ([`crate::replan`]).
    #[serde(alias = "replan")]
    Replan,
}

/// Where a task stands. The seed's statuses are `Pending`, `InProgress`,
/// `Completed`, `Failed` and `Cancelled`; `Assigned`, `InputRequired` and
/// `Skipped` are ours, so every status field a seed peer reads holds one
/// of the five (`TaskStatus::seed`) and ours sits beside it. Each is also read in
/// snake_case, and `Cancelled` as .NET spells it (`Canceled`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum TaskStatus {
    /// Waiting for its dependencies.
    #[serde(alias = "pending")]
    Pending,
    /// Handed to a worker pool, not yet picked up.
    #[serde(alias = "assigned")]
    Assigned,
    /// A worker is on it.
    #[serde(alias = "in_progress")]
    InProgress,
    /// The task waits for a person's answer.
    #[serde(alias = "input_required")]
    InputRequired,
    /// Done and accepted by the manager's review.
    #[serde(alias = "completed")]
    Completed,
    /// Ended without an accepted result.
    #[serde(alias = "failed")]
    Failed,
    /// Will not run: cancelled, or a dependency failed.
    #[serde(alias = "cancelled")]
    #[serde(alias = "Canceled")]
    #[serde(alias = "canceled")]
    Cancelled,
    /// Not run because its condition did not hold: an outcome, not a
    /// failure ([`crate::condition`]).
    Skipped,
}

impl TaskStatus {
    /// The one of the seed's five statuses (`Pending`, `InProgress`,
    /// `Completed`, `Failed`, `Cancelled`) that this is, for the status
    /// fields a seed peer reads: `Assigned` is still `Pending` (no worker has
    /// it), `InputRequired` still `InProgress` (the task runs, waiting), and
    /// `Skipped` is `Cancelled` (it will not run).
    pub fn seed(self) -> TaskStatus {
        match self {
            TaskStatus::Assigned => TaskStatus::Pending,
            TaskStatus::InputRequired => TaskStatus::InProgress,
            TaskStatus::Skipped => TaskStatus::Cancelled,
            other => other,
        }
    }

    /// Whether the task can change no more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed
                | TaskStatus::Failed
                | TaskStatus::Cancelled
                | TaskStatus::Skipped
        )
    }
}

/// Who an agent is in the hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AgentRole {
    /// Plans teams and renders reports.
    Boss,
    /// Runs a swarm's task graph.
    Manager,
    /// Executes tasks.
    Worker,
    /// A person or script using the CLI or a NATS client.
    Client,
}

/// One specialised worker persona of a plan: a prompt and tools, not a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WorkerDeploymentPlan {
    /// Unique name within the plan; tasks are `assigned_to` it. Written
    /// under the seed's name `worker_name` too, and read under either.
    #[serde(flatten, with = "seed::worker_name")]
    #[schemars(with = "seed::worker_name::Out<'static>")]
    pub name: String,
    /// What this persona specialises in.
    #[serde(default)]
    pub role: String,
    /// The system prompt the worker plays this persona with.
    #[serde(default)]
    pub system_prompt: String,
    /// Names of the tools this persona may call.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Other personas it works with.
    #[serde(default)]
    pub collaborators: Vec<String>,
    /// The worker pool whose processes execute this persona's tasks.
    #[serde(default = "default_pool")]
    pub pool: String,
    /// An outside A2A agent that does this persona's tasks instead of the
    /// worker's own agent loop: its base URL (its card is read at
    /// `<url>/.well-known/agent-card.json`). The pool's workers must allow
    /// it (`--a2a-allow`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a_url: Option<String>,
    /// The name of the worker's credential for that agent (its token is
    /// the worker's `SWARM_A2A_CREDENTIAL_<NAME>`), never the token itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub a2a_credential: Option<String>,
    /// A skill the persona needs, instead of naming a pool: its tasks go to
    /// a pool whose running workers' agent cards offer it (`swarm agents`),
    /// chosen when the swarm is deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill: Option<String>,
}

fn default_max_attempts() -> u32 {
    Limits::default().max_attempts
}

/// The pool a persona runs in when the plan names none.
pub fn default_pool() -> String {
    "general".to_string()
}

/// One task of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskDefinition {
    /// Unique within the plan; letters, digits, `-` and `_` only (it becomes a subject token).
    pub task_id: String,
    /// A short name.
    pub title: String,
    /// What to do: prose for the agent, or an explicit tool call as JSON
    /// `{"tool": "<name>", "arguments": {...}}`.
    pub description: String,
    /// The persona (`WorkerDeploymentPlan::name`) that does it.
    pub assigned_to: String,
    /// Tasks that must complete first.
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// Higher runs first among ready tasks; derived from the graph when absent.
    /// Read from any JSON number the seed's `int` may hold (a negative one
    /// is 0).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "seed::whole_number"
    )]
    pub priority: Option<u32>,
    /// The seed's estimate of how long the task takes, in minutes: kept and
    /// passed on (in the assignment's `tasks`), not scheduled by.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "seed::whole_number"
    )]
    pub estimated_minutes: Option<u32>,
    /// A tighter result size limit for this task, checked by the manager's gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<usize>,
    /// What the output must satisfy: checked by the worker (the model
    /// corrects itself) and again by the manager's review.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateSpec>,
    /// When to run, decided on the dependencies once they have all ended;
    /// the task is `Skipped` when it does not hold ([`crate::condition`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<crate::condition::Condition>,
    /// Fans the task out over a list a dependency produced: one child
    /// task per item, made from this one as a template ([`crate::map`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<crate::map::MapSpec>,
    /// A task of the plan to run in this one's place if it fails for good:
    /// held until then, skipped if this one completes. The tasks that
    /// depend on this one take the fallback's result instead, and a failure
    /// the fallback recovers does not fail the mission (the report says
    /// so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
}

impl TaskDefinition {
    /// This task with only the fields the seed's `TaskDefinition` has (id,
    /// title, description, persona, dependencies, priority, estimate): what
    /// an assignment's `tasks` carries for seed peers, without the gates,
    /// conditions and maps they would not read.
    pub fn seed_view(&self) -> TaskDefinition {
        TaskDefinition {
            task_id: self.task_id.clone(),
            title: self.title.clone(),
            description: self.description.clone(),
            assigned_to: self.assigned_to.clone(),
            dependencies: self.dependencies.clone(),
            priority: self.priority,
            estimated_minutes: self.estimated_minutes,
            max_result_bytes: None,
            gates: Vec::new(),
            condition: None,
            map: None,
            on_failure: None,
        }
    }
}

/// A mission's budget for model use; `None` is no limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MissionBudget {
    /// Most tokens (input and output) the whole mission may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Most estimated cost in US dollars the whole mission may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

impl MissionBudget {
    /// Why `tokens` and `cost_usd` spent are over budget, if they are.
    pub fn exceeded(&self, tokens: u64, cost_usd: f64) -> Option<String> {
        if let Some(max) = self.max_tokens
            && tokens > max
        {
            return Some(format!(
                "the mission's token budget is spent: {tokens} tokens used, {max} allowed"
            ));
        }
        if let Some(max) = self.max_cost_usd
            && cost_usd > max
        {
            return Some(format!(
                "the mission's cost budget is spent: ${cost_usd:.4} used, ${max:.4} allowed"
            ));
        }
        None
    }
}

/// A team for a mission: the manager's directive, worker personas and tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SwarmDeploymentPlan {
    /// What the manager is told to achieve and how to judge it.
    #[serde(default)]
    pub manager_directive: String,
    /// The worker personas.
    pub workers: Vec<WorkerDeploymentPlan>,
    /// The task graph. Empty means one task per persona, from the directive.
    #[serde(default)]
    pub tasks: Vec<TaskDefinition>,
    /// What the finished mission must show.
    #[serde(default)]
    pub success_criteria: Vec<String>,
    /// Who made the plan (`offline-planner`, `explicit`, a model name).
    #[serde(default)]
    pub planner: String,
    /// Sub-manager personas: a task assigned to one runs as a child swarm
    /// ([`crate::hierarchy`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sub_managers: Vec<crate::hierarchy::SubManagerPlan>,
    /// The seed's fields: what a plan says of the mission it serves
    /// ([`SeedPlanFields`]).
    #[serde(flatten)]
    pub seed: SeedPlanFields,
}

/// What the seed's `SwarmDeploymentPlan` says of its mission. A plan that
/// comes with these fills in what its request or deployment leaves out
/// ([`SwarmDeploymentPlan::adopt_seed_fields`]); the boss writes them in
/// every plan it deploys, so a seed peer reading the deployment finds them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SeedPlanFields {
    /// The manager the seed's boss meant the plan for. Read and not used:
    /// managers here are interchangeable replicas, one active at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager_name: Option<String>,
    /// The mission the plan was made for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_task: Option<String>,
    /// The id of the swarm the plan is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swarm_id: Option<String>,
    /// How long the swarm may run, in minutes.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "seed::whole_number"
    )]
    pub max_execution_minutes: Option<u32>,
}

impl SwarmDeploymentPlan {
    /// Takes what a seed plan says of its mission: with no directive, its
    /// `original_task` becomes the directive, so the one task per persona
    /// a plan without tasks expands to ([`crate::validate::expand_tasks`])
    /// is the mission itself. Blank seed fields are dropped.
    pub fn adopt_seed_fields(&mut self) {
        let blank = |v: &Option<String>| v.as_deref().is_some_and(|t| t.trim().is_empty());
        if blank(&self.seed.original_task) {
            self.seed.original_task = None;
        }
        if blank(&self.seed.swarm_id) {
            self.seed.swarm_id = None;
        }
        if self.manager_directive.trim().is_empty()
            && let Some(task) = &self.seed.original_task
        {
            self.manager_directive = task.clone();
        }
    }
}

/// A message a payload type can be: ties the Rust type to its [`MessageType`].
pub trait Payload: Serialize + DeserializeOwned {
    /// The message type of this payload.
    const MESSAGE_TYPE: MessageType;
}

/// Every A2AP message: the seed's envelope fields, flat beside the payload's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Envelope<T> {
    /// The A2AP version the sender wrote, `major.minor`. Any minor version
    /// of this build's major is read; a message that names none is read as
    /// `1.0`.
    #[serde(default = "crate::default_protocol_version")]
    pub protocol_version: String,
    /// Unique per message.
    pub message_id: String,
    /// When the sender made it.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub timestamp: DateTime<Utc>,
    /// The sending agent's id.
    pub sender_agent: String,
    /// The intended agent, or a role or pool name.
    pub recipient_agent: String,
    /// What the payload is.
    pub message_type: MessageType,
    /// Ties a message to the one it answers (a task id, a mission id).
    pub correlation_id: String,
    /// The swarm this message belongs to.
    pub swarm_id: String,
    /// The payload.
    #[serde(flatten)]
    pub body: T,
}

impl<T: Payload> Envelope<T> {
    /// Wraps a payload with a fresh message id and the current time.
    pub fn new(
        sender_agent: impl Into<String>,
        recipient_agent: impl Into<String>,
        swarm_id: impl Into<String>,
        correlation_id: impl Into<String>,
        body: T,
    ) -> Self {
        Self {
            protocol_version: crate::PROTOCOL_VERSION.to_string(),
            message_id: uuid::Uuid::new_v4().to_string(),
            timestamp: Utc::now(),
            sender_agent: sender_agent.into(),
            recipient_agent: recipient_agent.into(),
            message_type: T::MESSAGE_TYPE,
            correlation_id: correlation_id.into(),
            swarm_id: swarm_id.into(),
            body,
        }
    }

    /// Encodes the whole message.
    pub fn encode(&self, codec: Codec) -> Result<Vec<u8>, CodecError> {
        codec.encode(self)
    }

    /// Decodes a message and checks that it is of this type and of a protocol
    /// version this build reads.
    ///
    /// One pass over the bytes that keeps the envelope's fields and hands the
    /// others to the payload's deserializer; what it cannot take goes
    /// through two passes (the envelope's fields, skipping the payload's,
    /// then the payload's), which judge type and version first. The derived
    /// decoder of the flattened struct buffers every field in a generic tree
    /// first, at three times the cost (`cargo bench -p swarm-bench --bench
    /// codec`). A payload field may not share a name with an envelope field
    /// (on the wire they would be one field).
    pub fn decode(codec: Codec, bytes: &[u8]) -> Result<Self, ErrorBody> {
        if codec == Codec::Protobuf {
            // Protobuf becomes the JSON form first, which is then judged on
            // type and version like any other message.
            let json = crate::proto::message("Envelope")
                .ok_or_else(|| "no Envelope in proto/a2ap.proto".to_owned())
                .and_then(|desc| crate::proto::decode_json(&desc, bytes))
                .and_then(|json| serde_json::to_vec(&json).map_err(|e| e.to_string()))
                .map_err(|reason| CodecError::Decode {
                    codec: "protobuf",
                    reason,
                })?;
            return Self::decode(Codec::Json, &json);
        }
        // The usual case in one pass: the envelope's fields taken as they
        // come, the others handed straight to the payload's deserializer.
        // Anything it does not read whole, or reads as another type or
        // version, is decoded again in the two passes below, so every
        // message that is refused is refused for the same reason as before.
        if let Ok(one) = codec.decode::<one_pass::OnePass<T>>(bytes)
            && let Some(envelope) = one.envelope()
        {
            return Ok(envelope);
        }
        // The header is checked first, so that a message of an unknown
        // version or another type is refused for that reason rather than for
        // a field the payload type happens to miss.
        let head: Header = codec.decode(bytes)?;
        if !crate::protocol_supported(&head.protocol_version) {
            return Err(crate::unsupported_protocol(&head.protocol_version));
        }
        if head.message_type != T::MESSAGE_TYPE {
            return Err(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "expected a {:?} message, got {:?}",
                    T::MESSAGE_TYPE,
                    head.message_type
                ),
            ));
        }
        let body: T = codec.decode(bytes)?;
        fn required<V>(field: &str, value: Option<V>) -> Result<V, ErrorBody> {
            value.ok_or_else(|| {
                ErrorBody::new(
                    ErrorCode::DecodeFailed,
                    format!("cannot decode the message: missing field `{field}`"),
                )
            })
        }
        Ok(Envelope {
            protocol_version: head.protocol_version,
            message_type: head.message_type,
            message_id: required("message_id", head.message_id)?,
            timestamp: required("timestamp", head.timestamp)?,
            sender_agent: required("sender_agent", head.sender_agent)?,
            recipient_agent: required("recipient_agent", head.recipient_agent)?,
            correlation_id: required("correlation_id", head.correlation_id)?,
            swarm_id: required("swarm_id", head.swarm_id)?,
            body,
        })
    }
}

/// The single-pass decode of [`Envelope::decode`]: a map visitor that keeps
/// the envelope's fields and passes every other field on to the payload's
/// own deserializer, as if they were all there was.
mod one_pass {
    use std::fmt;
    use std::marker::PhantomData;

    use chrono::{DateTime, Utc};
    use serde::de::{self, DeserializeOwned, DeserializeSeed, MapAccess, Visitor};
    use serde::{Deserialize, Deserializer};

    use super::{Envelope, MessageType, Payload};

    #[derive(Deserialize)]
    #[serde(transparent)]
    struct Timestamp(#[serde(with = "crate::timestamp")] DateTime<Utc>);

    /// The envelope's fields as far as they were present.
    #[derive(Default)]
    struct Head {
        protocol_version: Option<String>,
        message_type: Option<MessageType>,
        message_id: Option<String>,
        timestamp: Option<Timestamp>,
        sender_agent: Option<String>,
        recipient_agent: Option<String>,
        correlation_id: Option<String>,
        swarm_id: Option<String>,
    }

    /// A message read in one pass.
    pub(super) struct OnePass<T> {
        head: Head,
        body: T,
    }

    impl<T: Payload> OnePass<T> {
        /// The envelope, if every field is there and it is of this type and
        /// of a version this build reads.
        pub(super) fn envelope(self) -> Option<Envelope<T>> {
            let h = self.head;
            let version = h
                .protocol_version
                .unwrap_or_else(crate::default_protocol_version);
            let message_type = h.message_type?;
            (crate::protocol_supported(&version) && message_type == T::MESSAGE_TYPE)
                .then_some(())?;
            Some(Envelope {
                protocol_version: version,
                message_type,
                message_id: h.message_id?,
                timestamp: h.timestamp?.0,
                sender_agent: h.sender_agent?,
                recipient_agent: h.recipient_agent?,
                correlation_id: h.correlation_id?,
                swarm_id: h.swarm_id?,
                body: self.body,
            })
        }
    }

    impl<'de, T: DeserializeOwned> Deserialize<'de> for OnePass<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_map(Whole(PhantomData))
        }
    }

    struct Whole<T>(PhantomData<T>);

    impl<'de, T: DeserializeOwned> Visitor<'de> for Whole<T> {
        type Value = OnePass<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an A2AP message")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            let mut head = Head::default();
            let body = T::deserialize(Rest {
                map,
                head: &mut head,
            })?;
            Ok(OnePass { head, body })
        }
    }

    /// The message's map less the envelope's fields, as a deserializer of
    /// its own for the payload.
    struct Rest<'a, A> {
        map: A,
        head: &'a mut Head,
    }

    impl<'de, A: MapAccess<'de>> Deserializer<'de> for Rest<'_, A> {
        type Error = A::Error;

        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
            visitor.visit_map(self)
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map struct enum identifier ignored_any
        }
    }

    /// A key as the format gives it: borrowed from the input or owned.
    enum Key<'de> {
        Borrowed(&'de str),
        Owned(String),
    }

    impl<'de> Deserialize<'de> for Key<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct K;
            impl<'de> Visitor<'de> for K {
                type Value = Key<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a field name")
                }
                fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                    Ok(Key::Borrowed(v))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                    Ok(Key::Owned(v.to_owned()))
                }
                fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                    Ok(Key::Owned(v))
                }
            }
            d.deserialize_str(K)
        }
    }

    impl<'de, A: MapAccess<'de>> MapAccess<'de> for Rest<'_, A> {
        type Error = A::Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, A::Error> {
            fn take<'de, A: MapAccess<'de>, V: Deserialize<'de>>(
                map: &mut A,
                slot: &mut Option<V>,
                name: &'static str,
            ) -> Result<(), A::Error> {
                if slot.is_some() {
                    return Err(de::Error::duplicate_field(name));
                }
                *slot = Some(map.next_value()?);
                Ok(())
            }
            loop {
                let Some(key) = self.map.next_key::<Key<'de>>()? else {
                    return Ok(None);
                };
                let name = match &key {
                    Key::Borrowed(s) => *s,
                    Key::Owned(s) => s.as_str(),
                };
                let (map, h) = (&mut self.map, &mut *self.head);
                match name {
                    "protocol_version" => take(map, &mut h.protocol_version, "protocol_version")?,
                    "message_type" => take(map, &mut h.message_type, "message_type")?,
                    "message_id" => take(map, &mut h.message_id, "message_id")?,
                    "timestamp" => take(map, &mut h.timestamp, "timestamp")?,
                    "sender_agent" => take(map, &mut h.sender_agent, "sender_agent")?,
                    "recipient_agent" => take(map, &mut h.recipient_agent, "recipient_agent")?,
                    "correlation_id" => take(map, &mut h.correlation_id, "correlation_id")?,
                    "swarm_id" => take(map, &mut h.swarm_id, "swarm_id")?,
                    _ => {
                        return match key {
                            Key::Borrowed(s) => seed
                                .deserialize(de::value::BorrowedStrDeserializer::new(s))
                                .map(Some),
                            Key::Owned(s) => seed
                                .deserialize(de::value::StringDeserializer::new(s))
                                .map(Some),
                        };
                    }
                }
            }
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(
            &mut self,
            seed: V,
        ) -> Result<V::Value, A::Error> {
            self.map.next_value_seed(seed)
        }
    }

    #[cfg(test)]
    mod tests {
        #![allow(clippy::unwrap_used)]

        use super::*;
        use crate::{Codec, Control, ErrorBody, ErrorCode, ErrorMessage};

        fn messages() -> (Envelope<Control>, Envelope<ErrorMessage>) {
            let cancel = Envelope::new(
                "boss",
                "manager",
                "s1",
                "s1",
                Control::Cancel {
                    reason: "asked".into(),
                },
            );
            let error = Envelope::new(
                "worker-1",
                "manager",
                "s1",
                "t1",
                ErrorMessage {
                    token: String::new(),
                    task_id: Some("t1".into()),
                    attempt: Some(2),
                    error: ErrorBody::new(ErrorCode::Timeout, "too slow"),
                },
            );
            (cancel, error)
        }

        #[test]
        fn the_usual_message_is_read_in_one_pass_as_the_two_passes_read_it() {
            let (cancel, error) = messages();
            for codec in [Codec::MsgPack, Codec::Json] {
                let bytes = cancel.encode(codec).unwrap();
                let one = codec.decode::<OnePass<Control>>(&bytes).unwrap();
                assert_eq!(one.envelope().unwrap(), cancel);
                let bytes = error.encode(codec).unwrap();
                let one = codec.decode::<OnePass<ErrorMessage>>(&bytes).unwrap();
                assert_eq!(one.envelope().unwrap(), error);
                assert_eq!(
                    Envelope::<ErrorMessage>::decode(codec, &bytes).unwrap(),
                    error
                );
            }
        }

        #[test]
        fn what_one_pass_cannot_take_is_refused_as_before() {
            let (cancel, _) = messages();
            let json = String::from_utf8(cancel.encode(Codec::Json).unwrap()).unwrap();
            // Another type: no envelope from the one pass; the two passes name the type.
            let bytes = cancel.encode(Codec::Json).unwrap();
            let one = Codec::Json.decode::<OnePass<ErrorMessage>>(&bytes);
            assert!(one.map_or(true, |o| o.envelope().is_none()));
            let e = Envelope::<ErrorMessage>::decode(Codec::Json, &bytes).unwrap_err();
            assert_eq!(e.code, ErrorCode::ValidationFailed, "{}", e.message);
            // An envelope field twice: refused by both.
            let twice = json.replacen(
                "\"swarm_id\":\"s1\"",
                "\"swarm_id\":\"s1\",\"swarm_id\":\"s2\"",
                1,
            );
            assert_ne!(twice, json);
            assert!(
                Codec::Json
                    .decode::<OnePass<Control>>(twice.as_bytes())
                    .is_err()
            );
            let e = Envelope::<Control>::decode(Codec::Json, twice.as_bytes()).unwrap_err();
            assert_eq!(e.code, ErrorCode::DecodeFailed, "{}", e.message);
            // A missing envelope field: named.
            let missing = json.replacen("\"sender_agent\":\"boss\",", "", 1);
            assert_ne!(missing, json);
            let e = Envelope::<Control>::decode(Codec::Json, missing.as_bytes()).unwrap_err();
            assert!(e.message.contains("sender_agent"), "{}", e.message);
        }

        #[test]
        fn a_message_of_our_major_is_read_whatever_its_minor_and_another_major_is_refused() {
            let (cancel, _) = messages();
            let json = String::from_utf8(cancel.encode(Codec::Json).unwrap()).unwrap();
            let with = |v: &str| {
                let out = json.replacen(
                    "\"protocol_version\":\"1.0\"",
                    &format!("\"protocol_version\":{v}"),
                    1,
                );
                assert!(out.contains(&format!("\"protocol_version\":{v}")));
                out
            };
            for codec in [Codec::Json, Codec::MsgPack] {
                let as_codec = |text: &str| {
                    let v: serde_json::Value = serde_json::from_str(text).unwrap();
                    codec.encode(&v).unwrap()
                };
                // An older or newer minor of 1, even with a field we do not know.
                for minor in ["\"1.0\"", "\"1.7\"", "\"1.12\""] {
                    let text = with(minor).replacen('{', "{\"added_in_1_7\":true,", 1);
                    let got = Envelope::<Control>::decode(codec, &as_codec(&text))
                        .unwrap_or_else(|e| panic!("{codec:?} {minor}: {}", e.message));
                    assert_eq!(got.body, cancel.body);
                    assert_eq!(format!("\"{}\"", got.protocol_version), minor);
                }
                // Another major, or no version we can parse: a typed refusal.
                for other in ["\"99.0\"", "\"2.0\"", "\"0.9\"", "\"1\"", "\"one\"", "\"\""] {
                    let e =
                        Envelope::<Control>::decode(codec, &as_codec(&with(other))).unwrap_err();
                    assert_eq!(e.code, ErrorCode::UnsupportedProtocol, "{codec:?} {other}");
                    assert!(e.message.contains("1.0"), "{}", e.message);
                }
                // No version at all: read as 1.0 (the seed's classes may send none).
                let none = json.replacen("\"protocol_version\":\"1.0\",", "", 1);
                assert_ne!(none, json);
                let got = Envelope::<Control>::decode(codec, &as_codec(&none)).unwrap();
                assert_eq!(got.protocol_version, crate::DEFAULT_PROTOCOL_VERSION);
                assert_eq!(got.body, cancel.body);
            }
        }
    }
}

/// The envelope alone, for reading the type and version of any message
/// without its payload ([`Envelope::decode`] reads it first). Only the type
/// is required here (a missing version is read as `1.0`): a message is
/// judged on its type and version before on anything it misses.
#[derive(Debug, Clone, Deserialize)]
pub struct Header {
    /// See [`Envelope::protocol_version`] (`1.0` when absent).
    #[serde(default = "crate::default_protocol_version")]
    pub protocol_version: String,
    /// See [`Envelope::message_type`].
    pub message_type: MessageType,
    /// See [`Envelope::message_id`].
    pub message_id: Option<String>,
    /// See [`Envelope::timestamp`].
    #[serde(default, with = "crate::timestamp::option")]
    pub timestamp: Option<DateTime<Utc>>,
    /// See [`Envelope::sender_agent`].
    pub sender_agent: Option<String>,
    /// See [`Envelope::recipient_agent`].
    pub recipient_agent: Option<String>,
    /// See [`Envelope::correlation_id`].
    pub correlation_id: Option<String>,
    /// See [`Envelope::swarm_id`].
    pub swarm_id: Option<String>,
}

/// A plan handed to the managers, with the mission it serves.
///
/// A seed's plan says its mission itself: when `mission` is absent it is the
/// plan's `original_task`, and when `deadline` is, `accepted_at` plus the
/// plan's `max_execution_minutes` (else the limits').
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SwarmDeployment {
    /// The mission's text.
    pub mission: String,
    /// The caller's id for the mission, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission_id: Option<String>,
    /// The team and the tasks.
    pub plan: SwarmDeploymentPlan,
    /// The limits the mission was accepted with.
    #[serde(default)]
    pub limits: Limits,
    /// The mission's budget for model use.
    #[serde(default)]
    pub budget: MissionBudget,
    /// When the boss accepted the mission.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub accepted_at: DateTime<Utc>,
    /// When the swarm must be done.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub deadline: DateTime<Utc>,
    /// The parent task this swarm runs for, when it is a child swarm
    /// ([`crate::hierarchy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<crate::hierarchy::ParentTask>,
    /// Why the boss could not plan this child swarm: the manager records it
    /// as failed with this reason, and its report answers the parent task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The mission's trace (32 lowercase hex digits), when the boss exports
    /// traces: the manager keeps it in the swarm's state and its report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The scope of the learned skills its tasks are offered and record
    /// (`None`: [`crate::skill::DEFAULT_SCOPE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_scope: Option<String>,
}

impl Payload for SwarmDeployment {
    const MESSAGE_TYPE: MessageType = MessageType::SwarmDeployment;
}

impl<'de> Deserialize<'de> for SwarmDeployment {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct OnWire {
            #[serde(default)]
            mission: Option<String>,
            #[serde(default)]
            mission_id: Option<String>,
            plan: SwarmDeploymentPlan,
            #[serde(default)]
            limits: Limits,
            #[serde(default)]
            budget: MissionBudget,
            #[serde(with = "crate::timestamp")]
            accepted_at: DateTime<Utc>,
            #[serde(default, with = "crate::timestamp::option")]
            deadline: Option<DateTime<Utc>>,
            #[serde(default)]
            parent: Option<crate::hierarchy::ParentTask>,
            #[serde(default)]
            failure: Option<String>,
            #[serde(default)]
            trace_id: Option<String>,
            #[serde(default)]
            skills_scope: Option<String>,
        }
        let mut w = OnWire::deserialize(d)?;
        w.plan.adopt_seed_fields();
        let mission = w
            .mission
            .or_else(|| w.plan.seed.original_task.clone())
            .ok_or_else(|| serde::de::Error::missing_field("mission"))?;
        let minutes = w
            .plan
            .seed
            .max_execution_minutes
            .unwrap_or(w.limits.max_execution_minutes);
        let deadline = match w.deadline {
            Some(t) => t,
            None => w
                .accepted_at
                .checked_add_signed(chrono::Duration::minutes(i64::from(minutes)))
                .ok_or_else(|| serde::de::Error::custom("the deadline is out of range"))?,
        };
        Ok(SwarmDeployment {
            mission,
            mission_id: w.mission_id,
            plan: w.plan,
            deadline,
            limits: w.limits,
            budget: w.budget,
            accepted_at: w.accepted_at,
            parent: w.parent,
            failure: w.failure,
            trace_id: w.trace_id,
            skills_scope: w.skills_scope,
        })
    }
}

/// The finished result of a dependency, handed to a task as context. The
/// result's text is the `ResultSubmission` at `result_seq` in the A2AP stream;
/// the manager also carries it in `result` when it has it at hand and it is
/// small, which spares the worker a read. An assignment stays small however
/// large its inputs are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContextRef {
    /// The dependency.
    pub task_id: String,
    /// Its title.
    pub title: String,
    /// Stream sequence of its accepted `ResultSubmission`.
    pub result_seq: u64,
    /// The result's text, when the manager sends it along; else read it at `result_seq`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// A task handed to a worker pool, with the persona to play.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskAssignment {
    /// The task.
    pub task_id: String,
    /// Its title.
    pub title: String,
    /// What to do (prose, or an explicit tool call as JSON).
    pub description: String,
    /// The persona to play.
    pub persona: WorkerDeploymentPlan,
    /// 1 for the first try; counts tries after failures.
    pub attempt: u32,
    /// 0 for the first version; counts the manager's revision requests.
    pub revision: u32,
    /// Why earlier versions were rejected, oldest first.
    #[serde(default)]
    pub feedback: Vec<String>,
    /// Results of the dependencies.
    #[serde(default)]
    pub context: Vec<ContextRef>,
    /// Most agent-loop steps.
    pub max_steps: u32,
    /// Most deliveries to workers before the task fails (a worker that dies
    /// on it each time does not get it forever).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Largest result accepted.
    pub max_result_bytes: usize,
    /// Higher is more urgent.
    #[serde(default)]
    pub priority: u32,
    /// When the swarm must be done.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub deadline: DateTime<Utc>,
    /// What the output must satisfy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateSpec>,
    /// The mission's budget for model use.
    #[serde(default)]
    pub budget: MissionBudget,
    /// Tokens the mission had used when this was assigned.
    #[serde(default)]
    pub spent_tokens: u64,
    /// Estimated cost the mission had used when this was assigned.
    #[serde(default)]
    pub spent_cost_usd: f64,
    /// The assignment's secret: its result (or the worker's `Error`) must
    /// echo it, or the manager sets that aside as forged. Only the pool's
    /// workers and the manager can read it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// For a task assigned to a sub-manager: the child swarm to run it as
    /// ([`crate::hierarchy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<crate::hierarchy::ChildSwarm>,
    /// The personas this task may ask for help ([`crate::collaborate`]):
    /// those of its persona's `collaborators` that are personas of the plan.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub collaborators: Vec<crate::collaborate::Collaborator>,
    /// The seed's list of the tasks assigned: this task, as the plan
    /// defines it. Swarm assigns one task per message and reads its own
    /// fields above; the list is for seed peers.
    #[serde(default)]
    pub tasks: Vec<TaskDefinition>,
    /// The scope of the learned skills the task is offered and records
    /// (`None`: [`crate::skill::DEFAULT_SCOPE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_scope: Option<String>,
}

impl Payload for TaskAssignment {
    const MESSAGE_TYPE: MessageType = MessageType::TaskAssignment;
}

/// How far a task has come.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProgressUpdate {
    /// The task.
    pub task_id: String,
    /// Its status now: written as `status` in the seed's five values and
    /// as `detailed_status` in ours.
    #[serde(flatten, with = "seed::status")]
    #[schemars(with = "seed::status::Out")]
    pub status: TaskStatus,
    /// 0 to 100. Read from any number (the seed's may have a fraction),
    /// rounded and held to 0-100.
    #[serde(deserialize_with = "seed::percentage")]
    pub progress_percentage: u8,
    /// What is happening, for people: written as `message` and as the
    /// seed's `progress_description`, read from either.
    #[serde(flatten, with = "seed::description")]
    #[schemars(with = "seed::description::Out<'static>")]
    pub message: String,
    /// The attempt this update belongs to (0 from a peer that does not say).
    #[serde(default)]
    pub attempt: u32,
    /// The revision this update belongs to (0 from a peer that does not say).
    #[serde(default)]
    pub revision: u32,
    /// Numbers such as steps taken, tool calls, tokens, elapsed milliseconds.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
}

impl Payload for ProgressUpdate {
    const MESSAGE_TYPE: MessageType = MessageType::ProgressUpdate;
}

/// One step of an agent loop, as recorded in a result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepRecord {
    /// 1-based step number.
    pub step: u32,
    /// The tool called, if the step called one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tool's arguments as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// What came back (the tool's output or the model's text), shortened.
    pub observation: String,
    /// Whether the step failed.
    #[serde(default)]
    pub is_error: bool,
}

/// A worker's result for one attempt and revision of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResultSubmission {
    /// The task.
    pub task_id: String,
    /// `Completed` with a result, or `Failed` with an error; written also as
    /// the seed's `final_status`.
    #[serde(flatten, with = "seed::result_status")]
    #[schemars(with = "seed::result_status::Out")]
    pub status: TaskStatus,
    /// The result text; a result that is a JSON object is written also as
    /// the seed's `structured_data`.
    #[serde(flatten, with = "seed::result_text")]
    #[schemars(with = "seed::result_text::Out<'static>")]
    pub result: String,
    /// The files the task produced (the paths its `write_file` calls
    /// wrote), as the seed's `artifacts`.
    #[serde(default)]
    pub artifacts: Vec<String>,
    /// The attempt this result is for.
    pub attempt: u32,
    /// The revision this result is for.
    pub revision: u32,
    /// The provider that produced it (`offline`, a model name).
    pub provider: String,
    /// The worker process that produced it.
    pub worker_id: String,
    /// When the worker started.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub started_at: DateTime<Utc>,
    /// When the worker finished.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub completed_at: DateTime<Utc>,
    /// The agent loop's steps.
    #[serde(default)]
    pub steps: Vec<StepRecord>,
    /// Numbers such as steps, tool calls, tokens, elapsed milliseconds.
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// Why the task failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// The verdicts of the task's gates inside the worker's loop (failures
    /// the model then corrected included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate_verdicts: Vec<GateVerdict>,
    /// The token of the assignment this answers ([`TaskAssignment::token`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// The learned skills the task was offered and those it recorded
    /// ([`crate::skill`]): the manager moves their scores by its verdict.
    #[serde(default, skip_serializing_if = "SkillsUsed::is_empty")]
    pub skills: SkillsUsed,
}

/// The learned skills a task was offered (`used`) and those it recorded
/// (`learned`), in a result, a task's state and the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillsUsed {
    /// Offered in its system prompt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used: Vec<crate::skill::SkillRef>,
    /// Recorded with `record_skill`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub learned: Vec<crate::skill::SkillRef>,
}

impl SkillsUsed {
    /// Whether it names no skill.
    pub fn is_empty(&self) -> bool {
        self.used.is_empty() && self.learned.is_empty()
    }

    /// Adds what `other` names that this does not.
    pub fn merge(&mut self, other: &SkillsUsed) {
        crate::skill::merge(&mut self.used, &other.used);
        crate::skill::merge(&mut self.learned, &other.learned);
    }

    /// The keys of every skill named, once each.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .used
            .iter()
            .chain(&self.learned)
            .map(|r| r.key.clone())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

impl Payload for ResultSubmission {
    const MESSAGE_TYPE: MessageType = MessageType::ResultSubmission;
}

/// One quality gate's verdict on one version of a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GateVerdict {
    /// The gate's name.
    pub gate: String,
    /// Whether the result passed.
    pub passed: bool,
    /// Why it failed (empty when it passed).
    #[serde(default)]
    pub reason: String,
    /// The revision judged.
    pub revision: u32,
}

/// How one task ended, in the final report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskOutcome {
    /// The task.
    pub task_id: String,
    /// Its title.
    pub title: String,
    /// What it was asked to do.
    pub description: String,
    /// The persona that did it.
    pub assigned_to: String,
    /// Its dependencies.
    pub dependencies: Vec<String>,
    /// How it ended: `status` in the seed's five values, `detailed_status`
    /// in ours (`Skipped` is there, and `Cancelled` for the seed).
    #[serde(flatten, with = "seed::status")]
    #[schemars(with = "seed::status::Out")]
    pub status: TaskStatus,
    /// The accepted result (empty when none).
    pub result: String,
    /// Whether `result` was shortened to keep the report within the payload limit.
    #[serde(default)]
    pub result_truncated: bool,
    /// Stream sequence of the full result, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_seq: Option<u64>,
    /// Tries taken.
    pub attempts: u32,
    /// Revisions asked for.
    pub revisions: u32,
    /// When it was first assigned.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timestamp::option"
    )]
    #[schemars(schema_with = "crate::timestamp::option::schema")]
    pub assigned_at: Option<DateTime<Utc>>,
    /// When a worker started the accepted version.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timestamp::option"
    )]
    #[schemars(schema_with = "crate::timestamp::option::schema")]
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::timestamp::option"
    )]
    #[schemars(schema_with = "crate::timestamp::option::schema")]
    pub completed_at: Option<DateTime<Utc>>,
    /// Why it failed, was cancelled or was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every gate verdict on every version.
    #[serde(default)]
    pub gate_verdicts: Vec<GateVerdict>,
    /// The provider that produced the accepted result.
    #[serde(default)]
    pub provider: String,
    /// The child swarm that ran this task's last version, for a task of a
    /// sub-manager ([`crate::hierarchy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_swarm: Option<String>,
    /// The task whose ask for help this task answered
    /// ([`crate::collaborate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_by: Option<String>,
    /// The learned skills its versions were offered and recorded.
    #[serde(default, skip_serializing_if = "SkillsUsed::is_empty")]
    pub skills: SkillsUsed,
}

/// How a swarm stands; in the final report, how it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SwarmStatus {
    /// Tasks are being worked on.
    Running,
    /// Every task completed.
    Completed,
    /// At least one task failed (its dependents were cancelled).
    Failed,
    /// A person or client cancelled the swarm.
    Cancelled,
    /// The swarm's deadline passed.
    TimedOut,
}

impl SwarmStatus {
    /// The seed's `TaskStatus` for a swarm that stands here, for the
    /// report's `overall_status`: `Running` is `InProgress`, and `TimedOut`
    /// is `Failed` (the mission did not get done).
    pub fn seed(self) -> TaskStatus {
        match self {
            SwarmStatus::Running => TaskStatus::InProgress,
            SwarmStatus::Completed => TaskStatus::Completed,
            SwarmStatus::Failed | SwarmStatus::TimedOut => TaskStatus::Failed,
            SwarmStatus::Cancelled => TaskStatus::Cancelled,
        }
    }

    /// Whether the swarm has ended.
    pub fn is_terminal(self) -> bool {
        !matches!(self, SwarmStatus::Running)
    }
}

/// A manager's one report for a finished swarm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FinalReport {
    /// How the mission went, honestly: written as `swarm_status`, and as
    /// the seed's `overall_status` in its five values (`TimedOut` is
    /// `Failed` there).
    #[serde(flatten, with = "seed::overall_status")]
    #[schemars(with = "seed::overall_status::Out")]
    pub overall_status: SwarmStatus,
    /// The mission's text.
    pub mission: String,
    /// A summary of what was done.
    pub summary: String,
    /// Observations drawn from the results: written as `insight_list`, and
    /// as the seed's `insights`, one string of lines.
    #[serde(flatten, with = "seed::insights")]
    #[schemars(with = "seed::insights::Out<'static>")]
    pub insights: Vec<String>,
    /// Every task.
    pub task_results: Vec<TaskOutcome>,
    /// Totals: tasks by status, revisions, attempts, duration. Written as
    /// numbers in `metric_values`, and as the seed's `metrics`, a map of
    /// strings.
    #[serde(flatten, with = "seed::metrics")]
    #[schemars(with = "seed::metrics::Out<'static>")]
    pub metrics: BTreeMap<String, f64>,
    /// When the mission was accepted.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub started_at: DateTime<Utc>,
    /// When the swarm ended.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub completed_at: DateTime<Utc>,
    /// The mission's trace (32 lowercase hex digits), when it was traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The learned skills the tasks were offered and recorded, once each.
    #[serde(default, skip_serializing_if = "SkillsUsed::is_empty")]
    pub skills: SkillsUsed,
}

impl Payload for FinalReport {
    const MESSAGE_TYPE: MessageType = MessageType::FinalReport;
}

/// The A2AP `Error` message: the error envelope plus the task it concerns.
///
/// Written in both shapes: ours (`error`, an [`ErrorBody`]; `task_id`) and
/// the seed's flat one beside it (`error_code`, `error_message`, `details`,
/// `affected_task_id`). Read in either: `error_code` may be one of our
/// codes in any spelling (another is kept as the detail `error_code` of an
/// `internal` error), `details` a sentence or a map.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ErrorMessage {
    /// The task concerned, if any; written also as `affected_task_id`.
    #[serde(flatten, serialize_with = "seed::affected_task")]
    #[schemars(with = "seed::AffectedTaskFields")]
    pub task_id: Option<String>,
    /// The attempt concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// What went wrong; written also as the seed's flat fields.
    #[serde(flatten, serialize_with = "seed::flat_error")]
    #[schemars(with = "seed::FlatErrorFields")]
    pub error: ErrorBody,
    /// The token of the assignment it concerns ([`TaskAssignment::token`]),
    /// when the sender is the worker that holds it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
}

impl Payload for ErrorMessage {
    const MESSAGE_TYPE: MessageType = MessageType::Error;
}

impl<'de> Deserialize<'de> for ErrorMessage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (task_id, attempt, error, token) = seed::ErrorOnWire::deserialize(d)?.into_parts()?;
        Ok(ErrorMessage {
            task_id,
            attempt,
            error,
            token,
        })
    }
}

/// How every notice that a swarm has ended begins: the reason of the
/// `Control::Cancel` a manager sends its workers when a swarm ends before its
/// tasks, and of the approvals and questions closed because of it.
pub const SWARM_ENDED: &str = "the swarm ended";

/// The notice that a swarm ended with `status`.
pub fn swarm_ended(status: SwarmStatus) -> String {
    format!("{SWARM_ENDED}: {status:?}")
}

/// A command to a swarm, sent on `a2ap.<swarm>.control`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Control {
    /// Stop the swarm: no new assignments; the report says Cancelled.
    Cancel {
        /// Why, for the report.
        #[serde(default)]
        reason: String,
    },
    /// End the swarm as TimedOut if its deadline has passed (a no-op
    /// otherwise). Managers send it when they see a deadline go by.
    Expire,
}

impl Payload for Control {
    const MESSAGE_TYPE: MessageType = MessageType::Control;
}

/// A record of an input that can never be processed, kept with the reason
/// on `swarm.deadletter.<source>` so nothing is dropped silently.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeadLetter {
    /// The subject the input arrived on.
    pub subject: String,
    /// Why it could not be processed.
    pub reason: ErrorBody,
    /// The input's first bytes, lossily as text.
    pub payload_preview: String,
    /// The input's size in bytes.
    pub payload_bytes: usize,
    /// The agent that recorded it.
    pub recorded_by: String,
    /// When.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub recorded_at: DateTime<Utc>,
}

impl DeadLetter {
    /// A dead letter for `payload` received on `subject`.
    pub fn new(subject: &str, reason: ErrorBody, payload: &[u8], recorded_by: &str) -> Self {
        const PREVIEW: usize = 4096;
        let cut = payload.len().min(PREVIEW);
        Self {
            subject: subject.to_string(),
            reason,
            payload_preview: String::from_utf8_lossy(&payload[..cut]).into_owned(),
            payload_bytes: payload.len(),
            recorded_by: recorded_by.to_string(),
            recorded_at: Utc::now(),
        }
    }
}
