//! The gateway's HTTP server: the agent card, the JSON-RPC binding at `/`,
//! the HTTP+JSON binding (`/message:send`, `/tasks/{id}`, ...), SSE for the
//! streaming operations, and the HTML reports at `/reports/{id}.html`.
//!
//! Every A2A request is authenticated first (when tokens are configured),
//! then its `A2A-Version` checked, then parsed; each failure is the spec's
//! error in the request's binding.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::card::API_KEY_HEADER;
use crate::error::{A2aError, ErrorKind, SUPPORTED_VERSIONS};
use crate::mapping::Shape;
use crate::swarms::{Caller, Swarms};
use crate::types::{
    CancelTaskRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest, ListTasksRequest,
    SendMessageRequest, SubscribeToTaskRequest, TaskPushNotificationConfig,
    TaskPushNotificationConfigRequest, TaskState,
};

/// The media type of the HTTP+JSON binding.
const A2A_JSON: &str = "application/a2a+json";

/// What every handler shares.
pub struct Gateway {
    /// The operations.
    pub swarms: Swarms,
    /// The card, as served.
    pub card: crate::card::CardSource,
    /// Token → caller name; empty: callers are anonymous.
    pub tokens: HashMap<String, String>,
    /// The console's follower of the buckets, shared by its browsers.
    pub hub: Arc<crate::console::Hub>,
}

type Shared = Arc<Gateway>;

/// The router; with `console`, the web console's pages too (`GET /` is
/// the console's list of swarms, `POST /` stays JSON-RPC).
pub fn router(gateway: Arc<Gateway>, body_limit: usize, console: bool) -> Router {
    let root = if console {
        post(jsonrpc).get(crate::console::swarms_page)
    } else {
        post(jsonrpc)
    };
    let base = if console {
        crate::console::router()
    } else {
        Router::new()
    };
    base.route("/.well-known/agent-card.json", get(agent_card))
        .route("/", root)
        .route("/message:send", post(rest_send))
        .route("/message:stream", post(rest_stream))
        .route("/tasks", get(rest_list))
        .route("/tasks/{id}", get(rest_get_task).post(rest_post_task))
        .route(
            "/tasks/{id}/pushNotificationConfigs",
            get(rest_push_list).post(rest_push_create),
        )
        .route(
            "/tasks/{id}/pushNotificationConfigs/{config}",
            get(rest_push_get).delete(rest_push_delete),
        )
        .route("/extendedAgentCard", get(rest_extended_card))
        .route("/reports/{file}", get(report_html))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(gateway)
}

async fn agent_card(State(g): State<Shared>) -> Response {
    let mut r = Json(g.card.current().await).into_response();
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=60"),
    );
    r
}

/// Compares two secrets in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// The caller a request's credentials name: `Authorization: Bearer <token>`
/// or `X-API-Key: <token>`.
pub(crate) fn authenticate(g: &Gateway, headers: &HeaderMap) -> Result<Caller, A2aError> {
    if g.tokens.is_empty() {
        return Ok(Caller(None));
    }
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_owned())
        });
    let key = headers
        .get(API_KEY_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned());
    let Some(presented) = bearer.or(key) else {
        return Err(A2aError::new(
            ErrorKind::Unauthenticated,
            format!(
                "authentication required: send `Authorization: Bearer <token>` or \
                 `{API_KEY_HEADER}: <token>`"
            ),
        ));
    };
    caller_of_token(g, &presented)
        .ok_or_else(|| A2aError::new(ErrorKind::Unauthenticated, "the token is not valid"))
}

/// The caller a presented token names, if it is one of the gateway's.
pub(crate) fn caller_of_token(g: &Gateway, presented: &str) -> Option<Caller> {
    // Every token is compared, so the time taken says nothing of which matched.
    let mut found = None;
    for (token, name) in &g.tokens {
        if same_secret(token, presented) {
            found = Some(name.clone());
        }
    }
    found.map(|name| Caller(Some(name)))
}

/// Refuses a protocol version this gateway does not serve (no header
/// means 0.3).
fn check_version(headers: &HeaderMap) -> Result<(), A2aError> {
    let asked = headers
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let served = asked.is_some_and(|v| {
        let major_minor: String = v.split('.').take(2).collect::<Vec<_>>().join(".");
        SUPPORTED_VERSIONS.contains(&major_minor.as_str())
    });
    if served {
        Ok(())
    } else {
        Err(A2aError::version_not_supported(asked))
    }
}

/// Authentication, then the version: what every A2A request passes.
pub(crate) fn admit(g: &Gateway, headers: &HeaderMap) -> Result<Caller, A2aError> {
    let caller = authenticate(g, headers)?;
    check_version(headers)?;
    Ok(caller)
}

fn parse<T: DeserializeOwned>(value: Value) -> Result<T, A2aError> {
    serde_json::from_value(value).map_err(|e| A2aError::invalid_params(format!("params: {e}")))
}

fn history_shape(history_length: Option<i32>) -> Shape {
    Shape {
        history_length: history_length.map(|n| usize::try_from(n.max(0)).unwrap_or(0)),
        artifacts: true,
    }
}

/// An SSE response of `events`, each turned into its JSON by `wrap`.
fn sse<S>(events: S, wrap: impl Fn(Value) -> Value + Send + 'static) -> Response
where
    S: futures::Stream<Item = crate::types::StreamResponse> + Send + 'static,
{
    let stream = events.map(move |e| {
        let value = to_json(&e);
        Ok::<_, Infallible>(Event::default().data(wrap(value).to_string()))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

// ---- JSON-RPC ----

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn rpc_result(id: &Value, result: Value) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

fn rpc_error(id: &Value, e: &A2aError) -> Response {
    let status = if e.kind == ErrorKind::Unauthenticated {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::OK
    };
    let mut r = (
        status,
        Json(json!({"jsonrpc": "2.0", "id": id, "error": e.to_jsonrpc()})),
    )
        .into_response();
    challenge(&mut r, e);
    r
}

/// Adds `WWW-Authenticate` to a refusal for want of credentials.
fn challenge(r: &mut Response, e: &A2aError) {
    if e.kind == ErrorKind::Unauthenticated {
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"swarm\""),
        );
    }
}

/// A JSON-RPC 2.0 request's id, method and params; or the id to answer
/// with (null when it cannot be read) and why it is not one.
pub(crate) fn parse_rpc(body: &[u8]) -> Result<(Value, String, Value), (Value, A2aError)> {
    let request: Value = serde_json::from_slice(body).map_err(|e| {
        (
            Value::Null,
            A2aError::new(ErrorKind::JsonParse, format!("the body is not JSON: {e}")),
        )
    })?;
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let valid_id = matches!(id, Value::Null | Value::String(_) | Value::Number(_));
    let method = request.get("method").and_then(Value::as_str);
    let (true, Some("2.0"), Some(method)) = (
        valid_id,
        request.get("jsonrpc").and_then(Value::as_str),
        method,
    ) else {
        return Err((
            if valid_id { id } else { Value::Null },
            A2aError::new(
                ErrorKind::InvalidRequest,
                "not a JSON-RPC 2.0 request: it needs \"jsonrpc\": \"2.0\", a string \
                 \"method\" and a string or number \"id\"",
            ),
        ));
    };
    let params = request.get("params").cloned().unwrap_or(json!({}));
    Ok((id, method.to_owned(), params))
}

async fn jsonrpc(State(g): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let (id, method, params) = match parse_rpc(&body) {
        Ok(parsed) => parsed,
        Err((id, e)) => return rpc_error(&id, &e),
    };
    let caller = match admit(&g, &headers) {
        Ok(c) => c,
        Err(e) => return rpc_error(&id, &e),
    };
    match rpc_call(&g, &caller, &method, params, &id).await {
        Ok(r) => r,
        Err(e) => rpc_error(&id, &e),
    }
}

/// What a JSON-RPC method answers, in any binding: a result, or a stream
/// of events.
pub enum RpcAnswer {
    /// The `result` of the response.
    Value(Value),
    /// The events of a streaming method, each the `result` of a response.
    Stream(futures::stream::BoxStream<'static, crate::types::StreamResponse>),
}

/// Carries out JSON-RPC method `method` with `params` for `caller`: the
/// same for the HTTP binding at `/` and the NATS binding (`crate::nats`).
pub async fn rpc_dispatch(
    g: &Gateway,
    caller: &Caller,
    method: &str,
    params: Value,
) -> Result<RpcAnswer, A2aError> {
    let value = |v: Value| Ok(RpcAnswer::Value(v));
    match method {
        "SendMessage" => {
            let request: SendMessageRequest = parse(params)?;
            let task = g.swarms.send(caller, &request).await?;
            value(json!({"task": to_json(&task)}))
        }
        "SendStreamingMessage" => {
            let request: SendMessageRequest = parse(params)?;
            let events = start_stream(g, caller, &request).await?;
            Ok(RpcAnswer::Stream(events.boxed()))
        }
        "SubscribeToTask" => {
            let request: SubscribeToTaskRequest = parse(params)?;
            let events =
                crate::stream::open(g.swarms.clone(), caller.clone(), request.id, true, None)
                    .await?;
            Ok(RpcAnswer::Stream(events.boxed()))
        }
        "GetTask" => {
            let request: GetTaskRequest = parse(params)?;
            let task = g
                .swarms
                .task(caller, &request.id, history_shape(request.history_length))
                .await?;
            value(to_json(&task))
        }
        "ListTasks" => {
            let request: ListTasksRequest = parse(params)?;
            value(to_json(&g.swarms.list(caller, &request).await?))
        }
        "CancelTask" => {
            let request: CancelTaskRequest = parse(params)?;
            value(to_json(&g.swarms.cancel(caller, &request.id).await?))
        }
        "CreateTaskPushNotificationConfig" => {
            let config: TaskPushNotificationConfig = parse(params)?;
            let task_id = config.task_id.clone();
            value(to_json(
                &g.swarms.push_create(caller, &task_id, config).await?,
            ))
        }
        "GetTaskPushNotificationConfig" => {
            let request: TaskPushNotificationConfigRequest = parse(params)?;
            value(to_json(
                &g.swarms
                    .push_get(caller, &request.task_id, &request.id)
                    .await?,
            ))
        }
        "ListTaskPushNotificationConfigs" => {
            let request: ListTaskPushNotificationConfigsRequest = parse(params)?;
            value(to_json(
                &g.swarms.push_list(caller, &request.task_id).await?,
            ))
        }
        "DeleteTaskPushNotificationConfig" => {
            let request: TaskPushNotificationConfigRequest = parse(params)?;
            g.swarms
                .push_delete(caller, &request.task_id, &request.id)
                .await?;
            value(json!({}))
        }
        "GetExtendedAgentCard" => Err(no_extended_card()),
        other => Err(A2aError::new(
            ErrorKind::MethodNotFound,
            format!("no method {other:?}"),
        )),
    }
}

async fn rpc_call(
    g: &Gateway,
    caller: &Caller,
    method: &str,
    params: Value,
    id: &Value,
) -> Result<Response, A2aError> {
    Ok(match rpc_dispatch(g, caller, method, params).await? {
        RpcAnswer::Value(v) => rpc_result(id, v),
        RpcAnswer::Stream(events) => {
            let id = id.clone();
            sse(
                events,
                move |r| json!({"jsonrpc": "2.0", "id": id, "result": r}),
            )
        }
    })
}

fn no_extended_card() -> A2aError {
    A2aError::new(
        ErrorKind::ExtendedAgentCardNotConfigured,
        "this agent has no extended card: the public card is the whole card",
    )
}

/// `SendStreamingMessage`: the message's task, then its stream.
async fn start_stream(
    g: &Gateway,
    caller: &Caller,
    request: &SendMessageRequest,
) -> Result<impl futures::Stream<Item = crate::types::StreamResponse> + Send + 'static, A2aError> {
    let mut once = request.clone();
    // The stream follows the task; the send itself must not wait.
    once.configuration
        .get_or_insert_with(Default::default)
        .return_immediately = true;
    // Read before the send: updates stored while the stream opens are
    // followed, not lost.
    let since = g.swarms.last_sequence().await?;
    let task = g.swarms.send(caller, &once).await?;
    crate::stream::open(
        g.swarms.clone(),
        caller.clone(),
        task.id,
        false,
        Some(since),
    )
    .await
}

// ---- HTTP+JSON ----

fn rest_ok(value: Value) -> Response {
    let mut r = Json(value).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(A2A_JSON));
    r
}

fn rest_error(e: &A2aError) -> Response {
    if e.kind == ErrorKind::Internal {
        tracing::warn!(error = %e.message, "an A2A request failed");
    }
    let mut r = (e.kind.http_status(), Json(e.to_rest())).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(A2A_JSON));
    challenge(&mut r, e);
    r
}

fn rest<F>(f: F) -> Response
where
    F: FnOnce() -> Result<Response, A2aError>,
{
    f().unwrap_or_else(|e| rest_error(&e))
}

fn body_json(body: &Bytes) -> Result<Value, A2aError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|e| A2aError::new(ErrorKind::JsonParse, format!("the body is not JSON: {e}")))
}

async fn rest_send(State(g): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        let request: SendMessageRequest = parse(body_json(&body)?)?;
        let task = g.swarms.send(&caller, &request).await?;
        Ok::<_, A2aError>(rest_ok(json!({"task": task})))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

async fn rest_stream(State(g): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        let request: SendMessageRequest = parse(body_json(&body)?)?;
        let events = start_stream(&g, &caller, &request).await?;
        Ok::<_, A2aError>(sse(events, |v| v))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

/// A query parameter as a number.
fn query_number(q: &HashMap<String, String>, name: &str) -> Result<Option<i32>, A2aError> {
    q.get(name)
        .map(|v| {
            v.parse::<i32>()
                .map_err(|_| A2aError::invalid_params(format!("{name} must be a number")))
        })
        .transpose()
}

async fn rest_list(
    State(g): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        let status = match q.get("status") {
            Some(s) => Some(
                TaskState::parse(s)
                    .ok_or_else(|| A2aError::invalid_params(format!("no task state {s:?}")))?,
            ),
            None => None,
        };
        let include_artifacts = match q.get("includeArtifacts").map(String::as_str) {
            None => None,
            Some("true") => Some(true),
            Some("false") => Some(false),
            Some(other) => {
                return Err(A2aError::invalid_params(format!(
                    "includeArtifacts must be true or false, not {other:?}"
                )));
            }
        };
        let request = ListTasksRequest {
            tenant: String::new(),
            context_id: q.get("contextId").cloned().unwrap_or_default(),
            status,
            page_size: query_number(&q, "pageSize")?,
            page_token: q.get("pageToken").cloned().unwrap_or_default(),
            history_length: query_number(&q, "historyLength")?,
            status_timestamp_after: q.get("statusTimestampAfter").cloned(),
            include_artifacts,
        };
        let page = g.swarms.list(&caller, &request).await?;
        Ok::<_, A2aError>(rest_ok(to_json(&page)))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

/// `GET /tasks/{id}`, and `GET /tasks/{id}:subscribe`.
async fn rest_get_task(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        if let Some(id) = id.strip_suffix(":subscribe") {
            let events =
                crate::stream::open(g.swarms.clone(), caller, id.to_owned(), true, None).await?;
            return Ok(sse(events, |v| v));
        }
        let shape = history_shape(query_number(&q, "historyLength")?);
        let task = g.swarms.task(&caller, &id, shape).await?;
        Ok::<_, A2aError>(rest_ok(to_json(&task)))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

/// `POST /tasks/{id}:cancel` and `POST /tasks/{id}:subscribe` (axum takes
/// the whole last segment as the id; the verb is split off here).
async fn rest_post_task(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(segment): Path<String>,
) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        if let Some(id) = segment.strip_suffix(":cancel") {
            let task = g.swarms.cancel(&caller, id).await?;
            return Ok(rest_ok(to_json(&task)));
        }
        if let Some(id) = segment.strip_suffix(":subscribe") {
            let events =
                crate::stream::open(g.swarms.clone(), caller, id.to_owned(), true, None).await?;
            return Ok(sse(events, |v| v));
        }
        Err::<Response, _>(A2aError::new(
            ErrorKind::MethodNotFound,
            format!("no operation POST /tasks/{segment}: use :cancel or :subscribe"),
        ))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

/// `POST /tasks/{id}/pushNotificationConfigs`: the body is the config.
async fn rest_push_create(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(task_id): Path<String>,
    body: Bytes,
) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        let config: TaskPushNotificationConfig = parse(body_json(&body)?)?;
        let made = g.swarms.push_create(&caller, &task_id, config).await?;
        Ok::<_, A2aError>(rest_ok(to_json(&made)))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

async fn rest_push_list(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(task_id): Path<String>,
) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        let page = g.swarms.push_list(&caller, &task_id).await?;
        Ok::<_, A2aError>(rest_ok(to_json(&page)))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

async fn rest_push_get(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path((task_id, id)): Path<(String, String)>,
) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        let config = g.swarms.push_get(&caller, &task_id, &id).await?;
        Ok::<_, A2aError>(rest_ok(to_json(&config)))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

async fn rest_push_delete(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path((task_id, id)): Path<(String, String)>,
) -> Response {
    let run = async {
        let caller = admit(&g, &headers)?;
        g.swarms.push_delete(&caller, &task_id, &id).await?;
        Ok::<_, A2aError>(rest_ok(json!({})))
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

async fn rest_extended_card(State(g): State<Shared>, headers: HeaderMap) -> Response {
    rest(|| {
        admit(&g, &headers)?;
        Err(no_extended_card())
    })
}

/// `GET /reports/{swarm}.html`: the boss's HTML report of a swarm the
/// caller may see.
async fn report_html(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(file): Path<String>,
) -> Response {
    let run = async {
        let caller = authenticate(&g, &headers)?;
        let id = file.strip_suffix(".html").unwrap_or(&file);
        // The caller must see the swarm (this also refuses a bad id).
        g.swarms.view(&caller, id).await?;
        let html = g
            .swarms
            .report_html(id)
            .await?
            .ok_or_else(|| A2aError::task_not_found(id))?;
        let mut r = html.into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        // The page is the boss's, self-contained: nothing of it may load
        // anything else or run as this origin.
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox",
            ),
        );
        Ok::<_, A2aError>(r)
    };
    run.await.unwrap_or_else(|e| rest_error(&e))
}

async fn not_found() -> Response {
    rest_error(&A2aError::new(
        ErrorKind::MethodNotFound,
        "no such path; the agent card is at /.well-known/agent-card.json",
    ))
}
