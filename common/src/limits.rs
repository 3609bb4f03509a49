//! Limits every role enforces, so no input can make a swarm grow without bound.

use serde::{Deserialize, Serialize};

/// Bounds on one mission. Carried in the deployment so that the manager and
/// the workers enforce the same numbers the boss accepted the mission with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Largest mission payload accepted on `boss.missions`, in bytes.
    pub max_mission_bytes: usize,
    /// Most tasks in one plan.
    pub max_tasks: usize,
    /// Most worker personas in one plan.
    pub max_workers: usize,
    /// Largest system prompt or task description, in bytes.
    pub max_prompt_bytes: usize,
    /// Largest result a task may return, in bytes.
    pub max_result_bytes: usize,
    /// Most revisions the manager asks for before a task fails.
    pub max_revisions: u32,
    /// Most attempts (deliveries to a worker) before a task fails.
    pub max_attempts: u32,
    /// Most agent-loop steps a worker takes on one task.
    pub max_steps: u32,
    /// Longest a swarm may run, in minutes.
    pub max_execution_minutes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_mission_bytes: 256 * 1024,
            max_tasks: 1000,
            max_workers: 64,
            max_prompt_bytes: 32 * 1024,
            max_result_bytes: 64 * 1024,
            max_revisions: 2,
            max_attempts: 3,
            max_steps: 8,
            max_execution_minutes: 60,
        }
    }
}
