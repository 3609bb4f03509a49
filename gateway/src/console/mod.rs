//! The web console: pages a person reads and acts on, served by the
//! gateway at `/` (`--console`, on by default).
//!
//! Pages are rendered here (minijinja, HTML escaping on) and work without
//! script; `console.js` (embedded, no CDN) makes them live over SSE:
//!
//! - `/`: the swarms, newest first, filtered by status and age, a page at
//!   a time, with a mission form; rows change as swarms do ([`live`]'s
//!   hub, one watch of the buckets per gateway for every browser);
//! - `/swarms/{id}`: the task graph and timeline (SVG from
//!   [`swarm_boss::graph`]), the tasks, what waits for a person, cancel,
//!   the report; `/swarms/{id}/tasks/{task}` a task's description,
//!   output, steps, gates, review and numbers;
//! - `/approvals`: approvals and questions waiting, decided and answered
//!   through the boss's desk, the same checked path as the CLI's;
//! - `/agents`: the running replicas, from their agent cards (or, with no
//!   cards, the NATS services that answer).
//!
//! Authentication is the gateway's: with tokens configured a person signs
//! in with one (kept in an `HttpOnly`, `SameSite=Strict` cookie) or sends
//! it as a bearer token, and sees only the swarms started with it. A form
//! posted with the cookie must come from this origin. Every page carries a
//! Content-Security-Policy that allows only the gateway's own script and
//! stylesheet.

mod live;
mod views;

pub use live::Hub;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use chrono::Utc;
use minijinja::{AutoEscape, Environment, UndefinedBehavior, context};
use serde::Serialize;
use swarm_client::client as sc;
use swarm_common::{ResultSubmission, SwarmStatus, subjects};

use crate::error::{A2aError, ErrorKind};
use crate::http::Gateway;
use crate::swarms::Caller;
use views::{AgentView, ApprovalView, QuestionView, RowView, SwarmView, TaskView, Waiting};

/// The cookie a signed-in person's token is kept in.
pub const COOKIE: &str = "swarm_console";
/// Swarms on one page of the list.
const PAGE_SIZE: usize = 50;
/// The deepest page of the list (the listing reads what it skips).
const MAX_OFFSET: usize = 2000;

const CSS: &str = include_str!("../../console/console.css");
const JS: &str = include_str!("../../console/console.js");

/// The security headers of every console response.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

type Shared = Arc<Gateway>;

/// The console's routes (`/` itself is added by [`crate::http::router`],
/// which shares it with JSON-RPC's `POST /`).
pub fn router() -> Router<Shared> {
    Router::new()
        .route("/assets/console.css", get(css))
        .route("/assets/console.js", get(js))
        // Browsers ask for it on every page, the report's included.
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/missions", post(submit))
        .route("/swarms/{id}", get(swarm_page))
        .route("/swarms/{id}/tasks/{task}", get(task_page))
        .route("/swarms/{id}/waiting", get(swarm_waiting))
        .route("/swarms/{id}/report", get(report))
        .route("/swarms/{id}/cancel", post(cancel))
        .route("/approvals", get(approvals_page))
        .route("/approvals/{id}/decide", post(decide))
        .route("/questions/{swarm}/{task}/answer", post(answer))
        .route("/agents", get(agents_page))
        .route("/events/swarms", get(live::swarms_events))
        .route("/events/swarms/{id}", get(live::swarm_events))
        .route("/events/waiting", get(live::waiting_events))
}

pub(crate) fn templates() -> &'static Environment<'static> {
    static ENV: std::sync::OnceLock<Environment<'static>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        // Every template escapes, whatever its name.
        env.set_auto_escape_callback(|_| AutoEscape::Html);
        env.set_undefined_behavior(UndefinedBehavior::Chainable);
        for (name, source) in [
            ("base.html", include_str!("../../console/base.html")),
            ("fragment.html", include_str!("../../console/fragment.html")),
            ("login.html", include_str!("../../console/login.html")),
            ("swarms.html", include_str!("../../console/swarms.html")),
            ("row.html", include_str!("../../console/row.html")),
            (
                "task_rows.html",
                include_str!("../../console/task_rows.html"),
            ),
            ("swarm.html", include_str!("../../console/swarm.html")),
            ("waiting.html", include_str!("../../console/waiting.html")),
            (
                "approvals.html",
                include_str!("../../console/approvals.html"),
            ),
            ("agents.html", include_str!("../../console/agents.html")),
            ("task.html", include_str!("../../console/task.html")),
        ] {
            // The templates are part of the binary: a broken one is a
            // build defect the console tests catch.
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "a console template does not parse");
            }
        }
        env
    })
}

/// A view model as a template value.
fn v<T: Serialize>(x: &T) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(x))
}

/// A page or fragment rendered, with the console's headers.
fn html(status: StatusCode, template: &str, ctx: minijinja::Value) -> Response {
    let body = templates()
        .get_template(template)
        .and_then(|t| t.render(ctx));
    match body {
        Ok(body) => secured((status, body).into_response(), "text/html; charset=utf-8"),
        Err(e) => {
            tracing::error!(template, error = %e, "rendering a console page");
            secured(
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the console could not render this page",
                )
                    .into_response(),
                "text/plain; charset=utf-8",
            )
        }
    }
}

fn secured(mut r: Response, content_type: &'static str) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

async fn css() -> Response {
    // The drawings' styles are the report's, so both look the same.
    static ALL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let all = ALL.get_or_init(|| format!("{CSS}\n{}", swarm_boss::graph::CSS));
    secured(all.clone().into_response(), "text/css; charset=utf-8")
}

async fn js() -> Response {
    secured(JS.into_response(), "text/javascript; charset=utf-8")
}

/// Who a console request is from.
#[derive(Debug, Clone)]
pub struct Person {
    /// As the operations know callers.
    pub caller: Caller,
    /// Whether the credentials came in the cookie (so a form needs a
    /// same-origin check).
    by_cookie: bool,
}

impl Person {
    /// How decisions and answers name the person.
    fn by(&self) -> String {
        match &self.caller.0 {
            None => "console".into(),
            Some(name) => format!("console:{name}"),
        }
    }
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.trim().to_owned())
}

/// The person a request is from, or why not (a redirect to sign in for a
/// page, 401 for anything else).
pub(crate) fn person(g: &Gateway, headers: &HeaderMap) -> Result<Person, A2aError> {
    if g.tokens.is_empty() {
        return Ok(Person {
            caller: Caller(None),
            by_cookie: false,
        });
    }
    if headers.contains_key(header::AUTHORIZATION) {
        return crate::http::authenticate(g, headers).map(|caller| Person {
            caller,
            by_cookie: false,
        });
    }
    match cookie_token(headers).and_then(|t| crate::http::caller_of_token(g, &t)) {
        Some(caller) => Ok(Person {
            caller,
            by_cookie: true,
        }),
        None => Err(A2aError::new(
            ErrorKind::Unauthenticated,
            "sign in with a token to use the console",
        )),
    }
}

/// Refuses a form posted with the cookie from another origin.
fn same_origin(g: &Gateway, p: &Person, headers: &HeaderMap) -> Result<(), A2aError> {
    if !p.by_cookie {
        return Ok(());
    }
    let from = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok());
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let ok = from.is_some_and(|from| {
        let from = from.trim_end_matches('/');
        let authority = from
            .strip_prefix("http://")
            .or_else(|| from.strip_prefix("https://"))
            .map(|rest| rest.split('/').next().unwrap_or_default());
        from.starts_with(g.swarms.public_url.as_str()) || (authority.is_some() && authority == host)
    });
    if ok {
        Ok(())
    } else {
        Err(A2aError::new(
            ErrorKind::InvalidRequest,
            "a console form must be sent from the console's own pages",
        ))
    }
}

/// A failed page: sign-in for want of credentials, else the error's text.
fn failed(e: &A2aError, path: &str) -> Response {
    if e.kind == ErrorKind::Unauthenticated {
        return Redirect::to(&format!("/login?next={}", encode(path))).into_response();
    }
    let status = e.kind.http_status();
    if e.kind == ErrorKind::Internal {
        tracing::warn!(error = %e.message, "a console request failed");
    }
    html(
        status,
        "base.html",
        context! { page => "error", flash => e.message.clone(), flash_kind => "error" },
    )
}

/// Percent-encodes `s` for a query value.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The form fields of a urlencoded body.
fn form(body: &Bytes) -> HashMap<String, String> {
    url::form_urlencoded::parse(body).into_owned().collect()
}

/// Where a form sends the person back to: a path of this console only.
fn back_to(fields: &HashMap<String, String>, default: &str) -> String {
    match fields.get("back").or_else(|| fields.get("next")) {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p.clone(),
        _ => default.to_owned(),
    }
}

/// A redirect after a form, with what happened in the query (`?done=` or
/// `?error=`), shown once by the page.
fn after_form(to: &str, outcome: Result<String, String>) -> Response {
    let sep = if to.contains('?') { '&' } else { '?' };
    let (key, text) = match outcome {
        Ok(t) => ("done", t),
        Err(t) => ("error", t),
    };
    let text: String = text.chars().take(300).collect();
    Redirect::to(&format!("{to}{sep}{key}={}", encode(&text))).into_response()
}

fn flash(q: &HashMap<String, String>) -> (String, &'static str) {
    match (q.get("done"), q.get("error")) {
        (_, Some(e)) => (e.chars().take(300).collect(), "error"),
        (Some(d), None) => (d.chars().take(300).collect(), "done"),
        _ => (String::new(), ""),
    }
}

/// The caller's name for the header (none when anonymous).
fn who(p: &Person) -> String {
    p.caller.0.clone().unwrap_or_default()
}

// ---- sign in ----

async fn login_page(Query(q): Query<HashMap<String, String>>) -> Response {
    let next = back_to(&q, "/");
    let (flash, kind) = flash(&q);
    html(
        StatusCode::OK,
        "login.html",
        context! { page => "login", next, flash, flash_kind => kind },
    )
}

async fn login(State(g): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let fields = form(&body);
    let next = back_to(&fields, "/");
    let token = fields.get("token").map(|t| t.trim()).unwrap_or_default();
    if crate::http::caller_of_token(&g, token).is_none() {
        return after_form(
            &format!("/login?next={}", encode(&next)),
            Err("that token is not valid here".into()),
        );
    }
    let secure = g.swarms.public_url.starts_with("https://")
        || headers
            .get("x-forwarded-proto")
            .is_some_and(|v| v.as_bytes() == b"https");
    // The token's characters are checked: a cookie value cannot hold `;`,
    // spaces or controls, and a token that does not fit is not kept.
    if !token
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b';' && b != b',' && b != b'"' && b != b'\\')
    {
        return after_form(
            &format!("/login?next={}", encode(&next)),
            Err("this token cannot be kept in a cookie: send it as a bearer token".into()),
        );
    }
    let cookie = format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age=43200{}",
        if secure { "; Secure" } else { "" }
    );
    let mut r = Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

async fn logout() -> Response {
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("swarm_console=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    r
}

// ---- the swarms ----

#[derive(Serialize)]
struct Choice {
    value: &'static str,
    label: &'static str,
}

const STATUSES: &[(&str, &str)] = &[
    ("", "any"),
    ("running", "running"),
    ("completed", "completed"),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
    ("timedout", "timed out"),
];
const SPANS: &[(&str, &str)] = &[
    ("", "any time"),
    ("1h", "the last hour"),
    ("24h", "the last day"),
    ("7d", "the last week"),
];

/// `GET /`: the swarms the person may see, newest first.
pub async fn swarms_page(
    State(g): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let p = match person(&g, &headers) {
        Ok(p) => p,
        Err(e) => return failed(&e, "/"),
    };
    let status = q.get("status").cloned().unwrap_or_default();
    let since = q.get("since").cloned().unwrap_or_default();
    let statuses = match status.as_str() {
        "" => Vec::new(),
        s => match swarm_client::list::parse_status(s) {
            Ok(s) => vec![s],
            Err(e) => return failed(&A2aError::invalid_params(e), "/"),
        },
    };
    let since_span = match since.as_str() {
        "" => None,
        s => match swarm_client::list::parse_since(s) {
            Ok(d) => Some(d),
            Err(e) => return failed(&A2aError::invalid_params(e), "/"),
        },
    };
    let offset = q
        .get("page")
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0)
        .saturating_mul(PAGE_SIZE)
        .min(MAX_OFFSET);
    let now = Utc::now();
    let rows = match g
        .swarms
        .rows(&p.caller, statuses, since_span, offset + PAGE_SIZE + 1)
        .await
    {
        Ok(rows) => rows,
        Err(e) => return failed(&e, "/"),
    };
    let more = rows.len() > offset + PAGE_SIZE;
    let rows: Vec<RowView> = rows
        .iter()
        .skip(offset)
        .take(PAGE_SIZE)
        .map(|r| RowView::of(r, now))
        .collect();
    let page = offset / PAGE_SIZE;
    let link = |n: usize| {
        let mut url = format!("/?page={n}");
        if !status.is_empty() {
            url.push_str(&format!("&status={}", encode(&status)));
        }
        if !since.is_empty() {
            url.push_str(&format!("&since={}", encode(&since)));
        }
        url
    };
    let (flash, kind) = flash(&q);
    let waiting_count = waiting(&g, &p.caller, None).await.map_or(0, |w| w.len());
    html(
        StatusCode::OK,
        "swarms.html",
        context! {
            page => "swarms",
            caller => who(&p),
            waiting_count,
            flash, flash_kind => kind,
            open_form => q.contains_key("new"),
            form_key => uuid::Uuid::new_v4().to_string(),
            rows => v(&rows),
            first_page => page == 0,
            filter => context! { status => status.clone(), since => since.clone() },
            statuses => v(&STATUSES.iter().map(|(value, label)| Choice { value, label }).collect::<Vec<_>>()),
            spans => v(&SPANS.iter().map(|(value, label)| Choice { value, label }).collect::<Vec<_>>()),
            prev_url => (page > 0).then(|| link(page - 1)),
            next_url => more.then(|| link(page + 1)),
        },
    )
}

/// `POST /missions`: the form's text or plan, submitted as the person.
async fn submit(State(g): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let p = match person(&g, &headers).and_then(|p| same_origin(&g, &p, &headers).map(|()| p)) {
        Ok(p) => p,
        Err(e) => return failed(&e, "/"),
    };
    let fields = form(&body);
    let text = fields.get("text").map(|t| t.trim()).unwrap_or_default();
    let plan = fields.get("plan").map(|t| t.trim()).unwrap_or_default();
    let part = if !plan.is_empty() {
        match serde_json::from_str::<serde_json::Value>(plan) {
            Ok(data) => crate::types::Part::data(data),
            Err(e) => return after_form("/?new", Err(format!("the plan is not JSON: {e}"))),
        }
    } else if !text.is_empty() {
        crate::types::Part::text(text)
    } else {
        return after_form("/?new", Err("write a mission, or give a plan".into()));
    };
    // The form's key makes a form sent twice (a reload, a double click)
    // one mission.
    let key = fields
        .get("key")
        .filter(|k| subjects::is_token(k) && k.len() <= 64)
        .cloned()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let message = crate::types::Message {
        message_id: key,
        context_id: String::new(),
        task_id: String::new(),
        role: crate::types::Role::User,
        parts: vec![part],
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    };
    match g.swarms.start(&p.caller, &message, None).await {
        Ok(id) => Redirect::to(&format!("/swarms/{id}")).into_response(),
        Err(e) => after_form("/?new", Err(e.message)),
    }
}

/// `GET /swarms/{id}`.
async fn swarm_page(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let path = format!("/swarms/{id}");
    let p = match person(&g, &headers) {
        Ok(p) => p,
        Err(e) => return failed(&e, &path),
    };
    let view = match g.swarms.view(&p.caller, &id).await {
        Ok(v) => v,
        Err(e) => return failed(&e, &path),
    };
    let status = status_of(&view);
    let mut s = SwarmView::of(&view, status, Utc::now());
    s.trace_id = trace_id_of(&view);
    let waiting = waiting_of(&view);
    let (flash, kind) = flash(&q);
    html(
        StatusCode::OK,
        "swarm.html",
        context! {
            page => "swarm",
            caller => who(&p),
            flash, flash_kind => kind,
            back => path,
            show_swarm => false,
            waiting => v(&waiting),
            s => v(&s),
        },
    )
}

/// Where a swarm stands: its report's status, else its state's, else its
/// mission record's.
pub(crate) fn status_of(view: &crate::mapping::SwarmView) -> SwarmStatus {
    if let Some(r) = &view.report {
        return r.overall_status;
    }
    if let Some(s) = &view.state {
        return s.status;
    }
    view.record
        .as_ref()
        .map_or(SwarmStatus::Running, sc::record_status)
}

/// The mission's trace id, where the swarm recorded one.
fn trace_id_of(view: &crate::mapping::SwarmView) -> String {
    view.state
        .as_ref()
        .and_then(|s| s.trace_id.clone())
        .or_else(|| view.report.as_ref().and_then(|r| r.trace_id.clone()))
        .unwrap_or_default()
}

fn waiting_of(view: &crate::mapping::SwarmView) -> Waiting {
    Waiting {
        approvals: view.approvals.iter().map(ApprovalView::of).collect(),
        questions: view.questions.iter().map(QuestionView::of).collect(),
    }
}

/// `GET /swarms/{id}/tasks/{task}`: a page, or with `?fragment=1` the
/// part the swarm's page shows beside its graph.
async fn task_page(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path((id, task)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let path = format!("/swarms/{id}/tasks/{task}");
    let p = match person(&g, &headers) {
        Ok(p) => p,
        Err(e) => return failed(&e, &path),
    };
    let view = match g.swarms.view(&p.caller, &id).await {
        Ok(v) => v,
        Err(e) => return failed(&e, &path),
    };
    let Some(t) = view
        .state
        .as_ref()
        .and_then(|s| s.tasks.iter().find(|t| t.definition.task_id == task))
    else {
        return failed(
            &A2aError::new(
                ErrorKind::TaskNotFound,
                format!("swarm {id} has no task {task:?}"),
            ),
            &path,
        );
    };
    let result = match t.result_seq {
        Some(seq) => result_at(&g, &id, &task, seq).await,
        None => None,
    };
    let fragment = q.contains_key("fragment");
    html(
        StatusCode::OK,
        "task.html",
        context! {
            page => "task",
            layout => if fragment { "fragment.html" } else { "base.html" },
            full => !fragment,
            caller => who(&p),
            swarm_id => id,
            t => v(&TaskView::of(t, result.as_ref())),
        },
    )
}

/// The result stored at `seq`, if it is the result of `swarm`'s `task`.
async fn result_at(g: &Gateway, swarm: &str, task: &str, seq: u64) -> Option<ResultSubmission> {
    let js = async_nats::jetstream::new(g.swarms.client.clone());
    let stream = js.get_stream(subjects::A2AP_STREAM).await.ok()?;
    let msg = stream.get_raw_message(seq).await.ok()?;
    if subjects::Subject::parse(&msg.subject)
        != Some(subjects::Subject::Result {
            swarm_id: swarm,
            task_id: task,
        })
    {
        return None;
    }
    swarm_runtime::wire::decode::<ResultSubmission>(Some(&msg.headers), &msg.payload)
        .ok()
        .map(|e| e.body)
}

/// What waits for the person: in one swarm, or in every swarm it may see.
pub(crate) async fn waiting(
    g: &Gateway,
    caller: &Caller,
    swarm: Option<&str>,
) -> Result<Waiting, A2aError> {
    if let Some(id) = swarm {
        return Ok(waiting_of(&g.swarms.view(caller, id).await?));
    }
    let approvals = sc::approvals(&g.swarms.client, false)
        .await
        .map_err(|e| A2aError::internal(&e))?;
    let questions = g.swarms.open_questions().await?;
    // Each swarm's visibility is looked up once.
    let mut sees: HashMap<String, bool> = HashMap::new();
    let mut out = Waiting::default();
    for a in approvals {
        let Some(swarm_id) = a.swarm_id.clone() else {
            // Not a swarm's: only an anonymous console sees it.
            if caller.0.is_none() {
                out.approvals.push(ApprovalView::of(&a));
            }
            continue;
        };
        if visible(g, caller, &swarm_id, &mut sees).await {
            out.approvals.push(ApprovalView::of(&a));
        }
    }
    for q in questions {
        if visible(g, caller, &q.swarm_id, &mut sees).await {
            out.questions.push(QuestionView::of(&q));
        }
    }
    Ok(out)
}

async fn visible(
    g: &Gateway,
    caller: &Caller,
    swarm: &str,
    sees: &mut HashMap<String, bool>,
) -> bool {
    if caller.0.is_none() {
        return true;
    }
    if let Some(&s) = sees.get(swarm) {
        return s;
    }
    let s = g.swarms.view(caller, swarm).await.is_ok();
    sees.insert(swarm.to_owned(), s);
    s
}

/// `GET /swarms/{id}/waiting`: the fragment of what waits in one swarm.
async fn swarm_waiting(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let run = async {
        let p = person(&g, &headers)?;
        waiting(&g, &p.caller, Some(&id)).await
    };
    match run.await {
        Ok(w) => html(
            StatusCode::OK,
            "waiting.html",
            context! { waiting => v(&w), back => format!("/swarms/{id}"), show_swarm => false },
        ),
        Err(e) => error_text(&e),
    }
}

fn error_text(e: &A2aError) -> Response {
    secured(
        (e.kind.http_status(), e.message.clone()).into_response(),
        "text/plain; charset=utf-8",
    )
}

/// `GET /swarms/{id}/report`: the boss's HTML report, once rendered (a
/// swarm that has just ended is waited for, briefly).
async fn report(State(g): State<Shared>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let path = format!("/swarms/{id}/report");
    let run = async {
        let p = person(&g, &headers)?;
        let view = g.swarms.view(&p.caller, &id).await?;
        if view.report.is_some() {
            // Rendering follows the report by a moment.
            let _ = sc::wait_for_rendering(&g.swarms.client, &id, Duration::from_secs(10)).await;
        }
        g.swarms.report_html(&id).await?.ok_or_else(|| {
            A2aError::new(
                ErrorKind::TaskNotFound,
                format!("swarm {id} has no report yet"),
            )
        })
    };
    match run.await {
        Ok(html) => {
            let mut r = html.into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            // The report is self-contained: it may load nothing, run
            // nothing, and is sandboxed from this origin.
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox",
                ),
            );
            r
        }
        Err(e) => failed(&e, &path),
    }
}

/// `POST /swarms/{id}/cancel`.
async fn cancel(State(g): State<Shared>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let path = format!("/swarms/{id}");
    let p = match person(&g, &headers).and_then(|p| same_origin(&g, &p, &headers).map(|()| p)) {
        Ok(p) => p,
        Err(e) => return failed(&e, &path),
    };
    let outcome = match g.swarms.view(&p.caller, &id).await {
        Err(e) => Err(e.message),
        Ok(_) => sc::cancel(
            &g.swarms.client,
            &id,
            &format!("cancelled from the console by {}", p.by()),
        )
        .await
        .map(|()| "cancel sent".to_owned())
        .map_err(|e| format!("{e:#}")),
    };
    after_form(&path, outcome)
}

/// `GET /approvals`: what waits for the person in every swarm it sees.
async fn approvals_page(
    State(g): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let p = match person(&g, &headers) {
        Ok(p) => p,
        Err(e) => return failed(&e, "/approvals"),
    };
    let w = match waiting(&g, &p.caller, None).await {
        Ok(w) => w,
        Err(e) => return failed(&e, "/approvals"),
    };
    let (flash, kind) = flash(&q);
    let fragment = q.contains_key("fragment");
    let ctx = context! {
        page => "approvals",
        caller => who(&p),
        waiting_count => w.len(),
        flash, flash_kind => kind,
        back => "/approvals",
        show_swarm => true,
        empty => w.is_empty(),
        waiting => v(&w),
    };
    if fragment {
        html(StatusCode::OK, "waiting.html", ctx)
    } else {
        html(StatusCode::OK, "approvals.html", ctx)
    }
}

/// `POST /approvals/{id}/decide`: `decision` is `approve` or `deny`.
async fn decide(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let fields = form(&body);
    let back = back_to(&fields, "/approvals");
    let p = match person(&g, &headers).and_then(|p| same_origin(&g, &p, &headers).map(|()| p)) {
        Ok(p) => p,
        Err(e) => return failed(&e, &back),
    };
    let approve = match fields.get("decision").map(String::as_str) {
        Some("approve") => true,
        Some("deny") => false,
        _ => return after_form(&back, Err("choose approve or deny".into())),
    };
    // The approval must belong to a swarm the person sees.
    let pending = waiting(&g, &p.caller, None).await;
    let mine = pending
        .as_ref()
        .is_ok_and(|w| w.approvals.iter().any(|a| a.approval_id == id));
    if !mine {
        return after_form(
            &back,
            Err(format!("no pending approval {id} for you to decide")),
        );
    }
    let reason = fields
        .get("reason")
        .map(|r| r.trim().chars().take(500).collect::<String>())
        .filter(|r| !r.is_empty());
    let outcome = sc::decide_as(
        &g.swarms.client,
        &g.swarms.desk_user,
        &id,
        approve,
        &p.by(),
        reason,
    )
    .await
    .map(|r| format!("{} {}", r.tool, if approve { "approved" } else { "denied" }))
    .map_err(|e| format!("the decision was refused: {e:#}"));
    after_form(&back, outcome)
}

/// `POST /questions/{swarm}/{task}/answer`.
async fn answer(
    State(g): State<Shared>,
    headers: HeaderMap,
    Path((swarm, task)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let fields = form(&body);
    let back = back_to(&fields, "/approvals");
    let p = match person(&g, &headers).and_then(|p| same_origin(&g, &p, &headers).map(|()| p)) {
        Ok(p) => p,
        Err(e) => return failed(&e, &back),
    };
    if let Err(e) = g.swarms.view(&p.caller, &swarm).await {
        return after_form(&back, Err(e.message));
    }
    let text = fields.get("text").map(|t| t.trim()).unwrap_or_default();
    if text.is_empty() {
        return after_form(&back, Err("write an answer".into()));
    }
    let outcome = sc::answer_as(
        &g.swarms.client,
        &g.swarms.desk_user,
        &swarm,
        &task,
        text,
        &p.by(),
    )
    .await
    .map(|_| format!("answered task {task}"))
    .map_err(|e| format!("the answer was refused: {e:#}"));
    after_form(&back, outcome)
}

/// `GET /agents`.
async fn agents_page(State(g): State<Shared>, headers: HeaderMap) -> Response {
    let p = match person(&g, &headers) {
        Ok(p) => p,
        Err(e) => return failed(&e, "/agents"),
    };
    let now = Utc::now();
    let cards = swarm_client::agents::list(&g.swarms.client)
        .await
        .unwrap_or_default();
    let (agents, from_services) = if cards.is_empty() {
        (live::services(&g.swarms.client).await, true)
    } else {
        let mut cards = cards;
        cards.sort_by(|a, b| (&a.role, &a.agent_id).cmp(&(&b.role, &b.agent_id)));
        (cards.iter().map(|c| AgentView::of(c, now)).collect(), false)
    };
    html(
        StatusCode::OK,
        "agents.html",
        context! { page => "agents", caller => who(&p), agents => v(&agents), from_services },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_send_people_back_only_within_the_console() {
        let back = |p: &str| back_to(&HashMap::from([("back".to_owned(), p.to_owned())]), "/");
        assert_eq!(back("/swarms/s1"), "/swarms/s1");
        assert_eq!(back("//evil.example/x"), "/");
        assert_eq!(back("https://evil.example/"), "/");
        assert_eq!(back("/\\evil.example"), "/");
        assert_eq!(back_to(&HashMap::new(), "/approvals"), "/approvals");
    }

    #[test]
    fn the_token_is_read_from_its_cookie_only() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("other=1; swarm_console=abc123 ; x=y"),
        );
        assert_eq!(cookie_token(&h).as_deref(), Some("abc123"));
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("swarm_consoleX=abc"),
        );
        assert_eq!(cookie_token(&h), None);
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode("/swarms/a b?c&d"), "/swarms/a%20b%3Fc%26d");
        assert_eq!(encode("ok-_.~"), "ok-_.~");
    }

    #[test]
    fn every_template_parses() {
        for name in [
            "base.html",
            "fragment.html",
            "login.html",
            "swarms.html",
            "row.html",
            "task_rows.html",
            "swarm.html",
            "waiting.html",
            "approvals.html",
            "agents.html",
            "task.html",
        ] {
            assert!(templates().get_template(name).is_ok(), "{name}");
        }
    }
}
