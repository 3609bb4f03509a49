//! How a client call ended, as the exit code of the `swarm` command: the
//! enum of codes, the error that carries a code through `anyhow`
//! ([`fail`], [`WithExit`]), and the code an error calls for
//! ([`of_error`]). The calls of [`crate::client`] give their errors a code
//! (no boss answered: [`Exit::Unreachable`]; no final report in time:
//! [`Exit::WaitTimedOut`], ...), so a command or a gateway can tell them
//! apart. README.md's "Exit codes" lists the same codes and meanings (a
//! test keeps the two in step).

use std::fmt;

use swarm_common::SwarmStatus;

/// How a `swarm` command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exit {
    /// The mission completed (or the command did what it was asked).
    Completed = 0,
    /// An error: a refused mission, no such swarm, bad input, ...
    Error = 1,
    /// The command line could not be parsed (clap's own code).
    Usage = 2,
    /// The mission failed.
    Failed = 3,
    /// The mission was cancelled.
    Cancelled = 4,
    /// The mission ran out of time.
    TimedOut = 5,
    /// The system could not be reached: no NATS server, or no boss answered.
    Unreachable = 6,
    /// The wait ended before the final report arrived (`--timeout`).
    WaitTimedOut = 7,
}

impl Exit {
    /// Every code, in order.
    pub const ALL: [Exit; 8] = [
        Exit::Completed,
        Exit::Error,
        Exit::Usage,
        Exit::Failed,
        Exit::Cancelled,
        Exit::TimedOut,
        Exit::Unreachable,
        Exit::WaitTimedOut,
    ];

    /// The process exit code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The exit of a command that followed a mission to its final report.
    pub fn of_status(status: SwarmStatus) -> Exit {
        match status {
            SwarmStatus::Completed => Exit::Completed,
            SwarmStatus::Failed => Exit::Failed,
            SwarmStatus::Cancelled => Exit::Cancelled,
            SwarmStatus::TimedOut => Exit::TimedOut,
            // A report is only published for an ended swarm; a running one
            // here would be a bug elsewhere, and is not a success.
            SwarmStatus::Running => Exit::Error,
        }
    }

    /// What the code means, as documented.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Completed => "the mission completed (other commands: done)",
            Exit::Error => "an error: refused mission, no such swarm, bad input",
            Exit::Usage => "usage: the command line could not be parsed",
            Exit::Failed => "the mission failed",
            Exit::Cancelled => "the mission was cancelled",
            Exit::TimedOut => "the mission timed out",
            Exit::Unreachable => "could not reach the system: no NATS server, no boss answered",
            Exit::WaitTimedOut => "the wait (--timeout) ended before the final report",
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e.code())
    }
}

/// An error that ends the command with a given exit code. It shows as the
/// error it wraps.
#[derive(Debug)]
pub struct Coded {
    /// The exit code.
    pub exit: Exit,
    error: anyhow::Error,
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

impl std::error::Error for Coded {}

/// An error with the exit code `exit` and the message `message`.
pub fn fail(exit: Exit, message: impl fmt::Display) -> anyhow::Error {
    anyhow::Error::new(Coded {
        exit,
        error: anyhow::anyhow!("{message}"),
    })
}

/// Gives an error result an exit code.
pub trait WithExit<T> {
    /// The error, if any, ends the command with `exit`.
    fn exit_with(self, exit: Exit) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> WithExit<T> for Result<T, E> {
    fn exit_with(self, exit: Exit) -> anyhow::Result<T> {
        self.map_err(|e| {
            anyhow::Error::new(Coded {
                exit,
                error: e.into(),
            })
        })
    }
}

/// The exit code an error calls for: the one it was given, 6 for a failed
/// connection to NATS, 1 otherwise.
pub fn of_error(error: &anyhow::Error) -> Exit {
    for cause in error.chain() {
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.exit;
        }
        if let Some(swarm_runtime::RuntimeError::Connect { .. }) =
            cause.downcast_ref::<swarm_runtime::RuntimeError>()
        {
            return Exit::Unreachable;
        }
        if cause.downcast_ref::<async_nats::ConnectError>().is_some() {
            return Exit::Unreachable;
        }
    }
    Exit::Error
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn codes_are_distinct_and_in_order() {
        for (i, e) in Exit::ALL.iter().enumerate() {
            assert_eq!(usize::from(e.code()), i);
        }
    }

    #[test]
    fn a_final_status_maps_to_its_code() {
        assert_eq!(Exit::of_status(SwarmStatus::Completed).code(), 0);
        assert_eq!(Exit::of_status(SwarmStatus::Failed).code(), 3);
        assert_eq!(Exit::of_status(SwarmStatus::Cancelled).code(), 4);
        assert_eq!(Exit::of_status(SwarmStatus::TimedOut).code(), 5);
    }

    #[test]
    fn the_code_survives_context_and_connection_errors_are_unreachable() {
        let e = fail(Exit::WaitTimedOut, "no report").context("watching");
        assert_eq!(of_error(&e), Exit::WaitTimedOut);
        assert_eq!(format!("{e:#}"), "watching: no report");
        let e: anyhow::Result<()> = Err(swarm_runtime::RuntimeError::Connect {
            url: "nats://127.0.0.1:1".into(),
            source: "IO error".into(),
        })
        .context("connecting");
        assert_eq!(of_error(&e.unwrap_err()), Exit::Unreachable);
        assert_eq!(of_error(&anyhow::anyhow!("other")), Exit::Error);
        let e: anyhow::Result<()> = Err(anyhow::anyhow!("inner")).exit_with(Exit::Failed);
        assert_eq!(of_error(&e.unwrap_err()), Exit::Failed);
    }

    #[test]
    fn the_readme_documents_every_code() {
        let readme = include_str!("../../README.md");
        for e in Exit::ALL {
            let row = format!("| {} | {} |", e.code(), e.meaning());
            assert!(readme.contains(&row), "{row:?} missing from README.md");
        }
    }
}
