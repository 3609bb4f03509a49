//! Shutting down: the production signal (SIGTERM from Kubernetes, or
//! Ctrl-C), and draining what a role still has in flight.

use std::time::Duration;

use tokio::task::JoinSet;

/// Resolves when the process is asked to stop.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown requested");
}

/// Waits up to `deadline` for every task in `running` to finish; what is
/// still running then is left to the server to redeliver, and said so in the
/// log, naming it as `what` ("tasks", "reports", ...).
pub async fn drain<T: 'static>(running: &mut JoinSet<T>, deadline: Duration, what: &str) {
    let drained = tokio::time::timeout(deadline, async {
        while running.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("drain deadline passed with {what} in flight; they will be redelivered");
    }
}
