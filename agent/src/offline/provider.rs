//! The offline provider: a deterministic, rule-based agent. It is not a
//! language model and never pretends to be one: it reads the task's wording
//! (see `super::intent`), calls the real tools it is offered one step at a
//! time, and composes its answer from their actual outputs, saying that it
//! comes from the offline provider.
//!
//! It gives up (the synthetic `give_up` tool, so the task fails with the
//! reason) rather than answer when it cannot do all of what was asked: no
//! request it recognises, a request whose tool is not offered, or a tool call
//! that failed. A reply about a failure is not a result.
//!
//! It keeps no state between calls: every decision is made again from the
//! conversation, so the same conversation always gets the same reply. Its
//! tool calls have ids `offline-1`, `offline-2`, ... in plan order, and a call
//! whose id has a result in the conversation is done.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use serde_json::json;

use swarm_common::outcome::GIVE_UP;

use super::intent::{self, Intent, Target};
use crate::chat::{
    ChatMessage, CompletionRequest, CompletionResponse, Provider, ProviderError, Role,
    TOOL_ERROR_PREFIX, ToolCall, Usage,
};
use crate::prompt::{ParsedTask, parse_task_message};

/// What every text the offline provider writes starts with.
pub const OFFLINE_TAG: &str = "[offline provider]";

/// The offline provider turns at most this many requests of one task into tool calls.
const MAX_CALLS: usize = 16;
/// It spreads its calls over at most this many steps.
const MAX_TOOL_STEPS: usize = 3;

/// A deterministic rule-based agent that does real work with the tools it is
/// offered and needs no network. See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct OfflineProvider {
    _private: (),
}

impl OfflineProvider {
    /// The offline provider.
    pub fn new() -> OfflineProvider {
        OfflineProvider::default()
    }
}

#[async_trait]
impl Provider for OfflineProvider {
    fn name(&self) -> &str {
        "offline"
    }

    fn deterministic(&self) -> bool {
        true
    }

    async fn complete(
        &self,
        request: CompletionRequest,
    ) -> Result<CompletionResponse, ProviderError> {
        Ok(decide(&request))
    }
}

/// What the conversation says.
struct Conversation {
    task: ParsedTask,
    /// Feedback from the task message and from any later user messages.
    feedback: Vec<String>,
    /// Tool results by call id.
    results: BTreeMap<String, String>,
}

fn read_conversation(messages: &[ChatMessage]) -> Conversation {
    let mut task: Option<ParsedTask> = None;
    let mut feedback = Vec::new();
    let mut results = BTreeMap::new();
    for m in messages {
        match m.role {
            Role::User if task.is_none() => {
                let parsed = parse_task_message(&m.content);
                feedback.extend(parsed.feedback.iter().cloned());
                task = Some(parsed);
            }
            Role::User => feedback.push(m.content.clone()),
            Role::Tool => {
                if let Some(id) = &m.tool_call_id {
                    results.insert(id.clone(), m.content.clone());
                }
            }
            Role::System | Role::Assistant => {}
        }
    }
    Conversation {
        task: task.unwrap_or_default(),
        feedback,
        results,
    }
}

/// One tool call the offline provider means to make.
#[derive(Debug, Clone, PartialEq)]
struct PlannedCall {
    tool: &'static str,
    arguments: serde_json::Value,
    /// What it works on, for the answer: `notes.txt`, `the task text`, ...
    subject: String,
}

/// The calls for a task, and notes on what could not be done.
#[derive(Debug, Default)]
struct Plan {
    calls: Vec<PlannedCall>,
    notes: Vec<String>,
    /// Some request was recognised (even if its tool is not offered).
    recognised: bool,
}

const TASK_TEXT: &str = "the task text";
const CONTEXT_TEXT: &str = "the results of earlier tasks";

fn plan(task: &ParsedTask, offered: &BTreeSet<&str>) -> Plan {
    let instruction = task.instruction();
    let context = task.context_text();
    let mut plan = Plan::default();
    let measure = |target: &Target,
                   notes: &mut Vec<String>|
     -> Option<(serde_json::Value, String)> {
        match target {
            Target::Path(p) => Some((json!({ "path": p }), p.clone())),
            Target::Text(t) => Some((json!({ "text": t }), format!("the text {t:?}"))),
            Target::Context if task.context.is_empty() => {
                notes
                    .push("the task refers to earlier results, but none were supplied".to_string());
                None
            }
            Target::Context => Some((json!({ "text": context }), CONTEXT_TEXT.to_string())),
            Target::Unspecified if task.context.is_empty() => {
                Some((json!({ "text": instruction }), TASK_TEXT.to_string()))
            }
            Target::Unspecified => Some((json!({ "text": context }), CONTEXT_TEXT.to_string())),
        }
    };
    for intent in intent::recognise(instruction) {
        plan.recognised = true;
        let tool = intent.tool();
        let planned = match &intent {
            Intent::Calc(e) => Some((json!({ "expression": e }), e.clone())),
            Intent::Count(t) | Intent::Checksum(t) => measure(t, &mut plan.notes),
            Intent::List { path, recursive } => Some((
                json!({ "path": path, "recursive": recursive }),
                path.clone(),
            )),
            Intent::Grep { pattern, path } => Some((
                json!({ "pattern": pattern, "path": path }),
                format!("/{pattern}/ in {path}"),
            )),
            Intent::Read(p) => Some((json!({ "path": p }), p.clone())),
            Intent::Echo(t) => Some((json!({ "text": t }), String::new())),
        };
        let Some((arguments, subject)) = planned else {
            continue;
        };
        if !offered.contains(tool) {
            plan.notes.push(format!(
                "the task asks for `{tool}` ({subject}), which is not offered to this persona"
            ));
            continue;
        }
        let call = PlannedCall {
            tool,
            arguments,
            subject,
        };
        if !plan.calls.contains(&call) && plan.calls.len() < MAX_CALLS {
            plan.calls.push(call);
        }
    }
    plan
}

fn call_id(index: usize) -> String {
    format!("offline-{}", index + 1)
}

fn decide(request: &CompletionRequest) -> CompletionResponse {
    let conversation = read_conversation(&request.messages);
    let offered: BTreeSet<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    let plan = plan(&conversation.task, &offered);
    // One call per step for up to three calls; more are grouped so that a
    // task never takes more than three tool steps and a final answer.
    let group = plan.calls.len().div_ceil(MAX_TOOL_STEPS).max(1);
    let pending: Vec<usize> = (0..plan.calls.len())
        .filter(|i| !conversation.results.contains_key(&call_id(*i)))
        .collect();
    if let Some(&first) = pending.first() {
        let batch: Vec<usize> = pending
            .into_iter()
            .filter(|i| i / group == first / group)
            .collect();
        let what: Vec<String> = batch
            .iter()
            .map(|&i| {
                let call = &plan.calls[i];
                if call.subject.is_empty() {
                    format!("`{}`", call.tool)
                } else {
                    format!("`{}` on {}", call.tool, call.subject)
                }
            })
            .collect();
        return CompletionResponse {
            content: format!(
                "{OFFLINE_TAG} step {} of {}: calling {}",
                first / group + 1,
                plan.calls.len().div_ceil(group),
                what.join(", ")
            ),
            tool_calls: batch
                .iter()
                .map(|&i| ToolCall {
                    id: call_id(i),
                    name: plan.calls[i].tool.to_string(),
                    arguments: plan.calls[i].arguments.clone(),
                })
                .collect(),
            usage: Usage::default(),
            finish_reason: Some("tool_calls".to_string()),
        };
    }
    if let Some(reason) = shortfall(&conversation, &plan)
        && offered.contains(GIVE_UP)
    {
        return CompletionResponse {
            content: format!("{OFFLINE_TAG} giving up: {reason}"),
            tool_calls: vec![ToolCall {
                id: "offline-give-up".to_string(),
                name: GIVE_UP.to_string(),
                arguments: json!({ "reason": format!("{OFFLINE_TAG} {reason}") }),
            }],
            usage: Usage::default(),
            finish_reason: Some("tool_calls".to_string()),
        };
    }
    let answer = compose(&conversation, &plan);
    CompletionResponse {
        content: apply_feedback(answer, &conversation.feedback),
        tool_calls: Vec::new(),
        usage: Usage::default(),
        finish_reason: Some("stop".to_string()),
    }
}

/// What of the task could not be done, if anything: no request recognised,
/// a request whose tool is not offered, a tool call that failed.
fn shortfall(conversation: &Conversation, plan: &Plan) -> Option<String> {
    if plan.calls.is_empty() && !plan.recognised {
        return Some(
            "no tool matched this request offline. The offline provider is a rule-based \
             agent, not a language model: it recognises arithmetic, counting, checksums, \
             listing, searching, reading and echoing; a model provider (openai, anthropic) \
             can do the rest."
                .to_string(),
        );
    }
    let mut reasons: Vec<String> = plan
        .calls
        .iter()
        .enumerate()
        .filter_map(|(i, call)| {
            let output = conversation.results.get(&call_id(i))?;
            output
                .starts_with(TOOL_ERROR_PREFIX)
                .then(|| describe(call, output))
        })
        .collect();
    reasons.extend(plan.notes.iter().cloned());
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// One line (or block) of the answer for one call and its output.
fn describe(call: &PlannedCall, output: &str) -> String {
    if let Some(error) = output.strip_prefix(TOOL_ERROR_PREFIX) {
        let on = if call.subject.is_empty() {
            String::new()
        } else {
            format!(" on {}", call.subject)
        };
        let error = error.strip_prefix("failed: ").unwrap_or(error);
        return format!("`{}`{on} failed: {error}", call.tool);
    }
    match call.tool {
        "calc" => format!("{} = {output}", call.subject),
        "count" => match serde_json::from_str::<serde_json::Value>(output) {
            Ok(v) => format!(
                "count of {}: {} words, {} lines, {} characters, {} bytes",
                call.subject, v["words"], v["lines"], v["characters"], v["bytes"]
            ),
            Err(_) => format!("count of {}: {output}", call.subject),
        },
        "checksum" => format!(
            "sha256 of {}: {}",
            call.subject,
            output.split_whitespace().next().unwrap_or("")
        ),
        "list_files" => {
            let entries = if output == crate::tools::EMPTY_DIRECTORY {
                0
            } else {
                output.lines().filter(|l| !l.starts_with('[')).count()
            };
            format!("files in {} ({entries} entries):\n{output}", call.subject)
        }
        "grep" => format!("search for {}:\n{output}", call.subject),
        "read_file" => format!("contents of {}:\n{output}", call.subject),
        "echo" => format!("echo: {output}"),
        other => format!("{other}: {output}"),
    }
}

fn compose(conversation: &Conversation, plan: &Plan) -> String {
    let lines: Vec<String> = plan
        .calls
        .iter()
        .enumerate()
        .filter_map(|(i, call)| {
            let output = conversation.results.get(&call_id(i))?;
            Some(describe(call, output))
        })
        .collect();
    let mut answer = String::from(OFFLINE_TAG);
    if plan.calls.is_empty() {
        // Only where `give_up` is not offered: say plainly nothing was done.
        answer.push_str(
            " Nothing was done: no tool this persona is offered matches the request. The \
             offline provider is a rule-based agent, not a language model.",
        );
    } else if lines.len() == 1 && plan.notes.is_empty() {
        answer.push(' ');
        answer.push_str(&lines[0]);
    } else {
        answer.push_str(&format!(" Results of {} tool calls:", lines.len()));
        for line in &lines {
            answer.push_str("\n- ");
            answer.push_str(line);
        }
    }
    for note in &plan.notes {
        answer.push_str("\nNote: ");
        answer.push_str(note);
        answer.push('.');
    }
    answer
}

/// Condenses the answer when feedback names a byte limit; says so plainly
/// when feedback asks for something the offline provider cannot do.
fn apply_feedback(answer: String, feedback: &[String]) -> String {
    if feedback.is_empty() {
        return answer;
    }
    let Some(limit) = feedback.iter().filter_map(|f| intent::byte_limit(f)).min() else {
        let mut answer = answer;
        answer.push_str(
            "\nNote: reviewer feedback was received; the offline provider can act only on a \
             byte limit, so the answer is otherwise unchanged.",
        );
        return answer;
    };
    if answer.len() <= limit {
        return answer;
    }
    let note = format!(" [condensed to at most {limit} bytes per reviewer feedback]");
    let keep = limit.saturating_sub(note.len());
    if keep == 0 {
        return prefix(&answer, limit).to_string();
    }
    format!("{}{note}", prefix(&answer, keep))
}

/// The longest prefix of `text` of at most `max` bytes, on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ToolRegistry;

    fn request(task: &str, feedback: &[&str], tools: &[&str]) -> CompletionRequest {
        let registry = ToolRegistry::builtin(".");
        let mut content = format!("=== TASK t1: Task ===\n{task}\n");
        for (i, f) in feedback.iter().enumerate() {
            content.push_str(&format!("=== REVIEWER FEEDBACK {} ===\n{f}\n", i + 1));
        }
        content.push_str("=== END ===");
        CompletionRequest {
            messages: vec![ChatMessage::system("s"), ChatMessage::user(content)],
            tools: registry
                .specs()
                .into_iter()
                .filter(|s| tools.is_empty() || tools.contains(&s.name.as_str()))
                .collect(),
            max_tokens: None,
        }
    }

    #[tokio::test]
    async fn it_calls_one_tool_per_step_then_answers_from_the_outputs() {
        let p = OfflineProvider::new();
        assert_eq!(p.name(), "offline");
        let mut req = request("what is 6*7", &[], &[]);
        let first = p.complete(req.clone()).await.unwrap();
        assert_eq!(first.tool_calls.len(), 1);
        assert_eq!(first.tool_calls[0].name, "calc");
        assert_eq!(first.tool_calls[0].arguments, json!({"expression": "6*7"}));
        assert_eq!(first.usage, Usage::default());
        req.messages.push(ChatMessage::assistant_with_calls(
            first.content,
            first.tool_calls,
        ));
        req.messages
            .push(ChatMessage::tool_result("offline-1", "42"));
        let last = p.complete(req).await.unwrap();
        assert!(last.tool_calls.is_empty());
        assert_eq!(last.content, "[offline provider] 6*7 = 42");
    }

    #[tokio::test]
    async fn missing_tools_are_reported_not_faked() {
        let p = OfflineProvider::new();
        let reply = p
            .complete(request("what is 6*7", &[], &["echo"]))
            .await
            .unwrap();
        assert!(reply.tool_calls.is_empty());
        assert!(reply.content.starts_with(OFFLINE_TAG));
        assert!(reply.content.contains("`calc`"), "{}", reply.content);
        assert!(reply.content.contains("not offered"), "{}", reply.content);
    }

    #[tokio::test]
    async fn many_calls_are_grouped_into_three_steps() {
        let p = OfflineProvider::new();
        let mut req = request(
            "compute 1+1; compute 2+2; compute 3+3; compute 4+4; compute 5+5",
            &[],
            &[],
        );
        let mut sizes = Vec::new();
        loop {
            let reply = p.complete(req.clone()).await.unwrap();
            if reply.tool_calls.is_empty() {
                assert!(reply.content.contains("- 5+5 = 10"), "{}", reply.content);
                break;
            }
            sizes.push(reply.tool_calls.len());
            let results: Vec<_> = reply
                .tool_calls
                .iter()
                .map(|c| ChatMessage::tool_result(c.id.clone(), "10"))
                .collect();
            req.messages.push(ChatMessage::assistant_with_calls(
                reply.content,
                reply.tool_calls,
            ));
            req.messages.extend(results);
        }
        assert_eq!(sizes, [2, 2, 1]);
    }

    #[test]
    fn feedback_with_a_byte_limit_condenses_deterministically() {
        let long = format!("{OFFLINE_TAG} {}", "word ".repeat(100));
        let fb = vec!["The result is too long: keep it to at most 120 bytes.".to_string()];
        let short = apply_feedback(long.clone(), &fb);
        assert!(short.len() <= 120, "{}", short.len());
        assert!(short.starts_with(OFFLINE_TAG));
        assert!(short.ends_with("[condensed to at most 120 bytes per reviewer feedback]"));
        assert_eq!(short, apply_feedback(long.clone(), &fb));
        let tiny = apply_feedback(long, &["at most 10 bytes".to_string()]);
        assert_eq!(tiny, "[offline p");
        let unchanged = apply_feedback("ok".into(), &["be nicer".to_string()]);
        assert!(unchanged.starts_with("ok\nNote: reviewer feedback was received"));
    }
}
