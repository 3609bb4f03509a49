//! What makes an attempt a success: the one rule the worker applies before it
//! calls a result `Completed` and the manager's reviewer applies again before
//! it accepts one.
//!
//! A tool call that failed or was refused fails the attempt unless the agent
//! recovered from it: a later call of the same tool in the same run
//! succeeded (a model that mistyped a path and then read the right file).
//! The synthetic tools an agent loop offers (progress, questions, the final
//! answer, giving up) are not work and never count.

use crate::messages::StepRecord;

/// The synthetic tool that reports progress.
pub const REPORT_PROGRESS: &str = "report_progress";
/// The synthetic tool that asks a person a question.
pub const REQUEST_INPUT: &str = "request_input";
/// The synthetic tool that gives the final answer.
pub const RETURN_RESULT: &str = "return_result";
/// The synthetic tool with which an agent says it cannot do the task, and why.
pub const GIVE_UP: &str = "give_up";

/// The synthetic tool that asks a collaborator persona for help
/// ([`crate::collaborate`]). An ask that got no answer is not a failure of
/// the asking task: the agent reads why and decides; a collaborator task
/// that failed fails the mission as any task does.
pub const ASK_COLLABORATOR: &str = "ask_collaborator";

/// The synthetic tool with which an agent records a skill it found (a
/// named how-to) for later tasks ([`crate::skill`]).
pub const RECORD_SKILL: &str = "record_skill";

/// Every synthetic tool: calls of these are the loop's own, not work.
pub const SYNTHETIC_TOOLS: [&str; 6] = [
    REPORT_PROGRESS,
    REQUEST_INPUT,
    RETURN_RESULT,
    GIVE_UP,
    ASK_COLLABORATOR,
    RECORD_SKILL,
];

/// The first tool step that failed and that no later call of the same tool
/// made good, if any: the reason an attempt did not do what it was asked.
pub fn unrecovered_tool_failure(steps: &[StepRecord]) -> Option<&StepRecord> {
    steps.iter().enumerate().find_map(|(i, step)| {
        let tool = step.tool.as_deref()?;
        if !step.is_error || SYNTHETIC_TOOLS.contains(&tool) {
            return None;
        }
        let recovered = steps[i + 1..]
            .iter()
            .any(|later| later.tool.as_deref() == Some(tool) && !later.is_error);
        (!recovered).then_some(step)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: u32, tool: Option<&str>, is_error: bool) -> StepRecord {
        StepRecord {
            step: n,
            tool: tool.map(str::to_string),
            arguments: None,
            observation: format!("step {n}"),
            is_error,
        }
    }

    #[test]
    fn a_failed_call_fails_the_attempt_until_the_same_tool_succeeds() {
        let failed = [step(1, Some("read_file"), true), step(2, None, false)];
        assert_eq!(
            unrecovered_tool_failure(&failed).map(|s| s.step),
            Some(1),
            "an answer after a failed call does not make it good"
        );
        let other_tool = [
            step(1, Some("read_file"), true),
            step(2, Some("count"), false),
        ];
        assert_eq!(
            unrecovered_tool_failure(&other_tool).map(|s| s.step),
            Some(1)
        );
        let recovered = [
            step(1, Some("read_file"), true),
            step(2, Some("read_file"), false),
            step(3, None, false),
        ];
        assert_eq!(unrecovered_tool_failure(&recovered), None);
        let failed_again = [
            step(1, Some("read_file"), false),
            step(2, Some("read_file"), true),
        ];
        assert_eq!(
            unrecovered_tool_failure(&failed_again).map(|s| s.step),
            Some(2)
        );
    }

    #[test]
    fn the_loops_own_tools_are_not_work() {
        let steps = [step(1, Some(REPORT_PROGRESS), true), step(2, None, false)];
        assert_eq!(unrecovered_tool_failure(&steps), None);
        assert_eq!(unrecovered_tool_failure(&[]), None);
    }
}
