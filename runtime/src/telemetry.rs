//! Log setup: the filter comes from `RUST_LOG` (default `info`), the format
//! from `--log-format`. Colours only on a terminal and never with
//! `NO_COLOR` set (to anything but the empty string), so log files hold
//! plain text.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber for a service (default filter `info`);
/// a second call is a no-op.
pub fn init(format: LogFormat) {
    init_with(format, "info,async_nats=warn");
}

/// Installs the global subscriber with `default_filter` where `RUST_LOG` is
/// unset (the CLI uses `warn`, so its own output is not drowned in logs).
pub fn init_with(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Whether logs may be coloured: on a terminal, unless `NO_COLOR` is set to
/// anything but the empty string.
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::colour;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(!colour(false, None), "a log file gets no escape codes");
        assert!(!colour(true, Some("1".into())));
        assert!(
            colour(true, Some("".into())),
            "an empty NO_COLOR does not count"
        );
    }
}
