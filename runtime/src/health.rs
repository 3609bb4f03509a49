//! The health and metrics HTTP server every role binary can run for
//! Kubernetes: `/healthz` (the process is alive), `/readyz` (connected to
//! NATS and Swarm's streams and buckets exist) and `/metrics` (Prometheus).
//!
//! The server keeps its own NATS connection, made with the role's own
//! settings, and readiness probes what the role needs through it. A role
//! may also say where it is in its life ([`starting`], [`started`],
//! [`stopping`]): while it sets up or drains, it is not ready whatever NATS
//! says. Off unless a port is given (`--health-port` / `SWARM_HEALTH_PORT`);
//! the manifests set it, and `swarm up` gives each role one.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use async_nats::Client;
use async_nats::connection::State;
use axum::Router;
use axum::extract::State as AxumState;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use swarm_common::subjects;
use tokio::sync::{Mutex, OnceCell};
use tracing::{info, warn};

use crate::{NatsArgs, RuntimeError};

/// How long a readiness answer is reused, so a busy prober costs NATS little.
const READY_CACHE: Duration = Duration::from_secs(2);
/// How long one readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts of the health connection to reach NATS.
const RECONNECT_PAUSE: Duration = Duration::from_secs(2);

/// The role has not said where it is: readiness is the NATS probe alone.
const UNTRACKED: u8 = 0;
/// The role is setting up (streams, consumers, services).
const STARTING: u8 = 1;
/// The role has set up and is doing its work.
const STARTED: u8 = 2;
/// The role is draining after a shutdown signal.
const STOPPING: u8 = 3;

/// Where this process's role is in its life; see [`starting`].
static PHASE: AtomicU8 = AtomicU8::new(UNTRACKED);

/// Tells readiness the role is setting up: `/readyz` answers 503 until
/// [`started`]. A role that never calls these is judged by the NATS probe alone.
pub fn starting() {
    PHASE.store(STARTING, Ordering::SeqCst);
}

/// Tells readiness the role has set up (its consumers and services exist).
pub fn started() {
    PHASE.store(STARTED, Ordering::SeqCst);
}

/// Tells readiness the role is draining: `/readyz` answers 503 from now on.
pub fn stopping() {
    PHASE.store(STOPPING, Ordering::SeqCst);
}

/// What a phase means for readiness.
fn phase_verdict(phase: u8) -> Result<(), String> {
    match phase {
        STARTING => Err("the role is still setting up".into()),
        STOPPING => Err("the role is draining".into()),
        _ => Ok(()),
    }
}

/// Flags of the health and metrics server.
#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// Port of the `/healthz`, `/readyz` and `/metrics` server; 0 turns it off.
    #[arg(long = "health-port", env = "SWARM_HEALTH_PORT", default_value_t = 0)]
    pub port: u16,
    /// Address the health server listens on.
    #[arg(long = "health-addr", env = "SWARM_HEALTH_ADDR", default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    pub addr: IpAddr,
}

/// The streams whose presence makes a role ready: Swarm's three streams, and
/// the streams behind its two KV buckets and its object store.
pub fn required_streams() -> Vec<String> {
    vec![
        subjects::MISSIONS_STREAM.to_owned(),
        subjects::A2AP_STREAM.to_owned(),
        subjects::DEADLETTER_STREAM.to_owned(),
        format!("KV_{}", subjects::SWARMS_BUCKET),
        format!("KV_{}", subjects::MISSIONS_BUCKET),
        format!("OBJ_{}", subjects::REPORTS_BUCKET),
    ]
}

/// What the handlers share.
struct Shared {
    client: OnceCell<Client>,
    streams: Vec<String>,
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Shared {
    async fn ready(&self) -> Result<(), String> {
        // The phase is the role's own word, cheap and never cached.
        phase_verdict(PHASE.load(Ordering::SeqCst))?;
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = last.as_ref()
            && at.elapsed() < READY_CACHE
        {
            return answer.clone();
        }
        let answer = self.probe().await;
        *last = Some((Instant::now(), answer.clone()));
        answer
    }

    async fn probe(&self) -> Result<(), String> {
        let Some(client) = self.client.get() else {
            return Err("not connected to NATS yet".into());
        };
        if client.connection_state() != State::Connected {
            return Err("disconnected from NATS".into());
        }
        let js = async_nats::jetstream::new(client.clone());
        for name in &self.streams {
            match tokio::time::timeout(PROBE_TIMEOUT, js.get_stream(name)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("stream {name}: {e}")),
                Err(_) => return Err(format!("stream {name}: timed out")),
            }
        }
        Ok(())
    }
}

/// The router: `/healthz`, `/readyz`, `/metrics`. Without a client yet,
/// `/readyz` answers 503.
fn app(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

async fn readyz(AxumState(shared): AxumState<Arc<Shared>>) -> Response {
    match shared.ready().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}

async fn metrics() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::render(),
    )
        .into_response()
}

/// Installs the metrics recorder (labelled `role`) and, if `args.port` is
/// not 0, starts the health server in the background: it listens at once
/// (an error if the port is taken) and connects to NATS with `nats` as
/// `client_name`, retrying until it can. Returns the address it listens on.
pub async fn spawn(
    args: &HealthArgs,
    nats: NatsArgs,
    role: &str,
    client_name: String,
) -> Result<Option<SocketAddr>, RuntimeError> {
    crate::metrics::install(role);
    if args.port == 0 {
        return Ok(None);
    }
    let addr = SocketAddr::new(args.addr, args.port);
    let (local, shared) = serve(addr).await?;
    info!(addr = %local, "health server listening (/healthz, /readyz, /metrics)");
    tokio::spawn(async move {
        loop {
            match nats.connect(&client_name).await {
                Ok(client) => {
                    // The cell is set only here, once.
                    let _ = shared.client.set(client);
                    return;
                }
                Err(e) => {
                    warn!(error = %e, "health server cannot reach NATS yet; retrying");
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                }
            }
        }
    });
    Ok(Some(local))
}

/// Binds `addr` and serves the router in the background.
async fn serve(addr: SocketAddr) -> Result<(SocketAddr, Arc<Shared>), RuntimeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| RuntimeError::setup(format!("health server on {addr}"), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| RuntimeError::setup(format!("health server on {addr}"), e))?;
    let shared = Arc::new(Shared {
        client: OnceCell::new(),
        streams: required_streams(),
        last: Mutex::new(None),
    });
    let router = app(shared.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            warn!(error = %e, "health server stopped");
        }
    });
    Ok((local, shared))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out[9..12].parse().unwrap();
        (status, out)
    }

    #[tokio::test]
    async fn serves_health_metrics_and_unready_without_nats() {
        crate::metrics::install("test");
        let (addr, _shared) = serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let (status, body) = get(addr, "/healthz").await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("not connected to NATS"), "{body}");
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("swarm_build_info"), "{body}");
        let (status, _) = get(addr, "/nope").await;
        assert_eq!(status, 404);
    }

    #[tokio::test]
    async fn port_zero_is_off() {
        let args = HealthArgs {
            port: 0,
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let got = spawn(
            &args,
            NatsArgs::local("nats://127.0.0.1:1"),
            "test",
            "x".into(),
        )
        .await
        .unwrap();
        assert_eq!(got, None);
    }

    #[test]
    fn a_role_that_sets_up_or_drains_is_not_ready() {
        assert!(phase_verdict(UNTRACKED).is_ok());
        assert!(phase_verdict(STARTED).is_ok());
        assert!(phase_verdict(STARTING).unwrap_err().contains("setting up"));
        assert!(phase_verdict(STOPPING).unwrap_err().contains("draining"));
    }

    #[test]
    fn required_streams_name_the_kv_and_object_streams() {
        let s = required_streams();
        assert!(s.contains(&"KV_swarms".to_owned()));
        assert!(s.contains(&"OBJ_reports".to_owned()));
        assert_eq!(s.len(), 6);
    }
}
