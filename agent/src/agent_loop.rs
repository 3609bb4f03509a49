//! The agent loop: one task in, one [`AgentOutcome`] out.
//!
//! A task whose description is an explicit tool call runs that tool and
//! nothing else. Any other task is a conversation: the provider is asked for
//! the next action, tool calls are run and their results fed back, until the
//! provider answers without tool calls or the step limit is reached.
//!
//! **Invariant:** `run_task` never panics and never returns early without an
//! outcome: every failure (a provider error, a tool error in an explicit
//! call, the step limit) is a `Failed` outcome with an [`ErrorBody`].

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use swarm_common::{ErrorBody, ErrorCode, StepRecord, TaskStatus, WorkerDeploymentPlan};
use tokio::sync::mpsc::UnboundedSender;

use crate::prompt::render_task_message;
use crate::provider::{
    ChatMessage, CompletionRequest, Provider, ProviderError, TOOL_ERROR_PREFIX, ToolCall, Usage,
};
use crate::tools::{ToolError, ToolRegistry};

/// A step's observation is cut to this many bytes; results are not.
pub const MAX_OBSERVATION_BYTES: usize = 2048;

/// What `AgentOutcome::provider` says when an explicit tool call ran with no
/// provider involved.
pub const EXPLICIT_PROVIDER: &str = "explicit";

/// The result of a task this one depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextItem {
    /// The dependency.
    pub task_id: String,
    /// Its title.
    pub title: String,
    /// Its accepted result.
    pub result: String,
}

/// A task as the agent loop sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTask {
    /// The task.
    pub task_id: String,
    /// Its title.
    pub title: String,
    /// What to do: prose, or an explicit tool call
    /// `{"tool": "<name>", "arguments": {...}}`.
    pub description: String,
    /// The persona to play: its prompt, role and allowed tools.
    pub persona: WorkerDeploymentPlan,
    /// Results of the dependencies.
    pub context: Vec<ContextItem>,
    /// Reviewer feedback on earlier versions, oldest first.
    pub feedback: Vec<String>,
    /// Most provider calls.
    pub max_steps: u32,
    /// The largest result the manager accepts (for the provider's guidance;
    /// the loop does not cut results).
    pub max_result_bytes: usize,
}

/// How a task went.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOutcome {
    /// `Completed` or `Failed`.
    pub status: TaskStatus,
    /// The result (empty when the task failed).
    pub result: String,
    /// Every step: tool calls and the final answer.
    pub steps: Vec<StepRecord>,
    /// `steps`, `tool_calls`, `tool_errors`, `input_tokens`, `output_tokens`, `elapsed_ms`.
    pub metrics: BTreeMap<String, f64>,
    /// Why the task failed.
    pub error: Option<ErrorBody>,
    /// The provider that produced the result, or [`EXPLICIT_PROVIDER`].
    pub provider: String,
}

/// A task description that names a tool and its arguments directly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplicitCall {
    /// The tool.
    pub tool: String,
    /// Its arguments (an empty object when the description gives none).
    pub arguments: serde_json::Value,
}

impl ExplicitCall {
    /// Reads `{"tool": "<name>", "arguments": {...}}` (arguments optional, no
    /// other keys). Anything else is not an explicit call.
    pub fn parse(text: &str) -> Option<ExplicitCall> {
        let text = text.trim();
        if !text.starts_with('{') {
            return None;
        }
        let serde_json::Value::Object(map) = serde_json::from_str(text).ok()? else {
            return None;
        };
        if map.keys().any(|k| k != "tool" && k != "arguments") {
            return None;
        }
        let tool = map.get("tool")?.as_str()?.to_string();
        let arguments = map
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| serde_json::Value::Object(serde_json::Map::new()));
        Some(ExplicitCall { tool, arguments })
    }
}

/// Whether the persona may call `tool`: any tool when its list is empty.
fn allowed(persona: &WorkerDeploymentPlan, tool: &str) -> bool {
    persona.tools.is_empty() || persona.tools.iter().any(|t| t == tool)
}

/// `text` cut to at most `max` bytes on a character boundary, with a note of
/// the full size when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes in all]", &text[..end], text.len())
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

/// Steps, counters and the progress channel of one run.
struct Run<'a> {
    started: Instant,
    progress: Option<&'a UnboundedSender<StepRecord>>,
    steps: Vec<StepRecord>,
    provider_steps: u32,
    tool_calls: u32,
    tool_errors: u32,
    usage: Usage,
}

impl<'a> Run<'a> {
    fn new(progress: Option<&'a UnboundedSender<StepRecord>>) -> Self {
        Run {
            started: Instant::now(),
            progress,
            steps: Vec::new(),
            provider_steps: 0,
            tool_calls: 0,
            tool_errors: 0,
            usage: Usage::default(),
        }
    }

    fn record(&mut self, record: StepRecord) {
        if let Some(tx) = self.progress {
            // Nobody listening is no reason to stop working.
            let _ = tx.send(record.clone());
        }
        self.steps.push(record);
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

    fn finish(
        self,
        provider: &str,
        result: Result<String, ErrorBody>,
        steps_taken: u32,
    ) -> AgentOutcome {
        let metrics = BTreeMap::from([
            ("steps".to_string(), f64::from(steps_taken)),
            ("tool_calls".to_string(), f64::from(self.tool_calls)),
            ("tool_errors".to_string(), f64::from(self.tool_errors)),
            ("input_tokens".to_string(), self.usage.input_tokens as f64),
            ("output_tokens".to_string(), self.usage.output_tokens as f64),
            (
                "elapsed_ms".to_string(),
                self.started.elapsed().as_secs_f64() * 1000.0,
            ),
        ]);
        let (status, result, error) = match result {
            Ok(result) => (TaskStatus::Completed, result, None),
            Err(e) => (TaskStatus::Failed, String::new(), Some(e)),
        };
        AgentOutcome {
            status,
            result,
            steps: self.steps,
            metrics,
            error,
            provider: provider.to_string(),
        }
    }
}

/// Runs one task to an outcome. `progress`, when given, receives every step
/// as it is recorded.
pub async fn run_task(
    provider: &dyn Provider,
    tools: &ToolRegistry,
    task: &AgentTask,
    progress: Option<&UnboundedSender<StepRecord>>,
) -> AgentOutcome {
    let mut run = Run::new(progress);
    if let Some(call) = ExplicitCall::parse(&task.description) {
        let result = run_explicit(&mut run, tools, task, call).await;
        return run.finish(EXPLICIT_PROVIDER, result, 1);
    }
    let result = converse(&mut run, provider, tools, task).await;
    let steps = run.provider_steps;
    run.finish(provider.name(), result, steps)
}

async fn run_explicit(
    run: &mut Run<'_>,
    tools: &ToolRegistry,
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
    let outcome = tools.call(&call.name, call.arguments.clone()).await;
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

async fn converse(
    run: &mut Run<'_>,
    provider: &dyn Provider,
    tools: &ToolRegistry,
    task: &AgentTask,
) -> Result<String, ErrorBody> {
    let offered: Vec<_> = tools
        .specs()
        .into_iter()
        .filter(|s| allowed(&task.persona, &s.name))
        .collect();
    let mut messages = vec![
        ChatMessage::system(system_prompt(&task.persona)),
        ChatMessage::user(render_task_message(task)),
    ];
    for step in 1..=task.max_steps {
        run.provider_steps = step;
        let request = CompletionRequest {
            messages: messages.clone(),
            tools: offered.clone(),
            max_tokens: None,
        };
        let response = provider
            .complete(request)
            .await
            .map_err(|e| provider_error(provider, &e))?;
        run.usage.input_tokens += response.usage.input_tokens;
        run.usage.output_tokens += response.usage.output_tokens;
        if response.tool_calls.is_empty() {
            run.record(StepRecord {
                step,
                tool: None,
                arguments: None,
                observation: shorten(&response.content, MAX_OBSERVATION_BYTES),
                is_error: false,
            });
            return Ok(response.content);
        }
        messages.push(ChatMessage::assistant_with_calls(
            response.content,
            response.tool_calls.clone(),
        ));
        for call in &response.tool_calls {
            let outcome = if offered.iter().any(|s| s.name == call.name) {
                tools.call(&call.name, call.arguments.clone()).await
            } else {
                Err(ToolError::Refused(format!(
                    "tool {:?} is not offered to persona {:?}",
                    call.name, task.persona.name
                )))
            };
            run.record_tool(step, call, &outcome);
            let content = match outcome {
                Ok(output) => output,
                Err(e) => format!("{TOOL_ERROR_PREFIX}{e}"),
            };
            messages.push(ChatMessage::tool_result(call.id.clone(), content));
        }
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
