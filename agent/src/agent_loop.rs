//! The agent loop: one task in, one [`AgentOutcome`] out.
//!
//! A task whose description is an explicit tool call runs that tool and
//! nothing else. Any other task is a conversation: the provider is asked for
//! the next action, tool calls are run and their results fed back, until the
//! provider gives a final answer (text without tool calls, or the synthetic
//! `return_result` tool) or the step limit is reached.
//!
//! [`run_agent`] takes [`RunOptions`]: a [`Budget`] checked before every
//! provider call; gates the final answer must pass, a failure's reasons sent
//! back to the model as a user message a bounded number of times; and the
//! synthetic tools `report_progress` (an [`AgentEvent::Progress`]),
//! `request_input` (the run ends `InputRequired` with the question),
//! `return_result`, `give_up` (the run ends `Failed` with the agent's
//! reason) and, when [`RunOptions::collaboration`] names collaborators,
//! `ask_collaborator` (another persona's answer, through [`Collaborate`]). [`run_task`] is [`run_agent`] with default options and a
//! channel of steps only.
//!
//! **Invariant:** `run_agent` never panics and never returns early without an
//! outcome: every failure (a provider error, a spent budget, a tool error in
//! an explicit call, a tool call that failed and was not made good by a later
//! call of the same tool, an agent that gave up, a gate that still fails, the
//! step limit) is a `Failed` outcome with an [`ErrorBody`]. `Completed`
//! means the agent answered and nothing it did failed
//! ([`swarm_common::outcome`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use swarm_common::collaborate::Collaborator;
use swarm_common::outcome::unrecovered_tool_failure;
use swarm_common::{
    ErrorBody, ErrorCode, GateVerdict, StepRecord, TaskStatus, WorkerDeploymentPlan,
};
use tokio::sync::mpsc::UnboundedSender;

use crate::budget::Budget;
use crate::gates::{GateChain, GateCheck, GateOptions, GateSpec};
use crate::prompt::render_task_message;
use crate::provider::{
    ChatMessage, CompletionRequest, Provider, ProviderError, TOOL_ERROR_PREFIX, ToolCall, Usage,
};
use crate::task::{AgentTask, ExplicitCall};
use crate::text::shorten;
use crate::tools::{ToolAnnotations, ToolContext, ToolError, ToolRegistry, ToolSpec};

/// A step's observation is cut to this many bytes; results are not.
pub const MAX_OBSERVATION_BYTES: usize = 2048;

/// What `AgentOutcome::provider` says when an explicit tool call ran with no
/// provider involved.
pub const EXPLICIT_PROVIDER: &str = "explicit";

/// How a task went.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOutcome {
    /// `Completed`, `Failed`, or (from [`run_agent`] with `request_input`
    /// offered) `InputRequired`.
    pub status: TaskStatus,
    /// The result (empty when the task failed).
    pub result: String,
    /// Every step: tool calls and the final answer.
    pub steps: Vec<StepRecord>,
    /// `steps`, `tool_calls`, `tool_errors`, `input_tokens`, `output_tokens`,
    /// `cost_usd`, `gate_checks`, `gate_failures`, `elapsed_ms`.
    pub metrics: BTreeMap<String, f64>,
    /// Why the task failed.
    pub error: Option<ErrorBody>,
    /// The provider that produced the result, or [`EXPLICIT_PROVIDER`].
    pub provider: String,
}

/// The system prompt with the skills learned earlier that fit the task.
fn with_skills(mut prompt: String, skills: &[(String, String)]) -> String {
    if skills.is_empty() {
        return prompt;
    }
    prompt.push_str("\n\nSkills learned in earlier tasks, best first; use one when it fits:");
    for (name, how_to) in skills {
        prompt.push_str(&format!("\n- {}: {}", name.trim(), how_to.trim()));
    }
    prompt
}

/// Whether the persona may call `tool`: any tool when its list is empty.
fn allowed(persona: &WorkerDeploymentPlan, tool: &str) -> bool {
    persona.tools.is_empty() || persona.tools.iter().any(|t| t == tool)
}

fn system_prompt(persona: &WorkerDeploymentPlan) -> String {
    let mut prompt = if persona.system_prompt.trim().is_empty() {
        format!(
            "You are {}, a worker agent in a Swarm. Do the task you are given, using the \
             tools offered when they help, and reply with the result.",
            persona.name
        )
    } else {
        persona.system_prompt.clone()
    };
    if !persona.role.trim().is_empty() {
        prompt.push_str("\n\nYour role: ");
        prompt.push_str(persona.role.trim());
    }
    prompt
}

/// The number of times a failing gate's reasons go back to the model when
/// [`RunOptions`] does not say.
pub const DEFAULT_GATE_CORRECTIONS: u32 = 2;

pub use swarm_common::outcome::{
    ASK_COLLABORATOR, GIVE_UP, RECORD_SKILL, REPORT_PROGRESS, REQUEST_INPUT, RETURN_RESULT,
};

/// Asks another persona for help on a run's behalf (`ask_collaborator`):
/// the worker's is durable ([`swarm_common::collaborate`]).
#[async_trait]
pub trait Collaborate: Send + Sync {
    /// Asks `name` for help with `request`, the `ask`-th ask of this run
    /// (from 1; a replay of the same run asks with the same numbers), and
    /// waits for the answer: the collaborator's result, or an error saying
    /// why there is none.
    async fn ask(&self, ask: u32, name: &str, request: &str) -> Result<String, ToolError>;
}

/// Who a run may ask for help, and how ([`RunOptions::collaboration`]).
#[derive(Clone)]
pub struct Collaboration {
    /// The personas that may be asked, with their roles (for the tool's
    /// description).
    pub roster: Vec<Collaborator>,
    /// Carries the asks.
    pub asker: Arc<dyn Collaborate>,
}

impl std::fmt::Debug for Collaboration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collaboration")
            .field("roster", &self.roster)
            .finish_non_exhaustive()
    }
}

impl Collaboration {
    /// The `ask_collaborator` tool: its `name` one of the roster's.
    fn spec(&self) -> ToolSpec {
        let names: Vec<&str> = self.roster.iter().map(|c| c.name.as_str()).collect();
        let who: Vec<String> = self
            .roster
            .iter()
            .map(|c| {
                if c.role.trim().is_empty() {
                    c.name.clone()
                } else {
                    format!("{} ({})", c.name, c.role.trim())
                }
            })
            .collect();
        ToolSpec {
            name: ASK_COLLABORATOR.to_string(),
            description: format!(
                "Asks another member of your team for help and waits for their answer, which \
                 is this tool's result. Say everything they need in the request: they see \
                 nothing else of your task. You may ask: {}.",
                who.join(", ")
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": names,
                             "description": "Who to ask."},
                    "request": {"type": "string",
                                "description": "What you need from them, with the context they need."}
                },
                "required": ["name", "request"]
            }),
            annotations: ToolAnnotations::READ_ONLY,
        }
    }
}

/// Which synthetic tools the loop offers besides the registry's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticTools {
    /// `report_progress`: becomes an [`AgentEvent::Progress`].
    pub report_progress: bool,
    /// `request_input`: ends the run `InputRequired` with a question. Offer
    /// it only when the caller can park the task until a person answers.
    pub request_input: bool,
    /// `return_result`: the final answer as a tool call.
    pub return_result: bool,
    /// `give_up`: ends the run `Failed` with the agent's reason, so an agent
    /// that cannot do the task says so instead of answering with its excuse.
    pub give_up: bool,
    /// `record_skill`: becomes an [`AgentEvent::SkillRecorded`]. Offer it
    /// only when the caller keeps skills.
    #[serde(default)]
    pub record_skill: bool,
}

impl Default for SyntheticTools {
    fn default() -> Self {
        SyntheticTools {
            report_progress: true,
            request_input: false,
            return_result: true,
            give_up: true,
            record_skill: false,
        }
    }
}

/// How a run is bounded and checked, beyond the task itself.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Checked before every provider call.
    pub budget: Budget,
    /// Gates the final answer must pass.
    pub gates: Vec<GateSpec>,
    /// How gates are built here (whether command gates may run).
    pub gate_options: GateOptions,
    /// How many times failing gates' reasons go back to the model before
    /// the task fails.
    pub max_gate_corrections: u32,
    /// The revision being worked on, recorded in gate verdicts.
    pub revision: u32,
    /// The swarm, for tools that keep state per swarm and for approvals.
    pub swarm_id: Option<String>,
    /// The synthetic tools offered.
    pub synthetic: SyntheticTools,
    /// A cap on each reply's length, in tokens.
    pub max_reply_tokens: Option<u32>,
    /// Who the run may ask for help: `ask_collaborator` is offered when
    /// this names at least one persona.
    pub collaboration: Option<Collaboration>,
    /// Skills learned in earlier tasks that fit this one, for the system
    /// prompt: (name, how-to), best first.
    pub skills: Vec<(String, String)>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            budget: Budget::unlimited(),
            gates: Vec::new(),
            gate_options: GateOptions::default(),
            max_gate_corrections: DEFAULT_GATE_CORRECTIONS,
            revision: 0,
            swarm_id: None,
            synthetic: SyntheticTools::default(),
            max_reply_tokens: None,
            collaboration: None,
            skills: Vec::new(),
        }
    }
}

/// Something that happened during a run, as it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent {
    /// A step was recorded (a tool call or the answer).
    Step(StepRecord),
    /// The model reported progress with `report_progress`.
    Progress {
        /// What it said.
        message: String,
        /// How far it says it is, 0 to 100, if it said.
        percentage: Option<u8>,
    },
    /// A gate judged an answer.
    Gate(GateVerdict),
    /// A model call waits for the limits the swarm's workers share
    /// ([`crate::provider::limit`]): why, and for about how long.
    Waiting {
        /// The wait, as told to a person.
        message: String,
    },
    /// The model recorded a skill with `record_skill`, for the caller to
    /// keep.
    SkillRecorded {
        /// Its name.
        name: String,
        /// How to do it.
        how_to: String,
    },
    /// A streamed reply is being written ([`crate::provider::limit::notify_text`]):
    /// its latest text, for a person to watch. Never journaled; the step
    /// the whole reply makes is.
    Writing {
        /// The end of the text so far (at most [`WRITING_TAIL_BYTES`]).
        text: String,
        /// How long the text so far is, in bytes.
        len: usize,
    },
}

/// How much of a reply being written an [`AgentEvent::Writing`] carries:
/// its end, which is what a watcher reads.
pub const WRITING_TAIL_BYTES: usize = 1000;

impl AgentEvent {
    /// The event for a streamed reply whose text so far is `text`.
    pub fn writing(text: &str) -> AgentEvent {
        let mut start = text.len().saturating_sub(WRITING_TAIL_BYTES);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        AgentEvent::Writing {
            text: text[start..].to_string(),
            len: text.len(),
        }
    }
}

/// Everything a run produced: the outcome and what the outcome's fields do
/// not carry.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRun {
    /// How the task went.
    pub outcome: AgentOutcome,
    /// Every gate verdict, in order (several per revision when the model corrected itself).
    pub gate_verdicts: Vec<GateVerdict>,
    /// The question for a person, when the outcome is `InputRequired`.
    pub question: Option<String>,
    /// Tokens used by this run.
    pub usage: Usage,
    /// Estimated cost of this run, in US dollars.
    pub cost_usd: f64,
}

/// The feedback item that carries a person's answer to a `request_input`
/// question into the task's next run (append it to [`AgentTask::feedback`]).
pub fn answer_feedback(question: &str, answer: &str) -> String {
    format!(
        "You asked: {}\nA person answered: {}\nGo on with the task using this answer.",
        question.trim(),
        answer.trim()
    )
}

/// Arguments of `report_progress`.
#[derive(Debug, Deserialize, JsonSchema)]
struct ReportProgressArgs {
    /// What has been done so far, in a sentence.
    message: String,
    /// How far the task is, 0 to 100.
    #[serde(default)]
    percentage: Option<u8>,
}

/// Arguments of `request_input`.
#[derive(Debug, Deserialize, JsonSchema)]
struct RequestInputArgs {
    /// The question for a person; the task waits for the answer.
    question: String,
}

/// Arguments of `ask_collaborator`.
#[derive(Debug, Deserialize)]
struct AskCollaboratorArgs {
    name: String,
    request: String,
}

/// Arguments of `give_up`.
#[derive(Debug, Deserialize, JsonSchema)]
struct GiveUpArgs {
    /// Why the task cannot be done, in a sentence a person can act on.
    reason: String,
}

/// Arguments of `record_skill`.
#[derive(Debug, Deserialize, JsonSchema)]
struct RecordSkillArgs {
    /// A short name for the skill, such as "summarise a CSV by column".
    name: String,
    /// How to do it, in a few sentences another agent can follow.
    how_to: String,
}

/// The longest skill name `record_skill` takes, in characters.
pub const MAX_SKILL_NAME_CHARS: usize = 80;
/// The longest how-to `record_skill` takes, in bytes.
pub const MAX_SKILL_HOW_TO_BYTES: usize = 2000;

/// Arguments of `return_result`.
#[derive(Debug, Deserialize, JsonSchema)]
struct ReturnResultArgs {
    /// The final result of the task.
    result: String,
}

fn synthetic_spec<A: JsonSchema>(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.to_string(),
        parameters: schemars::schema_for!(A).to_value(),
        annotations: ToolAnnotations::READ_ONLY,
    }
}

impl SyntheticTools {
    fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        if self.report_progress {
            specs.push(synthetic_spec::<ReportProgressArgs>(
                REPORT_PROGRESS,
                "Reports progress on the task to the people watching; the task goes on.",
            ));
        }
        if self.request_input {
            specs.push(synthetic_spec::<RequestInputArgs>(
                REQUEST_INPUT,
                "Asks a person a question the task cannot go on without; the task waits \
                 until they answer.",
            ));
        }
        if self.return_result {
            specs.push(synthetic_spec::<ReturnResultArgs>(
                RETURN_RESULT,
                "Gives the final result of the task; call it once, when done.",
            ));
        }
        if self.record_skill {
            specs.push(synthetic_spec::<RecordSkillArgs>(
                RECORD_SKILL,
                "Records a skill you found while doing this task (a named how-to that would \
                 help with similar tasks) for later tasks and missions; the task goes on.",
            ));
        }
        if self.give_up {
            specs.push(synthetic_spec::<GiveUpArgs>(
                GIVE_UP,
                "Ends the task as failed, with the reason, when it cannot be done with the \
                 tools and information you have. Never present a failure as a result.",
            ));
        }
        specs
    }

    fn offers(&self, name: &str) -> bool {
        match name {
            REPORT_PROGRESS => self.report_progress,
            REQUEST_INPUT => self.request_input,
            RETURN_RESULT => self.return_result,
            GIVE_UP => self.give_up,
            RECORD_SKILL => self.record_skill,
            _ => false,
        }
    }
}

/// Where a run's steps and events go.
#[derive(Clone, Copy)]
enum Sink<'a> {
    None,
    Steps(&'a UnboundedSender<StepRecord>),
    Events(&'a UnboundedSender<AgentEvent>),
}

/// Steps, counters and the progress channel of one run.
struct Run<'a> {
    started: Instant,
    sink: Sink<'a>,
    steps: Vec<StepRecord>,
    provider_steps: u32,
    tool_calls: u32,
    tool_errors: u32,
    usage: Usage,
    cost_usd: f64,
    gate_verdicts: Vec<GateVerdict>,
    /// Skills recorded with `record_skill`, held to
    /// [`swarm_common::skill::MAX_RECORDED_PER_TASK`].
    skills_recorded: usize,
}

/// How a conversation ended well.
enum Done {
    Result(String),
    Input(String),
}

impl<'a> Run<'a> {
    fn new(sink: Sink<'a>) -> Self {
        Run {
            started: Instant::now(),
            sink,
            steps: Vec::new(),
            provider_steps: 0,
            tool_calls: 0,
            tool_errors: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            gate_verdicts: Vec::new(),
            skills_recorded: 0,
        }
    }

    fn record(&mut self, record: StepRecord) {
        // Nobody listening is no reason to stop working.
        match self.sink {
            Sink::None => {}
            Sink::Steps(tx) => {
                let _ = tx.send(record.clone());
            }
            Sink::Events(tx) => {
                let _ = tx.send(AgentEvent::Step(record.clone()));
            }
        }
        self.steps.push(record);
    }

    fn event(&self, event: AgentEvent) {
        if let Sink::Events(tx) = self.sink {
            let _ = tx.send(event);
        }
    }

    fn record_tool(&mut self, step: u32, call: &ToolCall, outcome: &Result<String, ToolError>) {
        self.tool_calls += 1;
        let (observation, is_error) = match outcome {
            Ok(output) => (shorten(output, MAX_OBSERVATION_BYTES), false),
            Err(e) => {
                self.tool_errors += 1;
                (shorten(&e.to_string(), MAX_OBSERVATION_BYTES), true)
            }
        };
        tracing::debug!(step, tool = %call.name, is_error, "tool call");
        self.record(StepRecord {
            step,
            tool: Some(call.name.clone()),
            arguments: Some(call.arguments.to_string()),
            observation,
            is_error,
        });
    }

    /// Runs the gates on `answer`, records and announces every verdict, and
    /// returns the failures.
    async fn judge(
        &mut self,
        chain: &GateChain,
        answer: &str,
        revision: u32,
    ) -> Vec<(String, GateCheck)> {
        let mut failures = Vec::new();
        for (gate, check) in chain.check(answer).await {
            tracing::debug!(%gate, passed = check.passed, "gate verdict");
            let verdict = GateVerdict {
                gate: gate.clone(),
                passed: check.passed,
                reason: check.reason.clone(),
                revision,
            };
            self.event(AgentEvent::Gate(verdict.clone()));
            self.gate_verdicts.push(verdict);
            if !check.passed {
                failures.push((gate, check));
            }
        }
        failures
    }

    fn finish(self, provider: &str, result: Result<Done, ErrorBody>, steps_taken: u32) -> AgentRun {
        let gate_failures = self.gate_verdicts.iter().filter(|v| !v.passed).count();
        let metrics = BTreeMap::from([
            ("steps".to_string(), f64::from(steps_taken)),
            ("tool_calls".to_string(), f64::from(self.tool_calls)),
            ("tool_errors".to_string(), f64::from(self.tool_errors)),
            ("input_tokens".to_string(), self.usage.input_tokens as f64),
            ("output_tokens".to_string(), self.usage.output_tokens as f64),
            ("cost_usd".to_string(), self.cost_usd),
            ("gate_checks".to_string(), self.gate_verdicts.len() as f64),
            ("gate_failures".to_string(), gate_failures as f64),
            (
                "elapsed_ms".to_string(),
                self.started.elapsed().as_secs_f64() * 1000.0,
            ),
        ]);
        let (status, result, error, question) = match result {
            Ok(Done::Result(result)) => (TaskStatus::Completed, result, None, None),
            Ok(Done::Input(question)) => (
                TaskStatus::InputRequired,
                String::new(),
                None,
                Some(question),
            ),
            Err(e) => (TaskStatus::Failed, String::new(), Some(e), None),
        };
        AgentRun {
            outcome: AgentOutcome {
                status,
                result,
                steps: self.steps,
                metrics,
                error,
                provider: provider.to_string(),
            },
            gate_verdicts: self.gate_verdicts,
            question,
            usage: self.usage,
            cost_usd: self.cost_usd,
        }
    }
}

/// Runs one task to an outcome with default [`RunOptions`] (no budget, no
/// gates, `report_progress` and `return_result` offered). `progress`, when
/// given, receives every step as it is recorded.
pub async fn run_task(
    provider: &dyn Provider,
    tools: &ToolRegistry,
    task: &AgentTask,
    progress: Option<&UnboundedSender<StepRecord>>,
) -> AgentOutcome {
    let sink = progress.map_or(Sink::None, Sink::Steps);
    run_with(provider, tools, task, &RunOptions::default(), sink)
        .await
        .outcome
}

/// Runs one task to an outcome under `options`. `events`, when given,
/// receives every step, progress report and gate verdict as it happens.
pub async fn run_agent(
    provider: &dyn Provider,
    tools: &ToolRegistry,
    task: &AgentTask,
    options: &RunOptions,
    events: Option<&UnboundedSender<AgentEvent>>,
) -> AgentRun {
    let sink = events.map_or(Sink::None, Sink::Events);
    run_with(provider, tools, task, options, sink).await
}

async fn run_with(
    provider: &dyn Provider,
    tools: &ToolRegistry,
    task: &AgentTask,
    options: &RunOptions,
    sink: Sink<'_>,
) -> AgentRun {
    let mut run = Run::new(sink);
    let chain = GateChain::from_specs(&options.gates, &options.gate_options);
    let ctx = ToolContext {
        swarm_id: options.swarm_id.clone(),
        task_id: Some(task.task_id.clone()),
    };
    if let Some(call) = ExplicitCall::parse(&task.description) {
        let mut result = run_explicit(&mut run, tools, &ctx, task, call).await;
        if let Ok(answer) = &result
            && !chain.is_empty()
        {
            let failures = run.judge(&chain, answer, options.revision).await;
            if !failures.is_empty() {
                result = Err(gates_failed(&failures, 0));
            }
        }
        return run.finish(EXPLICIT_PROVIDER, result.map(Done::Result), 1);
    }
    let result = converse(&mut run, provider, tools, &ctx, &chain, task, options).await;
    let steps = run.provider_steps;
    run.finish(provider.name(), result, steps)
}

async fn run_explicit(
    run: &mut Run<'_>,
    tools: &ToolRegistry,
    ctx: &ToolContext,
    task: &AgentTask,
    call: ExplicitCall,
) -> Result<String, ErrorBody> {
    let call = ToolCall {
        id: "explicit-1".to_string(),
        name: call.tool,
        arguments: call.arguments,
    };
    if !allowed(&task.persona, &call.name) {
        let message = format!(
            "persona {:?} may not call tool {:?}; its tools are {}",
            task.persona.name,
            call.name,
            task.persona.tools.join(", ")
        );
        run.record_tool(1, &call, &Err(ToolError::Refused(message.clone())));
        return Err(ErrorBody::new(ErrorCode::AuthorizationDenied, message)
            .with_detail("tool", &call.name)
            .with_detail("persona", &task.persona.name));
    }
    let outcome = tools.call_in(ctx, &call.name, call.arguments.clone()).await;
    run.record_tool(1, &call, &outcome);
    outcome.map_err(|e| {
        let code = match e {
            ToolError::InvalidArguments(_) | ToolError::UnknownTool(_) => {
                ErrorCode::ValidationFailed
            }
            ToolError::Refused(_) | ToolError::Failed(_) => ErrorCode::ToolFailed,
        };
        let message = match &e {
            ToolError::UnknownTool(name) => format!(
                "unknown tool {name:?}; the tools are {}",
                tools.names().join(", ")
            ),
            other => format!("tool {:?} {other}", call.name),
        };
        ErrorBody::new(code, message).with_detail("tool", &call.name)
    })
}

/// Why an agent that gave up failed.
fn gave_up(reason: &str) -> ErrorBody {
    let reason = if reason.is_empty() {
        "no reason given"
    } else {
        reason
    };
    ErrorBody::new(ErrorCode::GaveUp, format!("the agent gave up: {reason}"))
}

/// Why a run whose tool call failed, and was not made good, failed.
fn tool_failed(step: &StepRecord) -> ErrorBody {
    let tool = step.tool.as_deref().unwrap_or("a tool");
    ErrorBody::new(
        ErrorCode::ToolFailed,
        format!(
            "tool {tool:?} failed: {} (step {})",
            shorten(
                step.observation
                    .strip_prefix("failed: ")
                    .unwrap_or(&step.observation),
                400
            ),
            step.step
        ),
    )
    .with_detail("tool", tool)
    .with_detail("step", step.step)
}

fn provider_error(provider: &dyn Provider, e: &ProviderError) -> ErrorBody {
    let code = match e {
        ProviderError::Timeout(_) => ErrorCode::Timeout,
        _ => ErrorCode::Internal,
    };
    let mut body = ErrorBody::new(code, format!("provider {:?} failed: {e}", provider.name()))
        .with_detail("provider", provider.name());
    body.retriable = e.retriable();
    if let Some(after) = e.retry_after() {
        body = body.with_detail("retry_after_ms", after.as_millis());
    }
    body
}

/// The user message that tells the model why its answer was rejected.
fn gate_feedback(failures: &[(String, GateCheck)]) -> String {
    let mut text = String::from("Your answer did not pass these quality checks:\n");
    for (gate, check) in failures {
        text.push_str(&format!("- {gate}: {}\n", check.reason));
    }
    text.push_str("Correct the answer so that it passes every check, and reply with the corrected result only.");
    text
}

fn gates_failed(failures: &[(String, GateCheck)], corrections: u32) -> ErrorBody {
    let reasons: Vec<String> = failures
        .iter()
        .map(|(gate, check)| format!("{gate}: {}", check.reason))
        .collect();
    let after = match corrections {
        0 => String::new(),
        1 => " after 1 correction".to_string(),
        n => format!(" after {n} corrections"),
    };
    ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("the result failed its gates{after}: {}", reasons.join("; ")),
    )
    .with_detail(
        "gates",
        failures
            .iter()
            .map(|(g, _)| g.as_str())
            .collect::<Vec<_>>()
            .join(","),
    )
}

fn parse_synthetic<A: serde::de::DeserializeOwned>(call: &ToolCall) -> Result<A, ToolError> {
    let arguments = if call.arguments.is_null() {
        serde_json::json!({})
    } else {
        call.arguments.clone()
    };
    serde_json::from_value(arguments)
        .map_err(|e| ToolError::InvalidArguments(format!("{}: {e}", call.name)))
}

async fn converse(
    run: &mut Run<'_>,
    provider: &dyn Provider,
    tools: &ToolRegistry,
    ctx: &ToolContext,
    chain: &GateChain,
    task: &AgentTask,
    options: &RunOptions,
) -> Result<Done, ErrorBody> {
    let synthetic = options.synthetic;
    let mut offered: Vec<ToolSpec> = tools
        .specs()
        .into_iter()
        .filter(|s| allowed(&task.persona, &s.name) && !synthetic.offers(&s.name))
        .collect();
    let registry_tools: Vec<String> = offered.iter().map(|s| s.name.clone()).collect();
    offered.extend(synthetic.specs());
    let collaboration = options
        .collaboration
        .as_ref()
        .filter(|c| !c.roster.is_empty());
    if let Some(c) = collaboration {
        offered.push(c.spec());
    }
    // Asks are numbered in the order the run makes them, so a replay of the
    // same run (the journal's) asks with the same numbers.
    let mut asks = 0;
    let mut messages = vec![
        ChatMessage::system(with_skills(system_prompt(&task.persona), &options.skills)),
        ChatMessage::user(render_task_message(task)),
    ];
    let mut corrections = 0;
    for step in 1..=task.max_steps {
        run.provider_steps = step;
        options.budget.check(
            run.usage.input_tokens + run.usage.output_tokens,
            run.cost_usd,
        )?;
        let request = CompletionRequest {
            messages: messages.clone(),
            tools: offered.clone(),
            max_tokens: options.max_reply_tokens,
        };
        let response = provider
            .complete(request)
            .await
            .map_err(|e| provider_error(provider, &e))?;
        run.usage.input_tokens += response.usage.input_tokens;
        run.usage.output_tokens += response.usage.output_tokens;
        run.cost_usd += provider.cost_usd(response.usage);
        let answer = if response.tool_calls.is_empty() {
            run.record(StepRecord {
                step,
                tool: None,
                arguments: None,
                observation: shorten(&response.content, MAX_OBSERVATION_BYTES),
                is_error: false,
            });
            messages.push(ChatMessage::assistant(response.content.clone()));
            Some(response.content)
        } else {
            messages.push(ChatMessage::assistant_with_calls(
                response.content,
                response.tool_calls.clone(),
            ));
            let mut answer = None;
            for call in &response.tool_calls {
                if answer.is_some() {
                    messages.push(ChatMessage::tool_result(
                        call.id.clone(),
                        format!(
                            "{TOOL_ERROR_PREFIX}not run: {RETURN_RESULT} already ended the task"
                        ),
                    ));
                    continue;
                }
                let outcome = match call.name.as_str() {
                    ASK_COLLABORATOR if collaboration.is_some() => {
                        match (collaboration, parse_synthetic::<AskCollaboratorArgs>(call)) {
                            (Some(c), Ok(a)) if c.roster.iter().any(|r| r.name == a.name) => {
                                asks += 1;
                                c.asker.ask(asks, &a.name, &a.request).await
                            }
                            (Some(c), Ok(a)) => Err(ToolError::Refused(format!(
                                "{:?} is not one of your collaborators; they are {}",
                                a.name,
                                c.roster
                                    .iter()
                                    .map(|r| r.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ))),
                            (_, Err(e)) => Err(e),
                            (None, Ok(_)) => Err(ToolError::UnknownTool(ASK_COLLABORATOR.into())),
                        }
                    }
                    name if synthetic.offers(name) => match name {
                        REPORT_PROGRESS => parse_synthetic::<ReportProgressArgs>(call).map(|a| {
                            run.event(AgentEvent::Progress {
                                message: a.message.clone(),
                                percentage: a.percentage.map(|p| p.min(100)),
                            });
                            format!("progress reported: {}", a.message)
                        }),
                        RECORD_SKILL => parse_synthetic::<RecordSkillArgs>(call).and_then(|a| {
                            let name = a.name.trim().to_string();
                            let how_to = a.how_to.trim().to_string();
                            if name.is_empty() || how_to.is_empty() {
                                return Err(ToolError::InvalidArguments(
                                    "a skill needs a name and a how_to".into(),
                                ));
                            }
                            if name.chars().count() > MAX_SKILL_NAME_CHARS
                                || how_to.len() > MAX_SKILL_HOW_TO_BYTES
                            {
                                return Err(ToolError::InvalidArguments(format!(
                                    "a skill's name is at most {MAX_SKILL_NAME_CHARS} \
                                         characters and its how_to at most \
                                         {MAX_SKILL_HOW_TO_BYTES} bytes"
                                )));
                            }
                            if run.skills_recorded >= swarm_common::skill::MAX_RECORDED_PER_TASK {
                                return Err(ToolError::InvalidArguments(format!(
                                    "a task records at most {} skills",
                                    swarm_common::skill::MAX_RECORDED_PER_TASK
                                )));
                            }
                            run.skills_recorded += 1;
                            run.event(AgentEvent::SkillRecorded {
                                name: name.clone(),
                                how_to,
                            });
                            Ok(format!("skill recorded: {name}"))
                        }),
                        REQUEST_INPUT => match parse_synthetic::<RequestInputArgs>(call) {
                            Ok(a) => {
                                run.record_tool(step, call, &Ok(a.question.clone()));
                                return Ok(Done::Input(a.question));
                            }
                            Err(e) => Err(e),
                        },
                        GIVE_UP => match parse_synthetic::<GiveUpArgs>(call) {
                            Ok(a) => {
                                let reason = a.reason.trim().to_string();
                                run.record_tool(
                                    step,
                                    call,
                                    &Err(ToolError::Refused(reason.clone())),
                                );
                                return Err(gave_up(&reason));
                            }
                            Err(e) => Err(e),
                        },
                        _ => parse_synthetic::<ReturnResultArgs>(call).map(|a| {
                            answer = Some(a.result);
                            "result received".to_string()
                        }),
                    },
                    name if registry_tools.iter().any(|t| t == name) => {
                        tools.call_in(ctx, name, call.arguments.clone()).await
                    }
                    name => Err(ToolError::Refused(format!(
                        "tool {name:?} is not offered to persona {:?}",
                        task.persona.name
                    ))),
                };
                run.record_tool(step, call, &outcome);
                let content = match outcome {
                    Ok(output) => output,
                    Err(e) => format!("{TOOL_ERROR_PREFIX}{e}"),
                };
                messages.push(ChatMessage::tool_result(call.id.clone(), content));
            }
            answer
        };
        let Some(answer) = answer else { continue };
        // An answer does not make good a tool call that failed: the task
        // fails with the tool's reason (the rule the manager checks again).
        if let Some(failed) = unrecovered_tool_failure(&run.steps) {
            return Err(tool_failed(failed));
        }
        if chain.is_empty() {
            return Ok(Done::Result(answer));
        }
        let failures = run.judge(chain, &answer, options.revision).await;
        if failures.is_empty() {
            return Ok(Done::Result(answer));
        }
        if corrections >= options.max_gate_corrections {
            return Err(gates_failed(&failures, corrections));
        }
        corrections += 1;
        tracing::debug!(
            corrections,
            "the answer failed its gates; asking for a correction"
        );
        messages.push(ChatMessage::user(gate_feedback(&failures)));
    }
    Err(ErrorBody::new(
        ErrorCode::LimitExceeded,
        format!(
            "no final answer after {} steps (the step limit)",
            task.max_steps
        ),
    )
    .with_detail("max_steps", task.max_steps))
}

#[cfg(test)]
mod tests;
