//! Push notifications: webhooks a caller registers on a task, and their
//! delivery.
//!
//! A task's configs are one entry of the KV bucket `a2a-push`, keyed by the
//! swarm id and written with compare-and-swap, so replicas never lose each
//! other's writes. Delivery reads the swarm messages through one durable
//! consumer, `gateway-push`, that every gateway replica shares: each stored
//! update of a swarm with configs becomes the StreamResponse a stream would
//! send (its end: the artifacts and the terminal status), POSTed to each
//! webhook with the configured `Authorization` and the config's token in
//! `X-A2A-Notification-Token`. A message is acknowledged only once every
//! webhook took it (a 2xx answer); otherwise it is redelivered after a
//! growing delay, at most [`ATTEMPTS`] times. So delivery is at least once,
//! and survives a gateway's restart: what was not acknowledged is delivered
//! again, by whichever replica runs. Order across updates is not kept while
//! a webhook fails (a receiver reads each event's state, as the spec asks).
//!
//! Webhooks on loopback, private, link-local and other non-public
//! addresses are refused (server-side request forgery), when the config is
//! made and again at each connection, through a resolver that drops such
//! addresses; `--push-allow-private` lifts this for a trusted network.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, AckKind, consumer::pull, kv};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use swarm_common::subjects::{self, Subject};

use crate::error::{A2aError, ErrorKind};
use crate::swarms::{Caller, Swarms};
use crate::types::{StreamResponse, TaskPushNotificationConfig, TaskState};

/// The KV bucket of push notification configs, one entry per task.
pub const PUSH_BUCKET: &str = subjects::PUSH_BUCKET;
/// The durable consumer the gateway replicas deliver from.
pub const PUSH_CONSUMER: &str = subjects::PUSH_CONSUMER;
/// Most configs one task may have.
pub const MAX_CONFIGS: usize = 10;
/// Deliveries of one update before it is given up.
pub const ATTEMPTS: i64 = 10;
/// How long a webhook has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Updates delivered at once.
const CONCURRENCY: usize = 32;

/// A task's configs as stored: the task's context (each event names it)
/// and the configs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    context_id: String,
    configs: Vec<TaskPushNotificationConfig>,
}

fn internal(e: impl Into<anyhow::Error>) -> A2aError {
    A2aError::internal(&e.into())
}

/// The configs bucket.
#[derive(Debug, Clone)]
pub struct PushStore {
    kv: kv::Store,
}

impl PushStore {
    /// Opens the bucket (the setup creates it; see `runtime::infra`).
    pub async fn open(client: &async_nats::Client) -> anyhow::Result<PushStore> {
        let js = jetstream::new(client.clone());
        let kv = js
            .get_key_value(PUSH_BUCKET)
            .await
            .with_context(|| format!("opening the {PUSH_BUCKET} bucket (run `swarm setup`)"))?;
        Ok(PushStore { kv })
    }

    async fn read(&self, task_id: &str) -> Result<(Stored, Option<u64>), A2aError> {
        match self.kv.entry(task_id).await.map_err(internal)? {
            Some(e) if e.operation == kv::Operation::Put => {
                let stored = serde_json::from_slice(&e.value).map_err(internal)?;
                Ok((stored, Some(e.revision)))
            }
            Some(e) => Ok((Stored::default(), Some(e.revision))),
            None => Ok((Stored::default(), None)),
        }
    }

    /// Writes `change` of a task's configs, retrying on a concurrent write.
    async fn change<T>(
        &self,
        task_id: &str,
        change: impl Fn(&mut Stored) -> Result<T, A2aError>,
    ) -> Result<T, A2aError> {
        for _ in 0..10 {
            let (mut stored, revision) = self.read(task_id).await?;
            let out = change(&mut stored)?;
            let bytes = serde_json::to_vec(&stored).map_err(internal)?;
            let written = match revision {
                Some(r) => self.kv.update(task_id, bytes.into(), r).await.is_ok(),
                None => self.kv.create(task_id, bytes.into()).await.is_ok(),
            };
            if written {
                return Ok(out);
            }
        }
        Err(A2aError::internal(&anyhow::anyhow!(
            "the push configs of task {task_id} kept changing under this write"
        )))
    }

    /// The task's configs.
    pub async fn configs(
        &self,
        task_id: &str,
    ) -> Result<Vec<TaskPushNotificationConfig>, A2aError> {
        Ok(self.read(task_id).await?.0.configs)
    }

    async fn stored(&self, task_id: &str) -> Result<Stored, A2aError> {
        Ok(self.read(task_id).await?.0)
    }

    /// Adds `config` to its task, or replaces the one with its id.
    pub async fn put(
        &self,
        context_id: &str,
        config: &TaskPushNotificationConfig,
    ) -> Result<(), A2aError> {
        self.change(&config.task_id, |stored| {
            stored.context_id = context_id.to_owned();
            if let Some(same) = stored.configs.iter_mut().find(|c| c.id == config.id) {
                *same = config.clone();
            } else if stored.configs.len() >= MAX_CONFIGS {
                return Err(A2aError::invalid_params(format!(
                    "task {} has {MAX_CONFIGS} push notification configs, the most it may have: \
                     delete one first",
                    config.task_id
                )));
            } else {
                stored.configs.push(config.clone());
            }
            Ok(())
        })
        .await
    }

    /// Removes a config; removing one that is not there is no error.
    pub async fn delete(&self, task_id: &str, id: &str) -> Result<(), A2aError> {
        if self.read(task_id).await?.1.is_none() {
            return Ok(());
        }
        self.change(task_id, |stored| {
            stored.configs.retain(|c| c.id != id);
            Ok(())
        })
        .await
    }
}

/// Whether an address is one anyone on the internet could reach (and so
/// not a way into the gateway's own network).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return public_v4(v4);
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // unique local fc00::/7, link-local fe80::/10
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                // documentation 2001:db8::/32
                || (first == 0x2001 && v6.segments()[1] == 0x0db8)
                // IPv4-compatible and NAT64 forms of any address
                || v6.segments()[..6].iter().all(|s| *s == 0)
                || (first == 0x0064 && v6.segments()[1] == 0xff9b))
        }
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        // shared address space (carrier-grade NAT) 100.64.0.0/10
        || (a == 100 && (b & 0xc0) == 64)
        // IETF protocol assignments 192.0.0.0/24, benchmarking 198.18.0.0/15
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b & 0xfe) == 18)
        // reserved 240.0.0.0/4
        || a >= 240)
}

/// Checks a webhook URL: http or https, a host, and, unless
/// `allow_private`, only public addresses behind it.
pub async fn check_url(url: &str, allow_private: bool) -> Result<reqwest::Url, String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("the webhook URL {url:?}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("the webhook URL {url:?} is not http or https"));
    }
    let Some(host) = parsed.host() else {
        return Err(format!("the webhook URL {url:?} has no host"));
    };
    if allow_private {
        return Ok(parsed);
    }
    let refuse = || {
        format!(
            "the webhook URL {url:?} is on a loopback, private or otherwise non-public address: \
             refused (a gateway run with --push-allow-private takes it)"
        )
    };
    let addresses: Vec<IpAddr> = match host {
        url::Host::Ipv4(ip) => vec![IpAddr::V4(ip)],
        url::Host::Ipv6(ip) => vec![IpAddr::V6(ip)],
        url::Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name == "localhost" || name.ends_with(".localhost") {
                return Err(refuse());
            }
            let port = parsed.port_or_known_default().unwrap_or(443);
            tokio::net::lookup_host((name.as_str(), port))
                .await
                .map_err(|e| format!("the webhook host {name:?} does not resolve: {e}"))?
                .map(|a| a.ip())
                .collect()
        }
    };
    if addresses.is_empty() || !addresses.iter().all(|ip| is_public(*ip)) {
        return Err(refuse());
    }
    Ok(parsed)
}

/// Resolves webhook hosts and drops every address that is not public, so a
/// name that resolved to a public address when its config was made cannot
/// lead to a private one later.
struct PublicResolver;

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0))
                .await?
                .filter(|a| is_public(a.ip()))
                .collect();
            if found.is_empty() {
                return Err(format!("{name} resolves to no public address").into());
            }
            Ok(Box::new(found.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The HTTP client webhooks are posted with: a time limit, no redirects
/// (one could lead anywhere), no proxy from the environment (it would
/// resolve the host itself), and, unless `allow_private`, the
/// [`PublicResolver`].
pub fn http_client(allow_private: bool) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("swarm-gateway/", env!("CARGO_PKG_VERSION")));
    if !allow_private {
        builder = builder.dns_resolver(Arc::new(PublicResolver));
    }
    builder.build().context("building the webhook client")
}

/// The config a caller asked for, made whole: its task, an id (the task's
/// when none is given, as the reference SDK does), and a checked URL.
pub async fn prepared(
    task_id: &str,
    mut config: TaskPushNotificationConfig,
    allow_private: bool,
) -> Result<TaskPushNotificationConfig, A2aError> {
    if !config.task_id.is_empty() && config.task_id != task_id {
        return Err(A2aError::invalid_params(format!(
            "the config names task {:?}, the request task {task_id:?}",
            config.task_id
        )));
    }
    config.task_id = task_id.to_owned();
    config.tenant.clear();
    if config.id.is_empty() {
        config.id = task_id.to_owned();
    }
    if !subjects::is_token(&config.id) {
        return Err(A2aError::invalid_params(
            "a push notification config id is 1 to 128 letters, digits, - or _",
        ));
    }
    if config.url.len() > 2048 || config.token.len() > 1024 {
        return Err(A2aError::invalid_params(
            "the webhook URL (2048 bytes) or token (1024) is too long",
        ));
    }
    if let Some(auth) = &config.authentication {
        let header = format!("{} {}", auth.scheme, auth.credentials);
        if auth.scheme.trim().is_empty()
            || header.len() > 4096
            || reqwest::header::HeaderValue::from_str(&header).is_err()
        {
            return Err(A2aError::invalid_params(
                "the webhook authentication needs a scheme, and it and the credentials must make \
                 an HTTP header of at most 4096 bytes",
            ));
        }
    }
    if !config.token.is_empty() && reqwest::header::HeaderValue::from_str(&config.token).is_err() {
        return Err(A2aError::invalid_params(
            "the push token must be printable ASCII",
        ));
    }
    check_url(&config.url, allow_private)
        .await
        .map_err(A2aError::invalid_params)?;
    Ok(config)
}

/// Delivers push notifications until the shutdown signal.
pub struct Deliverer {
    /// The operations (to read an ended task).
    pub swarms: Swarms,
    /// The configs.
    pub store: PushStore,
    /// The webhook client.
    pub http: reqwest::Client,
    /// Configs that took an update (by its stream sequence) this process
    /// delivered again because another webhook did not: not sent twice.
    delivered: Mutex<HashMap<u64, HashSet<String>>>,
}

impl Deliverer {
    /// A deliverer.
    pub fn new(swarms: Swarms, store: PushStore, http: reqwest::Client) -> Deliverer {
        Deliverer {
            swarms,
            store,
            http,
            delivered: Mutex::new(HashMap::new()),
        }
    }

    /// Creates (or binds to) the durable consumer.
    pub async fn consumer(&self) -> anyhow::Result<pull::Stream> {
        let js = jetstream::new(self.swarms.client.clone());
        let stream = js
            .get_stream(subjects::A2AP_STREAM)
            .await
            .context("opening the A2AP stream (run `swarm setup`)")?;
        let consumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(PUSH_CONSUMER.into()),
                description: Some("The A2A gateways' push notifications".into()),
                filter_subjects: subjects::push_filters(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ack_wait: TIMEOUT * 4,
                // Only what happens from the first gateway on is pushed.
                deliver_policy: jetstream::consumer::DeliverPolicy::New,
                // A backstop: each message is given up after ATTEMPTS.
                max_deliver: ATTEMPTS + 2,
                max_ack_pending: 1024,
                ..Default::default()
            })
            .await
            .with_context(|| format!("creating the consumer {PUSH_CONSUMER}"))?;
        consumer
            .messages()
            .await
            .with_context(|| format!("pulling from {PUSH_CONSUMER}"))
    }

    /// The loop: each message delivered in its own task, at most
    /// [`CONCURRENCY`] at once.
    pub async fn run(
        self: Arc<Self>,
        mut messages: pull::Stream,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let slots = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            let next = tokio::select! {
                () = &mut shutdown => return,
                next = messages.next() => next,
            };
            match next {
                Some(Ok(message)) => {
                    let Ok(slot) = slots.clone().acquire_owned().await else {
                        return;
                    };
                    let me = self.clone();
                    tokio::spawn(async move {
                        me.handle(message).await;
                        drop(slot);
                    });
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "push notifications: pulling again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    match self.consumer().await {
                        Ok(fresh) => messages = fresh,
                        Err(e) => tracing::warn!(error = %format!("{e:#}"), "push notifications"),
                    }
                }
                None => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if let Ok(fresh) = self.consumer().await {
                        messages = fresh;
                    }
                }
            }
        }
    }

    async fn handle(&self, message: jetstream::Message) {
        let (sequence, delivered) = match message.info() {
            Ok(info) => (info.stream_sequence, info.delivered),
            Err(_) => (0, 1),
        };
        let outcome = self.deliver(&message, sequence).await;
        let ack = match outcome {
            Ok(()) => AckKind::Ack,
            Err(reason) if delivered >= ATTEMPTS => {
                tracing::warn!(
                    subject = %message.subject, %reason, attempts = delivered,
                    "push notification given up"
                );
                AckKind::Term
            }
            Err(reason) => {
                let delay = Duration::from_secs(1 << (delivered - 1).clamp(0, 6).unsigned_abs());
                tracing::info!(
                    subject = %message.subject, %reason, attempt = delivered, ?delay,
                    "push notification not taken: trying again"
                );
                AckKind::Nak(Some(delay))
            }
        };
        if !matches!(ack, AckKind::Nak(_))
            && let Ok(mut done) = self.delivered.lock()
        {
            done.remove(&sequence);
        }
        if let Err(e) = message.ack_with(ack).await {
            tracing::warn!(error = %e, "push notifications: acknowledging");
        }
    }

    /// Sends one stored message's events to every webhook of its task;
    /// `Err` names what did not take them.
    async fn deliver(&self, message: &jetstream::Message, sequence: u64) -> Result<(), String> {
        let Some(subject) = Subject::parse(&message.subject) else {
            return Ok(());
        };
        let id = subject.swarm_id();
        let stored = self.store.stored(id).await.map_err(|e| e.message)?;
        if stored.configs.is_empty() {
            return Ok(());
        }
        let Some(update) = swarm_client::client::update_of(
            &message.subject,
            message.headers.as_ref(),
            &message.payload,
        ) else {
            return Ok(());
        };
        let events = if crate::stream::ends(&update) {
            crate::stream::ending(&self.swarms, &Caller(None), id)
                .await
                .map_err(|e| e.message)?
        } else {
            match crate::stream::event_of(&update, id, &stored.context_id, TaskState::Working) {
                Some((_, event)) => vec![event],
                None => return Ok(()),
            }
        };
        let already = self
            .delivered
            .lock()
            .map(|d| d.get(&sequence).cloned().unwrap_or_default())
            .unwrap_or_default();
        let mut failed = Vec::new();
        for config in stored.configs.iter().filter(|c| !already.contains(&c.id)) {
            match self.post_all(config, &events).await {
                Ok(()) => {
                    if let Ok(mut d) = self.delivered.lock() {
                        d.entry(sequence).or_default().insert(config.id.clone());
                    }
                }
                Err(e) => failed.push(format!("{}: {e}", config.url)),
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    }

    async fn post_all(
        &self,
        config: &TaskPushNotificationConfig,
        events: &[StreamResponse],
    ) -> Result<(), String> {
        for event in events {
            let mut request = self
                .http
                .post(&config.url)
                .header(reqwest::header::CONTENT_TYPE, "application/a2a+json")
                .json(event);
            if let Some(auth) = &config.authentication
                && !auth.credentials.is_empty()
            {
                request = request.header(
                    reqwest::header::AUTHORIZATION,
                    format!("{} {}", auth.scheme, auth.credentials),
                );
            }
            if !config.token.is_empty() {
                request = request.header("X-A2A-Notification-Token", &config.token);
            }
            let response = request.send().await.map_err(|e| {
                // The error's chain says why (refused, timed out, no public address).
                let mut text = e.to_string();
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    text = format!("{text}: {s}");
                    source = s.source();
                }
                text
            })?;
            if !response.status().is_success() {
                return Err(format!("answered {}", response.status()));
            }
        }
        Ok(())
    }
}

/// Why a push operation on a task cannot be done: the task is not the
/// caller's, or has ended (no update will follow).
pub fn refuse_ended(task_id: &str, state: TaskState) -> A2aError {
    A2aError::new(
        ErrorKind::UnsupportedOperation,
        format!("task {task_id} has ended ({state:?}): no notification would follow"),
    )
    .with("taskId", task_id)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn webhook_urls_are_checked() {
        for refused in [
            "http://127.0.0.1:9/hook",
            "http://localhost/hook",
            "http://api.localhost/hook",
            "http://[::1]/hook",
            "http://10.0.0.5/hook",
            "http://169.254.169.254/latest/meta-data",
        ] {
            let e = check_url(refused, false).await.unwrap_err();
            assert!(e.contains("--push-allow-private"), "{refused}: {e}");
        }
        assert!(check_url("ftp://example.com/x", false).await.is_err());
        assert!(check_url("not a url", false).await.is_err());
        assert!(check_url("http://8.8.8.8/hook", false).await.is_ok());
        assert!(check_url("http://127.0.0.1:9/hook", true).await.is_ok());
    }

    #[tokio::test]
    async fn a_config_is_made_whole_or_refused() {
        let c =
            |v: serde_json::Value| serde_json::from_value::<TaskPushNotificationConfig>(v).unwrap();
        let made = prepared(
            "t1",
            c(serde_json::json!({"url": "http://127.0.0.1:1/h"})),
            true,
        )
        .await
        .unwrap();
        assert_eq!((made.id.as_str(), made.task_id.as_str()), ("t1", "t1"));
        let other = prepared(
            "t1",
            c(serde_json::json!({"url": "http://127.0.0.1:1/h", "taskId": "t2"})),
            true,
        )
        .await;
        assert!(other.is_err());
        let bad_id = prepared(
            "t1",
            c(serde_json::json!({"url": "http://127.0.0.1:1/h", "id": "a b"})),
            true,
        )
        .await;
        assert!(bad_id.is_err());
        let bad_auth = prepared(
            "t1",
            c(serde_json::json!({"url": "http://127.0.0.1:1/h",
                "authentication": {"scheme": "Bearer", "credentials": "a\nb"}})),
            true,
        )
        .await;
        assert!(bad_auth.is_err());
    }
}
