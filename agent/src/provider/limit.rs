//! Model call limits shared by every process that calls one endpoint: a
//! cap on concurrent requests, requests and tokens per minute, and a pause
//! that a `429` (or `529`, overloaded) with `Retry-After` seen by any
//! caller imposes on all of them.
//!
//! This module holds what does not depend on where the shared state is
//! kept: the [`CallLimiter`] the HTTP providers ask before each attempt and
//! tell after it, the state itself ([`SharedLimits`], a small JSON value
//! changed only by compare-and-swap, so a store that offers that is all an
//! implementation needs; the worker keeps it in JetStream KV), the reading
//! of the providers' rate-limit headers, and the task-local [`CallScope`]
//! that names the swarm a call is for (fair shares) and counts the time
//! spent waiting (the report's `model_wait_ms`).
//!
//! Rates are kept as a generic cell rate algorithm: one "theoretical
//! arrival time" per limit, moved forward by each call's cost (a request,
//! or its tokens), and a call may go when that time is at most a minute
//! ahead of now. It bursts a minute's worth, as the providers' own token
//! buckets do, and needs no timer and no history.
//!
//! Fair shares: while calls of more than one swarm wait for a slot, a
//! swarm holding its share (the cap divided by the swarms holding or
//! waiting, rounded up) waits for the others; a swarm alone takes every
//! free slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};

use super::ProviderError;

/// One minute, the window every rate is counted in, in milliseconds.
const MINUTE_MS: f64 = 60_000.0;

/// At most this many waiting calls are remembered (the oldest go first);
/// it bounds the shared value's size.
const MAX_WAITERS: usize = 512;

/// The longest reason kept with a pause.
const MAX_REASON: usize = 200;

/// How long a waiting call is remembered unless it asks again.
const WAITER_TTL: Duration = Duration::from_secs(3);

/// The longest a waiting call sleeps before it looks again (its waiter
/// entry is refreshed within [`WAITER_TTL`]).
const MAX_NAP: Duration = Duration::from_secs(1);

/// How many times a settlement tries its compare-and-swap before it lets
/// the slot expire instead.
const SETTLE_TRIES: usize = 32;

/// A model endpoint: where calls go and for which model. Calls to one
/// endpoint share its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL calls are posted to.
    pub url: String,
    /// The model named in each request.
    pub model: String,
}

impl Endpoint {
    /// The endpoint of `model` at `url`.
    pub fn new(url: impl Into<String>, model: impl Into<String>) -> Endpoint {
        Endpoint {
            url: url.into(),
            model: model.into(),
        }
    }

    /// A short key, safe in any store's key syntax (hex of a hash of the
    /// URL and model).
    pub fn key(&self) -> String {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(format!("{}\n{}", self.url, self.model).as_bytes());
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The configured limits of an endpoint. `None` leaves a limit to what the
/// provider's headers say, or unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Requests in flight at once, across every caller.
    pub max_concurrent: Option<u32>,
    /// Requests per minute.
    pub requests_per_minute: Option<u64>,
    /// Tokens (prompt and reply) per minute.
    pub tokens_per_minute: Option<u64>,
}

/// What one call asks of the limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// Unique to the call.
    pub id: String,
    /// The swarm it is for ("" when none), for fair shares.
    pub swarm: String,
    /// Its estimated tokens, prompt and reply.
    pub tokens: u64,
    /// How long its slot is held at most: a caller that dies holding one
    /// frees it when this runs out.
    pub lease: Duration,
}

/// Why a call waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// A caller was told to retry later (`429`, `529`, or no requests or
    /// tokens left until a reset).
    Paused,
    /// Every slot is taken, or this swarm holds its share.
    Concurrency,
    /// The requests per minute are spent.
    Requests,
    /// The tokens per minute are spent.
    Tokens,
}

impl WaitReason {
    /// The label of metrics and reports: `paused`, `concurrency`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Paused => "paused",
            WaitReason::Concurrency => "concurrency",
            WaitReason::Requests => "requests",
            WaitReason::Tokens => "tokens",
        }
    }
}

/// What [`SharedLimits::take`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The call may go. `held` says whether it holds a slot to give back.
    Go {
        /// It took a concurrency slot ([`SharedLimits::release`] frees it).
        held: bool,
    },
    /// The call waits: until `until_ms` (milliseconds since the epoch)
    /// when that is known, else until the state changes.
    Wait {
        /// Why.
        reason: WaitReason,
        /// When it may try again, if a time says so.
        until_ms: Option<i64>,
        /// A person's reading of why (the pause's reason, for one).
        detail: String,
    },
}

/// One call holding a slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    /// The call's id.
    pub id: String,
    /// Its swarm.
    pub swarm: String,
    /// When its slot frees itself, in milliseconds since the epoch.
    pub until_ms: i64,
}

/// One call waiting for a slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    /// The call's id.
    pub id: String,
    /// Its swarm.
    pub swarm: String,
    /// When it is forgotten unless it asks again.
    pub until_ms: i64,
}

/// The state of one endpoint's limits that every caller shares. Times are
/// milliseconds since the epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SharedLimits {
    /// The endpoint's URL, for people reading the store.
    pub url: String,
    /// Its model.
    pub model: String,
    /// No call goes before this.
    pub paused_until_ms: i64,
    /// Why, as the caller that paused it saw it.
    pub pause_reason: String,
    /// How many pauses this endpoint has had.
    pub pauses: u64,
    /// The requests' theoretical arrival time.
    pub requests_tat_ms: f64,
    /// The tokens' theoretical arrival time.
    pub tokens_tat_ms: f64,
    /// Requests per minute as the provider's headers say.
    pub learned_requests_per_minute: Option<u64>,
    /// Tokens per minute as the provider's headers say.
    pub learned_tokens_per_minute: Option<u64>,
    /// The calls holding slots.
    pub holders: Vec<Holder>,
    /// The calls waiting for one.
    pub waiters: Vec<Waiter>,
}

/// What a caller learned from one attempt's reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The HTTP status; `None` when no reply came.
    pub status: Option<u16>,
    /// The `Retry-After` it carried.
    pub retry_after: Option<Duration>,
    /// Its rate-limit headers.
    pub headers: RateHeaders,
    /// The tokens it used, when the reply says.
    pub tokens: Option<u64>,
}

/// The rate-limit headers of OpenAI (`x-ratelimit-*`) and Anthropic
/// (`anthropic-ratelimit-*`), read alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateHeaders {
    /// Requests allowed per minute.
    pub limit_requests: Option<u64>,
    /// Tokens allowed per minute.
    pub limit_tokens: Option<u64>,
    /// Requests left.
    pub remaining_requests: Option<u64>,
    /// Tokens left.
    pub remaining_tokens: Option<u64>,
    /// How long until requests are refilled.
    pub reset_requests: Option<Duration>,
    /// How long until tokens are refilled.
    pub reset_tokens: Option<Duration>,
}

impl RateHeaders {
    /// Reads `headers` as of `now`.
    pub fn read(headers: &HeaderMap, now: chrono::DateTime<chrono::Utc>) -> RateHeaders {
        let text = |names: [&str; 2]| {
            names
                .iter()
                .find_map(|n| headers.get(*n).and_then(|v| v.to_str().ok()))
                .map(str::trim)
        };
        let number = |names| text(names).and_then(|v| v.parse::<u64>().ok());
        let reset = |names| text(names).and_then(|v| parse_reset(v, now));
        RateHeaders {
            limit_requests: number([
                "x-ratelimit-limit-requests",
                "anthropic-ratelimit-requests-limit",
            ]),
            limit_tokens: number([
                "x-ratelimit-limit-tokens",
                "anthropic-ratelimit-tokens-limit",
            ]),
            remaining_requests: number([
                "x-ratelimit-remaining-requests",
                "anthropic-ratelimit-requests-remaining",
            ]),
            remaining_tokens: number([
                "x-ratelimit-remaining-tokens",
                "anthropic-ratelimit-tokens-remaining",
            ]),
            reset_requests: reset([
                "x-ratelimit-reset-requests",
                "anthropic-ratelimit-requests-reset",
            ]),
            reset_tokens: reset([
                "x-ratelimit-reset-tokens",
                "anthropic-ratelimit-tokens-reset",
            ]),
        }
    }
}

/// A reset: OpenAI's span (`1s`, `6m0s`, `20ms`, `1h2m3.5s`) or
/// Anthropic's RFC 3339 time; at most [`super::MAX_RETRY_AFTER`].
pub fn parse_reset(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(at) = chrono::DateTime::parse_from_rfc3339(value) {
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO)
    } else {
        parse_span(value)?
    };
    Some(wait.min(super::MAX_RETRY_AFTER))
}

/// `1h2m3.5s`, `20ms`, `6m0s`: numbers each followed by `h`, `m`, `s` or `ms`.
fn parse_span(value: &str) -> Option<Duration> {
    if value.is_empty() || value.len() > 40 {
        return None;
    }
    let mut total = 0.0_f64;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (scale, unit_len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else {
            return None;
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total))
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl SharedLimits {
    /// A fresh state for `endpoint`.
    pub fn new(endpoint: &Endpoint) -> SharedLimits {
        SharedLimits {
            url: endpoint.url.clone(),
            model: endpoint.model.clone(),
            ..SharedLimits::default()
        }
    }

    /// The limits in force: the configured ones, else the learned ones.
    pub fn effective(&self, limits: &Limits) -> Limits {
        Limits {
            max_concurrent: limits.max_concurrent,
            requests_per_minute: limits
                .requests_per_minute
                .or(self.learned_requests_per_minute),
            tokens_per_minute: limits.tokens_per_minute.or(self.learned_tokens_per_minute),
        }
    }

    /// Whether a call could need to write this state to go: with no limit
    /// in force a call only reads it (for a pause).
    pub fn limited(&self, limits: &Limits) -> bool {
        let l = self.effective(limits);
        l.max_concurrent.is_some()
            || l.requests_per_minute.is_some()
            || l.tokens_per_minute.is_some()
    }

    /// Forgets slots and waiters whose time is up.
    fn expire(&mut self, now: i64) {
        self.holders.retain(|h| h.until_ms > now);
        self.waiters.retain(|w| w.until_ms > now);
    }

    /// Decides whether `claim` may go at `now`; if it may, counts it. When
    /// it waits for a slot it is remembered as a waiter (for fair shares)
    /// until `now + waiter_ttl`.
    pub fn take(
        &mut self,
        now: i64,
        claim: &Claim,
        limits: &Limits,
        waiter_ttl: Duration,
    ) -> Decision {
        self.expire(now);
        if self.paused_until_ms > now {
            return Decision::Wait {
                reason: WaitReason::Paused,
                until_ms: Some(self.paused_until_ms),
                detail: self.pause_reason.clone(),
            };
        }
        let l = self.effective(limits);
        if let Some(cap) = l.max_concurrent {
            let cap = cap.max(1) as usize;
            if !self.slot_free(claim, cap) {
                self.waiters.retain(|w| w.id != claim.id);
                self.waiters.push(Waiter {
                    id: claim.id.clone(),
                    swarm: claim.swarm.clone(),
                    until_ms: now.saturating_add(ms(waiter_ttl)),
                });
                if self.waiters.len() > MAX_WAITERS {
                    let excess = self.waiters.len() - MAX_WAITERS;
                    self.waiters.drain(..excess);
                }
                return Decision::Wait {
                    reason: WaitReason::Concurrency,
                    until_ms: self.holders.iter().map(|h| h.until_ms).min(),
                    detail: format!("{} of {cap} requests in flight", self.holders.len()),
                };
            }
        }
        let nowf = now as f64;
        let requests_tat = l
            .requests_per_minute
            .map(|rpm| self.requests_tat_ms.max(nowf) + MINUTE_MS / rpm.max(1) as f64);
        if let Some(tat) = requests_tat
            && tat - nowf > MINUTE_MS
        {
            return Decision::Wait {
                reason: WaitReason::Requests,
                until_ms: Some((tat - MINUTE_MS).ceil() as i64),
                detail: format!(
                    "{} requests per minute",
                    l.requests_per_minute.unwrap_or_default()
                ),
            };
        }
        let tokens_tat = l.tokens_per_minute.map(|tpm| {
            let tpm = tpm.max(1);
            // A call larger than a minute's tokens still goes, alone.
            let cost = claim.tokens.min(tpm) as f64 * MINUTE_MS / tpm as f64;
            self.tokens_tat_ms.max(nowf) + cost
        });
        if let Some(tat) = tokens_tat
            && tat - nowf > MINUTE_MS
        {
            return Decision::Wait {
                reason: WaitReason::Tokens,
                until_ms: Some((tat - MINUTE_MS).ceil() as i64),
                detail: format!(
                    "{} tokens per minute",
                    l.tokens_per_minute.unwrap_or_default()
                ),
            };
        }
        if let Some(tat) = requests_tat {
            self.requests_tat_ms = tat;
        }
        if let Some(tat) = tokens_tat {
            self.tokens_tat_ms = tat;
        }
        self.waiters.retain(|w| w.id != claim.id);
        let held = l.max_concurrent.is_some();
        if held {
            self.holders.push(Holder {
                id: claim.id.clone(),
                swarm: claim.swarm.clone(),
                until_ms: now.saturating_add(ms(claim.lease)),
            });
        }
        Decision::Go { held }
    }

    /// Whether a slot is free for `claim`: one is, and its swarm is under
    /// its share or no other swarm waits.
    fn slot_free(&self, claim: &Claim, cap: usize) -> bool {
        if self.holders.len() >= cap {
            return false;
        }
        let others_wait = self.waiters.iter().any(|w| w.swarm != claim.swarm);
        if !others_wait {
            return true;
        }
        let mut swarms: Vec<&str> = self
            .holders
            .iter()
            .map(|h| h.swarm.as_str())
            .chain(self.waiters.iter().map(|w| w.swarm.as_str()))
            .chain(std::iter::once(claim.swarm.as_str()))
            .collect();
        swarms.sort_unstable();
        swarms.dedup();
        let share = cap.div_ceil(swarms.len());
        let mine = self
            .holders
            .iter()
            .filter(|h| h.swarm == claim.swarm)
            .count();
        mine < share
    }

    /// Gives back what `claim` took: its slot if `held`, and the tokens it
    /// did not use (or takes those it used beyond its estimate).
    pub fn release(
        &mut self,
        now: i64,
        claim: &Claim,
        held: bool,
        used: Option<u64>,
        limits: &Limits,
    ) {
        self.expire(now);
        if held {
            self.holders.retain(|h| h.id != claim.id);
        }
        if let (Some(used), Some(tpm)) = (used, self.effective(limits).tokens_per_minute) {
            let tpm = tpm.max(1);
            let per_token = MINUTE_MS / tpm as f64;
            let estimated = claim.tokens.min(tpm) as f64;
            let actual = used.min(tpm) as f64;
            self.tokens_tat_ms += (actual - estimated) * per_token;
        }
    }

    /// Takes in what a reply said: a `429` or `529` pauses every caller
    /// for its `Retry-After` (one second without one); no requests or
    /// tokens left pauses them until the reset; the limits the headers
    /// give are learned. Returns whether anything changed.
    pub fn observe(&mut self, now: i64, observed: &Observed) -> bool {
        let before = self.clone();
        let h = &observed.headers;
        if let Some(n) = h.limit_requests.filter(|n| *n > 0) {
            self.learned_requests_per_minute = Some(n);
        }
        if let Some(n) = h.limit_tokens.filter(|n| *n > 0) {
            self.learned_tokens_per_minute = Some(n);
        }
        let refused = matches!(observed.status, Some(429 | 529));
        let mut pause = |until: i64, reason: String| {
            if until > self.paused_until_ms {
                self.paused_until_ms = until;
                self.pause_reason = crate::text::shorten(&reason, MAX_REASON);
                self.pauses += 1;
            }
        };
        if refused {
            let wait = observed.retry_after.unwrap_or(Duration::from_secs(1));
            let status = observed.status.unwrap_or_default();
            let what = if status == 529 {
                "overloaded"
            } else {
                "rate limited"
            };
            pause(
                now.saturating_add(ms(wait)),
                format!(
                    "the provider answered {status} ({what}); retry after {:.1} s",
                    wait.as_secs_f64()
                ),
            );
        }
        if h.remaining_requests == Some(0)
            && let Some(reset) = h.reset_requests
        {
            pause(
                now.saturating_add(ms(reset)),
                "the provider's requests per minute are used up".to_owned(),
            );
        }
        if h.remaining_tokens == Some(0)
            && let Some(reset) = h.reset_tokens
        {
            pause(
                now.saturating_add(ms(reset)),
                "the provider's tokens per minute are used up".to_owned(),
            );
        }
        *self != before
    }
}

/// A place every caller of an endpoint shares its limits through.
#[async_trait]
pub trait CallLimiter: Send + Sync + std::fmt::Debug {
    /// Waits until a call of about `tokens` tokens may go to `endpoint`.
    /// The ticket goes back with [`settle`](Self::settle). An error ends
    /// the call.
    async fn acquire(&self, endpoint: &Endpoint, tokens: u64) -> Result<Ticket, ProviderError>;
    /// Gives `ticket` back with what the attempt learned.
    async fn settle(&self, endpoint: &Endpoint, ticket: Ticket, observed: Observed);
}

/// A call let through by a [`CallLimiter`].
#[derive(Debug, Clone, PartialEq)]
pub struct Ticket {
    /// What it claimed.
    pub claim: Claim,
    /// Whether it holds a slot.
    pub held: bool,
    /// How long it waited.
    pub waited: Duration,
}

/// Where [`SharedLimiter`] keeps each endpoint's [`SharedLimits`]: a
/// value per key with a revision, written only if the revision is still
/// the one read (compare-and-swap).
#[async_trait]
pub trait LimitStore: Send + Sync + std::fmt::Debug {
    /// The value of `key` and its revision, if there is one.
    async fn load(&self, key: &str) -> Result<Option<(SharedLimits, u64)>, String>;
    /// Writes `value` if `key` is still at `revision` (absent for `None`):
    /// `Ok(Some(new revision))` if it was written, `Ok(None)` if another
    /// caller wrote first.
    async fn store(
        &self,
        key: &str,
        value: &SharedLimits,
        revision: Option<u64>,
    ) -> Result<Option<u64>, String>;
    /// Returns when `key` is no longer at revision `seen` (at once if it
    /// is not now), or after `timeout`.
    async fn changed(&self, key: &str, seen: Option<u64>, timeout: Duration);
}

#[async_trait]
impl<S: LimitStore + ?Sized> LimitStore for Arc<S> {
    async fn load(&self, key: &str) -> Result<Option<(SharedLimits, u64)>, String> {
        (**self).load(key).await
    }

    async fn store(
        &self,
        key: &str,
        value: &SharedLimits,
        revision: Option<u64>,
    ) -> Result<Option<u64>, String> {
        (**self).store(key, value, revision).await
    }

    async fn changed(&self, key: &str, seen: Option<u64>, timeout: Duration) {
        (**self).changed(key, seen, timeout).await
    }
}

/// Something a [`SharedLimiter`] did, for metrics.
#[derive(Debug, Clone, PartialEq)]
pub enum LimitEvent {
    /// A call waited this long, for this reason (the last it waited for).
    Waited(WaitReason, Duration),
    /// A reply paused every caller of the endpoint.
    Paused {
        /// Why.
        reason: String,
        /// For how long from now.
        wait: Duration,
    },
    /// The store could not be reached; the call went without the limits.
    Unavailable(String),
}

/// Called with each event a [`SharedLimiter`] sees (for metrics).
pub type EventHook = Arc<dyn Fn(&LimitEvent) + Send + Sync>;

/// Called when a model call in a [`CallScope`] waits for the limit.
pub type WaitHook = Arc<dyn Fn(&WaitNotice) + Send + Sync>;

/// Told the text of a streamed reply as it grows (at most every 50 ms, and
/// once whole): all of it so far (a retried call starts again from nothing).
pub type TextHook = Arc<dyn Fn(&str) + Send + Sync>;

/// A [`CallLimiter`] over a [`LimitStore`]: each call reads the endpoint's
/// state, decides with [`SharedLimits::take`], and writes what it took
/// with compare-and-swap, retrying when another caller wrote first.
///
/// When the store cannot be reached a call goes without limits (logged and
/// counted): the limits protect the provider's quota, and a worker that
/// cannot reach its store cannot deliver results either, so refusing the
/// call would only turn a short outage into failed tasks.
pub struct SharedLimiter<S> {
    store: S,
    limits: Limits,
    lease: Duration,
    on_event: Option<EventHook>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for SharedLimiter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLimiter")
            .field("store", &self.store)
            .field("limits", &self.limits)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl<S: LimitStore> SharedLimiter<S> {
    /// A limiter keeping state in `store`, enforcing `limits`; a slot is
    /// held at most `lease` (longer than a call can take: the provider's
    /// timeout and a margin).
    pub fn new(store: S, limits: Limits, lease: Duration) -> SharedLimiter<S> {
        SharedLimiter {
            store,
            limits,
            lease,
            on_event: None,
        }
    }

    /// This limiter telling what it does to `f`.
    pub fn on_event(mut self, f: EventHook) -> SharedLimiter<S> {
        self.on_event = Some(f);
        self
    }

    fn tell(&self, event: LimitEvent) {
        if let Some(f) = &self.on_event {
            f(&event);
        }
    }

    fn unavailable(&self, claim: Claim, waited: Duration, e: String) -> Ticket {
        tracing::warn!(error = %e, "the model limits cannot be read or written; the call goes without them");
        self.tell(LimitEvent::Unavailable(e));
        Ticket {
            claim,
            held: false,
            waited,
        }
    }
}

#[async_trait]
impl<S: LimitStore> CallLimiter for SharedLimiter<S> {
    async fn acquire(&self, endpoint: &Endpoint, tokens: u64) -> Result<Ticket, ProviderError> {
        let key = endpoint.key();
        let claim = Claim {
            id: uuid::Uuid::new_v4().simple().to_string(),
            swarm: current_swarm(),
            tokens,
            lease: self.lease,
        };
        let started = Instant::now();
        let mut told = false;
        let mut last_reason = None;
        loop {
            let loaded = match self.store.load(&key).await {
                Ok(l) => l,
                Err(e) => return Ok(self.unavailable(claim, started.elapsed(), e)),
            };
            let revision = loaded.as_ref().map(|(_, r)| *r);
            let mut state = loaded
                .map(|(s, _)| s)
                .unwrap_or_else(|| SharedLimits::new(endpoint));
            let now = now_ms();
            let was_waiting = state
                .waiters
                .iter()
                .find(|w| w.id == claim.id)
                .map(|w| w.until_ms);
            if !state.limited(&self.limits) && state.paused_until_ms <= now {
                // Nothing to count: the call only had to see no pause.
                return Ok(self.ticket(claim, false, started, last_reason));
            }
            match state.take(now, &claim, &self.limits, WAITER_TTL) {
                Decision::Go { held } => match self.store.store(&key, &state, revision).await {
                    Ok(Some(_)) => return Ok(self.ticket(claim, held, started, last_reason)),
                    Ok(None) => continue,
                    Err(e) => return Ok(self.unavailable(claim, started.elapsed(), e)),
                },
                Decision::Wait {
                    reason,
                    until_ms,
                    detail,
                } => {
                    // A call waiting for a slot is counted among the waiters
                    // (fair shares); its entry is written again only when
                    // half its time is gone.
                    let refresh = reason == WaitReason::Concurrency
                        && was_waiting.is_none_or(|until| until < now + ms(WAITER_TTL) / 2);
                    let mut seen = revision;
                    if refresh {
                        match self.store.store(&key, &state, revision).await {
                            Ok(Some(written)) => seen = Some(written),
                            Ok(None) => continue,
                            Err(e) => return Ok(self.unavailable(claim, started.elapsed(), e)),
                        }
                    }
                    let expected = until_ms
                        .map(|u| Duration::from_millis(u.saturating_sub(now).max(0) as u64));
                    if !told {
                        told = true;
                        notify_wait(&WaitNotice {
                            reason,
                            expected,
                            detail,
                        });
                    }
                    last_reason = Some(reason);
                    let nap = expected.map_or(MAX_NAP, |d| d.min(MAX_NAP));
                    if reason == WaitReason::Concurrency {
                        self.store.changed(&key, seen, nap).await;
                    } else {
                        // A pause or a rate ends at a known time.
                        tokio::time::sleep(nap.max(Duration::from_millis(1))).await;
                    }
                }
            }
        }
    }

    async fn settle(&self, endpoint: &Endpoint, ticket: Ticket, observed: Observed) {
        let key = endpoint.key();
        for _ in 0..SETTLE_TRIES {
            let loaded = match self.store.load(&key).await {
                Ok(l) => l,
                Err(e) => {
                    self.unavailable(ticket.claim.clone(), Duration::ZERO, e);
                    return;
                }
            };
            let revision = loaded.as_ref().map(|(_, r)| *r);
            let before = loaded
                .map(|(s, _)| s)
                .unwrap_or_else(|| SharedLimits::new(endpoint));
            let mut state = before.clone();
            let now = now_ms();
            state.release(
                now,
                &ticket.claim,
                ticket.held,
                observed.tokens,
                &self.limits,
            );
            let paused = state.paused_until_ms;
            state.observe(now, &observed);
            if state == before {
                return;
            }
            match self.store.store(&key, &state, revision).await {
                Ok(Some(_)) => {
                    if state.paused_until_ms > paused {
                        let wait = Duration::from_millis(
                            state.paused_until_ms.saturating_sub(now).max(0) as u64,
                        );
                        tracing::warn!(url = %endpoint.url, model = %endpoint.model, reason = %state.pause_reason, wait_ms = wait.as_millis() as u64, "every caller of this model endpoint pauses");
                        self.tell(LimitEvent::Paused {
                            reason: state.pause_reason.clone(),
                            wait,
                        });
                    }
                    return;
                }
                Ok(None) => continue,
                Err(e) => {
                    self.unavailable(ticket.claim.clone(), Duration::ZERO, e);
                    return;
                }
            }
        }
        tracing::warn!(url = %endpoint.url, "the model limits stayed contended; the slot frees itself when its lease ends");
    }
}

impl<S: LimitStore> SharedLimiter<S> {
    fn ticket(
        &self,
        claim: Claim,
        held: bool,
        started: Instant,
        reason: Option<WaitReason>,
    ) -> Ticket {
        let waited = started.elapsed();
        if let Some(reason) = reason {
            self.tell(LimitEvent::Waited(reason, waited));
        }
        Ticket {
            claim,
            held,
            waited,
        }
    }
}

/// A [`LimitStore`] in this process's memory: the limits of callers that
/// share one process (and the tests of the algorithm).
#[derive(Debug)]
pub struct MemoryStore {
    values: Mutex<HashMap<String, (SharedLimits, u64)>>,
    /// Bumped at every write, so a waiter subscribed before it looks
    /// misses no change.
    version: tokio::sync::watch::Sender<u64>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            values: Mutex::new(HashMap::new()),
            version: tokio::sync::watch::channel(0).0,
        }
    }
}

impl MemoryStore {
    fn revision(&self, key: &str) -> Option<u64> {
        self.values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .map(|(_, r)| *r)
    }
}

#[async_trait]
impl LimitStore for MemoryStore {
    async fn load(&self, key: &str) -> Result<Option<(SharedLimits, u64)>, String> {
        let values = self
            .values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(values.get(key).cloned())
    }

    async fn store(
        &self,
        key: &str,
        value: &SharedLimits,
        revision: Option<u64>,
    ) -> Result<Option<u64>, String> {
        let mut values = self
            .values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = values.get(key).map(|(_, r)| *r);
        if current != revision {
            return Ok(None);
        }
        let next = current.unwrap_or(0) + 1;
        values.insert(key.to_owned(), (value.clone(), next));
        drop(values);
        self.version.send_modify(|v| *v += 1);
        Ok(Some(next))
    }

    async fn changed(&self, key: &str, seen: Option<u64>, timeout: Duration) {
        let mut rx = self.version.subscribe();
        if self.revision(key) != seen {
            return;
        }
        let _ = tokio::time::timeout(timeout, rx.changed()).await;
    }
}

/// The call being made: the swarm it is for and where its waits are
/// counted and told. Set around a task's run with [`scoped`].
#[derive(Clone, Default)]
pub struct CallScope {
    /// The swarm ("" outside one).
    pub swarm: String,
    waited_ms: Arc<AtomicU64>,
    on_wait: Option<WaitHook>,
    on_text: Option<TextHook>,
}

impl std::fmt::Debug for CallScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallScope")
            .field("swarm", &self.swarm)
            .field("waited_ms", &self.waited_ms.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A wait as told to a person: why, and for about how long.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitNotice {
    /// Why.
    pub reason: WaitReason,
    /// How long, when known.
    pub expected: Option<Duration>,
    /// What the limit or pause says.
    pub detail: String,
}

impl std::fmt::Display for WaitNotice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "waiting for the model's limits ({}",
            self.reason.as_str()
        )?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        f.write_str(")")?;
        if let Some(d) = self.expected {
            write!(f, " for about {:.1} s", d.as_secs_f64())?;
        }
        Ok(())
    }
}

impl CallScope {
    /// The scope of a call for `swarm`, telling each wait to `on_wait`.
    pub fn new(swarm: impl Into<String>, on_wait: Option<WaitHook>) -> CallScope {
        CallScope {
            swarm: swarm.into(),
            waited_ms: Arc::new(AtomicU64::new(0)),
            on_wait,
            on_text: None,
        }
    }

    /// This scope, telling the text of each streamed reply to `on_text` as
    /// it is written.
    pub fn with_text(mut self, on_text: TextHook) -> CallScope {
        self.on_text = Some(on_text);
        self
    }

    /// Milliseconds the calls in this scope waited for limits so far.
    pub fn waited_ms(&self) -> u64 {
        self.waited_ms.load(Ordering::Relaxed)
    }
}

tokio::task_local! {
    static SCOPE: CallScope;
}

/// Runs `f` with `scope` as its calls' scope.
pub async fn scoped<F: std::future::Future>(scope: CallScope, f: F) -> F::Output {
    SCOPE.scope(scope, f).await
}

/// The swarm of the call being made ("" outside a scope).
pub fn current_swarm() -> String {
    SCOPE.try_with(|s| s.swarm.clone()).unwrap_or_default()
}

/// Tells the current scope that a call starts to wait.
pub fn notify_wait(notice: &WaitNotice) {
    let _ = SCOPE.try_with(|s| {
        if let Some(f) = &s.on_wait {
            f(notice);
        }
    });
}

/// Tells the current scope the text a streamed reply has written so far.
pub fn notify_text(text: &str) {
    let _ = SCOPE.try_with(|s| {
        if let Some(f) = &s.on_text {
            f(text);
        }
    });
}

/// Counts `waited` in the current scope.
pub fn add_waited(waited: Duration) {
    let _ = SCOPE.try_with(|s| {
        s.waited_ms
            .fetch_add(ms(waited).max(0) as u64, Ordering::Relaxed);
    });
}

/// The tokens a reply says it used: OpenAI's `prompt_tokens` and
/// `completion_tokens`, or Anthropic's `input_tokens` and `output_tokens`.
pub fn used_tokens(reply: &serde_json::Value) -> Option<u64> {
    let usage = reply.get("usage")?;
    let n = |k: &str| usage.get(k).and_then(serde_json::Value::as_u64);
    let total = match (n("prompt_tokens"), n("completion_tokens")) {
        (None, None) => n("input_tokens")?.saturating_add(n("output_tokens").unwrap_or(0)),
        (p, c) => p.unwrap_or(0).saturating_add(c.unwrap_or(0)),
    };
    Some(total)
}

/// A request's tokens before it is sent: its bytes over four (a fair guess
/// for English and JSON) plus the reply's cap when it sets one.
pub fn estimate_tokens(body: &serde_json::Value, body_len: usize) -> u64 {
    let cap = ["max_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(serde_json::Value::as_u64))
        .unwrap_or(0);
    (body_len as u64).div_ceil(4).saturating_add(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: &str, swarm: &str, tokens: u64) -> Claim {
        Claim {
            id: id.into(),
            swarm: swarm.into(),
            tokens,
            lease: Duration::from_secs(100),
        }
    }

    const TTL: Duration = Duration::from_secs(3);

    #[test]
    fn a_cap_holds_and_a_release_frees_a_slot() {
        let limits = Limits {
            max_concurrent: Some(2),
            ..Limits::default()
        };
        let mut s = SharedLimits::default();
        assert_eq!(
            s.take(0, &claim("a", "x", 1), &limits, TTL),
            Decision::Go { held: true }
        );
        assert_eq!(
            s.take(0, &claim("b", "x", 1), &limits, TTL),
            Decision::Go { held: true }
        );
        let d = s.take(0, &claim("c", "x", 1), &limits, TTL);
        assert!(
            matches!(
                d,
                Decision::Wait {
                    reason: WaitReason::Concurrency,
                    ..
                }
            ),
            "{d:?}"
        );
        assert_eq!(s.waiters.len(), 1);
        s.release(1, &claim("a", "x", 1), true, None, &limits);
        assert_eq!(
            s.take(2, &claim("c", "x", 1), &limits, TTL),
            Decision::Go { held: true }
        );
        assert!(
            s.waiters.is_empty(),
            "a call that went is no longer waiting"
        );
    }

    #[test]
    fn a_dead_holders_slot_frees_itself() {
        let limits = Limits {
            max_concurrent: Some(1),
            ..Limits::default()
        };
        let mut s = SharedLimits::default();
        assert_eq!(
            s.take(0, &claim("a", "x", 1), &limits, TTL),
            Decision::Go { held: true }
        );
        assert!(matches!(
            s.take(99_000, &claim("b", "x", 1), &limits, TTL),
            Decision::Wait { .. }
        ));
        assert_eq!(
            s.take(100_001, &claim("b", "x", 1), &limits, TTL),
            Decision::Go { held: true }
        );
    }

    #[test]
    fn a_swarm_holding_its_share_waits_for_another_that_waits() {
        let limits = Limits {
            max_concurrent: Some(2),
            ..Limits::default()
        };
        let mut s = SharedLimits::default();
        // The big swarm alone takes both slots.
        assert!(matches!(
            s.take(0, &claim("b1", "big", 1), &limits, TTL),
            Decision::Go { .. }
        ));
        assert!(matches!(
            s.take(0, &claim("b2", "big", 1), &limits, TTL),
            Decision::Go { .. }
        ));
        // The small one waits, then a big call ends.
        assert!(matches!(
            s.take(1, &claim("s1", "small", 1), &limits, TTL),
            Decision::Wait { .. }
        ));
        assert!(matches!(
            s.take(1, &claim("b3", "big", 1), &limits, TTL),
            Decision::Wait { .. }
        ));
        s.release(2, &claim("b1", "big", 1), true, None, &limits);
        // The big swarm holds its share (1 of 2) while the small one waits.
        assert!(matches!(
            s.take(3, &claim("b3", "big", 1), &limits, TTL),
            Decision::Wait { .. }
        ));
        assert!(matches!(
            s.take(3, &claim("s1", "small", 1), &limits, TTL),
            Decision::Go { .. }
        ));
    }

    #[test]
    fn requests_per_minute_burst_a_minute_then_space_out() {
        let limits = Limits {
            requests_per_minute: Some(60),
            ..Limits::default()
        };
        let mut s = SharedLimits::default();
        let t0 = 1_000_000;
        for i in 0..60 {
            assert_eq!(
                s.take(t0, &claim(&i.to_string(), "", 1), &limits, TTL),
                Decision::Go { held: false },
                "request {i}"
            );
        }
        match s.take(t0, &claim("61", "", 1), &limits, TTL) {
            Decision::Wait {
                reason: WaitReason::Requests,
                until_ms: Some(at),
                ..
            } => assert_eq!(at, t0 + 1000),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            s.take(t0 + 1000, &claim("61", "", 1), &limits, TTL),
            Decision::Go { .. }
        ));
    }

    #[test]
    fn tokens_per_minute_count_the_estimate_then_the_truth() {
        let limits = Limits {
            tokens_per_minute: Some(1000),
            ..Limits::default()
        };
        let mut s = SharedLimits::default();
        let t0 = 5_000_000;
        assert!(matches!(
            s.take(t0, &claim("a", "", 900), &limits, TTL),
            Decision::Go { .. }
        ));
        assert!(matches!(
            s.take(t0, &claim("b", "", 200), &limits, TTL),
            Decision::Wait {
                reason: WaitReason::Tokens,
                ..
            }
        ));
        // It used 100, not 900: the rest comes back.
        s.release(t0, &claim("a", "", 900), false, Some(100), &limits);
        assert!(matches!(
            s.take(t0, &claim("b", "", 200), &limits, TTL),
            Decision::Go { .. }
        ));
        // A call larger than a minute's tokens still goes when the bucket is full.
        let mut fresh = SharedLimits::default();
        assert!(matches!(
            fresh.take(t0, &claim("c", "", 5000), &limits, TTL),
            Decision::Go { .. }
        ));
    }

    #[test]
    fn a_429_pauses_everyone_and_only_a_later_pause_extends_it() {
        let mut s = SharedLimits::default();
        let observed = Observed {
            status: Some(429),
            retry_after: Some(Duration::from_secs(2)),
            ..Observed::default()
        };
        assert!(s.observe(10_000, &observed));
        assert_eq!(s.paused_until_ms, 12_000);
        assert!(s.pause_reason.contains("429"), "{}", s.pause_reason);
        let d = s.take(11_000, &claim("a", "y", 1), &Limits::default(), TTL);
        assert!(
            matches!(
                d,
                Decision::Wait {
                    reason: WaitReason::Paused,
                    until_ms: Some(12_000),
                    ..
                }
            ),
            "{d:?}"
        );
        // An earlier end does not shorten it.
        let shorter = Observed {
            retry_after: Some(Duration::from_millis(500)),
            ..observed.clone()
        };
        assert!(!s.observe(10_500, &shorter));
        assert_eq!(s.paused_until_ms, 12_000);
        assert_eq!(
            s.take(12_000, &claim("a", "y", 1), &Limits::default(), TTL),
            Decision::Go { held: false }
        );
        // A 529 without Retry-After pauses a second.
        let overloaded = Observed {
            status: Some(529),
            ..Observed::default()
        };
        assert!(s.observe(20_000, &overloaded));
        assert_eq!(s.paused_until_ms, 21_000);
        assert!(s.pause_reason.contains("overloaded"));
        assert_eq!(s.pauses, 2);
    }

    #[test]
    fn headers_teach_limits_and_an_empty_bucket_pauses_until_its_reset() {
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-limit-requests", "500".parse().unwrap());
        headers.insert("x-ratelimit-limit-tokens", "30000".parse().unwrap());
        headers.insert("x-ratelimit-remaining-requests", "0".parse().unwrap());
        headers.insert("x-ratelimit-reset-requests", "1m2.5s".parse().unwrap());
        let now = chrono::Utc::now();
        let h = RateHeaders::read(&headers, now);
        assert_eq!(h.limit_requests, Some(500));
        assert_eq!(
            h.reset_requests,
            Some(Duration::from_millis(60_000)),
            "cut to a minute"
        );
        let mut s = SharedLimits::default();
        assert!(s.observe(
            0,
            &Observed {
                status: Some(200),
                headers: h,
                ..Observed::default()
            }
        ));
        assert_eq!(s.learned_requests_per_minute, Some(500));
        assert_eq!(s.learned_tokens_per_minute, Some(30_000));
        assert_eq!(s.paused_until_ms, 60_000);
        // A configured limit beats a learned one.
        let configured = Limits {
            requests_per_minute: Some(7),
            ..Limits::default()
        };
        assert_eq!(s.effective(&configured).requests_per_minute, Some(7));
        assert!(s.limited(&Limits::default()));

        let mut anthropic = HeaderMap::new();
        anthropic.insert("anthropic-ratelimit-tokens-limit", "80000".parse().unwrap());
        anthropic.insert("anthropic-ratelimit-tokens-remaining", "0".parse().unwrap());
        let at = (now + chrono::TimeDelta::seconds(3)).to_rfc3339();
        anthropic.insert("anthropic-ratelimit-tokens-reset", at.parse().unwrap());
        let h = RateHeaders::read(&anthropic, now);
        assert_eq!(h.limit_tokens, Some(80_000));
        assert_eq!(h.remaining_tokens, Some(0));
        let reset = h.reset_tokens.unwrap();
        assert!(
            reset > Duration::from_millis(2900) && reset <= Duration::from_secs(3),
            "{reset:?}"
        );
    }

    #[test]
    fn spans_read_as_openai_writes_them() {
        assert_eq!(parse_span("1s"), Some(Duration::from_secs(1)));
        assert_eq!(parse_span("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(parse_span("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(
            parse_span("1h2m3.5s"),
            Some(Duration::from_secs_f64(3723.5))
        );
        assert_eq!(parse_span("soon"), None);
        assert_eq!(parse_span("5"), None);
        assert_eq!(parse_span(""), None);
    }

    #[test]
    fn waiters_stay_bounded() {
        let limits = Limits {
            max_concurrent: Some(1),
            ..Limits::default()
        };
        let mut s = SharedLimits::default();
        assert!(matches!(
            s.take(0, &claim("h", "x", 1), &limits, TTL),
            Decision::Go { .. }
        ));
        for i in 0..(MAX_WAITERS + 50) {
            let _ = s.take(0, &claim(&i.to_string(), "x", 1), &limits, TTL);
        }
        assert_eq!(s.waiters.len(), MAX_WAITERS);
        // Waiters that stop asking are forgotten.
        let _ = s.take(4_000, &claim("late", "x", 1), &limits, TTL);
        assert_eq!(s.waiters.len(), 1);
    }

    #[test]
    fn usage_and_estimates_read_both_wire_formats() {
        let openai = serde_json::json!({"usage": {"prompt_tokens": 10, "completion_tokens": 5}});
        let anthropic = serde_json::json!({"usage": {"input_tokens": 7, "output_tokens": 3}});
        assert_eq!(used_tokens(&openai), Some(15));
        assert_eq!(used_tokens(&anthropic), Some(10));
        assert_eq!(used_tokens(&serde_json::json!({})), None);
        let body = serde_json::json!({"max_tokens": 100});
        assert_eq!(estimate_tokens(&body, 40), 110);
    }

    #[tokio::test]
    async fn a_scope_counts_waits_and_tells_them() {
        let told = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = told.clone();
        let scope = CallScope::new(
            "s-1",
            Some(Arc::new(move |n: &WaitNotice| {
                sink.lock().unwrap().push(n.to_string())
            })),
        );
        let inner = scope.clone();
        scoped(inner, async {
            assert_eq!(current_swarm(), "s-1");
            notify_wait(&WaitNotice {
                reason: WaitReason::Paused,
                expected: Some(Duration::from_secs(2)),
                detail: "the provider answered 429".into(),
            });
            add_waited(Duration::from_millis(1500));
        })
        .await;
        assert_eq!(scope.waited_ms(), 1500);
        let told = told.lock().unwrap();
        assert_eq!(told.len(), 1);
        assert!(
            told[0].contains("paused") && told[0].contains("2.0 s"),
            "{}",
            told[0]
        );
        // Outside a scope nothing happens and nothing breaks.
        assert_eq!(current_swarm(), "");
        add_waited(Duration::from_secs(1));
    }
}
