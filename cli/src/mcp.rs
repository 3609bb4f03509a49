//! `swarm mcp`: Swarm as an MCP server, so that any MCP client (Claude
//! Desktop, an IDE, another agent) can run swarms and follow them.
//!
//! Tools: `submit_mission` (text or a plan; with `wait`, followed to its
//! final report with progress notifications), `get_swarm`, `list_swarms`,
//! `cancel_swarm`, `list_approvals`, `approve`, `deny`, `answer`. Resources:
//! each swarm's final report as JSON and as HTML, and its state, at
//! `swarm://swarms/<id>/report.json`, `…/report.html` and `…/state.json`.
//!
//! Every tool goes through the same client calls as the CLI, as the NATS
//! user this process logs in as: the production permissions decide what an
//! MCP client may do (approving needs the `approver` login, as from the
//! CLI). A tool's failure is a result with `isError` and the reason; a call
//! of a tool that does not exist is a protocol error.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourceContents, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use swarm_client::{client, list};
use swarm_common::mission::MissionRequest;
use swarm_common::{SwarmDeploymentPlan, SwarmStatus};

/// How long `submit_mission` with `wait` follows a swarm unless told.
const DEFAULT_WAIT_SECS: u64 = 600;
/// The longest wait a call may ask for.
const MAX_WAIT_SECS: u64 = 3600;
/// The most swarms `list_swarms` returns, and the resources listed.
const MAX_LISTED: usize = 200;
/// How much of a task's result `get_swarm` shows, in bytes.
const RESULT_PREVIEW: usize = 2000;
/// URIs of a swarm's resources.
const URI_PREFIX: &str = "swarm://swarms/";

/// The server: a NATS connection and the desk user its decisions are made as.
#[derive(Clone)]
pub struct SwarmMcp {
    nc: async_nats::Client,
    /// The NATS user the boss's desk knows this login as.
    desk_user: String,
}

impl SwarmMcp {
    /// A server over `nc`, deciding approvals as `desk_user`.
    pub fn new(nc: async_nats::Client, desk_user: String) -> Self {
        SwarmMcp { nc, desk_user }
    }
}

/// Arguments of `submit_mission`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SubmitArgs {
    /// The mission in plain text (numbered steps run in order; lines and bullets in parallel).
    mission: String,
    /// An explicit plan (workers and tasks) to deploy as given, instead of one the boss makes.
    #[serde(default)]
    plan: Option<Value>,
    /// Your id for the mission: submitting the same id again makes no second swarm.
    #[serde(default)]
    mission_id: Option<String>,
    /// Follow the swarm to its final report (with progress notifications) before answering.
    #[serde(default)]
    wait: bool,
    /// With wait: seconds to wait for the final report (default 600, at most 3600).
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// Arguments naming one swarm.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SwarmArgs {
    /// The swarm id.
    swarm_id: String,
}

/// Arguments of `list_swarms`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// Only swarms in these states: running, completed, failed, cancelled, timedout.
    #[serde(default)]
    status: Vec<String>,
    /// Only swarms accepted within this span before now: 90s, 30m, 1h, 2d.
    #[serde(default)]
    since: Option<String>,
    /// At most this many swarms (default 20, at most 200).
    #[serde(default)]
    limit: Option<usize>,
}

/// Arguments of `cancel_swarm`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CancelArgs {
    /// The swarm id.
    swarm_id: String,
    /// Why, for the report.
    #[serde(default)]
    reason: Option<String>,
}

/// Arguments of `list_approvals`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ApprovalsArgs {
    /// Also the decided and expired requests, and those of ended swarms.
    #[serde(default)]
    all: bool,
}

/// Arguments of `approve` and `deny`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DecideArgs {
    /// The approval id (from list_approvals).
    approval_id: String,
    /// Why, for the record (and, on a denial, for the agent).
    #[serde(default)]
    reason: Option<String>,
}

/// Arguments of `answer`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AnswerArgs {
    /// The swarm id.
    swarm_id: String,
    /// The task that asked.
    task_id: String,
    /// The answer.
    text: String,
}

fn schema<T: JsonSchema>() -> Arc<serde_json::Map<String, Value>> {
    match schemars::schema_for!(T).to_value() {
        Value::Object(mut map) => {
            // The schema's own title and dialect say nothing to a model.
            map.remove("$schema");
            map.remove("title");
            Arc::new(map)
        }
        _ => Arc::new(serde_json::Map::new()),
    }
}

fn tool<T: JsonSchema>(
    name: &'static str,
    description: &'static str,
    hints: ToolAnnotations,
) -> Tool {
    Tool::new(name, description, schema::<T>()).with_annotations(hints)
}

fn reading() -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(true)
        .destructive(false)
        .idempotent(true)
}

fn changing(destructive: bool, idempotent: bool) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(false)
        .destructive(destructive)
        .idempotent(idempotent)
}

/// Every tool, in the order they are listed.
fn tools() -> Vec<Tool> {
    vec![
        tool::<SubmitArgs>(
            "submit_mission",
            "Submit a mission to Swarm (text, or text and an explicit plan). Answers the swarm id at once, or with wait the final report: status, summary and each task's result.",
            changing(false, true),
        ),
        tool::<SwarmArgs>(
            "get_swarm",
            "A swarm's status and each task's status, attempts and result so far.",
            reading(),
        ),
        tool::<ListArgs>(
            "list_swarms",
            "Swarms, newest first: status, tasks done of all, when accepted and ended, the mission.",
            reading(),
        ),
        tool::<CancelArgs>(
            "cancel_swarm",
            "Cancel a running swarm: no new assignments; its report says Cancelled.",
            changing(true, true),
        ),
        tool::<ApprovalsArgs>(
            "list_approvals",
            "Destructive tool calls waiting for a person's decision (pending ones of running swarms unless all).",
            reading(),
        ),
        tool::<DecideArgs>(
            "approve",
            "Let a waiting destructive tool call run.",
            changing(true, true),
        ),
        tool::<DecideArgs>(
            "deny",
            "Refuse a waiting destructive tool call.",
            changing(false, true),
        ),
        tool::<AnswerArgs>(
            "answer",
            "Answer the question a task asked (it waits, InputRequired, until answered).",
            changing(false, true),
        ),
    ]
}

/// A tool's failure, as a result the client (and its model) reads.
fn failure(message: impl std::fmt::Display) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.to_string())])
}

/// A tool's answer: its JSON as text, and as structured content.
fn answer(value: Value) -> CallToolResult {
    let text = serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string());
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

fn parse<T: DeserializeOwned>(
    arguments: Option<serde_json::Map<String, Value>>,
) -> Result<T, CallToolResult> {
    serde_json::from_value(Value::Object(arguments.unwrap_or_default()))
        .map_err(|e| failure(format!("invalid arguments: {e}")))
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes more)", &text[..end], text.len() - end)
}

/// The URIs of a swarm's resources.
fn uris(swarm_id: &str) -> Value {
    json!({
        "report_json": format!("{URI_PREFIX}{swarm_id}/report.json"),
        "report_html": format!("{URI_PREFIX}{swarm_id}/report.html"),
        "state": format!("{URI_PREFIX}{swarm_id}/state.json"),
    })
}

/// A final report as a tool answers it.
fn report_answer(swarm_id: &str, report: &swarm_common::FinalReport) -> Value {
    json!({
        "swarm_id": swarm_id,
        "status": report.overall_status,
        "summary": report.summary,
        "tasks": report.task_results.iter().map(|t| json!({
            "task_id": t.task_id,
            "title": t.title,
            "status": t.status,
            "attempts": t.attempts,
            "result": t.result,
            "error": t.error,
        })).collect::<Vec<_>>(),
        "resources": uris(swarm_id),
    })
}

impl SwarmMcp {
    async fn call(
        &self,
        name: &str,
        arguments: Option<serde_json::Map<String, Value>>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let outcome = match name {
            "submit_mission" => match parse::<SubmitArgs>(arguments) {
                Ok(args) => self.submit(args, context).await,
                Err(e) => return Ok(e),
            },
            "get_swarm" => match parse::<SwarmArgs>(arguments) {
                Ok(args) => self.get_swarm(&args.swarm_id).await,
                Err(e) => return Ok(e),
            },
            "list_swarms" => match parse::<ListArgs>(arguments) {
                Ok(args) => self.list_swarms(args).await,
                Err(e) => return Ok(e),
            },
            "cancel_swarm" => match parse::<CancelArgs>(arguments) {
                Ok(args) => {
                    let reason = args
                        .reason
                        .unwrap_or_else(|| "cancelled by an MCP client".to_owned());
                    client::cancel(&self.nc, &args.swarm_id, &reason)
                        .await
                        .map(|()| json!({"swarm_id": args.swarm_id, "cancelling": true, "reason": reason}))
                }
                Err(e) => return Ok(e),
            },
            "list_approvals" => match parse::<ApprovalsArgs>(arguments) {
                Ok(args) => client::approvals(&self.nc, args.all)
                    .await
                    .and_then(|records| Ok(json!({"approvals": serde_json::to_value(records)?}))),
                Err(e) => return Ok(e),
            },
            "approve" | "deny" => match parse::<DecideArgs>(arguments) {
                Ok(args) => client::decide_as(
                    &self.nc,
                    &self.desk_user,
                    &args.approval_id,
                    name == "approve",
                    &self.by(context),
                    args.reason,
                )
                .await
                .and_then(|record| Ok(serde_json::to_value(record)?)),
                Err(e) => return Ok(e),
            },
            "answer" => match parse::<AnswerArgs>(arguments) {
                Ok(args) => client::answer_as(
                    &self.nc,
                    &self.desk_user,
                    &args.swarm_id,
                    &args.task_id,
                    &args.text,
                    &self.by(context),
                )
                .await
                .and_then(|record| Ok(serde_json::to_value(record)?)),
                Err(e) => return Ok(e),
            },
            other => {
                return Err(McpError::invalid_params(
                    format!("no tool {other:?}; list_tools names them"),
                    None,
                ));
            }
        };
        Ok(match outcome {
            Ok(value) => answer(value),
            Err(e) => failure(format!("{e:#}")),
        })
    }

    /// Who decides, for the record: the MCP client's name.
    fn by(&self, context: &RequestContext<RoleServer>) -> String {
        match context.peer.peer_info() {
            Some(info) => format!("mcp:{}", info.client_info.name),
            None => "mcp".to_owned(),
        }
    }

    async fn submit(
        &self,
        args: SubmitArgs,
        context: &RequestContext<RoleServer>,
    ) -> anyhow::Result<Value> {
        let plan = match args.plan {
            Some(plan) => Some(
                serde_json::from_value::<SwarmDeploymentPlan>(plan)
                    .map_err(|e| anyhow::anyhow!("the plan does not parse: {e}"))?,
            ),
            None => None,
        };
        let request = MissionRequest {
            plan,
            mission_id: args.mission_id,
            ..MissionRequest::text(args.mission)
        };
        let reply = client::submit(&self.nc, &request, Duration::from_secs(15)).await?;
        let swarm_id = reply.swarm_id.clone();
        if !args.wait {
            return Ok(json!({
                "swarm_id": swarm_id,
                "accepted": true,
                "resources": uris(&swarm_id),
            }));
        }
        let timeout = Duration::from_secs(
            args.timeout_secs
                .unwrap_or(DEFAULT_WAIT_SECS)
                .clamp(1, MAX_WAIT_SECS),
        );
        let token = context.meta.get_progress_token();
        // Progress goes out from a task of its own: the watch's callback
        // cannot wait on the client.
        // Bounded: a client slower than the swarm misses notifications
        // rather than growing this process.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(f64, Option<f64>, String)>(256);
        let sender = token.map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                while let Some((done, total, message)) = rx.recv().await {
                    let mut note =
                        ProgressNotificationParam::new(token.clone(), done).with_message(message);
                    if let Some(total) = total {
                        note = note.with_total(total);
                    }
                    if peer.notify_progress(note).await.is_err() {
                        break;
                    }
                }
            })
        });
        let mut total: Option<f64> = None;
        let mut done = std::collections::BTreeSet::new();
        let watched = client::watch(&self.nc, &swarm_id, timeout, |update| {
            let message = match update {
                client::Update::Deployed { tasks } => {
                    total = Some(tasks.len() as f64);
                    format!("deployed with {} tasks", tasks.len())
                }
                client::Update::Progress(p) => {
                    format!("{}: {}", p.task_id, cut(&p.message, 200))
                }
                client::Update::Result(r) => {
                    done.insert(r.task_id.clone());
                    format!("{}: result submitted", r.task_id)
                }
                client::Update::Error(e) => format!(
                    "{}error: {}",
                    e.task_id
                        .as_deref()
                        .map(|t| format!("{t}: "))
                        .unwrap_or_default(),
                    cut(&e.error.message, 200)
                ),
                client::Update::Report(r) => format!("final report: {:?}", r.overall_status),
            };
            let _ = tx.try_send((done.len() as f64, total, message));
        })
        .await;
        drop(tx);
        if let Some(sender) = sender {
            // Notifications already queued go out before the answer.
            let _ = tokio::time::timeout(Duration::from_secs(5), sender).await;
        }
        Ok(report_answer(&swarm_id, &watched?))
    }

    async fn get_swarm(&self, swarm_id: &str) -> anyhow::Result<Value> {
        let (record, state) = tokio::try_join!(
            client::mission(&self.nc, swarm_id),
            client::state(&self.nc, swarm_id)
        )?;
        let Some(record) = record else {
            anyhow::bail!("no swarm {swarm_id}");
        };
        let status = state
            .as_ref()
            .map_or_else(|| client::record_status(&record), |s| s.status);
        let tasks: Vec<Value> = state
            .iter()
            .flat_map(|s| s.tasks.iter())
            .map(|t| {
                json!({
                    "task_id": t.definition.task_id,
                    "title": t.definition.title,
                    "status": t.status,
                    "attempt": t.attempt,
                    "revision": t.revision,
                    "result": cut(&t.result_preview, RESULT_PREVIEW),
                })
            })
            .collect();
        Ok(json!({
            "swarm_id": swarm_id,
            "status": status,
            "mission": record.request.mission,
            "accepted_at": record.accepted_at,
            "tasks": tasks,
            "resources": uris(swarm_id),
        }))
    }

    async fn list_swarms(&self, args: ListArgs) -> anyhow::Result<Value> {
        let statuses = args
            .status
            .iter()
            .map(|s| list::parse_status(s).map_err(anyhow::Error::msg))
            .collect::<anyhow::Result<Vec<SwarmStatus>>>()?;
        let since = args
            .since
            .as_deref()
            .map(|s| list::parse_since(s).map_err(anyhow::Error::msg))
            .transpose()?;
        let query = list::Query {
            statuses,
            since,
            limit: args.limit.unwrap_or(20).clamp(1, MAX_LISTED),
        };
        let listing = list::list(&self.nc, &query, chrono::Utc::now()).await?;
        Ok(json!({"swarms": serde_json::to_value(listing.rows)?}))
    }

    /// The text of a resource, and its MIME type.
    async fn read(&self, uri: &str) -> Result<(String, &'static str), McpError> {
        let not_found = || McpError::invalid_params(format!("no resource {uri}"), None);
        let rest = uri.strip_prefix(URI_PREFIX).ok_or_else(not_found)?;
        let (swarm_id, what) = rest.split_once('/').ok_or_else(not_found)?;
        if !swarm_common::subjects::is_token(swarm_id) {
            return Err(not_found());
        }
        let internal = |e: anyhow::Error| McpError::internal_error(format!("{e:#}"), None);
        match what {
            "report.json" => {
                let report = client::final_report(&self.nc, swarm_id)
                    .await
                    .map_err(internal)?
                    .ok_or_else(|| {
                        McpError::invalid_params(
                            format!("swarm {swarm_id} has no final report yet"),
                            None,
                        )
                    })?;
                Ok((
                    serde_json::to_string_pretty(&report).map_err(|e| internal(e.into()))?,
                    "application/json",
                ))
            }
            "state.json" => {
                let state = client::state(&self.nc, swarm_id)
                    .await
                    .map_err(internal)?
                    .ok_or_else(|| {
                        McpError::invalid_params(
                            format!("swarm {swarm_id} has no state (yet)"),
                            None,
                        )
                    })?;
                Ok((
                    serde_json::to_string_pretty(&state).map_err(|e| internal(e.into()))?,
                    "application/json",
                ))
            }
            "report.html" => {
                let html = client::report_html(&self.nc, swarm_id).await.map_err(|e| {
                    McpError::invalid_params(
                        format!("swarm {swarm_id} has no HTML report yet: {e:#}"),
                        None,
                    )
                })?;
                Ok((String::from_utf8_lossy(&html).into_owned(), "text/html"))
            }
            _ => Err(not_found()),
        }
    }
}

impl ServerHandler for SwarmMcp {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_instructions(
            "Swarm runs missions as swarms of agents. submit_mission starts one (wait: true follows it to its report); \
             get_swarm and list_swarms show where they stand; approvals and questions wait for a person.",
        );
        info.server_info = rmcp::model::Implementation::new("swarm", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(&request.name, request.arguments, &context)
            .await
            .map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let query = list::Query {
            statuses: Vec::new(),
            since: None,
            limit: MAX_LISTED,
        };
        let listing = list::list(&self.nc, &query, chrono::Utc::now())
            .await
            .map_err(|e| McpError::internal_error(format!("{e:#}"), None))?;
        let mut resources = Vec::new();
        for row in &listing.rows {
            let first_line = row.mission.lines().next().unwrap_or_default();
            resources.push(json!({
                "uri": format!("{URI_PREFIX}{}/state.json", row.swarm_id),
                "name": format!("{} state", row.swarm_id),
                "description": format!("The state of swarm {} ({:?}): {}", row.swarm_id, row.status, cut(first_line, 120)),
                "mimeType": "application/json",
            }));
            if row.status.is_terminal() {
                for (file, mime, what) in [
                    ("report.json", "application/json", "final report"),
                    ("report.html", "text/html", "HTML report"),
                ] {
                    resources.push(json!({
                        "uri": format!("{URI_PREFIX}{}/{file}", row.swarm_id),
                        "name": format!("{} {what}", row.swarm_id),
                        "description": format!("The {what} of swarm {}: {}", row.swarm_id, cut(first_line, 120)),
                        "mimeType": mime,
                    }));
                }
            }
        }
        serde_json::from_value(json!({"resources": resources}))
            .map_err(|e| McpError::internal_error(format!("listing resources: {e}"), None))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let templates = [
            ("report.json", "application/json", "A swarm's final report"),
            ("report.html", "text/html", "A swarm's HTML report"),
            ("state.json", "application/json", "A swarm's state"),
        ]
        .map(|(file, mime, name)| {
            json!({
                "uriTemplate": format!("{URI_PREFIX}{{swarm_id}}/{file}"),
                "name": name,
                "mimeType": mime,
            })
        });
        serde_json::from_value(json!({"resourceTemplates": templates}))
            .map_err(|e| McpError::internal_error(format!("listing templates: {e}"), None))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (text, mime) = self.read(&request.uri).await?;
        let contents = ResourceContents::TextResourceContents {
            uri: request.uri,
            mime_type: Some(mime.to_owned()),
            text,
            meta: None,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// Serves `server` on standard input and output until the client leaves.
pub async fn serve_stdio(server: SwarmMcp) -> anyhow::Result<()> {
    use rmcp::ServiceExt as _;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("starting the MCP server on stdio: {e}"))?;
    running.waiting().await?;
    Ok(())
}

/// Serves `server` over streamable HTTP at `/mcp` on `listener` until
/// `shutdown`; with a `token`, every request must carry it as a bearer
/// token. `allowed_hosts` are the Host headers accepted (DNS rebinding).
pub async fn serve_http(
    server: SwarmMcp,
    listener: tokio::net::TcpListener,
    token: Option<String>,
    allowed_hosts: Vec<String>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let mut config = StreamableHttpServerConfig::default();
    if !allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(allowed_hosts);
    }
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let token = token.map(Arc::new);
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let token = token.clone();
                async move {
                    if let Some(token) = token {
                        let given = request
                            .headers()
                            .get(axum::http::header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Bearer "));
                        if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes()))
                        {
                            return axum::response::IntoResponse::into_response((
                                axum::http::StatusCode::UNAUTHORIZED,
                                [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
                                "a bearer token is required",
                            ));
                        }
                    }
                    next.run(request).await
                }
            },
        ));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// Compares two secrets in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_an_object_schema_and_hints() {
        let tools = tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
        assert_eq!(
            names,
            [
                "submit_mission",
                "get_swarm",
                "list_swarms",
                "cancel_swarm",
                "list_approvals",
                "approve",
                "deny",
                "answer"
            ]
        );
        for t in &tools {
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
            assert!(t.annotations.is_some(), "{}", t.name);
            assert!(!t.input_schema.contains_key("$schema"), "{}", t.name);
        }
        let submit = &tools[0].input_schema;
        assert_eq!(submit["required"], json!(["mission"]));
    }

    #[test]
    fn wrong_arguments_are_a_tool_error_naming_the_field() {
        let mut args = serde_json::Map::new();
        args.insert("swarm".into(), json!("x"));
        let err = parse::<SwarmArgs>(Some(args)).unwrap_err();
        assert_eq!(err.is_error, Some(true));
        let text = serde_json::to_string(&err).unwrap();
        assert!(
            text.contains("swarm_id") || text.contains("swarm"),
            "{text}"
        );
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
