//! Retries for transient NATS faults: exponential backoff with jitter, via `backon`.

use std::future::Future;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};

/// The backoff Swarm uses for transient faults: 50 ms doubling to 2 s, with
/// jitter, at most 8 tries.
pub fn policy() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(8)
        .with_jitter()
}

/// Runs `op` until it succeeds, fails with an error `retriable` refuses, or
/// the policy gives up.
pub async fn retry<T, E, F, Fut>(op: F, retriable: impl Fn(&E) -> bool) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    op.retry(policy())
        .when(retriable)
        .notify(|e: &E, after: Duration| {
            tracing::warn!(error = %e, retry_in_ms = after.as_millis() as u64, "transient NATS fault; retrying");
        })
        .await
}

/// After a pull stream yielded an error (no responders while a consumer's
/// leader is elected, missed heartbeats): waits a moment and opens a new
/// stream with `open`, since async-nats may never renew the failed pull.
/// `None`, logged, if it cannot be opened yet; the caller keeps its stream
/// and comes back here on its next error.
pub async fn pull_again<S, E: std::fmt::Display>(
    what: &str,
    error: &dyn std::fmt::Display,
    open: impl Future<Output = Result<S, E>>,
) -> Option<S> {
    tracing::warn!(%error, "pulling {what} failed; pulling again");
    tokio::time::sleep(Duration::from_millis(200)).await;
    match open.await {
        Ok(fresh) => Some(fresh),
        Err(e) => {
            tracing::warn!(error = %e, "cannot pull {what} yet");
            None
        }
    }
}
