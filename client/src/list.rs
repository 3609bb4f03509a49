//! `swarm list`: the newest swarms, from the boss's mission records.
//!
//! The `missions` bucket keeps one revision per swarm, and the boss rewrites
//! a swarm's record at each stage of its mission, so the surviving messages
//! of its stream (`KV_missions`) are in the order of each swarm's last
//! update. A page is read from the end of that stream: a window of the last
//! sequences, doubled until it holds `limit` matching swarms accepted at or
//! after the time of the window's oldest message. Every swarm outside the
//! window was last updated before that message, so it was accepted before
//! it too and cannot belong on the page. A page therefore costs about what
//! it shows (plus the swarms updated meanwhile), however many swarms have
//! ever run. Tasks done, total and failed come from each row's `SwarmState`
//! (one read per row).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::DeliverPolicy, consumer::pull};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;
use swarm_common::{
    Codec, SwarmState, SwarmStatus, TaskStatus,
    mission::{MissionRecord, MissionStatus},
    subjects,
};

use crate::client::{self, record_status};

/// How far apart the boss's clock (which stamps `accepted_at`) and the
/// server's (which stamps the stream's messages) may be without a swarm
/// being left off a page: the window must reach this much further back.
const CLOCK_ALLOWANCE: chrono::TimeDelta = chrono::TimeDelta::milliseconds(500);
/// The sequences the first window spans, at least.
const FIRST_WINDOW: u64 = 32;
/// How long one stored message may take to arrive before the read fails.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What to list.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// Only swarms in one of these states (all when empty).
    pub statuses: Vec<SwarmStatus>,
    /// Only swarms accepted within this long before now.
    pub since: Option<Duration>,
    /// At most this many rows.
    pub limit: usize,
}

/// One swarm on a page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The swarm.
    pub swarm_id: String,
    /// The caller's mission id, if it gave one.
    pub mission_id: Option<String>,
    /// Where it stands.
    pub status: SwarmStatus,
    /// Tasks completed or skipped (none known before the swarm is deployed).
    pub tasks_done: Option<usize>,
    /// Tasks planned.
    pub tasks_total: Option<usize>,
    /// Tasks failed.
    pub tasks_failed: Option<usize>,
    /// When the boss accepted the mission.
    pub accepted_at: DateTime<Utc>,
    /// When the swarm ended.
    pub ended_at: Option<DateTime<Utc>>,
    /// The mission's text.
    pub mission: String,
}

/// What reading a page cost, for tests and `RUST_LOG=debug`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Messages read from the `missions` bucket's stream, over every window.
    pub messages_read: u64,
    /// Windows read.
    pub windows: u32,
    /// `SwarmState`s read.
    pub state_reads: u32,
}

/// A page of swarms, newest first.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// The rows.
    pub rows: Vec<Row>,
    /// What they cost.
    pub cost: Cost,
}

/// Parses a `--status` value: running, completed, failed, cancelled or
/// timedout (any case; `timed-out` and `timed_out` too).
pub fn parse_status(s: &str) -> Result<SwarmStatus, String> {
    match s
        .trim()
        .to_ascii_lowercase()
        .replace(['-', '_'], "")
        .as_str()
    {
        "running" => Ok(SwarmStatus::Running),
        "completed" => Ok(SwarmStatus::Completed),
        "failed" => Ok(SwarmStatus::Failed),
        "cancelled" | "canceled" => Ok(SwarmStatus::Cancelled),
        "timedout" => Ok(SwarmStatus::TimedOut),
        _ => Err(format!(
            "{s:?} is not a status: running, completed, failed, cancelled or timedout"
        )),
    }
}

/// Parses a `--since` value: a number and a unit, `90s`, `30m`, `1h`, `2d`,
/// or several such parts (`1h30m`).
pub fn parse_since(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a span such as 90s, 30m, 1h or 2d");
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in s.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    if !digits.is_empty() || total == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// The surviving messages of a stretch of the stream: the latest record
/// per swarm (`None` when its key was deleted) and the time of the oldest
/// message read.
#[derive(Default)]
struct Window {
    latest: HashMap<String, (u64, Option<MissionRecord>)>,
    oldest: Option<DateTime<Utc>>,
    read: u64,
}

/// Lists the newest swarms matching `query`, `now` being the time the
/// `--since` span ends.
pub async fn list(
    client: &async_nats::Client,
    query: &Query,
    now: DateTime<Utc>,
) -> anyhow::Result<Listing> {
    let js = jetstream::new(client.clone());
    let stream = js
        .get_stream(format!("KV_{}", subjects::MISSIONS_BUCKET))
        .await
        .context("opening the missions bucket")?;
    let at_start = stream.cached_info().state.clone();
    let mut lister = Lister {
        client,
        stream,
        query,
        // A span reaching before 1970 means every swarm.
        cutoff: query.since.map(|d| {
            chrono::TimeDelta::from_std(d)
                .ok()
                .and_then(|d| now.checked_sub_signed(d))
                .unwrap_or(DateTime::UNIX_EPOCH)
                .max(DateTime::UNIX_EPOCH)
        }),
        states: HashMap::new(),
        cost: Cost::default(),
    };
    if at_start.messages == 0 || query.limit == 0 {
        return Ok(Listing::default());
    }
    let first_span = FIRST_WINDOW.max((query.limit as u64).saturating_mul(2));
    // A span of time: when it holds few messages, reading them from its
    // start settles the page at once.
    if let Some(cutoff) = lister.cutoff {
        let from: SystemTime = (cutoff - CLOCK_ALLOWANCE).into();
        let consumer = lister
            .consumer(DeliverPolicy::ByStartTime {
                start_time: from.into(),
            })
            .await?;
        if consumer.cached_info().num_pending <= first_span * 2 {
            let window = lister.read(consumer).await?;
            let page = lister.page(&window).await?;
            return lister.finish(page).await;
        }
    }
    let mut span = first_span;
    loop {
        let start = at_start
            .last_sequence
            .saturating_add(1)
            .saturating_sub(span)
            .max(at_start.first_sequence);
        let consumer = lister
            .consumer(DeliverPolicy::ByStartSequence {
                start_sequence: start,
            })
            .await?;
        let window = lister.read(consumer).await?;
        let page = lister.page(&window).await?;
        let whole_stream = start <= at_start.first_sequence;
        // Every swarm outside the window was accepted before this.
        let unread_before = window.oldest.map(|t| t + CLOCK_ALLOWANCE);
        let settled = match unread_before {
            Some(t) => {
                (page.len() >= query.limit && page.last().is_some_and(|r| r.accepted_at >= t))
                    || lister.cutoff.is_some_and(|c| t <= c)
            }
            None => false,
        };
        if whole_stream || settled {
            return lister.finish(page).await;
        }
        span = span.saturating_mul(2);
    }
}

struct Lister<'a> {
    client: &'a async_nats::Client,
    stream: jetstream::stream::Stream,
    query: &'a Query,
    cutoff: Option<DateTime<Utc>>,
    /// States read so far (`None`: the swarm has none), each read once.
    states: HashMap<String, Option<SwarmState>>,
    cost: Cost,
}

impl Lister<'_> {
    async fn consumer(
        &self,
        deliver_policy: DeliverPolicy,
    ) -> anyhow::Result<jetstream::consumer::Consumer<pull::OrderedConfig>> {
        self.stream
            .create_consumer(pull::OrderedConfig {
                deliver_policy,
                ..Default::default()
            })
            .await
            .context("reading the missions bucket")
    }

    /// Reads from where the consumer starts to the end of the stream
    /// (including records updated since the listing began).
    async fn read(
        &mut self,
        consumer: jetstream::consumer::Consumer<pull::OrderedConfig>,
    ) -> anyhow::Result<Window> {
        self.cost.windows += 1;
        let mut window = Window::default();
        if consumer.cached_info().num_pending == 0 {
            return Ok(window);
        }
        let prefix = format!("$KV.{}.", subjects::MISSIONS_BUCKET);
        let mut messages = consumer
            .messages()
            .await
            .context("reading the missions bucket")?;
        loop {
            let msg = tokio::time::timeout(READ_TIMEOUT, messages.next())
                .await
                .context("reading the missions bucket: timed out")?
                .context("reading the missions bucket: the read ended")?
                .context("reading the missions bucket")?;
            window.read += 1;
            self.cost.messages_read += 1;
            let info = msg
                .info()
                .map_err(|e| anyhow::anyhow!("a message of the missions bucket: {e}"))?;
            let (seq, pending) = (info.stream_sequence, info.pending);
            let at: SystemTime = info.published.into();
            let at = DateTime::<Utc>::from(at);
            window.oldest = Some(window.oldest.map_or(at, |o| o.min(at)));
            if let Some(key) = msg.subject.as_str().strip_prefix(&prefix) {
                let deleted = msg
                    .headers
                    .as_ref()
                    .and_then(|h| h.get("KV-Operation"))
                    .is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE");
                let record = if deleted {
                    None
                } else {
                    match Codec::MsgPack.decode::<MissionRecord>(&msg.payload) {
                        Ok(r) => Some(r),
                        Err(e) => {
                            tracing::warn!(%key, error = %e, "skipping an unreadable mission record");
                            None
                        }
                    }
                };
                let newer = window.latest.get(key).is_none_or(|(known, _)| *known < seq);
                if newer {
                    window.latest.insert(key.to_string(), (seq, record));
                }
            }
            if pending == 0 {
                return Ok(window);
            }
        }
    }

    /// The swarm's state, read once per listing.
    async fn state(&mut self, swarm_id: &str) -> anyhow::Result<Option<&SwarmState>> {
        if !self.states.contains_key(swarm_id) {
            self.cost.state_reads += 1;
            let state = client::state(self.client, swarm_id).await?;
            self.states.insert(swarm_id.to_string(), state);
        }
        Ok(self.states.get(swarm_id).and_then(Option::as_ref))
    }

    /// The window's newest matching swarms, at most `limit`, newest first.
    async fn page(&mut self, window: &Window) -> anyhow::Result<Vec<MissionRecord>> {
        let mut candidates: Vec<&MissionRecord> = window
            .latest
            .values()
            .filter_map(|(_, r)| r.as_ref())
            .filter(|r| self.cutoff.is_none_or(|c| r.accepted_at >= c))
            .collect();
        candidates.sort_by(|a, b| {
            b.accepted_at
                .cmp(&a.accepted_at)
                .then_with(|| b.swarm_id.cmp(&a.swarm_id))
        });
        let mut page = Vec::new();
        for record in candidates {
            if page.len() >= self.query.limit {
                break;
            }
            let status = self.status(record).await?;
            if self.query.statuses.is_empty() || self.query.statuses.contains(&status) {
                page.push(record.clone());
            }
        }
        Ok(page)
    }

    /// Where a swarm stands: its record says so once the boss has recorded
    /// the report (or planning failed); before that, its state may already
    /// say it has ended.
    async fn status(&mut self, record: &MissionRecord) -> anyhow::Result<SwarmStatus> {
        match record.status {
            MissionStatus::Reported | MissionStatus::Failed => Ok(record_status(record)),
            MissionStatus::Accepted | MissionStatus::Deployed => Ok(self
                .state(&record.swarm_id)
                .await?
                .map_or(SwarmStatus::Running, |s| s.status)),
        }
    }

    async fn finish(mut self, page: Vec<MissionRecord>) -> anyhow::Result<Listing> {
        let mut rows = Vec::with_capacity(page.len());
        for record in page {
            let status = self.status(&record).await?;
            let state = self.state(&record.swarm_id).await?;
            rows.push(row(&record, state, status));
        }
        tracing::debug!(cost = ?self.cost, rows = rows.len(), "swarm list");
        Ok(Listing {
            rows,
            cost: self.cost,
        })
    }
}

/// A page's row from a swarm's record and, once deployed, its state.
pub fn row(record: &MissionRecord, state: Option<&SwarmState>, status: SwarmStatus) -> Row {
    let count = |s: &SwarmState, of: TaskStatus| s.tasks.iter().filter(|t| t.status == of).count();
    Row {
        swarm_id: record.swarm_id.clone(),
        mission_id: record.request.mission_id.clone(),
        status,
        tasks_done: state.map(|s| count(s, TaskStatus::Completed) + count(s, TaskStatus::Skipped)),
        tasks_total: state
            .map(|s| s.tasks.len())
            .or_else(|| record.plan.as_ref().map(|p| p.tasks.len())),
        tasks_failed: state.map(|s| count(s, TaskStatus::Failed)),
        accepted_at: record.accepted_at,
        ended_at: match (state, record.status) {
            (Some(s), _) => s.completed_at,
            (None, MissionStatus::Failed) => Some(record.updated_at),
            (None, _) => None,
        },
        mission: record.request.mission.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_write_them() {
        assert_eq!(parse_since("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_since("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_since("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_since("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_since("1h30m"), Ok(Duration::from_secs(5400)));
        for bad in ["", "h", "10", "5x", "0s", "1.5h", "99999999999999999999d"] {
            assert!(parse_since(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn statuses_are_named_in_lower_case() {
        assert_eq!(parse_status("running"), Ok(SwarmStatus::Running));
        assert_eq!(parse_status("Completed"), Ok(SwarmStatus::Completed));
        assert_eq!(parse_status("failed"), Ok(SwarmStatus::Failed));
        assert_eq!(parse_status("cancelled"), Ok(SwarmStatus::Cancelled));
        assert_eq!(parse_status("timedout"), Ok(SwarmStatus::TimedOut));
        assert_eq!(parse_status("timed-out"), Ok(SwarmStatus::TimedOut));
        assert!(parse_status("done").is_err());
    }
}
