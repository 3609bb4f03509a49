//! The gateway's side of NATS: the A2A operations carried out on swarms,
//! through the same client library as the CLI (submit to the boss, read
//! the buckets and the A2AP stream, cancel on the control subject, answer
//! and decide at the boss's desk). Nothing is kept in the process: any
//! replica answers any request.

use std::time::Duration;

use async_nats::Client;
use async_nats::jetstream::consumer::DeliverPolicy;
use chrono::Utc;
use swarm_client::client::{self as sc, Update};
use swarm_common::{Limits, SwarmStatus, TaskStatus as SwarmTaskStatus, subjects};

use crate::error::{A2aError, ErrorKind};
use crate::mapping::{self, Origin, Shape, SwarmView};
use crate::push::{self, PushStore};
use crate::types::{
    ListTaskPushNotificationConfigsResponse, ListTasksRequest, ListTasksResponse, Message,
    SendMessageRequest, Task, TaskPushNotificationConfig, TaskState,
};

/// Most tasks on one `ListTasks` page, and the page size when none is asked.
pub const MAX_PAGE_SIZE: usize = 100;
/// Swarms a filtered `ListTasks` looks through, newest first.
const LIST_WINDOW: usize = 1000;

/// Who is calling: the name of the token it presented, or `None` when the
/// gateway takes anonymous callers (who then see every swarm).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(pub Option<String>);

impl Caller {
    fn name(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }

    /// Whether this caller may see the swarm.
    fn sees(&self, view: &SwarmView) -> bool {
        match &self.0 {
            None => true,
            Some(name) => view.origin().is_some_and(|o| &o.caller == name),
        }
    }
}

/// What the operations need.
#[derive(Debug, Clone)]
pub struct Swarms {
    /// The NATS connection.
    pub client: Client,
    /// The boss's limits, checked before a mission is sent.
    pub limits: Limits,
    /// The NATS user the gateway answers and decides as at the desk.
    pub desk_user: String,
    /// How long a `SendMessage` that does not return at once waits for the
    /// task to end (or to need input) before answering with it as it stands.
    pub send_wait: Duration,
    /// Base URL the gateway is reached at, for the HTML report's URL.
    pub public_url: String,
    /// Push notification configs.
    pub push: PushStore,
    /// Whether webhooks may be on private and loopback addresses.
    pub push_allow_private: bool,
    /// The streams open, and their bounds.
    pub streams: std::sync::Arc<crate::stream::StreamSlots>,
}

fn internal(e: anyhow::Error) -> A2aError {
    A2aError::internal(&e)
}

impl Swarms {
    /// Everything JetStream holds of a swarm the caller may see.
    pub async fn view(&self, caller: &Caller, id: &str) -> Result<SwarmView, A2aError> {
        if !subjects::is_token(id) {
            return Err(A2aError::task_not_found(id));
        }
        let (record, state, report) = tokio::try_join!(
            sc::mission(&self.client, id),
            sc::state(&self.client, id),
            sc::final_report(&self.client, id),
        )
        .map_err(internal)?;
        if record.is_none() && state.is_none() && report.is_none() {
            return Err(A2aError::task_not_found(id));
        }
        let mut view = SwarmView {
            swarm_id: id.to_owned(),
            report_url: record
                .as_ref()
                .and_then(|r| r.report_object.as_ref())
                .map(|_| format!("{}/reports/{id}.html", self.public_url)),
            record,
            state,
            report,
            approvals: Vec::new(),
            questions: Vec::new(),
        };
        if !caller.sees(&view) {
            return Err(A2aError::task_not_found(id));
        }
        // A person is waited for only while the swarm runs.
        let running = view.report.is_none()
            && view
                .state
                .as_ref()
                .is_some_and(|s| s.status == SwarmStatus::Running);
        if running && let Some(state) = &view.state {
            // A task that asked stays in progress in the state: its open
            // question is in the inputs bucket.
            for t in state.tasks.iter().filter(|t| {
                matches!(
                    t.status,
                    SwarmTaskStatus::InputRequired
                        | SwarmTaskStatus::InProgress
                        | SwarmTaskStatus::Assigned
                )
            }) {
                if let Some(q) = sc::question(&self.client, id, &t.definition.task_id)
                    .await
                    .map_err(internal)?
                    .filter(|q| q.answer.is_none() && q.closed.is_none())
                {
                    view.questions.push(q);
                }
            }
            if state.tasks.iter().any(|t| {
                matches!(
                    t.status,
                    SwarmTaskStatus::InProgress | SwarmTaskStatus::Assigned
                )
            }) {
                view.approvals = sc::swarm_approvals(&self.client, id)
                    .await
                    .map_err(internal)?;
            }
        }
        Ok(view)
    }

    /// The task of a swarm the caller may see.
    pub async fn task(&self, caller: &Caller, id: &str, shape: Shape) -> Result<Task, A2aError> {
        Ok(mapping::task_of(&self.view(caller, id).await?, shape))
    }

    /// `SendMessage`: a message with no task id starts a swarm; one naming
    /// a task answers what that task waits for.
    pub async fn send(
        &self,
        caller: &Caller,
        request: &SendMessageRequest,
    ) -> Result<Task, A2aError> {
        let message = &request.message;
        let config = request.configuration.clone().unwrap_or_default();
        let shape = Shape {
            history_length: config
                .history_length
                .map(|n| usize::try_from(n.max(0)).unwrap_or(0)),
            artifacts: true,
        };
        let push = config.task_push_notification_config.clone();
        let id = if message.task_id.is_empty() {
            self.start(caller, message, push).await?
        } else {
            if let Some(push) = push {
                self.push_create(caller, &message.task_id, push).await?;
            }
            self.follow_up(caller, message).await?;
            message.task_id.clone()
        };
        if config.return_immediately {
            return self.task(caller, &id, shape).await;
        }
        // Blocking: wait for the end, or for a person, within send_wait.
        let deadline = tokio::time::Instant::now() + self.send_wait;
        loop {
            let task = self.task(caller, &id, shape).await?;
            if task.status.state.is_terminal()
                || task.status.state == TaskState::InputRequired
                || tokio::time::Instant::now() >= deadline
            {
                return Ok(task);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Submits the mission a message asks for and returns its swarm id (the
    /// same one for a message sent again). A push config is stored first,
    /// under the swarm id the mission will have, so no update escapes it.
    pub async fn start(
        &self,
        caller: &Caller,
        message: &Message,
        push: Option<TaskPushNotificationConfig>,
    ) -> Result<String, A2aError> {
        let mission = mapping::mission_of(message, caller.name(), &self.limits)?;
        let pushed = match push {
            Some(config) => {
                let swarm_id = swarm_common::mission::swarm_id_for(mission.mission_id.as_deref());
                let config = push::prepared(&swarm_id, config, self.push_allow_private).await?;
                let context = Origin::context_of(mission.mission_id.as_deref(), &swarm_id);
                self.push.put(&context, &config).await?;
                Some(config)
            }
            None => None,
        };
        let reply = sc::submit(&self.client, &mission, Duration::from_secs(10))
            .await
            .map_err(|e| {
                let text = format!("{e:#}");
                if text.starts_with("mission refused") {
                    A2aError::invalid_params(text)
                } else {
                    A2aError::internal(&e)
                }
            });
        match reply {
            Ok(reply) => Ok(reply.swarm_id),
            Err(e) => {
                // No swarm: its config would wait for nothing.
                if let Some(config) = pushed
                    && let Err(d) = self.push.delete(&config.task_id, &config.id).await
                {
                    tracing::warn!(error = %d.message, "removing the push config of a refused mission");
                }
                Err(e)
            }
        }
    }

    /// The task's state, for a push operation: it must be the caller's.
    async fn push_task(&self, caller: &Caller, task_id: &str) -> Result<Task, A2aError> {
        self.task(
            caller,
            task_id,
            Shape {
                history_length: Some(0),
                artifacts: false,
            },
        )
        .await
    }

    /// `CreateTaskPushNotificationConfig`: a webhook for a running task.
    pub async fn push_create(
        &self,
        caller: &Caller,
        task_id: &str,
        config: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        let task = self.push_task(caller, task_id).await?;
        if task.status.state.is_terminal() {
            return Err(push::refuse_ended(task_id, task.status.state));
        }
        let config = push::prepared(task_id, config, self.push_allow_private).await?;
        self.push.put(&task.context_id, &config).await?;
        Ok(config)
    }

    /// `GetTaskPushNotificationConfig`.
    pub async fn push_get(
        &self,
        caller: &Caller,
        task_id: &str,
        id: &str,
    ) -> Result<TaskPushNotificationConfig, A2aError> {
        self.push_task(caller, task_id).await?;
        self.push
            .configs(task_id)
            .await?
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| {
                A2aError::new(
                    ErrorKind::TaskNotFound,
                    format!("task {task_id} has no push notification config {id:?}"),
                )
                .with("taskId", task_id)
            })
    }

    /// `ListTaskPushNotificationConfigs`: all of them, on one page.
    pub async fn push_list(
        &self,
        caller: &Caller,
        task_id: &str,
    ) -> Result<ListTaskPushNotificationConfigsResponse, A2aError> {
        self.push_task(caller, task_id).await?;
        Ok(ListTaskPushNotificationConfigsResponse {
            configs: self.push.configs(task_id).await?,
            next_page_token: String::new(),
        })
    }

    /// `DeleteTaskPushNotificationConfig` (deleting one that is gone is no
    /// error).
    pub async fn push_delete(
        &self,
        caller: &Caller,
        task_id: &str,
        id: &str,
    ) -> Result<(), A2aError> {
        self.push_task(caller, task_id).await?;
        self.push.delete(task_id, id).await
    }

    /// A message on an existing task: the answer to its question, or the
    /// decision on its pending approval.
    async fn follow_up(&self, caller: &Caller, message: &Message) -> Result<(), A2aError> {
        let view = self.view(caller, &message.task_id).await?;
        let task = mapping::task_of(&view, Shape::FULL);
        if task.status.state.is_terminal() {
            return Err(A2aError::new(
                ErrorKind::UnsupportedOperation,
                format!(
                    "task {} has ended ({:?}) and takes no further messages",
                    task.id, task.status.state
                ),
            )
            .with("taskId", task.id));
        }
        let text = message
            .parts
            .iter()
            .filter_map(|p| p.text.as_deref())
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_owned();
        if text.is_empty() {
            return Err(A2aError::invalid_params(
                "a message on a task needs a text part: the answer, or approve / deny",
            ));
        }
        let by = match caller.name() {
            "" => "a2a".to_owned(),
            name => format!("a2a:{name}"),
        };
        if let Some(q) = view.questions.first() {
            sc::answer_as(
                &self.client,
                &self.desk_user,
                &q.swarm_id,
                &q.task_id,
                &text,
                &by,
            )
            .await
            .map_err(|e| A2aError::invalid_params(format!("the answer was refused: {e:#}")))?;
            return Ok(());
        }
        if let Some(a) = view.approvals.first() {
            let (word, reason) = match text.split_once(char::is_whitespace) {
                Some((w, r)) => (w, Some(r.trim().to_owned()).filter(|r| !r.is_empty())),
                None => (text.as_str(), None),
            };
            let approve = match word.to_ascii_lowercase().trim_end_matches(['.', '!']) {
                "approve" | "approved" | "yes" => true,
                "deny" | "denied" | "no" => false,
                _ => {
                    return Err(A2aError::invalid_params(format!(
                        "task {} waits for approval of {}: answer \"approve\" or \"deny\"",
                        message.task_id, a.tool
                    )));
                }
            };
            sc::decide_as(
                &self.client,
                &self.desk_user,
                &a.approval_id,
                approve,
                &by,
                reason,
            )
            .await
            .map_err(|e| A2aError::invalid_params(format!("the decision was refused: {e:#}")))?;
            return Ok(());
        }
        Err(A2aError::new(
            ErrorKind::UnsupportedOperation,
            format!(
                "task {} is working and waits for no input; follow it with GetTask or \
                 SubscribeToTask",
                message.task_id
            ),
        )
        .with("taskId", message.task_id.clone()))
    }

    /// `CancelTask`.
    pub async fn cancel(&self, caller: &Caller, id: &str) -> Result<Task, A2aError> {
        let view = self.view(caller, id).await?;
        let task = mapping::task_of(&view, Shape::FULL);
        let ended = task.status.state.is_terminal()
            || view.state.as_ref().is_some_and(|s| s.status.is_terminal());
        if ended {
            return Err(A2aError::new(
                ErrorKind::TaskNotCancelable,
                format!("task {id} has ended ({:?})", task.status.state),
            )
            .with("taskId", id));
        }
        sc::cancel(&self.client, id, "cancelled through A2A")
            .await
            .map_err(|e| {
                A2aError::new(ErrorKind::TaskNotCancelable, format!("{e:#}")).with("taskId", id)
            })?;
        // The manager takes the cancel at once: answer with the swarm as it
        // then stands (cancelled, or still ending).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let task = self.task(caller, id, Shape::FULL).await?;
            if task.status.state.is_terminal() || tokio::time::Instant::now() >= deadline {
                return Ok(task);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `ListTasks`: the caller's swarms, newest first, a page at a time.
    pub async fn list(
        &self,
        caller: &Caller,
        request: &ListTasksRequest,
    ) -> Result<ListTasksResponse, A2aError> {
        let page_size = match request.page_size {
            None | Some(0) => MAX_PAGE_SIZE,
            Some(n) if n < 0 => {
                return Err(A2aError::invalid_params("pageSize must not be negative"));
            }
            Some(n) => usize::try_from(n)
                .unwrap_or(MAX_PAGE_SIZE)
                .min(MAX_PAGE_SIZE),
        };
        let offset = if request.page_token.is_empty() {
            0
        } else {
            request
                .page_token
                .parse::<usize>()
                .map_err(|_| A2aError::invalid_params("pageToken is not one this agent gave"))?
        };
        let after = match &request.status_timestamp_after {
            Some(t) => Some(
                chrono::DateTime::parse_from_rfc3339(t)
                    .map_err(|e| A2aError::invalid_params(format!("statusTimestampAfter: {e}")))?
                    .with_timezone(&Utc),
            ),
            None => None,
        };
        let state_filter = request.status.filter(|s| *s != TaskState::Unspecified);
        let statuses = state_filter
            .map(mapping::swarm_statuses_for)
            .unwrap_or_default();
        if state_filter.is_some() && statuses.is_empty() {
            // Nothing the gateway runs ends rejected or waits for authentication.
            return Ok(ListTasksResponse {
                tasks: Vec::new(),
                next_page_token: String::new(),
                page_size: i32::try_from(page_size).unwrap_or(i32::MAX),
                total_size: 0,
            });
        }
        let query = swarm_client::list::Query {
            statuses,
            since: None,
            limit: LIST_WINDOW,
        };
        let listing = swarm_client::list::list(&self.client, &query, Utc::now())
            .await
            .map_err(internal)?;
        let mut rows: Vec<_> = listing
            .rows
            .into_iter()
            .filter(|r| match &caller.0 {
                None => true,
                Some(name) => r
                    .mission_id
                    .as_deref()
                    .and_then(Origin::of_mission_id)
                    .is_some_and(|o| &o.caller == name),
            })
            .filter(|r| {
                request.context_id.is_empty()
                    || Origin::context_of(r.mission_id.as_deref(), &r.swarm_id)
                        == request.context_id
            })
            .filter(|r| after.is_none_or(|t| r.ended_at.unwrap_or(r.accepted_at) > t))
            .collect();
        let shape = Shape {
            history_length: request
                .history_length
                .map(|n| usize::try_from(n.max(0)).unwrap_or(0)),
            artifacts: request.include_artifacts.unwrap_or(false),
        };
        let mut tasks = Vec::new();
        let mut total = rows.len();
        for row in rows.drain(..).skip(offset) {
            if tasks.len() == page_size {
                break;
            }
            match self.view(caller, &row.swarm_id).await {
                Ok(view) => {
                    let task = mapping::task_of(&view, shape);
                    // The finer states of a running swarm (submitted,
                    // working, input required) are told apart only here.
                    if state_filter.is_some_and(|s| s != task.status.state) {
                        total -= 1;
                        continue;
                    }
                    tasks.push(task);
                }
                // Removed (`swarm gc`) between the listing and now.
                Err(e) if e.kind == ErrorKind::TaskNotFound => total -= 1,
                Err(e) => return Err(e),
            }
        }
        let next = offset + page_size;
        Ok(ListTasksResponse {
            tasks,
            next_page_token: if next < total {
                next.to_string()
            } else {
                String::new()
            },
            page_size: i32::try_from(page_size).unwrap_or(i32::MAX),
            total_size: i32::try_from(total).unwrap_or(i32::MAX),
        })
    }

    /// The newest swarms the caller may see (at most `limit`), for the
    /// console's list.
    pub async fn rows(
        &self,
        caller: &Caller,
        statuses: Vec<SwarmStatus>,
        since: Option<Duration>,
        limit: usize,
    ) -> Result<Vec<swarm_client::list::Row>, A2aError> {
        // A caller that sees only its own swarms needs a wider window to
        // fill a page; the window is bounded either way.
        let window = if caller.0.is_some() {
            LIST_WINDOW.max(limit)
        } else {
            limit
        };
        let query = swarm_client::list::Query {
            statuses,
            since,
            limit: window,
        };
        let listing = swarm_client::list::list(&self.client, &query, Utc::now())
            .await
            .map_err(internal)?;
        Ok(listing
            .rows
            .into_iter()
            .filter(|r| match &caller.0 {
                None => true,
                Some(name) => r
                    .mission_id
                    .as_deref()
                    .and_then(Origin::of_mission_id)
                    .is_some_and(|o| &o.caller == name),
            })
            .take(limit)
            .collect())
    }

    /// Every question a task asked that is neither answered nor closed.
    pub async fn open_questions(
        &self,
    ) -> Result<Vec<swarm_common::approval::InputRecord>, A2aError> {
        use futures::StreamExt;
        let js = async_nats::jetstream::new(self.client.clone());
        let store = js
            .get_key_value(subjects::INPUTS_BUCKET)
            .await
            .map_err(|e| A2aError::internal(&anyhow::Error::new(e)))?;
        let mut keys = store
            .keys()
            .await
            .map_err(|e| A2aError::internal(&anyhow::Error::new(e)))?;
        let mut out = Vec::new();
        while let Some(key) = keys.next().await {
            let Ok(key) = key else { continue };
            let Ok(Some(bytes)) = store.get(&key).await else {
                continue;
            };
            if let Ok(q) =
                swarm_common::Codec::MsgPack.decode::<swarm_common::approval::InputRecord>(&bytes)
                && q.answer.is_none()
                && q.closed.is_none()
            {
                out.push(q);
            }
            // A bound: the page shows what a person can answer.
            if out.len() >= 500 {
                break;
            }
        }
        out.sort_by_key(|q| q.asked_at);
        Ok(out)
    }

    /// The HTML report of a swarm, once the boss has rendered it.
    pub async fn report_html(&self, id: &str) -> Result<Option<Vec<u8>>, A2aError> {
        use tokio::io::AsyncReadExt;
        let js = async_nats::jetstream::new(self.client.clone());
        let store = js
            .get_object_store(subjects::REPORTS_BUCKET)
            .await
            .map_err(|e| A2aError::internal(&anyhow::Error::new(e)))?;
        let mut object = match store.get(format!("{id}.html").as_str()).await {
            Ok(o) => o,
            Err(e) if e.kind() == async_nats::jetstream::object_store::GetErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(A2aError::internal(&anyhow::Error::new(e))),
        };
        let mut html = Vec::new();
        object
            .read_to_end(&mut html)
            .await
            .map_err(|e| A2aError::internal(&anyhow::Error::new(e)))?;
        Ok(Some(html))
    }

    /// The last sequence of the A2AP stream: a stream that starts after it
    /// and a snapshot read after it miss nothing between them.
    pub async fn last_sequence(&self) -> Result<u64, A2aError> {
        let js = async_nats::jetstream::new(self.client.clone());
        let mut stream = js
            .get_stream(subjects::A2AP_STREAM)
            .await
            .map_err(|e| A2aError::internal(&anyhow::Error::new(e)))?;
        let info = stream
            .info()
            .await
            .map_err(|e| A2aError::internal(&anyhow::Error::new(e)))?;
        Ok(info.state.last_sequence)
    }

    /// The swarm's stored messages after sequence `after`, as updates.
    pub async fn updates(
        &self,
        id: &str,
        after: u64,
    ) -> Result<impl futures::Stream<Item = Update> + use<>, A2aError> {
        use futures::StreamExt;
        let messages = sc::follow(
            &self.client,
            id,
            DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
        )
        .await
        .map_err(internal)?;
        Ok(messages.filter_map(|m| async move {
            match m {
                Ok(m) => sc::update_of(&m.subject, m.headers.as_ref(), &m.payload),
                // The ordered consumer recreates itself and goes on.
                Err(e) => {
                    tracing::warn!(error = %e, "following a swarm: resuming");
                    None
                }
            }
        }))
    }
}
