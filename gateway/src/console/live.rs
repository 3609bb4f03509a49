//! The console's live updates, over SSE.
//!
//! A swarm's page follows that swarm: a watch of its key in the `swarms`
//! bucket (each state the manager writes) and an ordered consumer on its
//! stored messages (results for the timeline, progress for each task's
//! latest words, the final report). What changed is sent: the graph when
//! its tasks or edges change, else each task whose status, attempt or
//! worker moved; the timeline at most twice a second.
//!
//! The list of swarms and what waits for a person change with every swarm,
//! so one [`Hub`] per gateway follows the buckets for every browser: the
//! `missions` and `approvals`/`inputs` buckets by KV watches, the `swarms`
//! bucket by a headers-only consumer (the states themselves can be large).
//! A swarm that changed is read once per flush, whatever the number of
//! browsers, and only while one is watching: no browser makes the gateway
//! poll a bucket.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::DeliverPolicy, consumer::pull};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use futures::StreamExt;
use serde_json::json;
use swarm_client::client::{self as sc, Update};
use swarm_client::list::Row;
use swarm_common::approval::ApprovalRecord;
use swarm_common::{Codec, SwarmState, subjects};
use tokio::sync::{Mutex, broadcast, mpsc};

use super::views::{self, AgentView, RowView, SwarmLine, TaskLine};
use super::{Shared, error_text, person};
use crate::http::Gateway;
use crate::mapping::Origin;

/// How often changed swarms are read and sent to the list's browsers.
const FLUSH: Duration = Duration::from_millis(300);
/// Most swarms read in one flush (the rest wait for the next).
const FLUSH_MOST: usize = 200;
/// How often a changing timeline is drawn again.
const TIMELINE_EVERY: Duration = Duration::from_millis(500);
/// Events buffered for a slow browser before the swarm's follower waits.
const BUFFER: usize = 64;

/// What the hub tells every console browser.
#[derive(Debug, Clone)]
pub enum HubEvent {
    /// A swarm's row as it now stands.
    Row(Arc<Row>),
    /// Something waiting for a person changed (in this swarm, if known).
    Waiting(Option<String>),
}

/// The gateway's one follower of the buckets the console's lists show.
#[derive(Debug)]
pub struct Hub {
    tx: broadcast::Sender<HubEvent>,
    started: std::sync::Once,
    dirty: Arc<Mutex<BTreeSet<String>>>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            tx: broadcast::channel(256).0,
            started: std::sync::Once::new(),
            dirty: Default::default(),
        }
    }
}

impl Hub {
    /// Its events from now on; the first subscriber starts its followers.
    pub fn subscribe(
        self: &Arc<Self>,
        client: &async_nats::Client,
    ) -> broadcast::Receiver<HubEvent> {
        let rx = self.tx.subscribe();
        self.started.call_once(|| {
            tokio::spawn(follow_records(client.clone(), self.dirty.clone()));
            tokio::spawn(follow_states(client.clone(), self.dirty.clone()));
            tokio::spawn(follow_waiting(client.clone(), self.tx.clone()));
            tokio::spawn(flush(client.clone(), self.dirty.clone(), self.tx.clone()));
        });
        rx
    }
}

/// An ordered pull consumer on a bucket's stream: the keys `filter` names
/// (`>` for all), from `from`. Pull, not a KV watch's push consumer, so the
/// gateway's user needs no flow-control replies, only `MSG.NEXT`.
async fn bucket(
    client: &async_nats::Client,
    name: &str,
    filter: &str,
    from: DeliverPolicy,
    headers_only: bool,
) -> anyhow::Result<pull::Ordered> {
    let js = jetstream::new(client.clone());
    let stream = js.get_stream(format!("KV_{name}")).await?;
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: format!("$KV.{name}.{filter}"),
            deliver_policy: from,
            headers_only,
            ..Default::default()
        })
        .await?;
    Ok(consumer.messages().await?)
}

/// The key of a bucket's message, if it is a value written (not deleted).
fn written<'a>(m: &'a jetstream::Message, name: &str) -> Option<&'a str> {
    let deleted = m
        .headers
        .as_ref()
        .and_then(|h| h.get("KV-Operation"))
        .is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE");
    if deleted {
        return None;
    }
    m.subject
        .as_str()
        .strip_prefix("$KV.")
        .and_then(|rest| rest.strip_prefix(name))
        .and_then(|rest| rest.strip_prefix('.'))
}

/// Runs `follow` again a second after it ends or fails, for ever.
async fn forever<F, Fut>(what: &'static str, mut follow: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    loop {
        if let Err(e) = follow().await {
            tracing::debug!(error = %format!("{e:#}"), what, "the console's follower stopped; again in 1 s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn follow_records(client: async_nats::Client, dirty: Arc<Mutex<BTreeSet<String>>>) {
    follow_keys(client, subjects::MISSIONS_BUCKET, dirty).await
}

async fn follow_states(client: async_nats::Client, dirty: Arc<Mutex<BTreeSet<String>>>) {
    follow_keys(client, subjects::SWARMS_BUCKET, dirty).await
}

/// Marks each swarm whose key in bucket `name` is written from now on.
async fn follow_keys(
    client: async_nats::Client,
    name: &'static str,
    dirty: Arc<Mutex<BTreeSet<String>>>,
) {
    forever(name, || async {
        // Headers only: a swarm's state can be large, and only its key is
        // needed here.
        let mut messages = bucket(&client, name, ">", DeliverPolicy::New, true).await?;
        while let Some(m) = messages.next().await {
            let m = m?;
            if let Some(key) = written(&m, name)
                && subjects::is_token(key)
            {
                dirty.lock().await.insert(key.to_owned());
            }
        }
        Ok(())
    })
    .await
}

async fn follow_waiting(client: async_nats::Client, tx: broadcast::Sender<HubEvent>) {
    let follow = |name: &'static str| {
        let (client, tx) = (client.clone(), tx.clone());
        forever(name, move || {
            let (client, tx) = (client.clone(), tx.clone());
            async move {
                let mut messages = bucket(&client, name, ">", DeliverPolicy::New, false).await?;
                while let Some(m) = messages.next().await {
                    let m = m?;
                    let swarm = if name == subjects::APPROVALS_BUCKET {
                        Codec::MsgPack
                            .decode::<ApprovalRecord>(&m.payload)
                            .ok()
                            .and_then(|r| r.swarm_id)
                    } else {
                        // Questions' keys are `<swarm>.<task>`.
                        written(&m, name)
                            .and_then(|k| k.split('.').next())
                            .map(str::to_owned)
                    };
                    let _ = tx.send(HubEvent::Waiting(swarm));
                }
                Ok(())
            }
        })
    };
    tokio::join!(
        follow(subjects::APPROVALS_BUCKET),
        follow(subjects::INPUTS_BUCKET)
    );
}

/// Reads the swarms that changed and sends their rows, while anyone listens.
async fn flush(
    client: async_nats::Client,
    dirty: Arc<Mutex<BTreeSet<String>>>,
    tx: broadcast::Sender<HubEvent>,
) {
    let mut tick = tokio::time::interval(FLUSH);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let batch: Vec<String> = {
            let mut d = dirty.lock().await;
            if tx.receiver_count() == 0 {
                // Nobody watches: what changed meanwhile is not sent later.
                d.clear();
                continue;
            }
            let take: Vec<String> = d.iter().take(FLUSH_MOST).cloned().collect();
            for k in &take {
                d.remove(k);
            }
            take
        };
        for id in batch {
            match sc::lookup(&client, &id).await {
                Ok(known) => {
                    let Some(record) = known.record.as_ref() else {
                        continue;
                    };
                    let row = swarm_client::list::row(record, known.state.as_ref(), known.status());
                    let _ = tx.send(HubEvent::Row(Arc::new(row)));
                }
                Err(e) => {
                    tracing::debug!(swarm_id = %id, error = %format!("{e:#}"), "reading a changed swarm")
                }
            }
        }
    }
}

fn event(name: &str, data: &impl serde::Serialize) -> Option<Event> {
    Event::default().event(name).json_data(data).ok()
}

fn sse_of(rx: mpsc::Receiver<Event>) -> Response {
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Whether `caller` may see the swarm a row is of.
fn sees(caller: &crate::swarms::Caller, row: &Row) -> bool {
    match &caller.0 {
        None => true,
        Some(name) => row
            .mission_id
            .as_deref()
            .and_then(Origin::of_mission_id)
            .is_some_and(|o| &o.caller == name),
    }
}

/// `GET /events/swarms`: rows of the swarms the person sees, as they change.
pub async fn swarms_events(State(g): State<Shared>, headers: HeaderMap) -> Response {
    let p = match person(&g, &headers) {
        Ok(p) => p,
        Err(e) => return error_text(&e),
    };
    let slot = match g.swarms.streams.take(&p.caller) {
        Ok(s) => s,
        Err(e) => return error_text(&e),
    };
    let mut hub = g.hub.subscribe(&g.swarms.client);
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let _slot = slot;
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                got = hub.recv() => match got {
                    Ok(HubEvent::Row(row)) if sees(&p.caller, &row) => {
                        if let Some(e) = event("row", &RowView::of(&row, Utc::now()))
                            && tx.send(e).await.is_err()
                        {
                            return;
                        }
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    sse_of(rx)
}

/// `GET /events/waiting`: a word each time something waiting changes.
pub async fn waiting_events(State(g): State<Shared>, headers: HeaderMap) -> Response {
    let p = match person(&g, &headers) {
        Ok(p) => p,
        Err(e) => return error_text(&e),
    };
    let slot = match g.swarms.streams.take(&p.caller) {
        Ok(s) => s,
        Err(e) => return error_text(&e),
    };
    let mut hub = g.hub.subscribe(&g.swarms.client);
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let _slot = slot;
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                got = hub.recv() => match got {
                    Ok(HubEvent::Waiting(_)) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        if let Some(e) = event("waiting", &json!({}))
                            && tx.send(e).await.is_err()
                        {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            }
        }
    });
    sse_of(rx)
}

/// `GET /events/swarms/{id}`: one swarm as it runs (see the module doc).
pub async fn swarm_events(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let run = async {
        let p = person(&g, &headers)?;
        // Refuses a swarm the person may not see.
        g.swarms.view(&p.caller, &id).await?;
        let slot = g.swarms.streams.take(&p.caller)?;
        Ok::<_, crate::error::A2aError>(slot)
    };
    let slot = match run.await {
        Ok(s) => s,
        Err(e) => return error_text(&e),
    };
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let _slot = slot;
        if let Err(e) = follow_swarm(&g, &id, &tx).await {
            tracing::debug!(swarm_id = %id, error = %format!("{e:#}"), "a console stream ended");
            if let Some(ev) = event("problem", &json!({"message": format!("{e:#}")})) {
                let _ = tx.send(ev).await;
            }
        }
    });
    sse_of(rx)
}

/// What one browser has been sent of a swarm, to send only what changes.
#[derive(Default)]
struct Sent {
    structure: Option<Vec<(String, Vec<String>)>>,
    lines: HashMap<String, TaskLine>,
    swarm: Option<SwarmLine>,
}

async fn follow_swarm(g: &Gateway, id: &str, tx: &mpsc::Sender<Event>) -> anyhow::Result<()> {
    let client = g.swarms.client.clone();
    let mut states = bucket(
        &client,
        subjects::SWARMS_BUCKET,
        id,
        DeliverPolicy::LastPerSubject,
        false,
    )
    .await?;
    let mut messages = sc::follow(&client, id, DeliverPolicy::All).await?;
    let mut hub = g.hub.subscribe(&client);
    // What waited before the hub followed the buckets is read once now.
    if let Some(e) = event("waiting", &json!({})) {
        tx.send(e)
            .await
            .map_err(|_| anyhow::anyhow!("the browser left"))?;
    }
    let mut sent = Sent::default();
    let mut state: Option<SwarmState> = None;
    let mut finished: Vec<swarm_boss::graph::Bar> = Vec::new();
    let mut seen: HashSet<(String, u32, u32)> = HashSet::new();
    let mut timeline_due = false;
    let mut tick = tokio::time::interval(TIMELINE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let send = |e: Option<Event>| async move {
        match e {
            Some(e) => tx
                .send(e)
                .await
                .map_err(|_| anyhow::anyhow!("the browser left")),
            None => Ok(()),
        }
    };
    loop {
        tokio::select! {
            _ = tx.closed() => return Ok(()),
            entry = states.next() => {
                let Some(entry) = entry else { anyhow::bail!("the state watch ended") };
                let entry = entry?;
                if written(&entry, subjects::SWARMS_BUCKET).is_none() {
                    continue;
                }
                let Ok(mut s) = Codec::MsgPack.decode::<SwarmState>(&entry.payload) else {
                    continue;
                };
                if s.chunks.is_some() {
                    // A large swarm's tasks are in chunks beside its entry.
                    match swarm_client::client::state(&client, id).await {
                        Ok(Some(whole)) => s = whole,
                        _ => continue,
                    }
                }
                for e in changes(&mut sent, &s) {
                    send(Some(e)).await?;
                }
                state = Some(s);
                timeline_due = true;
            }
            m = messages.next() => {
                let Some(m) = m else { anyhow::bail!("the swarm's messages ended") };
                let Ok(m) = m else { continue };
                match sc::update_of(&m.subject, m.headers.as_ref(), &m.payload) {
                    Some(Update::Result(r))
                        if seen.insert((r.task_id.clone(), r.attempt, r.revision)) =>
                    {
                        finished.push(views::bar_of(&r));
                        timeline_due = true;
                    }
                    Some(Update::Progress(p)) if !p.message.trim().is_empty() => {
                        let text = views::latest(&p.message);
                        send(event("latest", &json!({"id": p.task_id, "text": text}))).await?;
                    }
                    Some(Update::Report(r)) => {
                        // The last state may come after the report in this
                        // select: the page ends on the state as stored.
                        if let Ok(Some(s)) = sc::state(&client, id).await {
                            for e in changes(&mut sent, &s) {
                                send(Some(e)).await?;
                            }
                            state = Some(s);
                        }
                        let svg = views::timeline_of(&finished, state.as_ref(), Utc::now());
                        send(event("timeline", &json!({"svg": svg}))).await?;
                        let (code, label, class) = views::swarm_badge(r.overall_status);
                        send(event("report", &json!({
                            "status_code": code, "status_label": label, "status_class": class,
                        }))).await?;
                        return Ok(());
                    }
                    _ => {}
                }
            }
            got = hub.recv() => {
                if let Ok(HubEvent::Waiting(Some(s))) = &got && s == id {
                    send(event("waiting", &json!({}))).await?;
                }
            }
            _ = tick.tick(), if timeline_due => {
                timeline_due = false;
                let svg = views::timeline_of(&finished, state.as_ref(), Utc::now());
                send(event("timeline", &json!({"svg": svg}))).await?;
            }
        }
    }
}

/// The events a new state makes for a browser that was sent `sent`.
fn changes(sent: &mut Sent, s: &SwarmState) -> Vec<Event> {
    let mut out = Vec::new();
    let structure = views::structure(s);
    let lines = views::task_lines(s);
    if sent.structure.as_ref() != Some(&structure) {
        let rows = super::templates()
            .get_template("task_rows.html")
            .and_then(|t| t.render(minijinja::context! { swarm_id => s.swarm_id.clone(), tasks => minijinja::Value::from(minijinja::value::Serde(&lines)) }))
            .unwrap_or_default();
        out.extend(event(
            "graph",
            &json!({"svg": views::graph_of(s), "rows": rows}),
        ));
        sent.structure = Some(structure);
    }
    let changed: Vec<&TaskLine> = lines
        .iter()
        .filter(|l| sent.lines.get(&l.id) != Some(*l))
        .collect();
    if !changed.is_empty() {
        out.extend(event("tasks", &changed));
    }
    sent.lines = lines.into_iter().map(|l| (l.id.clone(), l)).collect();
    let line = SwarmLine::of(s.status, Some(s));
    if sent.swarm.as_ref() != Some(&line) {
        out.extend(event("swarm", &line));
        sent.swarm = Some(line);
    }
    out
}

/// The replicas that answer `$SRV.INFO` within half a second, for a
/// deployment without agent cards.
pub async fn services(client: &async_nats::Client) -> Vec<AgentView> {
    let inbox = client.new_inbox();
    let Ok(mut sub) = client.subscribe(inbox.clone()).await else {
        return Vec::new();
    };
    if client
        .publish_with_reply("$SRV.INFO", inbox, bytes::Bytes::new())
        .await
        .is_err()
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
    while out.len() < 256 {
        let Ok(Some(m)) = tokio::time::timeout_at(deadline, sub.next()).await else {
            break;
        };
        let Ok(info) = serde_json::from_slice::<serde_json::Value>(&m.payload) else {
            continue;
        };
        let text = |k: &str| {
            info.get(k)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        out.push(AgentView {
            role: text("name"),
            agent_id: text("id"),
            pool: String::new(),
            skills: info
                .get("endpoints")
                .and_then(|e| e.as_array())
                .map(|eps| {
                    eps.iter()
                        .filter_map(|e| e.get("subject").and_then(|s| s.as_str()))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            tools: Vec::new(),
            version: text("version"),
            url: String::new(),
            since: String::new(),
        });
    }
    out.sort_by(|a, b| (&a.role, &a.agent_id).cmp(&(&b.role, &b.agent_id)));
    out
}
