//! The model's other jobs in a swarm, besides doing tasks: reviewing a
//! task's result for the manager ([`review_with_provider`]) and writing the
//! final report's summary and insights ([`summarize_with_provider`]).
//!
//! Both ask for a small JSON object and read it strictly; a reply that does
//! not fit is sent back with the problem, a bounded number of times, so a
//! chatty model cannot turn into an accepted result by accident.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use swarm_common::{ErrorBody, ErrorCode, TaskOutcome, TaskStatus};

use crate::provider::{ChatMessage, CompletionRequest, Provider, ProviderError, Usage};
use crate::text::shorten;

/// How many replies a review or a summary may take to be readable.
const MAX_REPLIES: u32 = 3;
/// A result is quoted to a reviewer up to this many bytes.
const MAX_REVIEWED_BYTES: usize = 32 * 1024;
/// Each task's result is quoted to the summarizer up to this many bytes.
const MAX_SUMMARIZED_BYTES: usize = 4 * 1024;

/// What the manager asks a reviewer about.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReviewRequest {
    /// The manager's directive (the mission and how to judge it).
    pub directive: String,
    /// The task's title.
    pub task_title: String,
    /// What the task asked for.
    pub task_description: String,
    /// The result to judge.
    pub result: String,
    /// What every result must show (the plan's success criteria).
    pub criteria: Vec<String>,
}

/// A reviewer's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewVerdict {
    /// Whether the result is accepted.
    pub approved: bool,
    /// What to change, for a revision (empty when approved).
    pub feedback: String,
    /// Tokens the review used.
    pub usage: Usage,
    /// Its estimated cost in US dollars.
    pub cost_usd: f64,
}

/// A final report's prose.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// What was done, honestly.
    pub summary: String,
    /// Observations drawn from the results.
    pub insights: Vec<String>,
    /// Tokens used.
    pub usage: Usage,
    /// Estimated cost in US dollars.
    pub cost_usd: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewReply {
    approved: bool,
    #[serde(default)]
    feedback: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SummaryReply {
    summary: String,
    #[serde(default)]
    insights: Vec<String>,
}

fn provider_failed(provider: &dyn Provider, what: &str, e: &ProviderError) -> ErrorBody {
    let code = match e {
        ProviderError::Timeout(_) => ErrorCode::Timeout,
        _ => ErrorCode::Internal,
    };
    let mut body = ErrorBody::new(
        code,
        format!("{what} with {:?} failed: {e}", provider.name()),
    )
    .with_detail("provider", provider.name());
    body.retriable = e.retriable();
    body
}

/// Asks for a JSON object of type `T`, sending problems back up to
/// [`MAX_REPLIES`] replies in all.
async fn ask_json<T: DeserializeOwned>(
    provider: &dyn Provider,
    what: &str,
    mut messages: Vec<ChatMessage>,
) -> Result<(T, Usage, f64), ErrorBody> {
    let mut usage = Usage::default();
    let mut cost = 0.0;
    let mut problem = String::new();
    for _ in 0..MAX_REPLIES {
        let response = provider
            .complete(CompletionRequest {
                messages: messages.clone(),
                tools: Vec::new(),
                max_tokens: None,
            })
            .await
            .map_err(|e| provider_failed(provider, what, &e))?;
        usage.input_tokens += response.usage.input_tokens;
        usage.output_tokens += response.usage.output_tokens;
        cost += provider.cost_usd(response.usage);
        let text = crate::gates::strip_code_fence(&response.content);
        let text = match (text.find('{'), text.rfind('}')) {
            (Some(start), Some(end)) if start < end => &text[start..=end],
            _ => text,
        };
        match serde_json::from_str::<T>(text) {
            Ok(value) => return Ok((value, usage, cost)),
            Err(e) => {
                problem = e.to_string();
                messages.push(ChatMessage::assistant(response.content));
                messages.push(ChatMessage::user(format!(
                    "That reply cannot be read ({problem}). Reply with the JSON object only."
                )));
            }
        }
    }
    Err(ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!("{what}: no readable reply in {MAX_REPLIES} attempts; the last problem: {problem}"),
    )
    .with_detail("provider", provider.name()))
}

/// Asks `provider` to review a task's result. A rejection comes with
/// feedback for the revision; an approval may come with none.
pub async fn review_with_provider(
    provider: &dyn Provider,
    request: &ReviewRequest,
) -> Result<ReviewVerdict, ErrorBody> {
    let mut criteria = String::new();
    for c in &request.criteria {
        criteria.push_str(&format!("- {c}\n"));
    }
    if criteria.is_empty() {
        criteria.push_str("- the result does what the task asks, correctly and completely\n");
    }
    let system = format!(
        "You are the manager of a Swarm reviewing a worker's result. Approve it only if it \
         does what the task asks and meets every criterion; otherwise reject it and say \
         exactly what to change. Reply with one JSON object and nothing else: \
         {{\"approved\": true|false, \"feedback\": \"what to change (empty when approved)\"}}.\n\n\
         The manager's directive:\n{}\n\nThe criteria:\n{criteria}",
        request.directive
    );
    let user = format!(
        "=== TASK: {} ===\n{}\n=== RESULT ===\n{}\n=== END ===",
        request.task_title,
        request.task_description,
        shorten(&request.result, MAX_REVIEWED_BYTES)
    );
    let (reply, usage, cost_usd): (ReviewReply, _, _) = ask_json(
        provider,
        "the review",
        vec![ChatMessage::system(system), ChatMessage::user(user)],
    )
    .await?;
    let feedback = reply.feedback.trim().to_string();
    if !reply.approved && feedback.is_empty() {
        return Ok(ReviewVerdict {
            approved: false,
            feedback: "The reviewer rejected the result without saying why; check it against \
                       the task and the criteria and improve it."
                .to_string(),
            usage,
            cost_usd,
        });
    }
    Ok(ReviewVerdict {
        approved: reply.approved,
        feedback,
        usage,
        cost_usd,
    })
}

/// Asks `provider` for the final report's summary and insights, from the
/// mission and every task's outcome (results quoted in part).
pub async fn summarize_with_provider(
    provider: &dyn Provider,
    mission: &str,
    tasks: &[TaskOutcome],
) -> Result<Summary, ErrorBody> {
    let system = "You write the final report of a Swarm mission for the person who asked for \
        it. Say honestly what was achieved and what failed, citing the tasks' results. Reply \
        with one JSON object and nothing else: {\"summary\": \"a few sentences\", \
        \"insights\": [\"one observation per item\"]}.";
    let mut user = format!("=== MISSION ===\n{mission}\n");
    for t in tasks {
        user.push_str(&format!(
            "=== TASK {} ({:?}): {} ===\n{}\n",
            t.task_id,
            t.status,
            t.title,
            match &t.error {
                // A skip is an outcome of the plan, not something that went wrong.
                Some(e) if t.status == TaskStatus::Skipped => format!("skipped: {e}"),
                Some(e) if t.result.is_empty() => format!("error: {e}"),
                _ => shorten(&t.result, MAX_SUMMARIZED_BYTES),
            }
        ));
    }
    user.push_str("=== END ===");
    let (reply, usage, cost_usd): (SummaryReply, _, _) = ask_json(
        provider,
        "the summary",
        vec![ChatMessage::system(system), ChatMessage::user(user)],
    )
    .await?;
    Ok(Summary {
        summary: reply.summary,
        insights: reply.insights,
        usage,
        cost_usd,
    })
}

/// What the manager tells its model when a task failed for good and it may
/// add tasks to the running graph ([`replan_with_provider`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplanRequest {
    /// The mission's text.
    pub mission: String,
    /// The manager's directive.
    pub directive: String,
    /// The personas tasks may be assigned to, one line each (name, role,
    /// tools).
    pub personas: Vec<String>,
    /// The graph as it stands, one line per task (id, status, title, and
    /// the start of its result or its error).
    pub tasks: Vec<String>,
    /// The task that failed; empty when every task completed and the model
    /// judges whether the mission needs more against `criteria`.
    pub failed_task: String,
    /// What it was asked to do.
    pub failed_description: String,
    /// Why it failed.
    pub failed_error: String,
    /// What the finished mission must show (the plan's success criteria).
    pub criteria: Vec<String>,
}

/// The tasks a model adds after a failure.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplanAnswer {
    /// Tasks to add (none: the model sees no way on).
    pub tasks: Vec<swarm_common::TaskDefinition>,
    /// The added task that does the failed one's job.
    pub replaces: Option<String>,
    /// Why, in the model's words.
    pub reason: String,
    /// Tokens used.
    pub usage: Usage,
    /// Estimated cost in US dollars.
    pub cost_usd: f64,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct ReplanReply {
    reason: String,
    #[serde(default)]
    tasks: Vec<ReplanTask>,
    #[serde(default)]
    replaces: Option<String>,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct ReplanTask {
    task_id: String,
    title: String,
    description: String,
    assigned_to: String,
    #[serde(default)]
    dependencies: Vec<String>,
}

/// Asks `provider` for tasks to add after a task failed for good. `check`
/// says why tasks cannot be added to the graph (the manager's rules,
/// `swarm_common::replan::check_added`); a refused answer is sent back with
/// the reason, up to [`MAX_REPLIES`] answers in all.
pub async fn replan_with_provider(
    provider: &dyn Provider,
    request: &ReplanRequest,
    check: impl Fn(&[swarm_common::TaskDefinition], Option<&str>) -> Result<(), String>,
) -> Result<ReplanAnswer, ErrorBody> {
    let reply_shape = "Reply with one JSON object and nothing else: {\"reason\": \"why these \
                       tasks (or why none)\", \"tasks\": [{\"task_id\": \"...\", \"title\": \
                       \"...\", \"description\": \"...\", \"assigned_to\": \"<a persona's \
                       name>\", \"dependencies\": [\"<task ids>\"]}], \"replaces\": \"<the id \
                       of the added task whose result the tasks after the failed one should \
                       use>\"}. Task ids are new, of letters, digits, '-' and '_'; dependencies \
                       name tasks of the graph or added tasks.";
    let context = format!(
        "The mission:\n{}\n\nThe manager's directive:\n{}\n\nThe personas:\n{}\n\nThe tasks so \
         far:\n{}",
        shorten(&request.mission, 8 * 1024),
        shorten(&request.directive, 4 * 1024),
        request.personas.join("\n"),
        request.tasks.join("\n"),
    );
    let (system, user) = if request.failed_task.is_empty() {
        (
            format!(
                "You are the manager of a Swarm mission. Every one of its tasks has completed. \
                 Judge whether the results meet the mission and its success criteria; if more \
                 work is needed, you may add tasks to the task graph. {reply_shape} Leave out \
                 \"replaces\". Reply with \"tasks\": [] when the mission needs nothing more."
            ),
            format!(
                "{context}\n\nThe success criteria:\n{}",
                request
                    .criteria
                    .iter()
                    .map(|c| format!("- {c}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        )
    } else {
        (
            format!(
                "You are the manager of a Swarm mission. One of its tasks has failed for good. \
                 You may add tasks to the running task graph so that the mission can still \
                 succeed: for example a task that reaches the same goal another way. \
                 {reply_shape} Reply with \"tasks\": [] when no task can help."
            ),
            format!(
                "{context}\n\nThe task that failed: {}\nIt was asked to: {}\nIt failed because: {}",
                request.failed_task,
                shorten(&request.failed_description, 8 * 1024),
                shorten(&request.failed_error, 4 * 1024),
            ),
        )
    };
    let mut messages = vec![ChatMessage::system(system), ChatMessage::user(user)];
    let mut usage = Usage::default();
    let mut cost_usd = 0.0;
    let mut problem = String::new();
    for _ in 0..MAX_REPLIES {
        let (reply, u, c): (ReplanReply, _, _) =
            ask_json(provider, "replanning", messages.clone()).await?;
        usage.input_tokens += u.input_tokens;
        usage.output_tokens += u.output_tokens;
        cost_usd += c;
        let tasks: Vec<swarm_common::TaskDefinition> = reply
            .tasks
            .iter()
            .map(|t| swarm_common::TaskDefinition {
                estimated_minutes: None,
                task_id: t.task_id.clone(),
                title: t.title.clone(),
                description: t.description.clone(),
                assigned_to: t.assigned_to.clone(),
                dependencies: t.dependencies.clone(),
                priority: None,
                max_result_bytes: None,
                gates: Vec::new(),
                condition: None,
                map: None,
                on_failure: None,
            })
            .collect();
        let replaces = reply.replaces.clone().filter(|r| !r.is_empty());
        match check(&tasks, replaces.as_deref()) {
            Ok(()) => {
                return Ok(ReplanAnswer {
                    tasks,
                    replaces,
                    reason: reply.reason,
                    usage,
                    cost_usd,
                });
            }
            Err(p) => {
                problem = p;
                messages.push(ChatMessage::assistant(
                    serde_json::to_string(&reply).unwrap_or_default(),
                ));
                messages.push(ChatMessage::user(format!(
                    "Those tasks cannot be added: {problem}. Reply with the corrected JSON object \
                     only."
                )));
            }
        }
    }
    Err(ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "replanning: no usable tasks in {MAX_REPLIES} answers; the last problem: {problem}"
        ),
    )
    .with_detail("provider", provider.name()))
}
