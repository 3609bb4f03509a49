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
//! Each task gets a persona by the kind of work its text asks for (the
//! tools [`super::intent`] reads in it).

use std::collections::BTreeSet;

use swarm_common::{SwarmDeploymentPlan, TaskDefinition, WorkerDeploymentPlan};

use super::intent::{self, Intent};
use crate::task::ExplicitCall;

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

/// A persona the offline planner staffs, with the tools it gets of those
/// that exist: what an agent card offers as a skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonaOffer {
    /// The persona's name.
    pub name: &'static str,
    /// What it does.
    pub role: &'static str,
    /// Its tools.
    pub tools: Vec<String>,
}

/// Every persona the offline planner may staff given `tool_names`, the
/// specialists first; a specialist left with no tool is left out.
pub fn personas(tool_names: &[String]) -> Vec<PersonaOffer> {
    SPECIALISTS
        .iter()
        .chain(std::iter::once(&GENERALIST))
        .map(|p| PersonaOffer {
            name: p.name,
            role: p.role,
            tools: persona_tools(p, tool_names),
        })
        .filter(|p| !p.tools.is_empty())
        .collect()
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
                estimated_minutes: None,
                on_failure: None,
                task_id: id.clone(),
                title,
                description: text.to_string(),
                assigned_to: persona.name.to_string(),
                dependencies: deps,
                priority: None,
                max_result_bytes: None,
                gates: Vec::new(),
                condition: None,
                map: None,
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
            a2a_url: None,
            a2a_credential: None,
            skill: None,
        })
        .collect();
    let success_criteria = tasks
        .iter()
        .map(|t| format!("{} completes with a non-empty result", t.task_id))
        .collect();
    SwarmDeploymentPlan {
        seed: Default::default(),
        sub_managers: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<String> {
        crate::tools::ToolRegistry::builtin(".").names()
    }

    fn plan(mission: &str) -> SwarmDeploymentPlan {
        let plan = offline_plan(mission, &tools());
        swarm_common::validate::validate_plan(&plan, &swarm_common::Limits::default()).unwrap();
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
