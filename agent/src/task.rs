//! A task as an agent sees it ([`AgentTask`]): what to do, the persona to
//! play, the results of the tasks it depends on ([`ContextItem`]) and the
//! reviewer's feedback; and the explicit tool call a task's description may
//! be instead of prose ([`ExplicitCall`]). The agent loop runs these; the
//! prompt lays them out; the planners read the calls.

use serde::{Deserialize, Serialize};
use swarm_common::WorkerDeploymentPlan;

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
