//! Flags that turn on the optional tools and command gates, for a worker
//! binary to `#[command(flatten)]`. Everything is off by default.

use std::sync::Arc;
use std::time::Duration;

use super::{FetchConfig, MemoryStore, ShellConfig, ToolsConfig};
use crate::gates::{CommandPolicy, GateOptions};

/// Which programs tasks' `command` gates may run here, for a worker or a
/// manager binary to `#[command(flatten)]`. None by default.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CommandGateArgs {
    /// A program tasks' command gates may run, named exactly as the gates
    /// name it (`jq`, `/usr/local/bin/check-report`); repeat or separate
    /// with commas. Allow only checkers whose arguments cannot run code:
    /// the arguments come from the mission.
    #[arg(
        long = "command-gate-allow",
        env = "SWARM_COMMAND_GATE_ALLOW",
        value_delimiter = ','
    )]
    pub command_gate_allow: Vec<String>,
    /// UNSAFE, for development only: let command gates run any program, so
    /// that whoever can submit a mission can run programs on this host.
    #[arg(long = "allow-command-gates", env = "SWARM_ALLOW_COMMAND_GATES")]
    pub allow_command_gates: bool,
}

impl CommandGateArgs {
    /// The policy these flags set.
    pub fn policy(&self) -> CommandPolicy {
        if self.allow_command_gates {
            return CommandPolicy::Any;
        }
        let programs: std::collections::BTreeSet<String> = self
            .command_gate_allow
            .iter()
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        if programs.is_empty() {
            CommandPolicy::Refuse
        } else {
            CommandPolicy::Allow(programs)
        }
    }
}

/// The optional tools' flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ToolArgs {
    /// Offer `write_file` (writes inside the workspace).
    #[arg(long = "tool-write-file", env = "SWARM_TOOL_WRITE_FILE")]
    pub write_file: bool,
    /// Offer `http_fetch` for these hosts (`example.com`, `*.example.com`, `*`); repeat or separate with commas.
    #[arg(
        long = "fetch-allow-host",
        env = "SWARM_FETCH_ALLOW_HOSTS",
        value_delimiter = ','
    )]
    pub fetch_allow_hosts: Vec<String>,
    /// Let `http_fetch` reach loopback and private addresses.
    #[arg(long = "fetch-allow-private", env = "SWARM_FETCH_ALLOW_PRIVATE")]
    pub fetch_allow_private: bool,
    /// Offer `shell` (every call waits for a person's approval).
    #[arg(long = "tool-shell", env = "SWARM_TOOL_SHELL")]
    pub shell: bool,
    /// Seconds a `shell` command may run.
    #[arg(
        long = "shell-timeout",
        env = "SWARM_SHELL_TIMEOUT",
        default_value_t = 60
    )]
    pub shell_timeout: u64,
    /// Which programs tasks' command gates may run on this worker.
    #[command(flatten)]
    pub command_gates: CommandGateArgs,
}

impl ToolArgs {
    /// The tools these flags enable, with `memory` offered when a store is given.
    pub fn tools_config(&self, memory: Option<Arc<dyn MemoryStore>>) -> ToolsConfig {
        let hosts: Vec<String> = self
            .fetch_allow_hosts
            .iter()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .collect();
        ToolsConfig {
            write_file: self.write_file,
            http_fetch: (!hosts.is_empty()).then(|| FetchConfig {
                allowed_hosts: hosts,
                allow_private: self.fetch_allow_private,
                ..FetchConfig::default()
            }),
            shell: self.shell.then(|| ShellConfig {
                timeout: Duration::from_secs(self.shell_timeout.max(1)),
                ..ShellConfig::default()
            }),
            memory,
        }
    }

    /// How gates are built on this worker: command gates run in its
    /// workspace.
    pub fn gate_options(&self, workspace_root: &std::path::Path) -> GateOptions {
        GateOptions {
            commands: self.command_gates.policy(),
            command_dir: Some(workspace_root.to_path_buf()),
            ..GateOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tools: ToolArgs,
    }

    #[test]
    fn flags_enable_tools() {
        let cli = Cli::try_parse_from(["worker"]).unwrap();
        let c = cli.tools.tools_config(None);
        assert!(!c.write_file && c.http_fetch.is_none() && c.shell.is_none() && c.memory.is_none());
        let cli = Cli::try_parse_from([
            "worker",
            "--tool-write-file",
            "--fetch-allow-host",
            "docs.rs,*.example.com",
            "--tool-shell",
            "--shell-timeout",
            "5",
        ])
        .unwrap();
        let c = cli.tools.tools_config(None);
        assert!(c.write_file);
        assert_eq!(
            c.http_fetch.unwrap().allowed_hosts,
            ["docs.rs", "*.example.com"]
        );
        assert_eq!(c.shell.unwrap().timeout, Duration::from_secs(5));
        assert_eq!(
            cli.tools.gate_options(std::path::Path::new(".")).commands,
            CommandPolicy::Refuse
        );
        let cli = Cli::try_parse_from([
            "worker",
            "--command-gate-allow",
            "jq",
            "--command-gate-allow",
            "/usr/bin/xmllint,",
        ])
        .unwrap();
        assert_eq!(
            cli.tools.command_gates.policy(),
            CommandPolicy::Allow(["/usr/bin/xmllint".to_string(), "jq".to_string()].into())
        );
        let cli = Cli::try_parse_from(["worker", "--allow-command-gates"]).unwrap();
        assert_eq!(cli.tools.command_gates.policy(), CommandPolicy::Any);
    }
}
