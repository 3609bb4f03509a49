//! Limits every role enforces, so no input can make a swarm grow without bound.
//!
//! The plan's bounds are checked once, where a plan comes in
//! ([`crate::validate::validate_plan`]: the boss at intake and after
//! planning, the manager at deployment), and refused with `limit_exceeded`
//! or `validation_failed` and a short reason. The gate builders check the
//! gates' bounds again, so a plan that never passed intake still cannot make
//! a worker or a manager do unbounded work.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Bounds on one mission. Carried in the deployment so that the manager and
/// the workers enforce the same numbers the boss accepted the mission with.
/// Every field has a default, so a message from a build that knew fewer
/// limits still decodes (with today's defaults for the rest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct Limits {
    /// Largest mission payload accepted on `boss.missions`, in bytes.
    pub max_mission_bytes: usize,
    /// Most tasks in one plan.
    pub max_tasks: usize,
    /// Most worker personas in one plan.
    pub max_workers: usize,
    /// Largest system prompt, manager directive or task description, in bytes.
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
    /// Deepest nesting of child swarms ([`crate::hierarchy`]): 0 allows no
    /// sub-managers, 1 lets a mission's swarm have children but not
    /// grandchildren (default 3).
    pub max_swarm_depth: u32,
    /// Most tasks of one plan assigned to sub-managers, so most child swarms
    /// one swarm runs at a time (default 16).
    pub max_child_swarms: usize,
    /// Most asks for help one task makes of its collaborators, over all its
    /// attempts, accepted or refused (default 4; [`crate::collaborate`]).
    pub max_collaborator_asks: u32,
    /// Most times the manager's model adds tasks to one swarm after a task
    /// failed for good (default 2; [`crate::replan`]).
    pub max_replans: u32,
    /// Bounds on what the plan's tasks carry: titles, gates, their schemas
    /// and regular expressions. Behind a pointer, so that the messages that
    /// carry limits stay small (`{"task": {...}}` on the wire).
    pub task: Box<TaskLimits>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_mission_bytes: 256 * 1024,
            max_tasks: 100_000,
            max_workers: 64,
            max_prompt_bytes: 32 * 1024,
            max_result_bytes: 64 * 1024,
            max_revisions: 2,
            max_attempts: 3,
            max_steps: 8,
            max_execution_minutes: 60,
            max_swarm_depth: 3,
            max_child_swarms: 16,
            max_collaborator_asks: 4,
            max_replans: 2,
            task: Box::default(),
        }
    }
}

/// Bounds on what a plan's tasks carry ([`Limits::task`]). Every field has
/// a default, so a message from a build that knew fewer still decodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TaskLimits {
    /// Longest task title or worker role, in bytes (default 256). Titles are
    /// one-line names shown in every progress line, status table and report;
    /// the text of a task belongs in its description.
    pub max_title_bytes: usize,
    /// Most gates on one task (default 16). Every gate runs on every result,
    /// on the worker and again on the manager.
    pub max_gates_per_task: usize,
    /// Most bytes one gate's description takes as JSON (default 16 KiB): a
    /// JSON schema, an SQL table list, a command line.
    pub max_gate_bytes: usize,
    /// Deepest nesting of a `json_schema` gate's schema, in levels of
    /// objects and arrays (default 16). The schema library checks a schema
    /// against its meta-schema level by level and keeps what it compiled for
    /// each level for the life of the process: about 5 MiB a level for draft
    /// 2020-12 (645 MiB for a schema 90 levels deep). Measured at 16 levels
    /// in the costliest shape (`agent/tests/gate_memory.rs`): a process that
    /// checks such a schema peaks 71 MiB above where it started (75 MiB in a
    /// debug build), and 135 MiB once it has checked one in each of the five
    /// drafts; that is kept once per process, not once per schema.
    pub max_schema_depth: usize,
    /// Most nodes (JSON values) in a `json_schema` gate's schema, each
    /// `$ref` counted as the size of what it points to (default 4,096). The
    /// schema library inlines references, so a few `$ref`s that each use
    /// another twice expand exponentially (20 such levels took gigabytes);
    /// this bounds the expanded schema. A `$ref` that leads back to itself
    /// (a recursive schema) is refused outright: it expands without end.
    pub max_schema_nodes: usize,
    /// Longest regular expression, in bytes (default 1 KiB): a `regex`
    /// gate's pattern, and each `pattern` and `patternProperties` key of a
    /// JSON schema.
    pub max_regex_bytes: usize,
    /// Largest compiled form of one regular expression, in bytes (default
    /// 1 MiB; the `regex` crate's `size_limit`). A short pattern can compile
    /// to a large automaton (`\w{1000}`); this refuses it while it compiles.
    pub max_regex_compiled_bytes: usize,
    /// Largest cache of the lazy DFA a regular expression matches with, in
    /// bytes (default 2 MiB; the `regex` crate's `dfa_size_limit`).
    pub max_regex_dfa_bytes: usize,
    /// Most regular expressions on one task (default 32): its `regex` gates
    /// and the patterns in its JSON schemas. Each is compiled once per task
    /// run, off the async threads (up to about 10 ms for one at the
    /// compiled-size limit).
    pub max_regexes_per_task: usize,
    /// Most regular expressions in one plan (default 1,024), so that checking
    /// a plan's patterns at intake stays cheap (6,000 regex gates once held a
    /// worker's thread for 19.5 s).
    pub max_regexes_per_plan: usize,
    /// Longest a `command` gate may run, in seconds (default 300).
    pub max_command_gate_secs: u64,
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self {
            max_title_bytes: 256,
            max_gates_per_task: 16,
            max_gate_bytes: 16 * 1024,
            max_schema_depth: 16,
            max_schema_nodes: 4096,
            max_regex_bytes: 1024,
            max_regex_compiled_bytes: 1024 * 1024,
            max_regex_dfa_bytes: 2 * 1024 * 1024,
            max_regexes_per_task: 32,
            max_regexes_per_plan: 1024,
            max_command_gate_secs: 300,
        }
    }
}
