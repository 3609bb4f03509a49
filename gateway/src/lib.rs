//! The Swarm A2A gateway: an A2A v1.0 agent in front of a swarm.
//!
//! An A2A client (any implementation of the spec: the Python `a2a-sdk`, the
//! .NET and JS SDKs, an agent framework) reads the card at
//! `/.well-known/agent-card.json`, then speaks JSON-RPC at `/` or HTTP+JSON
//! at `/message:send`, `/tasks/...`: a message starts a mission (one A2A
//! task is one swarm), `GetTask`/`ListTasks` read the swarms' state and
//! reports, `CancelTask` cancels, the streaming operations follow the
//! swarm's stored messages over SSE, and a message on a task that waits
//! for a person answers it. See `docs/a2a.md`.
//!
//! The gateway keeps nothing: every answer is read from JetStream, so any
//! number of replicas serve the same swarms.
//!
//! - [`types`]: the A2A data model in ProtoJSON;
//! - [`error`]: the spec's errors in both bindings;
//! - [`mapping`]: messages to missions, swarms to tasks (no I/O);
//! - [`card`]: the agent card;
//! - [`swarms`]: the operations, over NATS;
//! - [`stream`]: SSE streams of a task;
//! - [`push`]: webhooks and their delivery;
//! - [`http`]: the router, and the JSON-RPC dispatch both bindings share;
//! - [`nats`]: the A2A NATS binding (`docs/a2a-nats.md`);
//! - [`console`]: the web console at `/` (`docs/console.md`).

pub mod card;
pub mod console;
pub mod error;
pub mod http;
pub mod mapping;
pub mod nats;
pub mod push;
pub mod stream;
pub mod swarms;
pub mod types;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use swarm_common::Limits;

/// How to run a gateway.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The NATS connection.
    pub client: async_nats::Client,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The base URL callers reach the gateway at (default: `http://<listen>`).
    pub public_url: Option<String>,
    /// Token → caller name; empty: anonymous callers.
    pub tokens: HashMap<String, String>,
    /// The boss's limits.
    pub limits: Limits,
    /// The NATS user the gateway answers and decides as at the boss's desk.
    pub desk_user: String,
    /// How long a blocking `SendMessage` waits for the task to end.
    pub send_wait: Duration,
    /// The tools the workers offer (the card's skills).
    pub tool_names: Vec<String>,
    /// Take webhooks on private and loopback addresses.
    pub push_allow_private: bool,
    /// Most streams one caller may have open at once.
    pub max_streams_per_caller: usize,
    /// Most streams open at once on this gateway.
    pub max_streams: usize,
    /// The URL the card names for the NATS binding (`nats://host:port/a2a.rpc`),
    /// which is served on the gateway's own connection either way.
    pub nats_url: Option<String>,
    /// Serve the web console at `/`.
    pub console: bool,
}

/// Parses tokens: `name:secret` entries separated by commas or new lines
/// (a bare `secret` is named `token-<n>`); `#` starts a comment line.
pub fn parse_tokens(text: &str) -> anyhow::Result<HashMap<String, String>> {
    let mut out = HashMap::new();
    for (n, entry) in text
        .split(['\n', ','])
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.starts_with('#'))
        .enumerate()
    {
        let (name, secret) = match entry.split_once(':') {
            Some((name, secret)) => (name.trim().to_owned(), secret.trim().to_owned()),
            None => (format!("token-{}", n + 1), entry.to_owned()),
        };
        if secret.len() < 16 {
            anyhow::bail!("the token of {name:?} is shorter than 16 characters");
        }
        if out.insert(secret, name.clone()).is_some() {
            anyhow::bail!("the token of {name:?} is given twice");
        }
    }
    Ok(out)
}

/// A listener bound, and what it serves.
pub struct Bound {
    listener: tokio::net::TcpListener,
    router: axum::Router,
    /// The address it listens on.
    pub local_addr: SocketAddr,
    /// The base URL the card names.
    pub public_url: String,
    /// The ids of the card's skills.
    pub skills: Vec<String>,
    deliverer: std::sync::Arc<push::Deliverer>,
    pushes: async_nats::jetstream::consumer::pull::Stream,
    gateway: std::sync::Arc<http::Gateway>,
    client: async_nats::Client,
}

/// Binds the listener and builds the router (separate from [`serve`] so a
/// caller learns the port before serving, as `--listen 127.0.0.1:0` needs).
pub async fn bind(config: GatewayConfig) -> anyhow::Result<Bound> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("listening on {}", config.listen))?;
    let local_addr = listener.local_addr()?;
    let public_url = config
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{local_addr}"))
        .trim_end_matches('/')
        .to_owned();
    let inputs = card::CardInputs {
        public_url: public_url.clone(),
        tool_names: config.tool_names.clone(),
        authenticated: !config.tokens.is_empty(),
        nats_url: config.nats_url.clone(),
        pool_skills: Vec::new(),
    };
    let skills = card::card(&inputs)
        .skills
        .iter()
        .map(|s| s.id.clone())
        .collect();
    // The served card follows the running pools' agent cards.
    let agents = async_nats::jetstream::new(config.client.clone())
        .get_key_value(swarm_common::subjects::AGENTS_BUCKET)
        .await
        .ok();
    let card = card::CardSource::new(inputs, agents);
    // A mission request is at most the boss's limit; a message around it
    // adds little.
    let body_limit = config.limits.max_mission_bytes.saturating_mul(2) + 64 * 1024;
    let client = config.client.clone();
    let store = push::PushStore::open(&config.client).await?;
    let swarms = swarms::Swarms {
        client: config.client,
        limits: config.limits,
        desk_user: config.desk_user,
        send_wait: config.send_wait,
        public_url: public_url.clone(),
        push: store.clone(),
        push_allow_private: config.push_allow_private,
        streams: stream::StreamSlots::new(config.max_streams_per_caller, config.max_streams),
    };
    let deliverer = std::sync::Arc::new(push::Deliverer::new(
        swarms.clone(),
        store,
        push::http_client(config.push_allow_private)?,
    ));
    // Made before serving, so a gateway that cannot deliver does not start.
    let pushes = deliverer.consumer().await?;
    let gateway = http::Gateway {
        swarms,
        card,
        tokens: config.tokens,
        hub: Default::default(),
    };
    let gateway = std::sync::Arc::new(gateway);
    Ok(Bound {
        listener,
        router: http::router(gateway.clone(), body_limit, config.console),
        gateway,
        client,
        local_addr,
        public_url,
        skills,
        deliverer,
        pushes,
    })
}

/// Serves, and delivers push notifications, until `shutdown` resolves;
/// then finishes the requests in flight (a notification not delivered by
/// then is delivered again by whichever gateway runs next).
pub async fn serve(
    bound: Bound,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let pushing = tokio::spawn({
        let mut stopped = stopped.clone();
        bound.deliverer.clone().run(bound.pushes, async move {
            let _ = stopped.wait_for(|s| *s).await;
        })
    });
    let over_nats = tokio::spawn(nats::serve(
        bound.gateway.clone(),
        bound.client.clone(),
        stopped.clone(),
    ));
    let served = axum::serve(bound.listener, bound.router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            let _ = stop.send(true);
        })
        .await
        .context("serving A2A");
    pushing.abort();
    // Told to stop with the HTTP server; an HTTP server that failed on its
    // own leaves it running, and the process's end takes it.
    match tokio::time::timeout(Duration::from_secs(2), over_nats).await {
        Ok(Ok(Err(e))) => tracing::warn!(error = %format!("{e:#}"), "the A2A NATS binding stopped"),
        Ok(Err(e)) => tracing::warn!(error = %e, "the A2A NATS binding panicked"),
        _ => {}
    }
    served
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn tokens_are_named_entries_or_bare_secrets() {
        let t = parse_tokens("# callers\nops:0123456789abcdef0\n 0123456789abcdefX ,").unwrap();
        assert_eq!(t["0123456789abcdef0"], "ops");
        assert_eq!(t["0123456789abcdefX"], "token-2");
        assert!(parse_tokens("ops:short").is_err());
        assert!(parse_tokens("a:0123456789abcdef0,b:0123456789abcdef0").is_err());
    }
}
