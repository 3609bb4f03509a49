//! The layout of the user message that carries a task: written by the agent
//! loop, read back by the offline provider. Keeping both halves here keeps
//! them in step.
//!
//! ```text
//! Complete the task below. ...
//! === TASK t2: Count the words ===
//! count the words of the previous result
//! === RESULT OF EARLIER TASK t1: Read notes.txt ===
//! alpha beta
//! === REVIEWER FEEDBACK 1 ===
//! Keep it to at most 100 bytes.
//! === END ===
//! ```
//!
//! A section's text is kept exactly, so counting the words of an earlier
//! result counts that result and nothing else.

use crate::task::{AgentTask, ContextItem};

const OPEN: &str = "=== ";
const CLOSE: &str = " ===";
const TASK: &str = "TASK ";
const CONTEXT: &str = "RESULT OF EARLIER TASK ";
const FEEDBACK: &str = "REVIEWER FEEDBACK ";
const END: &str = "=== END ===";

const PREAMBLE: &str = "Complete the task below. Results of the tasks it depends on and \
reviewer feedback on earlier versions of your answer follow it when there are any; \
address every feedback item. Reply with the final result only.";

/// A task message taken apart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ParsedTask {
    pub title: String,
    pub description: String,
    pub context: Vec<ContextItem>,
    pub feedback: Vec<String>,
}

impl ParsedTask {
    /// The text that says what to do: the description, or the title when
    /// there is no description.
    pub fn instruction(&self) -> &str {
        if self.description.trim().is_empty() {
            &self.title
        } else {
            &self.description
        }
    }

    /// The earlier results as one text.
    pub fn context_text(&self) -> String {
        self.context
            .iter()
            .map(|c| c.result.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The user message for a task.
pub fn render_task_message(task: &AgentTask) -> String {
    let mut out = String::new();
    out.push_str(PREAMBLE);
    out.push('\n');
    let section = |out: &mut String, header: String, body: &str| {
        out.push_str(OPEN);
        out.push_str(&header);
        out.push_str(CLOSE);
        out.push('\n');
        out.push_str(body);
        out.push('\n');
    };
    section(
        &mut out,
        format!(
            "{TASK}{}: {}",
            one_line(&task.task_id),
            one_line(&task.title)
        ),
        &task.description,
    );
    for c in &task.context {
        section(
            &mut out,
            format!("{CONTEXT}{}: {}", one_line(&c.task_id), one_line(&c.title)),
            &c.result,
        );
    }
    for (i, f) in task.feedback.iter().enumerate() {
        section(&mut out, format!("{FEEDBACK}{}", i + 1), f);
    }
    out.push_str(END);
    out
}

enum Section {
    Task { title: String },
    Context { task_id: String, title: String },
    Feedback,
}

fn header(line: &str) -> Option<Section> {
    let inner = line.strip_prefix(OPEN)?.strip_suffix(CLOSE)?;
    if let Some(rest) = inner.strip_prefix(TASK) {
        let (_, title) = rest.split_once(": ").unwrap_or((rest, ""));
        return Some(Section::Task {
            title: title.to_string(),
        });
    }
    if let Some(rest) = inner.strip_prefix(CONTEXT) {
        let (id, title) = rest.split_once(": ").unwrap_or((rest, ""));
        return Some(Section::Context {
            task_id: id.to_string(),
            title: title.to_string(),
        });
    }
    if let Some(n) = inner.strip_prefix(FEEDBACK)
        && n.chars().all(|c| c.is_ascii_digit())
    {
        return Some(Section::Feedback);
    }
    None
}

fn finish(parsed: &mut ParsedTask, done: Option<(Section, Vec<&str>)>) {
    let Some((section, lines)) = done else { return };
    let body = lines.join("\n");
    match section {
        Section::Task { title } => {
            parsed.title = title;
            parsed.description = body;
        }
        Section::Context { task_id, title } => parsed.context.push(ContextItem {
            task_id,
            title,
            result: body,
        }),
        Section::Feedback => parsed.feedback.push(body),
    }
}

/// Reads a task message back. Text that is not in this layout is taken as
/// the description, whole.
pub(crate) fn parse_task_message(text: &str) -> ParsedTask {
    let mut parsed = ParsedTask::default();
    let mut current: Option<(Section, Vec<&str>)> = None;
    let mut seen_header = false;
    for line in text.split('\n') {
        if line == END {
            finish(&mut parsed, current.take());
            continue;
        }
        if let Some(section) = header(line) {
            seen_header = true;
            finish(&mut parsed, current.take());
            current = Some((section, Vec::new()));
            continue;
        }
        if let Some((_, lines)) = current.as_mut() {
            lines.push(line);
        }
    }
    finish(&mut parsed, current.take());
    if !seen_header {
        parsed.description = text.to_string();
    }
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> AgentTask {
        AgentTask {
            task_id: "t2".into(),
            title: "Count\nwords".into(),
            description: "count the words of the previous result\n".into(),
            persona: swarm_common::WorkerDeploymentPlan {
                name: "text-analyst".into(),
                role: String::new(),
                system_prompt: String::new(),
                tools: vec![],
                collaborators: vec![],
                pool: "general".into(),
                a2a_url: None,
                a2a_credential: None,
                skill: None,
            },
            context: vec![
                ContextItem {
                    task_id: "t1".into(),
                    title: "Read: notes".into(),
                    result: "alpha beta\n\ngamma".into(),
                },
                ContextItem {
                    task_id: "t0".into(),
                    title: String::new(),
                    result: String::new(),
                },
            ],
            feedback: vec!["Keep it to at most 100 bytes.".into(), "two\nlines".into()],
            max_steps: 8,
            max_result_bytes: 1000,
        }
    }

    #[test]
    fn a_task_message_reads_back_exactly() {
        let t = task();
        let parsed = parse_task_message(&render_task_message(&t));
        assert_eq!(parsed.title, "Count words");
        assert_eq!(parsed.description, t.description);
        assert_eq!(parsed.context, t.context);
        assert_eq!(parsed.feedback, t.feedback);
        assert_eq!(parsed.context_text(), "alpha beta\n\ngamma\n\n");
    }

    #[test]
    fn free_text_is_the_description() {
        let parsed = parse_task_message("what is 2+2?\n=== not a header");
        assert_eq!(parsed.instruction(), "what is 2+2?\n=== not a header");
        assert!(parsed.context.is_empty() && parsed.feedback.is_empty());
    }
}
