//! The client side of Swarm: submit a mission, follow it to its report,
//! read a swarm's state, cancel it, fetch its HTML report.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use async_nats::{
    Client, HeaderMap,
    jetstream::{self, consumer::DeliverPolicy, consumer::pull, kv},
};
use bytes::Bytes;
use futures::StreamExt;
use swarm_common::{
    Codec, Control, Envelope, ErrorMessage, FinalReport, ProgressUpdate, ResultSubmission,
    SwarmDeployment, SwarmState, SwarmStatus,
    approval::{ApprovalRecord, ApprovalStatus, DeskReply, DeskRequest, InputRecord},
    headers as h,
    mission::{MissionErrorReply, MissionRecord, MissionReply, MissionRequest, MissionStatus},
    subjects::{self, Subject},
};
use tokio::io::AsyncReadExt;

use crate::exit::{Exit, fail};

/// Submits a mission to `boss.missions` as JSON and returns the boss's answer.
pub async fn submit(
    client: &Client,
    request: &MissionRequest,
    timeout: Duration,
) -> anyhow::Result<MissionReply> {
    let mut headers = HeaderMap::new();
    headers.insert(h::CONTENT_TYPE, swarm_common::codec::JSON);
    // A caller with a trace of its own (a gateway's request) has the
    // mission continue it.
    swarm_runtime::trace::inject(&mut headers);
    let body = Bytes::from(Codec::Json.encode(request)?);
    let reply = tokio::time::timeout(
        timeout,
        client.request_with_headers(subjects::MISSIONS, headers, body),
    )
    .await
    .map_err(|_| {
        fail(
            Exit::Unreachable,
            format!(
                "no boss answered on {} within {timeout:?}",
                subjects::MISSIONS
            ),
        )
    })?
    .map_err(|e| {
        fail(
            Exit::Unreachable,
            format!(
                "no boss answered on {}: {e} (is a boss running?)",
                subjects::MISSIONS
            ),
        )
    })?;
    if let Ok(err) = Codec::Json.decode::<MissionErrorReply>(&reply.payload) {
        return Err(fail(
            Exit::Error,
            format!(
                "mission refused: {} ({})",
                err.error.message, err.error.code
            ),
        ));
    }
    Codec::Json
        .decode::<MissionReply>(&reply.payload)
        .context("the boss's reply is not a mission reply")
}

/// One thing that happened to a swarm, as a watcher sees it.
// A watcher holds one update at a time: a boxed result would cost an
// allocation per update and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Update {
    /// The swarm was deployed with these tasks (ids, in plan order).
    Deployed {
        /// The tasks' ids.
        tasks: Vec<String>,
    },
    /// A task's progress.
    Progress(ProgressUpdate),
    /// A task's result was submitted (not yet reviewed).
    Result(ResultSubmission),
    /// An error concerning the swarm or one of its tasks.
    Error(ErrorMessage),
    /// The final report: the watch ends.
    Report(Box<FinalReport>),
}

/// The prefix of a progress update that shows a reply being written (the
/// worker's `writing: ` and the end of the text so far).
pub const WRITING_PREFIX: &str = "writing: ";

/// A progress message of a reply being written, on one line of at most
/// `max` characters, by its last words (which are what is new); `None` for
/// any other message.
pub fn written_tail(message: &str, max: usize) -> Option<String> {
    let text = message.strip_prefix(WRITING_PREFIX)?;
    let words: Vec<char> = text
        .trim_start_matches('…')
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .collect();
    let room = max.saturating_sub(WRITING_PREFIX.len() + 1).max(1);
    Some(if words.len() <= room && !text.starts_with('…') {
        format!("{WRITING_PREFIX}{}", words.iter().collect::<String>())
    } else {
        let tail: String = words[words.len().saturating_sub(room)..].iter().collect();
        format!("{WRITING_PREFIX}…{tail}")
    })
}

/// Follows a swarm from its first message (a late watcher replays the
/// history) and calls `on_update` for each, until the final report or a
/// planning error arrives or `timeout` passes.
pub async fn watch(
    client: &Client,
    swarm_id: &str,
    timeout: Duration,
    mut on_update: impl FnMut(&Update),
) -> anyhow::Result<FinalReport> {
    let mut messages = follow(client, swarm_id, DeliverPolicy::All).await?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let next = tokio::time::timeout_at(deadline, messages.next())
            .await
            .map_err(|_| {
                fail(
                    Exit::WaitTimedOut,
                    format!("no final report for {swarm_id} within {timeout:?}"),
                )
            })?;
        let Some(msg) = next else {
            bail!("the swarm's message stream ended");
        };
        // The ordered consumer recreates itself after a missed heartbeat or a
        // lost consumer (a node of a cluster restarting) and yields the fault
        // on the way: the watch goes on until its deadline.
        let msg = match msg {
            Ok(msg) => msg,
            Err(e) => {
                tracing::warn!(error = %e, %swarm_id, "following the swarm: resuming");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let update = update_of(&msg.subject, msg.headers.as_ref(), &msg.payload);
        let Some(update) = update else { continue };
        on_update(&update);
        match update {
            Update::Report(report) => return Ok(*report),
            Update::Error(e) if e.task_id.is_none() => {
                return Err(fail(
                    Exit::Failed,
                    format!("the mission failed before it started: {}", e.error.message),
                ));
            }
            _ => {}
        }
    }
}

/// The swarm's stored messages from `from` on (an ordered consumer on its
/// events, which recreates itself after a lost heartbeat): what [`watch`]
/// reads, and what the A2A gateway streams.
pub async fn follow(
    client: &Client,
    swarm_id: &str,
    from: DeliverPolicy,
) -> anyhow::Result<pull::Ordered> {
    let js = jetstream::new(client.clone());
    let stream = js
        .get_stream(subjects::A2AP_STREAM)
        .await
        .context("opening the A2AP stream (is the cluster set up?)")?;
    // A cluster that has just formed (or lost a node) can time out the
    // consumer's creation while its meta leader settles: such faults are
    // retried, anything else is reported at once.
    let follow = || async {
        let consumer = stream
            .create_consumer(pull::OrderedConfig {
                filter_subject: subjects::swarm_events(swarm_id),
                deliver_policy: from,
                ..Default::default()
            })
            .await
            .map_err(|e| FollowFault {
                transient: transient_consumer_fault(e.kind()),
                error: e.into(),
            })?;
        consumer.messages().await.map_err(|e| FollowFault {
            transient: true,
            error: e.into(),
        })
    };
    swarm_runtime::retry::retry(follow, |f| f.transient)
        .await
        .map_err(|f| f.error.context("following the swarm"))
}

/// The update one stored message of a swarm is, or `None` for a message a
/// watcher does not show (a control, an assignment, bytes that do not decode).
pub fn update_of(subject: &str, headers: Option<&HeaderMap>, payload: &[u8]) -> Option<Update> {
    fn body<T: swarm_common::Payload>(headers: Option<&HeaderMap>, payload: &[u8]) -> Option<T> {
        swarm_runtime::wire::decode::<T>(headers, payload)
            .ok()
            .map(|e| e.body)
    }
    match Subject::parse(subject)? {
        Subject::Deploy { .. } => {
            body::<SwarmDeployment>(headers, payload).map(|d| Update::Deployed {
                tasks: d.plan.tasks.into_iter().map(|t| t.task_id).collect(),
            })
        }
        Subject::Progress { .. } => body(headers, payload).map(Update::Progress),
        Subject::Result { .. } => body(headers, payload).map(Update::Result),
        Subject::Error { .. } => body(headers, payload).map(Update::Error),
        Subject::Report { .. } => body(headers, payload).map(|r| Update::Report(Box::new(r))),
        _ => None,
    }
}

/// Why a watch could not start following its swarm, and whether trying again
/// may help.
struct FollowFault {
    transient: bool,
    error: anyhow::Error,
}

impl std::fmt::Display for FollowFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.error)
    }
}

/// Whether a consumer's creation failed for a reason that passes once a
/// cluster settles: a request that timed out or found no responder, or the
/// server answering that JetStream is not available yet (a 5xx status).
fn transient_consumer_fault(kind: jetstream::stream::ConsumerErrorKind) -> bool {
    use jetstream::stream::ConsumerErrorKind as Kind;
    match kind {
        Kind::TimedOut | Kind::Request => true,
        Kind::JetStream(e) => e.code() >= 500,
        _ => false,
    }
}

/// A swarm's state from the `swarms` bucket.
/// Most child swarm states [`descendants`] reads.
pub const MAX_DESCENDANTS: usize = 256;

/// The states of the child swarms below `state`, and theirs, by swarm id
/// (at most [`MAX_DESCENDANTS`]); a child not started yet has none.
pub async fn descendants(
    client: &Client,
    state: &SwarmState,
) -> anyhow::Result<std::collections::HashMap<String, SwarmState>> {
    let mut found = std::collections::HashMap::new();
    let mut next: Vec<String> = state
        .tasks
        .iter()
        .filter_map(|t| state.child_of(t))
        .collect();
    while let Some(id) = next.pop() {
        if found.len() >= MAX_DESCENDANTS || found.contains_key(&id) {
            continue;
        }
        if let Some(child) = self::state(client, &id).await? {
            next.extend(child.tasks.iter().filter_map(|t| child.child_of(t)));
            found.insert(id, child);
        }
    }
    Ok(found)
}

/// The stored state of a swarm.
pub async fn state(client: &Client, swarm_id: &str) -> anyhow::Result<Option<SwarmState>> {
    if !subjects::is_token(swarm_id) {
        bail!("{swarm_id:?} is not a swarm id");
    }
    let js = jetstream::new(client.clone());
    let store = js
        .get_key_value(subjects::SWARMS_BUCKET)
        .await
        .context("opening the swarms bucket")?;
    Ok(swarm_runtime::states::load(&store, swarm_id)
        .await?
        .map(|(state, _)| state))
}

/// A mission's record from the `missions` bucket.
pub async fn mission(client: &Client, swarm_id: &str) -> anyhow::Result<Option<MissionRecord>> {
    let js = jetstream::new(client.clone());
    let store = js
        .get_key_value(subjects::MISSIONS_BUCKET)
        .await
        .context("opening the missions bucket")?;
    decode_entry(&store, swarm_id).await
}

async fn decode_entry<T: serde::de::DeserializeOwned>(
    store: &kv::Store,
    key: &str,
) -> anyhow::Result<Option<T>> {
    if !subjects::is_token(key) {
        bail!("{key:?} is not a swarm id");
    }
    match store.get(key).await.context("reading the bucket")? {
        Some(bytes) => Ok(Some(
            Codec::MsgPack
                .decode(&bytes)
                .context("decoding the stored value")?,
        )),
        None => Ok(None),
    }
}

/// What the system knows of one swarm: the boss's record of its mission
/// and the manager's state (a swarm deployed directly on
/// `a2ap.<swarm>.deploy` has only the state; a mission not yet deployed, or
/// whose planning failed, only the record).
#[derive(Debug, Clone)]
pub struct Known {
    /// The swarm.
    pub swarm_id: String,
    /// The mission record, if the swarm came through the boss.
    pub record: Option<MissionRecord>,
    /// The swarm's state, once a manager has taken its deployment.
    pub state: Option<SwarmState>,
}

impl Known {
    /// Where the swarm stands: the state's word when there is one (it ends
    /// a swarm before the boss records the report), else the record's.
    pub fn status(&self) -> SwarmStatus {
        match (&self.state, &self.record) {
            (Some(s), _) => s.status,
            (None, Some(r)) => record_status(r),
            (None, None) => SwarmStatus::Running,
        }
    }
}

/// How a swarm stands according to its mission record alone.
pub fn record_status(record: &MissionRecord) -> SwarmStatus {
    match record.status {
        MissionStatus::Accepted | MissionStatus::Deployed => SwarmStatus::Running,
        MissionStatus::Reported => record.overall_status.unwrap_or(SwarmStatus::Running),
        MissionStatus::Failed => SwarmStatus::Failed,
    }
}

/// Looks a swarm up in the `missions` bucket and the `swarms` bucket; an id
/// neither holds is the error "no such swarm <id>" (exit code 1).
pub async fn lookup(client: &Client, swarm_id: &str) -> anyhow::Result<Known> {
    let no_such = || fail(Exit::Error, format!("no such swarm {swarm_id}"));
    if !subjects::is_token(swarm_id) {
        return Err(no_such());
    }
    let (record, state) = tokio::try_join!(mission(client, swarm_id), state(client, swarm_id))?;
    if record.is_none() && state.is_none() {
        return Err(no_such());
    }
    Ok(Known {
        swarm_id: swarm_id.to_string(),
        record,
        state,
    })
}

/// Waits until the boss has rendered the swarm's HTML report and returns its record.
pub async fn wait_for_rendering(
    client: &Client,
    swarm_id: &str,
    timeout: Duration,
) -> anyhow::Result<MissionRecord> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(r) = mission(client, swarm_id).await?
            && r.report_object.is_some()
        {
            return Ok(r);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("the boss did not render the report of {swarm_id} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Fetches the HTML report from the object store and writes it to `path`.
pub async fn fetch_report(client: &Client, swarm_id: &str, path: &Path) -> anyhow::Result<PathBuf> {
    let html = report_html(client, swarm_id).await?;
    let name = format!("{swarm_id}.html");
    let path = if path.is_dir() {
        path.join(&name)
    } else {
        path.to_path_buf()
    };
    tokio::fs::write(&path, html)
        .await
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The swarm's HTML report, from the object store.
pub async fn report_html(client: &Client, swarm_id: &str) -> anyhow::Result<Vec<u8>> {
    if !subjects::is_token(swarm_id) {
        bail!("{swarm_id:?} is not a swarm id");
    }
    let js = jetstream::new(client.clone());
    let store = js
        .get_object_store(subjects::REPORTS_BUCKET)
        .await
        .context("opening the reports object store")?;
    let name = format!("{swarm_id}.html");
    let mut object = store
        .get(name.as_str())
        .await
        .with_context(|| format!("no report {name} in the object store"))?;
    let mut html = Vec::new();
    object
        .read_to_end(&mut html)
        .await
        .context("reading the report")?;
    Ok(html)
}

/// The swarm's `FinalReport` as published on `a2ap.<swarm>.report` (the
/// last one there), or `None` while it has none.
pub async fn final_report(client: &Client, swarm_id: &str) -> anyhow::Result<Option<FinalReport>> {
    if !subjects::is_token(swarm_id) {
        bail!("{swarm_id:?} is not a swarm id");
    }
    let js = jetstream::new(client.clone());
    let stream = js
        .get_stream(subjects::A2AP_STREAM)
        .await
        .context("opening the A2AP stream")?;
    match swarm_runtime::wire::last_on(&stream, &subjects::report(swarm_id))
        .await
        .context("reading the final report")?
    {
        Some(msg) => {
            let env = swarm_runtime::wire::decode::<FinalReport>(Some(&msg.headers), &msg.payload)
                .map_err(|e| anyhow::anyhow!("decoding the final report: {}", e.message))?;
            Ok(Some(env.body))
        }
        None => Ok(None),
    }
}

/// Asks the swarm's manager to cancel it. A swarm that does not exist, or
/// has ended, is an error and nothing is sent.
pub async fn cancel(client: &Client, swarm_id: &str, reason: &str) -> anyhow::Result<()> {
    let known = lookup(client, swarm_id).await?;
    let status = known.status();
    if status.is_terminal() {
        return Err(fail(
            Exit::Error,
            format!("swarm {swarm_id} has finished ({status:?}): nothing to cancel"),
        ));
    }
    let js = jetstream::new(client.clone());
    let env = Envelope::new(
        "swarm-cli",
        "manager",
        swarm_id,
        swarm_id,
        Control::Cancel {
            reason: reason.to_string(),
        },
    );
    swarm_runtime::wire::publish(&js, subjects::control(swarm_id), &env, None).await?;
    Ok(())
}

/// Where a swarm stands, or `None` when no bucket knows it (an approval or
/// question naming such a swarm is left as it is).
async fn status_of(client: &Client, swarm_id: &str) -> anyhow::Result<Option<SwarmStatus>> {
    if !subjects::is_token(swarm_id) {
        return Ok(None);
    }
    let (record, state) = tokio::try_join!(mission(client, swarm_id), state(client, swarm_id))?;
    Ok(match (state, record) {
        (Some(s), _) => Some(s.status),
        (None, Some(r)) => Some(record_status(&r)),
        (None, None) => None,
    })
}

/// Approval requests in the `approvals` bucket, oldest first. Unless `all`,
/// only the pending ones whose swarm is still running.
pub async fn approvals(client: &Client, all: bool) -> anyhow::Result<Vec<ApprovalRecord>> {
    let js = jetstream::new(client.clone());
    let store = js
        .get_key_value(subjects::APPROVALS_BUCKET)
        .await
        .context("opening the approvals bucket")?;
    let mut keys = store.keys().await.context("listing approvals")?;
    let mut out = Vec::new();
    let mut ended: std::collections::HashMap<String, bool> = Default::default();
    while let Some(key) = keys.next().await {
        let key = key.context("listing approvals")?;
        let Some(r) = decode_entry::<ApprovalRecord>(&store, &key).await? else {
            continue;
        };
        if !all {
            if r.status != ApprovalStatus::Pending {
                continue;
            }
            if let Some(swarm) = &r.swarm_id {
                let gone = match ended.get(swarm) {
                    Some(&g) => g,
                    None => {
                        let g = status_of(client, swarm)
                            .await?
                            .is_some_and(SwarmStatus::is_terminal);
                        ended.insert(swarm.clone(), g);
                        g
                    }
                };
                if gone {
                    continue;
                }
            }
        }
        out.push(r);
    }
    out.sort_by_key(|r| r.requested_at);
    Ok(out)
}

/// The pending approval requests of one swarm, oldest first.
pub async fn swarm_approvals(
    client: &Client,
    swarm_id: &str,
) -> anyhow::Result<Vec<ApprovalRecord>> {
    let js = jetstream::new(client.clone());
    let store = js
        .get_key_value(subjects::APPROVALS_BUCKET)
        .await
        .context("opening the approvals bucket")?;
    let mut keys = store.keys().await.context("listing approvals")?;
    let mut out = Vec::new();
    while let Some(key) = keys.next().await {
        let key = key.context("listing approvals")?;
        let Some(r) = decode_entry::<ApprovalRecord>(&store, &key).await? else {
            continue;
        };
        if r.status == ApprovalStatus::Pending && r.swarm_id.as_deref() == Some(swarm_id) {
            out.push(r);
        }
    }
    out.sort_by_key(|r| r.requested_at);
    Ok(out)
}

/// The question task `task_id` of `swarm_id` asked, if it asked one.
pub async fn question(
    client: &Client,
    swarm_id: &str,
    task_id: &str,
) -> anyhow::Result<Option<InputRecord>> {
    if !subjects::is_token(swarm_id) || !subjects::is_token(task_id) {
        bail!("{swarm_id:?}/{task_id:?} is not a swarm and task id");
    }
    let js = jetstream::new(client.clone());
    let store = js
        .get_key_value(subjects::INPUTS_BUCKET)
        .await
        .context("opening the inputs bucket")?;
    match store
        .get(format!("{swarm_id}.{task_id}"))
        .await
        .context("reading the inputs bucket")?
    {
        Some(bytes) => Ok(Some(
            Codec::MsgPack
                .decode(&bytes)
                .context("decoding the question")?,
        )),
        None => Ok(None),
    }
}

/// How long a decision or an answer waits for a boss to take it.
const DESK_PATIENCE: Duration = Duration::from_secs(10);

/// [`decide_as`] the `client` user.
pub async fn decide(
    client: &Client,
    approval_id: &str,
    approve: bool,
    by: &str,
    reason: Option<String>,
) -> anyhow::Result<ApprovalRecord> {
    decide_as(client, "client", approval_id, approve, by, reason).await
}

/// Approves or denies a pending request, asking the boss's desk as the
/// NATS user `user` (the production config allows only one's own name);
/// `by` names the person in the record. A request is decided once. One
/// whose swarm has ended is closed instead (`Expired`, "the swarm ended:
/// <status>") and the call fails.
pub async fn decide_as(
    client: &Client,
    user: &str,
    approval_id: &str,
    approve: bool,
    by: &str,
    reason: Option<String>,
) -> anyhow::Result<ApprovalRecord> {
    if !subjects::is_token(approval_id) {
        bail!("{approval_id:?} is not an approval id");
    }
    let request = DeskRequest::Decide {
        approval_id: approval_id.to_owned(),
        approve,
        by: by.to_owned(),
        reason,
    };
    match swarm_runtime::desk::call(client, user, &request, DESK_PATIENCE).await? {
        DeskReply::Approval(record) => Ok(record),
        DeskReply::Refused(e) => bail!("{}", e.message),
        other => bail!("the desk answered {other:?}"),
    }
}

/// [`answer_as`] the `client` user.
pub async fn answer(
    client: &Client,
    swarm_id: &str,
    task_id: &str,
    text: &str,
    by: &str,
) -> anyhow::Result<InputRecord> {
    answer_as(client, "client", swarm_id, task_id, text, by).await
}

/// Answers the question a task asked, through the boss's desk as the NATS
/// user `user` (answered once). A closed question is refused; so is one
/// whose swarm has ended, which is closed first ("the swarm ended:
/// <status>").
pub async fn answer_as(
    client: &Client,
    user: &str,
    swarm_id: &str,
    task_id: &str,
    text: &str,
    by: &str,
) -> anyhow::Result<InputRecord> {
    if !subjects::is_token(swarm_id) || !subjects::is_token(task_id) {
        bail!("{swarm_id:?}/{task_id:?} is not a swarm and task id");
    }
    let request = DeskRequest::Answer {
        swarm_id: swarm_id.to_owned(),
        task_id: task_id.to_owned(),
        text: text.to_owned(),
        by: by.to_owned(),
    };
    match swarm_runtime::desk::call(client, user, &request, DESK_PATIENCE).await? {
        DeskReply::Question(record) => Ok(record),
        DeskReply::Refused(e) => bail!("{}", e.message),
        other => bail!("the desk answered {other:?}"),
    }
}

/// The learned skills ([`swarm_common::skill`]) of `scope`, or of every
/// scope, by scope then score (highest first).
pub async fn skills(
    client: &Client,
    scope: Option<&str>,
) -> anyhow::Result<Vec<swarm_common::skill::LearnedSkill>> {
    let kv = async_nats::jetstream::new(client.clone())
        .get_key_value(subjects::SKILLS_BUCKET)
        .await
        .context("opening the skills bucket (has `swarm setup` run?)")?;
    swarm_runtime::skills::SkillBook::new(kv).list(scope).await
}

/// Asks the boss's desk, as NATS user `user`, to remove the learned skill
/// at `key`; `by` names the person for the log. Returns the skill removed.
pub async fn remove_skill_as(
    client: &Client,
    user: &str,
    key: &str,
    by: &str,
) -> anyhow::Result<swarm_common::skill::LearnedSkill> {
    let request = DeskRequest::RemoveSkill {
        key: key.to_owned(),
        by: by.to_owned(),
    };
    match swarm_runtime::desk::call(client, user, &request, DESK_PATIENCE).await? {
        DeskReply::Skill(skill) => Ok(skill),
        DeskReply::Refused(e) => bail!("{}", e.message),
        other => bail!("the desk answered {other:?}"),
    }
}

/// The roles that answer the handshake, in the order `swarm hello` shows them.
pub const HELLO_ROLES: [&str; 3] = ["boss", "manager", "worker"];

/// Asks every replica of `roles` for its handshake (`swarm.hello.<role>`)
/// and gathers the answers that come within `window`, by role and id. A
/// replica that refuses (no common protocol version) is left out.
pub async fn hello(
    client: &Client,
    roles: &[&str],
    window: Duration,
) -> anyhow::Result<Vec<swarm_runtime::hello::Hello>> {
    let inbox = client.new_inbox();
    let mut replies = client
        .subscribe(inbox.clone())
        .await
        .context("subscribing to the handshake replies")?;
    for role in roles {
        client
            .publish_with_reply(subjects::hello(role), inbox.clone(), Bytes::new())
            .await
            .with_context(|| format!("asking the {role} replicas"))?;
    }
    client.flush().await.context("asking the replicas")?;
    let deadline = tokio::time::Instant::now() + window;
    let mut out = Vec::new();
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline, replies.next()).await {
        if let Ok(h) = serde_json::from_slice::<swarm_runtime::hello::Hello>(&msg.payload) {
            out.push(h);
        }
    }
    out.sort_by(|a, b| {
        let rank = |r: &str| {
            HELLO_ROLES
                .iter()
                .position(|x| *x == r)
                .unwrap_or(usize::MAX)
        };
        (rank(&a.role), &a.id).cmp(&(rank(&b.role), &b.id))
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetstream::stream::ConsumerErrorKind as Kind;

    #[test]
    fn a_timed_out_or_unanswered_consumer_request_is_retried_and_a_refusal_is_not() {
        assert!(transient_consumer_fault(Kind::TimedOut));
        assert!(transient_consumer_fault(Kind::Request));
        assert!(!transient_consumer_fault(Kind::InvalidName));
        assert!(!transient_consumer_fault(Kind::InvalidConsumerType));
        assert!(!transient_consumer_fault(Kind::Other));
        // The server's own answers, as it words them.
        let answer = |json: &str| Kind::JetStream(serde_json::from_str(json).unwrap());
        assert!(transient_consumer_fault(answer(
            r#"{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}"#
        )));
        assert!(!transient_consumer_fault(answer(
            r#"{"code":400,"err_code":10059,"description":"stream not found"}"#
        )));
    }
}

/// What `swarm gc` removed of one swarm.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Collected {
    /// The swarm.
    pub swarm_id: String,
    /// Its messages in the `A2AP` stream (deployment, assignments, progress,
    /// results, errors, control, the report).
    pub messages: u64,
    /// Entries of its state, mission record, journal, memory and questions.
    pub entries: u64,
    /// Its approval requests.
    pub approvals: u64,
    /// Whether its HTML report was in the object store.
    pub report: bool,
}

/// Removes everything a finished swarm left in JetStream: its messages,
/// state, mission record, journal, memory notes, questions, approval
/// requests and the report in the object store. Refused for a swarm that is
/// still running (cancel it first) and for an unknown one. Purging needs a
/// login allowed to purge (an operator's, not the `client` user of the
/// production configuration); the boss's own copy of the HTML page on its
/// disk is not touched.
pub async fn gc(client: &Client, swarm_id: &str) -> anyhow::Result<Collected> {
    let known = lookup(client, swarm_id).await?;
    let status = known.status();
    if !status.is_terminal() {
        return Err(fail(
            Exit::Error,
            format!(
                "swarm {swarm_id} is still running; cancel it first (`swarm cancel {swarm_id}`)"
            ),
        ));
    }
    let js = jetstream::new(client.clone());
    let purge = |stream: String, filter: String| {
        let js = js.clone();
        async move {
            let stream_handle = js
                .get_stream(&stream)
                .await
                .with_context(|| format!("opening {stream}"))?;
            let done = stream_handle
                .purge()
                .filter(filter.clone())
                .await
                .with_context(|| format!("purging {filter} from {stream}"))?;
            anyhow::Ok(done.purged)
        }
    };
    let mut collected = Collected {
        swarm_id: swarm_id.to_string(),
        ..Default::default()
    };
    collected.messages += purge(subjects::A2AP_STREAM.into(), format!("a2ap.{swarm_id}.>")).await?;
    collected.messages += purge(
        subjects::WORK_STREAM.into(),
        format!("a2ap.work.*.{swarm_id}.>"),
    )
    .await?;
    for (bucket, filter) in [
        (subjects::SWARMS_BUCKET, swarm_id.to_string()),
        // A large swarm's chunks of tasks ([`swarm_runtime::states`]).
        (subjects::SWARMS_BUCKET, format!("{swarm_id}.>")),
        (subjects::MISSIONS_BUCKET, swarm_id.to_string()),
        (subjects::JOURNAL_BUCKET, format!("{swarm_id}.>")),
        (subjects::MEMORY_BUCKET, format!("{swarm_id}.>")),
        (subjects::INPUTS_BUCKET, format!("{swarm_id}.>")),
        (subjects::PUSH_BUCKET, swarm_id.to_string()),
    ] {
        collected.entries +=
            purge(format!("KV_{bucket}"), format!("$KV.{bucket}.{filter}")).await?;
    }
    for record in approvals(client, true).await? {
        if record.swarm_id.as_deref() == Some(swarm_id) {
            collected.approvals += purge(
                format!("KV_{}", subjects::APPROVALS_BUCKET),
                format!("$KV.{}.{}", subjects::APPROVALS_BUCKET, record.approval_id),
            )
            .await?;
        }
    }
    let reports = js
        .get_object_store(subjects::REPORTS_BUCKET)
        .await
        .context("opening the reports object store")?;
    collected.report = reports.delete(format!("{swarm_id}.html")).await.is_ok();
    Ok(collected)
}
