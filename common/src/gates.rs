//! Gates as data: what a task's output must satisfy, described so the
//! description can travel in a plan and an assignment. The agent crate
//! builds and runs them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A gate, described as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateSpec {
    /// The output is JSON valid against `schema`.
    JsonSchema {
        /// The JSON schema.
        schema: serde_json::Value,
    },
    /// The output matches `pattern` (or, with `forbid`, does not).
    Regex {
        /// A regular expression (Rust `regex` syntax).
        pattern: String,
        /// Fail when the pattern matches, instead of when it does not.
        #[serde(default)]
        forbid: bool,
        /// Said in the reason, for people and the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// The output's length, in characters, is within bounds.
    Length {
        /// The fewest characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min_chars: Option<usize>,
        /// The most characters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_chars: Option<usize>,
    },
    /// The output is SQL that parses, and (with `schema`) names only
    /// tables and columns that exist.
    Sql {
        /// `generic` (default), `postgresql`, `mysql`, `sqlite`, `mssql`, ...
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dialect: Option<String>,
        /// Table name to its column names.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<BTreeMap<String, Vec<String>>>,
    },
    /// An external command reads the output on stdin; exit 0 passes, any
    /// other status fails with its stderr.
    Command {
        /// The program.
        program: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Seconds before it is killed and the gate fails.
        #[serde(default = "default_command_secs")]
        timeout_secs: u64,
    },
}

fn default_command_secs() -> u64 {
    30
}

impl GateSpec {
    /// The gate's name: its kind, with the detail that tells two apart.
    pub fn name(&self) -> String {
        match self {
            GateSpec::JsonSchema { .. } => "json_schema".to_string(),
            GateSpec::Regex {
                pattern, forbid, ..
            } => {
                format!("regex{}({pattern})", if *forbid { "_forbid" } else { "" })
            }
            GateSpec::Length { .. } => "length".to_string(),
            GateSpec::Sql { .. } => "sql".to_string(),
            GateSpec::Command { program, .. } => format!("command({program})"),
        }
    }
}
