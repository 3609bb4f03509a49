//! Log setup: the filter comes from `RUST_LOG` (default `info`), the format
//! from `--log-format`.

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
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
