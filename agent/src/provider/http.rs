//! The HTTP plumbing the remote providers share: one JSON POST with a
//! timeout, retried on 429 and 5xx with exponential backoff and jitter, a
//! `Retry-After` (seconds or an HTTP date) taking the place of the backoff's
//! delay when the server gives one. With a [`CallLimiter`], each attempt
//! waits for the endpoint's shared limits first and tells them what the
//! reply said after. A reply sent as an event stream is read as it comes
//! ([`super::sse`]), its text told to the call's scope as it grows, and
//! handed on as the JSON reply it adds up to.
//!
//! **Invariant:** every call ends, with a value or a [`ProviderError`]: each
//! attempt is bounded by the timeout, the number of attempts by
//! `max_retries`, and each wait by [`MAX_RETRY_AFTER`].

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};

use super::ProviderError;
use super::limit::{self, CallLimiter, Endpoint, Observed, RateHeaders};
use super::sse::{self, Assembler, Wire};

/// A `Retry-After` longer than this is cut to it, so a provider cannot park a
/// worker for an hour.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The largest reply body read, in bytes.
const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// How much of a bad body an error message quotes.
const QUOTED_BODY_BYTES: usize = 300;

/// A JSON endpoint with its timeout and retry policy.
#[derive(Debug, Clone)]
pub(crate) struct JsonClient {
    client: reqwest::Client,
    /// How a streamed reply's events read.
    wire: Wire,
    timeout: Duration,
    max_retries: u32,
    min_backoff: Duration,
    /// The shared limits every attempt goes through, and its endpoint.
    limiter: Option<(Arc<dyn CallLimiter>, Endpoint)>,
}

/// A slot taken for an attempt: given back when the attempt is dropped
/// before it settles (its task cancelled or timed out), so the slot is free
/// at once rather than when its lease runs out.
struct Held(Option<(Arc<dyn CallLimiter>, Endpoint, limit::Ticket)>);

impl Drop for Held {
    fn drop(&mut self) {
        if let Some((limiter, endpoint, ticket)) = self.0.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move { limiter.settle(&endpoint, ticket, Observed::default()).await });
        }
    }
}

/// One failed attempt: the error and the wait the server asked for.
struct Attempt {
    error: ProviderError,
    retry_after: Option<Duration>,
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl JsonClient {
    /// A client for `wire`'s API whose every attempt ends within `timeout`
    /// (a streamed reply's last event included), retried at most
    /// `max_retries` times, the first backoff `min_backoff` long.
    pub(crate) fn new(
        wire: Wire,
        timeout: Duration,
        max_retries: u32,
        min_backoff: Duration,
    ) -> Result<JsonClient, ProviderError> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| ProviderError::Transport(format!("cannot build an HTTP client: {e}")))?;
        Ok(JsonClient {
            client,
            wire,
            timeout,
            max_retries,
            min_backoff,
            limiter: None,
        })
    }

    /// This client with every attempt going through `limiter`'s limits of
    /// `endpoint`.
    pub(crate) fn limited(
        mut self,
        limiter: Arc<dyn CallLimiter>,
        endpoint: Endpoint,
    ) -> JsonClient {
        self.limiter = Some((limiter, endpoint));
        self
    }

    fn policy(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.min_backoff)
            .with_max_delay(Duration::from_secs(30))
            .with_max_times(self.max_retries as usize)
            .with_jitter()
    }

    /// POSTs `body` to `url` with `headers` and returns the JSON reply,
    /// retrying transient failures.
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, ProviderError> {
        let bytes = serde_json::to_vec(body)
            .map_err(|e| ProviderError::InvalidResponse(format!("the request is not JSON: {e}")))?;
        let tokens = limit::estimate_tokens(body, bytes.len());
        let bytes = bytes::Bytes::from(bytes);
        let once = || self.post_limited(url, headers, bytes.clone(), tokens);
        once.retry(self.policy())
            .when(|a: &Attempt| a.error.retriable())
            // The server's wait replaces the backoff's, but only while the
            // backoff has tries left (`None` means give up).
            .adjust(|a: &Attempt, backoff| backoff.map(|d| a.retry_after.unwrap_or(d)))
            .notify(|a: &Attempt, after: Duration| {
                tracing::warn!(%url, error = %a.error, retry_in_ms = after.as_millis() as u64, "provider call failed; retrying");
            })
            .await
            .map_err(|a| a.error)
    }

    /// One attempt, through the shared limits when there are any.
    async fn post_limited(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: bytes::Bytes,
        tokens: u64,
    ) -> Result<serde_json::Value, Attempt> {
        let Some((limiter, endpoint)) = &self.limiter else {
            return self.post_once(url, headers, body).await.0;
        };
        let ticket = limiter
            .acquire(endpoint, tokens)
            .await
            .map_err(|error| Attempt {
                error,
                retry_after: None,
            })?;
        limit::add_waited(ticket.waited);
        let mut held = Held(Some((limiter.clone(), endpoint.clone(), ticket)));
        let (result, observed) = self.post_once(url, headers, body).await;
        if let Some((limiter, endpoint, ticket)) = held.0.take() {
            limiter.settle(&endpoint, ticket, observed).await;
        }
        result
    }

    async fn post_once(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: bytes::Bytes,
    ) -> (Result<serde_json::Value, Attempt>, Observed) {
        let fail = |error| Attempt {
            error,
            retry_after: None,
        };
        let mut observed = Observed::default();
        let response = match self
            .client
            .post(url)
            .headers(headers.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body)
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => return (Err(fail(self.transport(e))), observed),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        observed.status = Some(status.as_u16());
        observed.retry_after = retry_after;
        observed.headers = RateHeaders::read(response.headers(), chrono::Utc::now());
        if status.is_success() && is_event_stream(response.headers()) {
            let result = self.read_stream(response, &mut observed).await;
            if let Ok(reply) = &result {
                observed.tokens = limit::used_tokens(reply);
            }
            return (result, observed);
        }
        let bytes = match read_capped(response).await {
            Ok(b) => b,
            Err(e) => return (Err(fail(self.transport_or(e))), observed),
        };
        if !status.is_success() {
            let error = status_error(status, retry_after, &bytes);
            return (Err(Attempt { error, retry_after }), observed);
        }
        let result = serde_json::from_slice::<serde_json::Value>(&bytes).map_err(|e| {
            fail(ProviderError::InvalidResponse(format!(
                "the reply is not JSON ({e}); it starts {:?}",
                quote(&bytes)
            )))
        });
        if let Ok(reply) = &result {
            observed.tokens = limit::used_tokens(reply);
        }
        (result, observed)
    }

    /// Reads a streamed reply to its end, telling its text as it grows.
    /// An error event in the stream stands for its status (a 529 overload,
    /// a 429) in `observed`, so the shared limits hear of it as of a refusal.
    async fn read_stream(
        &self,
        response: reqwest::Response,
        observed: &mut Observed,
    ) -> Result<serde_json::Value, Attempt> {
        use eventsource_stream::{EventStreamError, Eventsource};
        use futures::StreamExt;
        let fail = |error| Attempt {
            error,
            retry_after: None,
        };
        let mut read = 0usize;
        let bytes = response.bytes_stream().map(move |chunk| {
            let chunk = chunk.map_err(BodyError::Http)?;
            read += chunk.len();
            if read > MAX_BODY_BYTES {
                return Err(BodyError::TooLarge);
            }
            Ok(chunk)
        });
        let mut events = std::pin::pin!(bytes.eventsource());
        let mut assembler = Assembler::new(self.wire);
        // Told at most this often: a watcher's updates are paced slower
        // still, and a server sending a flood of tiny events then costs a
        // copy of the text per interval, not per event.
        const TELL_EVERY: Duration = Duration::from_millis(50);
        let mut told: Option<std::time::Instant> = None;
        let mut untold = false;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(EventStreamError::Transport(e)) => return Err(fail(self.transport_or(e))),
                Err(EventStreamError::Utf8(e)) => {
                    return Err(fail(ProviderError::InvalidResponse(format!(
                        "the event stream is not UTF-8: {e}"
                    ))));
                }
                Err(EventStreamError::Parser(e)) => {
                    return Err(fail(ProviderError::InvalidResponse(format!(
                        "the event stream is malformed: {e}"
                    ))));
                }
            };
            match assembler.feed(&event.event, &event.data) {
                Ok(fed) => {
                    if fed.grew {
                        untold = true;
                    }
                    if untold && told.is_none_or(|at| at.elapsed() >= TELL_EVERY) {
                        told = Some(std::time::Instant::now());
                        untold = false;
                        limit::notify_text(assembler.text());
                    }
                    if fed.done {
                        break;
                    }
                }
                Err(sse::StreamError { error, status }) => {
                    if status.is_some() {
                        observed.status = status;
                    }
                    return Err(fail(error));
                }
            }
        }
        // The whole text is told last, however soon after the one before.
        if untold {
            limit::notify_text(assembler.text());
        }
        assembler.finish().map_err(fail)
    }

    fn transport(&self, e: reqwest::Error) -> ProviderError {
        if e.is_timeout() {
            ProviderError::Timeout(self.timeout)
        } else {
            ProviderError::Transport(error_chain(&e))
        }
    }

    fn transport_or(&self, e: BodyError) -> ProviderError {
        match e {
            BodyError::Http(e) => self.transport(e),
            BodyError::TooLarge => ProviderError::InvalidResponse(format!(
                "the reply is larger than {MAX_BODY_BYTES} bytes"
            )),
        }
    }
}

enum BodyError {
    Http(reqwest::Error),
    TooLarge,
}

async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, BodyError> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Http)? {
        if out.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(BodyError::TooLarge);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

/// An error with its sources, which is where reqwest keeps the useful part.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    crate::text::shorten(&text, QUOTED_BODY_BYTES)
}

/// The error for a reply with a non-success status.
fn status_error(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> ProviderError {
    let detail = error_message(body).unwrap_or_else(|| quote(body));
    let text = format!("HTTP {status}: {detail}");
    if status == StatusCode::TOO_MANY_REQUESTS {
        ProviderError::RateLimited { retry_after }
    } else if status.is_server_error() || status == StatusCode::REQUEST_TIMEOUT {
        ProviderError::Server(text)
    } else {
        ProviderError::Refused(text)
    }
}

/// `error.message` of an OpenAI or Anthropic error body.
fn error_message(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let error = value.get("error")?;
    match error.get("message").and_then(|m| m.as_str()) {
        Some(m) => Some(m.to_string()),
        None => error.as_str().map(str::to_string),
    }
}

/// The `Retry-After` header: delay-seconds or an HTTP date, at most
/// [`MAX_RETRY_AFTER`].
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, chrono::Utc::now())
}

/// Reads a `Retry-After` value as of `now`.
pub(crate) fn parse_retry_after(
    value: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(secs) = value.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return None;
        }
        Duration::from_secs_f64(secs.min(MAX_RETRY_AFTER.as_secs_f64()))
    } else {
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(parse_retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after("0.5", now),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 2026 00:00:07 GMT", now),
            Some(Duration::from_secs(7))
        );
        // A date in the past means now.
        assert_eq!(
            parse_retry_after("Wed, 31 Dec 2025 23:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("86400", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    proptest::proptest! {
        #[test]
        fn retry_after_never_panics_and_stays_bounded(value in ".{0,40}", secs in 0u64..10_000_000) {
            let now = chrono::Utc::now();
            if let Some(d) = parse_retry_after(&value, now) {
                proptest::prop_assert!(d <= MAX_RETRY_AFTER);
            }
            let d = parse_retry_after(&secs.to_string(), now);
            proptest::prop_assert_eq!(d, Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER)));
        }
    }

    #[test]
    fn statuses_map_to_errors() {
        let body = br#"{"error": {"message": "slow down", "type": "rate_limit"}}"#;
        assert_eq!(
            status_error(StatusCode::TOO_MANY_REQUESTS, None, body),
            ProviderError::RateLimited { retry_after: None }
        );
        let e = status_error(StatusCode::BAD_GATEWAY, None, b"<html>oops</html>");
        assert!(matches!(&e, ProviderError::Server(m) if m.contains("502") && m.contains("oops")));
        let e = status_error(
            StatusCode::UNAUTHORIZED,
            None,
            br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
        );
        assert!(matches!(&e, ProviderError::Refused(m) if m.contains("invalid x-api-key")));
        assert!(!e.retriable());
    }
}
