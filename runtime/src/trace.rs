//! One trace per mission: the W3C trace context (`traceparent`,
//! `tracestate`) in the headers of A2AP messages and of the requests the
//! roles make to each other, put there from the current span ([`inject`],
//! called by [`crate::wire::headers`]) and read back into the span that
//! processes a message ([`follow`], [`link`]).
//!
//! All of it is off unless [`crate::telemetry`] installed the OpenTelemetry
//! layer: then no header is written or read, and the spans that serve the
//! trace alone (target [`TARGET`], made by [`otel_span!`]) are disabled
//! callsites, whose fields are never evaluated; so a process without an
//! OTLP endpoint pays one relaxed load per message (docs/decisions.md, "One
//! trace per mission"). Logs never show those spans.

use std::sync::atomic::{AtomicBool, Ordering};

use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The W3C header that carries the trace and the sender's span.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C header that carries vendors' trace state.
pub const TRACESTATE: &str = "tracestate";

/// The target of the spans that serve the trace alone: disabled in the
/// logs' filter always, enabled in the trace's when it is installed. The
/// agent crate, which has no dependency on this one, writes it out.
pub const TARGET: &str = "swarm_otel";

/// The messaging system, as OpenTelemetry's semantic conventions name NATS.
pub const MESSAGING_SYSTEM: &str = "nats";

static ON: AtomicBool = AtomicBool::new(false);

/// Turns propagation on: the OpenTelemetry layer is installed.
pub(crate) fn enable() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether spans are exported (an OTLP endpoint is set).
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// An `info` span of target [`TARGET`]: it exists only while traces are
/// exported, and never shows in the logs.
#[macro_export]
macro_rules! otel_span {
    ($($arg:tt)*) => {
        ::tracing::info_span!(target: $crate::trace::TARGET, $($arg)*)
    };
}

struct Inject<'a>(&'a mut HeaderMap);

impl Injector for Inject<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct Extract<'a>(&'a HeaderMap);

impl Extractor for Extract<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_ref()).collect()
    }
}

/// A span for processing one message (or request) from `subject`, taken
/// by the consumer or queue group `group`, named `name` and of `kind`
/// (`consumer`, or `server` for a request), with the messaging attributes
/// NATS.Net sets, continuing the trace the message's `headers` carry.
/// [`tracing::Span::none`] while traces are off.
pub fn process(
    name: &str,
    kind: &'static str,
    subject: &str,
    group: &str,
    headers: Option<&HeaderMap>,
) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "process",
        otel.name = name,
        otel.kind = kind,
        messaging.system = MESSAGING_SYSTEM,
        messaging.operation.type = "process",
        messaging.destination.name = subject,
        messaging.consumer.group.name = group,
        swarm.id = tracing::field::Empty,
        swarm.task_id = tracing::field::Empty,
    );
    follow(&span, headers);
    span
}

/// Gives a span made elsewhere (for logs as well) the attributes of
/// [`process`] and its sender's parent, when traces are on. The span must
/// declare the fields (as `tracing::field::Empty`) and not be entered yet.
pub fn processing(
    span: &Span,
    name: &str,
    kind: &'static str,
    subject: &str,
    group: &str,
    headers: Option<&HeaderMap>,
) {
    if !enabled() {
        return;
    }
    span.record("otel.name", name);
    span.record("otel.kind", kind);
    span.record("messaging.system", MESSAGING_SYSTEM);
    span.record("messaging.operation.type", "process");
    span.record("messaging.destination.name", subject);
    span.record("messaging.consumer.group.name", group);
    follow(span, headers);
}

/// A span for processing a batch of messages at once (the manager applies
/// a swarm's queued events together): a child of the first that carries a
/// trace context, linked to the others, with the batch's size. The flag
/// says whether one carried a context (else the span has no parent yet,
/// and a [`Cause`] may give it one).
pub fn process_batch<'a>(
    name: &str,
    group: &str,
    messages: impl IntoIterator<Item = (&'a str, Option<&'a HeaderMap>)>,
) -> (Span, bool) {
    if !enabled() {
        return (Span::none(), false);
    }
    let span = tracing::info_span!(
        target: TARGET,
        "process",
        otel.name = name,
        otel.kind = "consumer",
        messaging.system = MESSAGING_SYSTEM,
        messaging.operation.type = "process",
        messaging.destination.name = tracing::field::Empty,
        messaging.consumer.group.name = group,
        messaging.batch.message_count = tracing::field::Empty,
        swarm.id = tracing::field::Empty,
    );
    let mut count = 0_u64;
    let mut parent = None;
    for (subject, headers) in messages {
        count += 1;
        let Some(cx) = extract(headers) else { continue };
        if parent.is_none() {
            span.record("messaging.destination.name", subject);
            parent = Some(cx);
        } else {
            span.add_link(cx.span().span_context().clone());
        }
    }
    span.record(
        "messaging.batch.message_count",
        i64::try_from(count).unwrap_or(i64::MAX),
    );
    let followed = parent.is_some_and(|cx| span.set_parent(cx).is_ok());
    (span, followed)
}

/// Where a span that no message caused belongs: the span context of an
/// earlier one, or of a mission whose trace id is all that is known.
#[derive(Debug, Clone)]
pub struct Cause(opentelemetry::Context);

impl Cause {
    /// The context of `span`, to make later spans its children.
    pub fn of(span: &Span) -> Option<Cause> {
        let cx = span.context();
        cx.span()
            .span_context()
            .is_valid()
            .then(|| Cause(cx.clone()))
    }

    /// A remote parent in the trace `trace_id` (as [`trace_id`] writes
    /// it), when no span of that trace is at hand: the span made under it
    /// stays in the mission's trace, its parent one no process exported.
    pub fn in_trace(trace_id: &str) -> Option<Cause> {
        use opentelemetry::trace::{SpanContext, TraceFlags, TraceId, TraceState};
        use opentelemetry_sdk::trace::{IdGenerator as _, RandomIdGenerator};
        if !enabled() || !is_trace_id(trace_id) {
            return None;
        }
        let id = TraceId::from_hex(trace_id).ok()?;
        let sc = SpanContext::new(
            id,
            RandomIdGenerator::default().new_span_id(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        Some(Cause(
            opentelemetry::Context::new().with_remote_span_context(sc),
        ))
    }

    /// Makes `span` (not yet entered) a child of this cause.
    pub fn parent(&self, span: &Span) {
        let _ = span.set_parent(self.0.clone());
    }
}

/// Adds the current span's trace context to `headers`, when traces are on
/// and the span belongs to one.
pub fn inject(headers: &mut HeaderMap) {
    if enabled() {
        inject_from(&Span::current(), headers);
    }
}

/// Adds `span`'s trace context to `headers`, if it has one.
pub fn inject_from(span: &Span, headers: &mut HeaderMap) {
    let cx = span.context();
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(&cx, &mut Inject(headers));
    }
}

/// The trace context a message's headers carry, if traces are on and it
/// carries a valid one.
pub fn extract(headers: Option<&HeaderMap>) -> Option<opentelemetry::Context> {
    let headers = headers.filter(|h| enabled() && h.get(TRACEPARENT).is_some())?;
    let cx = TraceContextPropagator::new().extract(&Extract(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Makes `span` (not yet entered) a child of the span that sent the
/// message with `headers`: the processing continues its sender's trace.
/// Returns whether it did.
pub fn follow(span: &Span, headers: Option<&HeaderMap>) -> bool {
    match extract(headers) {
        Some(cx) => span.set_parent(cx).is_ok(),
        None => false,
    }
}

/// Links `span` to the span that sent the message with `headers`: for a
/// span that processes many messages at once, whose parent is only one of
/// them.
pub fn link(span: &Span, headers: Option<&HeaderMap>) {
    if let Some(cx) = extract(headers) {
        span.add_link(cx.span().span_context().clone());
    }
}

/// The trace id of `span` (32 lowercase hex digits), if traces are on and
/// it belongs to a trace.
pub fn trace_id(span: &Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| sc.trace_id().to_string())
}

/// The trace id of the current span ([`trace_id`]).
pub fn current_trace_id() -> Option<String> {
    trace_id(&Span::current())
}

/// Whether `id` is a trace id as W3C writes it: 32 lowercase hex digits,
/// not all zero.
pub fn is_trace_id(id: &str) -> bool {
    id.len() == 32
        && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && id.bytes().any(|b| b != b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_read_or_written_while_traces_are_off() {
        let mut headers = HeaderMap::new();
        inject(&mut headers);
        assert!(headers.get(TRACEPARENT).is_none());
        headers.insert(
            TRACEPARENT,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
        assert!(extract(Some(&headers)).is_none());
        assert_eq!(current_trace_id(), None);
    }

    #[test]
    fn a_trace_id_is_32_lowercase_hex_digits_not_all_zero() {
        assert!(is_trace_id("4bf92f3577b34da6a3ce929d0e0e4736"));
        assert!(!is_trace_id("4BF92F3577B34DA6A3CE929D0E0E4736"));
        assert!(!is_trace_id("00000000000000000000000000000000"));
        assert!(!is_trace_id("4bf92f3577b34da6"));
    }

    #[test]
    fn the_headers_carry_the_context_both_ways() {
        let mut headers = HeaderMap::new();
        headers.insert(
            TRACEPARENT,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        );
        headers.insert(TRACESTATE, "vendor=x");
        let cx = TraceContextPropagator::new().extract(&Extract(&headers));
        let mut out = HeaderMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut Inject(&mut out));
        assert_eq!(
            out.get(TRACEPARENT).map(|v| v.as_str()),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(out.get(TRACESTATE).map(|v| v.as_str()), Some("vendor=x"));
    }
}
