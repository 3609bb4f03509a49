//! The offline planner: a mission's text to a task graph, by its layout and
//! wording alone, with no model.
//!
//! - Numbered steps (`1.`, `2)`) form a chain: each depends on the one before.
//! - Bulleted items (`-`, `*`, `•`) and plain lines are independent (fan-out).
//! - Within one step or line, "then" splits it into sub-tasks in sequence.
//! - A line that is an explicit tool call (`{"tool": ..., "arguments": ...}`)
//!   is one task, verbatim.
//! - A line ending in `:` beside other lines is a heading, not a task.
//!
//! Each task gets a persona by the kind of work its text asks for.
//!
//! [`plan_with_provider`] asks a model instead: for a JSON plan matching
//! [`plan_schema`], validated like any plan plus "only tools that exist",
//! with the problems sent back to the model a bounded number of times.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::Deserialize;
use swarm_common::{
    ErrorBody, ErrorCode, Limits, SwarmDeploymentPlan, TaskDefinition, WorkerDeploymentPlan,
};

use crate::agent_loop::ExplicitCall;
use crate::intent::{self, Intent};
use crate::provider::{ChatMessage, CompletionRequest, Provider};

/// Who made plans from [`offline_plan`].
pub const OFFLINE_PLANNER: &str = "offline-planner";

/// Longest task title, in characters.
const MAX_TITLE_CHARS: usize = 60;
/// The mission is quoted in the manager's directive up to this many bytes.
const MAX_DIRECTIVE_MISSION_BYTES: usize = 4096;

/// A persona the offline planner can staff.
struct PersonaKind {
    name: &'static str,
    role: &'static str,
    system_prompt: &'static str,
    /// Its tools; `None` for every tool.
    tools: Option<&'static [&'static str]>,
}

/// Specialists, in order of preference: the first whose tools cover a task gets it.
static SPECIALISTS: &[PersonaKind] = &[
    PersonaKind {
        name: "calculator",
        role: "Evaluates arithmetic exactly",
        system_prompt: "You are calculator, a worker in a Swarm that evaluates arithmetic. \
            Evaluate every expression with the calc tool rather than in your head, keep the \
            expression exactly as the task states it, and reply with the expression and its \
            value. If the expression is malformed, say what is wrong with it.",
        tools: Some(&["calc"]),
    },
    PersonaKind {
        name: "text-analyst",
        role: "Measures text: counts and checksums",
        system_prompt: "You are text-analyst, a worker in a Swarm that measures text. Use \
            count for words, lines, characters and bytes, checksum for SHA-256 digests and \
            echo to repeat text exactly. When the task refers to earlier results, measure \
            the text of those results. Report the numbers the tools return, never estimates.",
        tools: Some(&["count", "checksum", "echo"]),
    },
    PersonaKind {
        name: "file-analyst",
        role: "Reads, lists and searches files in the workspace",
        system_prompt: "You are file-analyst, a worker in a Swarm that examines the files of \
            the shared workspace. Use list_files to see what is there, read_file to read, \
            grep to search, and count or checksum to measure. Quote paths as the tools \
            report them, base every statement on a tool's output, and say plainly when a \
            file is missing or a path is refused.",
        tools: Some(&["read_file", "list_files", "grep", "count", "checksum"]),
    },
];

/// The persona for tasks no specialist covers.
static GENERALIST: PersonaKind = PersonaKind {
    name: "generalist",
    role: "Handles tasks that need several kinds of work",
    system_prompt: "You are generalist, a worker in a Swarm that takes tasks needing \
            several kinds of work. Use whichever tools fit the task, base your answer on \
            their outputs, and when no tool fits, say so plainly rather than guess.",
    tools: None,
};

/// How a line of the mission is marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Numbered,
    Bullet,
    Plain,
}

fn marked(line: &str) -> (Marker, &str) {
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && digits <= 4 {
        let rest = &line[digits..];
        if let Some(after) = rest.strip_prefix('.').or_else(|| rest.strip_prefix(')'))
            && (after.is_empty() || after.starts_with(char::is_whitespace))
        {
            return (Marker::Numbered, after.trim());
        }
    }
    for bullet in ["-", "*", "•"] {
        if let Some(after) = line.strip_prefix(bullet)
            && after.starts_with(char::is_whitespace)
        {
            return (Marker::Bullet, after.trim());
        }
    }
    (Marker::Plain, line)
}

/// A short title: one line, no trailing punctuation, at most 60 characters.
fn title_of(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let trimmed = one_line.trim_end_matches(['.', ',', ';', ':']);
    let mut chars = trimmed.chars();
    let mut title: String = match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    };
    if title.chars().count() > MAX_TITLE_CHARS {
        let cut: String = title.chars().take(MAX_TITLE_CHARS - 1).collect();
        // Cut at a word boundary when one is not too far back.
        let cut = match cut.rfind(' ') {
            Some(space) if space >= cut.len() / 2 => cut[..space].trim_end().to_string(),
            _ => cut,
        };
        title = format!("{cut}…");
    }
    title
}

/// The tools a task's text needs.
fn required_tools(description: &str) -> BTreeSet<String> {
    if let Some(call) = ExplicitCall::parse(description) {
        return BTreeSet::from([call.tool]);
    }
    intent::recognise(description)
        .iter()
        .map(|i: &Intent| i.tool().to_string())
        .collect()
}

/// The persona for a task: the first specialist whose tools (of those that
/// exist) cover what the task needs, else the generalist.
fn persona_for(description: &str, tool_names: &[String]) -> &'static PersonaKind {
    let required = required_tools(description);
    for p in SPECIALISTS {
        let available = persona_tools(p, tool_names);
        if !required.is_empty() && required.iter().all(|t| available.contains(t)) {
            return p;
        }
    }
    &GENERALIST
}

fn persona_tools(p: &PersonaKind, tool_names: &[String]) -> Vec<String> {
    match p.tools {
        Some(tools) => tools
            .iter()
            .filter(|t| tool_names.iter().any(|n| n == *t))
            .map(|t| t.to_string())
            .collect(),
        None => tool_names.to_vec(),
    }
}

/// Plans a mission without a model. Deterministic: the same mission and
/// tools give the same plan.
pub fn offline_plan(mission: &str, tool_names: &[String]) -> SwarmDeploymentPlan {
    let lines: Vec<&str> = mission
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let several = lines.len() > 1;
    let mut tasks: Vec<TaskDefinition> = Vec::new();
    let mut personas: Vec<&'static PersonaKind> = Vec::new();
    let mut last_numbered: Option<String> = None;
    let mut chained = false;
    let mut add =
        |tasks: &mut Vec<TaskDefinition>, text: &str, title: String, deps: Vec<String>| {
            let persona = persona_for(text, tool_names);
            if !personas.iter().any(|p| p.name == persona.name) {
                personas.push(persona);
            }
            let id = format!("t{}", tasks.len() + 1);
            tasks.push(TaskDefinition {
                task_id: id.clone(),
                title,
                description: text.to_string(),
                assigned_to: persona.name.to_string(),
                dependencies: deps,
                priority: None,
                max_result_bytes: None,
                gates: Vec::new(),
            });
            id
        };
    for line in &lines {
        let (marker, text) = marked(line);
        if text.is_empty() || (several && marker == Marker::Plain && text.ends_with(':')) {
            continue;
        }
        let first_deps = match (&marker, &last_numbered) {
            (Marker::Numbered, Some(prev)) => {
                chained = true;
                vec![prev.clone()]
            }
            _ => Vec::new(),
        };
        let last_id = if let Some(call) = ExplicitCall::parse(text) {
            let title = title_of(&format!("Call {} {}", call.tool, call.arguments));
            add(&mut tasks, text, title, first_deps)
        } else {
            let pieces = intent::split_then(text);
            let mut previous: Option<String> = None;
            for piece in pieces {
                let deps = match previous.take() {
                    Some(p) => {
                        chained = true;
                        vec![p]
                    }
                    None => first_deps.clone(),
                };
                previous = Some(add(&mut tasks, &piece, title_of(&piece), deps));
            }
            match previous {
                Some(id) => id,
                None => continue,
            }
        };
        if marker == Marker::Numbered {
            last_numbered = Some(last_id);
        }
    }
    if tasks.is_empty() {
        let text = mission.trim();
        let text = if text.is_empty() {
            "(the mission is empty)"
        } else {
            text
        };
        add(&mut tasks, text, title_of(text), Vec::new());
    }
    let names: Vec<String> = personas.iter().map(|p| p.name.to_string()).collect();
    let workers = personas
        .iter()
        .map(|p| WorkerDeploymentPlan {
            name: p.name.to_string(),
            role: p.role.to_string(),
            system_prompt: p.system_prompt.to_string(),
            tools: persona_tools(p, tool_names),
            collaborators: names.iter().filter(|n| *n != p.name).cloned().collect(),
            pool: swarm_common::default_pool(),
        })
        .collect();
    let success_criteria = tasks
        .iter()
        .map(|t| format!("{} completes with a non-empty result", t.task_id))
        .collect();
    SwarmDeploymentPlan {
        manager_directive: directive(mission, &tasks, chained),
        workers,
        tasks,
        success_criteria,
        planner: OFFLINE_PLANNER.to_string(),
    }
}

fn directive(mission: &str, tasks: &[TaskDefinition], chained: bool) -> String {
    let mut quoted = mission.trim();
    let mut cut = "";
    if quoted.len() > MAX_DIRECTIVE_MISSION_BYTES {
        let mut end = MAX_DIRECTIVE_MISSION_BYTES;
        while !quoted.is_char_boundary(end) {
            end -= 1;
        }
        quoted = &quoted[..end];
        cut = " […]";
    }
    let independent = tasks.iter().filter(|t| t.dependencies.is_empty()).count();
    let shape = match (tasks.len(), chained) {
        (1, _) => "a single task".to_string(),
        (n, false) => format!("{n} independent tasks that may run in parallel"),
        (n, true) if independent == 1 => format!("{n} tasks in sequence"),
        (n, true) => format!("{n} tasks, some in sequence and {independent} starting at once"),
    };
    format!(
        "Achieve this mission: {quoted}{cut}\n\nRun the plan's {shape}, each after the tasks \
         it depends on, and give every task the results of its dependencies. Review each \
         result against the success criteria: ask for a revision when a result is empty or \
         larger than the limit, and report honestly which tasks completed and which failed."
    )
}

// ---------------------------------------------------------------- model planning

/// The JSON schema of a plan, as given to a model. These types mirror
/// `swarm_common`'s plan types (which, being the protocol crate, derive no
/// schema); a test checks that they stay in step.
#[allow(dead_code)] // Read only through the derived schema.
mod schema {
    use super::*;

    /// A team and a task graph for a mission.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(deny_unknown_fields)]
    pub(super) struct Plan {
        /// What the manager must achieve and how to judge the results.
        manager_directive: String,
        /// The worker personas: each a name, a role, a system prompt and tools.
        workers: Vec<Worker>,
        /// The tasks. Every task is assigned to one worker by name.
        tasks: Vec<Task>,
        /// What the finished mission must show.
        #[serde(default)]
        success_criteria: Vec<String>,
    }

    /// A worker persona.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(deny_unknown_fields)]
    pub(super) struct Worker {
        /// A unique name, such as `researcher`.
        name: String,
        /// What it specialises in.
        role: String,
        /// The system prompt it works under.
        system_prompt: String,
        /// Names of the tools it may call; each must be one of the available tools.
        tools: Vec<String>,
        /// Names of other workers it works with.
        #[serde(default)]
        collaborators: Vec<String>,
    }

    /// A task.
    #[derive(Deserialize, JsonSchema)]
    #[schemars(deny_unknown_fields)]
    pub(super) struct Task {
        /// A unique id: letters, digits, `-` and `_` only, such as `t1`.
        task_id: String,
        /// A short title.
        title: String,
        /// What to do, fully enough for the worker to do it alone.
        description: String,
        /// The name of the worker that does it.
        assigned_to: String,
        /// Ids of tasks whose results it needs; they run first.
        #[serde(default)]
        dependencies: Vec<String>,
    }
}

/// The JSON schema a model's plan must match.
pub fn plan_schema() -> serde_json::Value {
    schemars::schema_for!(schema::Plan).to_value()
}

/// The reply's JSON object: the whole text, or a fenced block, or the span
/// from the first `{` to the last `}`.
fn json_of(reply: &str) -> &str {
    let fenced = crate::gates::strip_code_fence(reply);
    if fenced.starts_with('{') {
        return fenced;
    }
    match (reply.find('{'), reply.rfind('}')) {
        (Some(start), Some(end)) if start < end => &reply[start..=end],
        _ => reply.trim(),
    }
}

/// Why a reply is not a usable plan, in words for the model.
fn check_plan_reply(
    reply: &str,
    tool_names: &[String],
    limits: &Limits,
) -> Result<SwarmDeploymentPlan, String> {
    let value: serde_json::Value = serde_json::from_str(json_of(reply))
        .map_err(|e| format!("the reply is not a JSON object: {e}"))?;
    let validator = jsonschema::validator_for(&plan_schema())
        .map_err(|e| format!("internal error: the plan schema is invalid: {e}"))?;
    let errors = crate::gates::schema_errors(&validator, &value);
    if !errors.is_empty() {
        return Err(format!(
            "the plan does not match the schema: {}",
            errors.join("; ")
        ));
    }
    let plan: SwarmDeploymentPlan =
        serde_json::from_value(value).map_err(|e| format!("the plan cannot be read: {e}"))?;
    if plan.tasks.is_empty() {
        return Err("the plan has no tasks".to_string());
    }
    swarm_common::validate::validate_plan(&plan, limits).map_err(|e| e.message)?;
    let unknown: Vec<String> = plan
        .workers
        .iter()
        .flat_map(|w| {
            w.tools
                .iter()
                .filter(|t| !tool_names.contains(t))
                .map(move |t| format!("{t:?} (worker {:?})", w.name))
        })
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "these tools do not exist: {}; the available tools are {}",
            unknown.join(", "),
            tool_names.join(", ")
        ));
    }
    Ok(plan)
}

fn planning_prompt(tool_names: &[String], limits: &Limits) -> String {
    let schema = serde_json::to_string_pretty(&plan_schema()).unwrap_or_default();
    format!(
        "You are the planner of a Swarm: you design a team of worker agents and a graph of \
         tasks that together achieve a mission.\n\n\
         Reply with one JSON object and nothing else, matching this JSON schema:\n{schema}\n\n\
         Rules:\n\
         - at most {} workers and {} tasks; each system prompt and task description at most {} bytes;\n\
         - every task is assigned to a worker of the plan by name, and depends only on tasks of the plan, without cycles;\n\
         - task ids are letters, digits, '-' and '_';\n\
         - workers may use only these tools: {}.",
        limits.max_workers,
        limits.max_tasks,
        limits.max_prompt_bytes,
        if tool_names.is_empty() {
            "(none)".to_string()
        } else {
            tool_names.join(", ")
        },
    )
}

/// Asks `provider` for a plan for `mission` whose workers use only
/// `tool_names`, within `limits`. A reply that is not a valid plan gets its
/// problems sent back, and the model tries again, up to `max_attempts`
/// replies in all. The plan's `planner` is the provider's name.
pub async fn plan_with_provider(
    provider: &dyn Provider,
    mission: &str,
    tool_names: &[String],
    limits: &Limits,
    max_attempts: u32,
) -> Result<SwarmDeploymentPlan, ErrorBody> {
    let max_attempts = max_attempts.max(1);
    let mut messages = vec![
        ChatMessage::system(planning_prompt(tool_names, limits)),
        ChatMessage::user(format!("The mission:\n{mission}")),
    ];
    let mut last_problem = String::new();
    for attempt in 1..=max_attempts {
        let response = provider
            .complete(CompletionRequest {
                messages: messages.clone(),
                tools: Vec::new(),
                max_tokens: None,
            })
            .await
            .map_err(|e| {
                let mut body = ErrorBody::new(
                    match e {
                        crate::provider::ProviderError::Timeout(_) => ErrorCode::Timeout,
                        _ => ErrorCode::Internal,
                    },
                    format!("planning with {:?} failed: {e}", provider.name()),
                )
                .with_detail("provider", provider.name());
                body.retriable = e.retriable();
                body
            })?;
        match check_plan_reply(&response.content, tool_names, limits) {
            Ok(mut plan) => {
                plan.planner = provider.name().to_string();
                return Ok(plan);
            }
            Err(problem) => {
                tracing::info!(attempt, %problem, "the model's plan was refused");
                messages.push(ChatMessage::assistant(response.content));
                messages.push(ChatMessage::user(format!(
                    "That plan cannot be used: {problem}\nReply with the corrected plan as one \
                     JSON object matching the schema, and nothing else."
                )));
                last_problem = problem;
            }
        }
    }
    Err(ErrorBody::new(
        ErrorCode::ValidationFailed,
        format!(
            "the model gave no valid plan in {max_attempts} attempts; the last problem: {last_problem}"
        ),
    )
    .with_detail("provider", provider.name())
    .with_detail("attempts", max_attempts))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<String> {
        crate::tools::ToolRegistry::builtin(".").names()
    }

    fn plan(mission: &str) -> SwarmDeploymentPlan {
        let plan = offline_plan(mission, &tools());
        swarm_common::validate::validate_plan(&plan, &Limits::default()).unwrap();
        assert_eq!(plan.planner, "offline-planner");
        assert_eq!(plan.success_criteria.len(), plan.tasks.len());
        plan
    }

    /// Missions of about `bytes` bytes in the shapes that made the planner
    /// rescan the text: one long line without "then", a line of many
    /// "then"s, many short lines, unclosed quotes, "and" after "and", long
    /// runs of arithmetic, many paths in one clause.
    fn large_missions(bytes: usize) -> Vec<(&'static str, String)> {
        let fill = |unit: &str| {
            let mut s = unit.repeat(bytes / unit.len() + 1);
            let end = (0..=bytes)
                .rev()
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(0);
            s.truncate(end);
            s
        };
        vec![
            (
                "one long line",
                fill("count the words in notes.txt and the lines of it, "),
            ),
            ("many thens", fill("read a.txt then ")),
            ("many lines", fill("- count the words in notes.txt\n")),
            ("numbered steps", fill("1. compute 2 + 2\n")),
            ("unclosed single quotes", fill("echo 'a 'b ")),
            ("unclosed curly quotes", fill("say “a ")),
            ("and and", fill("and ")),
            ("arithmetic", format!("what is {}", fill("1 + ( "))),
            ("many paths", fill("count a1.txt b2.md c3.rs ")),
            ("context words", fill("the previous result ")),
            ("grep words", format!("grep for {}", fill("x "))),
            ("list words", format!("list {}", fill("in the "))),
        ]
    }

    /// CPU time this thread has used: what the planner spends, whatever else
    /// the machine runs (tests run side by side; a shared machine is busy).
    /// Wall time where Linux's per-thread figure is not at hand.
    fn thread_time(wall: std::time::Instant) -> std::time::Duration {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .map(std::time::Duration::from_nanos)
            .unwrap_or_else(|| wall.elapsed())
    }

    /// The time `offline_plan` takes on `mission`.
    fn plan_time(mission: &str) -> (std::time::Duration, usize) {
        let wall = std::time::Instant::now();
        let before = thread_time(wall);
        let plan = offline_plan(mission, &tools());
        (thread_time(wall) - before, plan.tasks.len())
    }

    /// The offline planner does work linear in the mission's length: a
    /// 256 KB mission (the most `boss.missions` accepts) of any shape plans
    /// in well under a second of CPU, in debug builds too (the quadratic
    /// planner took about 10 s on one in release, a minute in debug), and
    /// four times the text takes about four times as long, not sixteen.
    #[test]
    fn planning_is_linear_in_the_missions_length() {
        let quarter: Vec<_> = large_missions(64 * 1024);
        for ((shape, mission), (_, smaller)) in large_missions(256 * 1024).into_iter().zip(quarter)
        {
            let (took, tasks) = plan_time(&mission);
            let (took_quarter, _) = plan_time(&smaller);
            assert!(tasks > 0, "{shape}");
            eprintln!("{shape}: {took:?} ({tasks} tasks); a quarter of it: {took_quarter:?}");
            assert!(
                took < std::time::Duration::from_secs(1),
                "{shape}: {took:?}"
            );
            // Linear work grows 4 times; the quadratic planner's grew 16.
            assert!(
                took < took_quarter * 9 + std::time::Duration::from_millis(20),
                "{shape}: {took_quarter:?} for 64 KB, {took:?} for 256 KB"
            );
        }
    }

    fn deps(plan: &SwarmDeploymentPlan) -> Vec<(String, Vec<String>)> {
        plan.tasks
            .iter()
            .map(|t| (t.task_id.clone(), t.dependencies.clone()))
            .collect()
    }

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn numbered_steps_form_a_chain() {
        let p =
            plan("1. Read notes.txt\n2) Count the words of the previous result\n3. What is 6*7?");
        assert_eq!(
            deps(&p),
            [
                ("t1".into(), ids(&[])),
                ("t2".into(), ids(&["t1"])),
                ("t3".into(), ids(&["t2"])),
            ]
        );
        assert_eq!(p.tasks[0].description, "Read notes.txt");
        assert_eq!(p.tasks[0].assigned_to, "file-analyst");
        assert_eq!(p.tasks[1].assigned_to, "text-analyst");
        assert_eq!(p.tasks[2].assigned_to, "calculator");
        assert_eq!(p.tasks[2].title, "What is 6*7?");
        assert!(p.manager_directive.contains("3 tasks in sequence"));
    }

    #[test]
    fn bullets_and_plain_lines_fan_out() {
        let p = plan(
            "Analyse the workspace:\n- list the files in src\n* count the words in a.txt\n• compute 2^10\nchecksum of b.txt",
        );
        assert_eq!(p.tasks.len(), 4);
        assert!(p.tasks.iter().all(|t| t.dependencies.is_empty()));
        assert_eq!(p.tasks[0].description, "list the files in src");
        assert_eq!(p.tasks[0].title, "List the files in src");
        let names: Vec<&str> = p.workers.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["file-analyst", "text-analyst", "calculator"]);
        assert!(p.manager_directive.contains("4 independent tasks"));
        assert!(p.manager_directive.contains("Analyse the workspace:"));
    }

    #[test]
    fn then_splits_a_line_into_a_sequence() {
        let p =
            plan("Read notes.txt, then count the words of the previous result; then compute 1+1");
        assert_eq!(
            deps(&p),
            [
                ("t1".into(), ids(&[])),
                ("t2".into(), ids(&["t1"])),
                ("t3".into(), ids(&["t2"])),
            ]
        );
        assert_eq!(
            p.tasks[1].description,
            "count the words of the previous result"
        );
        assert_eq!(p.tasks[2].description, "compute 1+1");
    }

    #[test]
    fn mixed_layouts_combine() {
        let p = plan(
            "1. list the files\n- what is 2+2\n2. read a.txt then checksum it\n- echo \"done then\"",
        );
        assert_eq!(
            deps(&p),
            [
                ("t1".into(), ids(&[])),
                ("t2".into(), ids(&[])),
                ("t3".into(), ids(&["t1"])),
                ("t4".into(), ids(&["t3"])),
                ("t5".into(), ids(&[])),
            ]
        );
        assert_eq!(p.tasks[4].description, "echo \"done then\"");
        assert!(p.manager_directive.contains("some in sequence"));
    }

    #[test]
    fn explicit_tool_call_lines_stay_verbatim() {
        let line = r#"{"tool": "calc", "arguments": {"expression": "1 then 2"}}"#;
        let p = plan(&format!("1. count the words in a.txt\n2. {line}"));
        assert_eq!(p.tasks.len(), 2);
        assert_eq!(p.tasks[1].description, line);
        assert_eq!(p.tasks[1].dependencies, ids(&["t1"]));
        assert_eq!(p.tasks[1].assigned_to, "calculator");
        assert!(p.tasks[1].title.starts_with("Call calc"));
        assert!(p.tasks[1].title.chars().count() <= 60);
        let p = plan(r#"{"tool": "list_files"}"#);
        assert_eq!(p.tasks[0].assigned_to, "file-analyst");
    }

    #[test]
    fn a_one_line_mission_is_one_task() {
        let mission = "Write a haiku about the sea, with feeling and a great deal of care for the sound of every word.";
        let p = plan(mission);
        assert_eq!(p.tasks.len(), 1);
        assert_eq!(p.tasks[0].description, mission);
        assert_eq!(p.tasks[0].assigned_to, "generalist");
        assert!(
            p.tasks[0].title.chars().count() <= 60,
            "{}",
            p.tasks[0].title
        );
        assert!(p.tasks[0].title.ends_with('…'));
        assert_eq!(p.workers.len(), 1);
        assert_eq!(p.workers[0].tools, tools());
        assert_eq!(p.workers[0].pool, "general");
        assert!(p.workers[0].collaborators.is_empty());
        assert_eq!(p.success_criteria, ["t1 completes with a non-empty result"]);
        assert!(p.manager_directive.contains("a single task"));
    }

    #[test]
    fn the_plan_schema_mirrors_the_plan_types() {
        let schema = plan_schema();
        let props = |v: &serde_json::Value| -> BTreeSet<String> {
            v["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        let keys = |v: serde_json::Value| -> BTreeSet<String> {
            v.as_object().unwrap().keys().cloned().collect()
        };
        let plan = offline_plan("1. count words in a.txt\n2. what is 1+1", &tools());
        let mut task = plan.tasks[0].clone();
        task.priority = Some(1);
        task.max_result_bytes = Some(1);
        let defs = &schema["$defs"];
        assert!(props(&schema).is_subset(&keys(serde_json::to_value(&plan).unwrap())));
        assert!(
            props(&defs["Worker"])
                .is_subset(&keys(serde_json::to_value(&plan.workers[0]).unwrap()))
        );
        assert!(props(&defs["Task"]).is_subset(&keys(serde_json::to_value(&task).unwrap())));
        // The schema itself is one the gate library accepts.
        assert!(jsonschema::validator_for(&schema).is_ok());
        // An offline plan, less the fields a model does not write, passes it.
        let mut value = serde_json::to_value(&plan).unwrap();
        value.as_object_mut().unwrap().remove("planner");
        for w in value["workers"].as_array_mut().unwrap() {
            w.as_object_mut().unwrap().remove("pool");
        }
        let reply = value.to_string();
        let checked = check_plan_reply(&reply, &tools(), &Limits::default()).unwrap();
        assert_eq!(checked.tasks, plan.tasks);
    }

    #[test]
    fn personas_only_get_tools_that_exist() {
        let p = offline_plan("what is 2+2", &ids(&["echo", "count"]));
        assert_eq!(p.tasks[0].assigned_to, "generalist");
        assert_eq!(p.workers[0].tools, ids(&["echo", "count"]));
        let p = offline_plan("count words in a.txt", &tools());
        assert_eq!(p.workers[0].tools, ids(&["count", "checksum", "echo"]));
        assert_eq!(
            offline_plan("  ", &tools()).tasks[0].description,
            "(the mission is empty)"
        );
    }
}
