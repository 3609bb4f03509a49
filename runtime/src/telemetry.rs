//! Log and trace setup: the filter comes from `RUST_LOG` (default `info`),
//! the format from `--log-format`. Colours only on a terminal and never with
//! `NO_COLOR` set (to anything but the empty string), so log files hold
//! plain text.
//!
//! Traces go out over OTLP/HTTP (protobuf) only when an endpoint is set
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! and neither `OTEL_SDK_DISABLED=true` nor `OTEL_TRACES_EXPORTER=none`):
//! the same `tracing` spans as the logs, through tracing-opentelemetry.
//! Without one nothing is installed, so traces cost nothing
//! ([`crate::trace`] adds no headers either). The SDK reads the rest of the
//! standard variables itself (`OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_RESOURCE_ATTRIBUTES`, the exporter's headers and timeout).

use std::io::IsTerminal as _;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::{EnvFilter, Layer as _, layer::SubscriberExt as _};

use crate::config::LogFormat;

/// The tracer provider, when traces are exported: kept to flush it at the
/// end ([`shutdown`]).
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// How long [`shutdown`] waits for the last spans to be exported.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Installs the global subscriber for a service (default filter `info`),
/// exporting its spans as `service` when an OTLP endpoint is set; a second
/// call is a no-op.
pub fn init(format: LogFormat, service: &str) {
    init_with(format, "info,async_nats=warn", Some(service));
}

/// Installs the global subscriber with `default_filter` where `RUST_LOG` is
/// unset (the CLI uses `warn`, so its own output is not drowned in logs);
/// with a `service` name, spans are exported too when an endpoint is set.
pub fn init_with(format: LogFormat, default_filter: &str, service: Option<&str>) {
    let mut filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // The spans made for the trace alone never reach the logs (and, with no
    // trace to send them to, are never made).
    if let Ok(off) = format!("{}=off", crate::trace::TARGET).parse() {
        filter = filter.add_directive(off);
    }
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
    );
    let exporting = service.filter(|_| exporting(|name| std::env::var(name).ok()));
    let Some(service) = exporting else {
        // No traces: the subscriber exactly as without OpenTelemetry.
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr);
        let _ = match format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().try_init(),
        };
        return;
    };
    let provider = match provider(service) {
        Ok(p) => p,
        Err(e) => {
            // Traces are not worth refusing to start over: say so, log on.
            eprintln!("traces are off: cannot set up the OTLP exporter: {e}");
            return init_with(format, default_filter, None);
        }
    };
    let tracer = provider.tracer("swarm");
    // Spans of Swarm's own crates at `info` and above, whatever `RUST_LOG`
    // says of the logs; never the exporter's own HTTP client (a span per
    // export would be exported in turn).
    let spans = Targets::new()
        .with_target(crate::trace::TARGET, LevelFilter::INFO)
        .with_target("swarm", LevelFilter::INFO)
        .with_target("boss", LevelFilter::INFO)
        .with_target("manager", LevelFilter::INFO)
        .with_target("worker", LevelFilter::INFO)
        .with_target("gateway", LevelFilter::INFO);
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        .with_location(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(spans);
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => tracing::subscriber::set_global_default(
            tracing_subscriber::registry()
                .with(otel)
                .with(fmt.with_filter(filter)),
        ),
        LogFormat::Json => tracing::subscriber::set_global_default(
            tracing_subscriber::registry()
                .with(otel)
                .with(fmt.json().with_filter(filter)),
        ),
    };
    if installed.is_ok() {
        let _ = PROVIDER.set(provider);
        crate::trace::enable();
    }
}

/// Whether spans are exported, by the standard variables (`var` reads one).
fn exporting(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let none = var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    !disabled
        && !none
        && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The tracer provider: OTLP/HTTP with protobuf, batched on the SDK's own
/// thread, named `service` unless `OTEL_SERVICE_NAME` says otherwise.
fn provider(service: &str) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    // The exporter's reqwest has rustls without a provider of its own: the
    // ring one the workspace already builds (for an https endpoint).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none_or(|v| v.is_empty()) {
        resource = resource.with_service_name(service.to_owned());
    }
    let resource = resource
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

/// Exports the spans still queued and stops the exporter (each role's and
/// the CLI's last step); does nothing when traces are off. Blocks for at
/// most a few seconds.
pub fn shutdown() {
    if let Some(provider) = PROVIDER.get()
        && let Err(e) = provider.shutdown_with_timeout(FLUSH_TIMEOUT)
    {
        eprintln!("cannot export the last spans: {e}");
    }
}

/// Whether logs may be coloured: on a terminal, unless `NO_COLOR` is set to
/// anything but the empty string.
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::{colour, exporting};

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

    #[test]
    fn spans_are_exported_only_to_a_configured_endpoint_and_never_when_disabled() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(!exporting(env(&[])), "off by default");
        assert!(exporting(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://localhost:4318"
        )])));
        assert!(exporting(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://localhost:4318/v1/traces"
        )])));
        assert!(!exporting(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])));
        assert!(!exporting(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ])));
        assert!(!exporting(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])));
    }
}
