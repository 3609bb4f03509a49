//! [`MockLlm`]: a scripted language-model server for tests, speaking the
//! OpenAI chat-completions wire format (`POST /v1/chat/completions`, also
//! `/chat/completions`) and the Anthropic Messages format (`POST
//! /v1/messages`) on `127.0.0.1:<free port>`.
//!
//! In a whole-system test the boss, the manager and the worker all call the
//! same server, in an order nobody controls, so replies are chosen by
//! [`Rule`]s matched on the request (its system prompt, its last user
//! message, the tools it offers, ...), each with its own queue of
//! [`Reply`]s, tried in the order they were added, then a fallback. A rule
//! whose queue is empty is passed over, unless it repeats its last reply.
//! Every request is recorded ([`Recorded`]) so a test can assert what the
//! model was sent. A request that asks for a stream (`"stream": true`) gets
//! its [`Reply::Text`] or [`Reply::ToolCalls`] as the provider's server-sent
//! events, the text a few words per event ([`Reply::trickled`] spaces them
//! out in time).
//!
//! ```no_run
//! # async fn demo() {
//! use swarm_testkit::{Match, MockLlm, Reply, Rule};
//! let llm = MockLlm::start().await;
//! llm.add(
//!     Rule::new("worker", Match::new().offers_tool("read_file"))
//!         .reply(Reply::tool_call("read_file", serde_json::json!({"path": "a.txt"})))
//!         .then_always(Reply::text("done")),
//! );
//! // Pass llm.openai_env("gpt-4o-mini") to Cluster::builder().env(..).
//! # }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Which wire format a request used (from its path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI chat completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Another path: only a rule can answer it (with
    /// [`Match::wire`]`(Wire::Unknown)` or no wire condition); otherwise 404.
    Unknown,
}

impl Wire {
    fn of(path: &str) -> Wire {
        match path.trim_end_matches('/') {
            "/v1/chat/completions" | "/chat/completions" => Wire::OpenAi,
            "/v1/messages" | "/messages" => Wire::Anthropic,
            _ => Wire::Unknown,
        }
    }
}

/// A tool call in a scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub struct MockToolCall {
    /// The call's id; one is made up (`call_<n>`, `toolu_<n>`) when `None`.
    pub id: Option<String>,
    /// The tool.
    pub name: String,
    /// Its arguments (a JSON object).
    pub arguments: Value,
}

/// One scripted answer. [`Reply::Text`] and [`Reply::ToolCalls`] are
/// written in the wire format of the request they answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A final text.
    Text {
        /// The text.
        text: String,
        /// Input and output tokens reported in `usage`.
        usage: (u64, u64),
    },
    /// Tool calls, with optional text beside them.
    ToolCalls {
        /// Text beside the calls (may be empty).
        text: String,
        /// The calls.
        calls: Vec<MockToolCall>,
        /// Input and output tokens reported in `usage`.
        usage: (u64, u64),
    },
    /// A status, extra headers and a JSON body, sent as they are.
    Json {
        /// The HTTP status.
        status: u16,
        /// Extra headers, such as `Retry-After`.
        headers: Vec<(String, String)>,
        /// The body.
        body: Value,
    },
    /// A status, a content type and a raw body (malformed JSON, HTML, ...).
    Raw {
        /// The HTTP status.
        status: u16,
        /// The `Content-Type`.
        content_type: String,
        /// The body.
        body: String,
    },
    /// Waits, then answers with the inner reply.
    Delayed(Duration, Box<Reply>),
    /// The inner reply, its events (when streamed) this far apart.
    Trickled(Duration, Box<Reply>),
    /// Never answers (until the server is dropped).
    Hang,
}

/// Tokens a scripted reply reports unless told otherwise.
pub const DEFAULT_USAGE: (u64, u64) = (10, 5);

impl Reply {
    /// A final text, with [`DEFAULT_USAGE`].
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text {
            text: text.into(),
            usage: DEFAULT_USAGE,
        }
    }

    /// 200 with `body` as it is.
    pub fn ok(body: Value) -> Reply {
        Reply::json(200, Vec::<(&str, String)>::new(), body)
    }

    /// `status` with extra `headers` and `body` as it is.
    pub fn json(status: u16, headers: Vec<(&str, String)>, body: Value) -> Reply {
        Reply::Json {
            status,
            headers: headers
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            body,
        }
    }

    /// `status` with a raw body of `content_type`.
    pub fn raw(status: u16, content_type: &str, body: impl Into<String>) -> Reply {
        Reply::Raw {
            status,
            content_type: content_type.to_string(),
            body: body.into(),
        }
    }

    /// A final text that is `value` as JSON (a plan, a review, a summary).
    pub fn json_text(value: &Value) -> Reply {
        Reply::text(value.to_string())
    }

    /// One call of `name` with `arguments`, with [`DEFAULT_USAGE`].
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Reply {
        Reply::tool_calls(vec![(name.into(), arguments)])
    }

    /// Several calls in one reply, with [`DEFAULT_USAGE`].
    pub fn tool_calls(calls: Vec<(String, Value)>) -> Reply {
        Reply::ToolCalls {
            text: String::new(),
            calls: calls
                .into_iter()
                .map(|(name, arguments)| MockToolCall {
                    id: None,
                    name,
                    arguments,
                })
                .collect(),
            usage: DEFAULT_USAGE,
        }
    }

    /// An HTTP error status with a JSON error body in both APIs' shape
    /// (`{"error": {"message", "type"}}`).
    pub fn status(status: u16, message: &str) -> Reply {
        Reply::Json {
            status,
            headers: Vec::new(),
            body: json!({"type": "error", "error": {"type": "mock_error", "message": message}}),
        }
    }

    /// 429 with `Retry-After: <secs>`.
    pub fn rate_limited(retry_after_secs: u64) -> Reply {
        Reply::status(429, "rate limited by the mock").header("retry-after", retry_after_secs)
    }

    /// 200 whose body is not JSON.
    pub fn malformed() -> Reply {
        Reply::Raw {
            status: 200,
            content_type: "application/json".into(),
            body: "{\"choices\": [ this is not json".into(),
        }
    }

    /// This reply with `usage` (input, output tokens); other kinds are
    /// returned unchanged.
    pub fn usage(self, input: u64, output: u64) -> Reply {
        match self {
            Reply::Text { text, .. } => Reply::Text {
                text,
                usage: (input, output),
            },
            Reply::ToolCalls { text, calls, .. } => Reply::ToolCalls {
                text,
                calls,
                usage: (input, output),
            },
            Reply::Delayed(d, inner) => Reply::Delayed(d, Box::new(inner.usage(input, output))),
            Reply::Trickled(d, inner) => Reply::Trickled(d, Box::new(inner.usage(input, output))),
            other => other,
        }
    }

    /// This reply with an extra header (only [`Reply::Json`] carries them).
    pub fn header(self, name: &str, value: impl ToString) -> Reply {
        match self {
            Reply::Json {
                status,
                mut headers,
                body,
            } => {
                headers.push((name.to_string(), value.to_string()));
                Reply::Json {
                    status,
                    headers,
                    body,
                }
            }
            other => other,
        }
    }

    /// This reply after `delay`.
    pub fn after(self, delay: Duration) -> Reply {
        Reply::Delayed(delay, Box::new(self))
    }

    /// This reply, streamed with `every` between its events, as a model
    /// writes: its text arrives over `every` times the number of events.
    /// A request that did not ask for a stream gets it whole, at once.
    pub fn trickled(self, every: Duration) -> Reply {
        Reply::Trickled(every, Box::new(self))
    }
}

/// One condition on a request.
#[derive(Debug, Clone, PartialEq)]
enum Cond {
    Wire(Wire),
    System(String),
    LastUser(String),
    AnyMessage(String),
    OffersTool(String),
    NotOffersTool(String),
    Model(String),
}

/// What a [`Rule`] matches: all of its conditions (none matches every
/// request). Text conditions are substrings, case-sensitive.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Match {
    conds: Vec<Cond>,
}

impl Match {
    /// Matches every request.
    pub fn new() -> Match {
        Match::default()
    }

    /// The request uses `wire`.
    pub fn wire(mut self, wire: Wire) -> Match {
        self.conds.push(Cond::Wire(wire));
        self
    }

    /// The system prompt contains `text`.
    pub fn system_contains(mut self, text: impl Into<String>) -> Match {
        self.conds.push(Cond::System(text.into()));
        self
    }

    /// The text of the last user message contains `text` (for Anthropic,
    /// the text blocks of the last user turn, not its tool results).
    pub fn last_user_contains(mut self, text: impl Into<String>) -> Match {
        self.conds.push(Cond::LastUser(text.into()));
        self
    }

    /// Some message (system, user, assistant or tool result) contains `text`.
    pub fn any_message_contains(mut self, text: impl Into<String>) -> Match {
        self.conds.push(Cond::AnyMessage(text.into()));
        self
    }

    /// The request offers the tool `name`.
    pub fn offers_tool(mut self, name: impl Into<String>) -> Match {
        self.conds.push(Cond::OffersTool(name.into()));
        self
    }

    /// The request does not offer the tool `name`.
    pub fn lacks_tool(mut self, name: impl Into<String>) -> Match {
        self.conds.push(Cond::NotOffersTool(name.into()));
        self
    }

    /// The request names the model `model`.
    pub fn model(mut self, model: impl Into<String>) -> Match {
        self.conds.push(Cond::Model(model.into()));
        self
    }

    /// Whether `request` meets every condition.
    pub fn matches(&self, request: &Recorded) -> bool {
        self.conds.iter().all(|c| match c {
            Cond::Wire(w) => request.wire == *w,
            Cond::System(t) => request.system().contains(t.as_str()),
            Cond::LastUser(t) => request.last_user_text().contains(t.as_str()),
            Cond::AnyMessage(t) => request.all_text().contains(t.as_str()),
            Cond::OffersTool(t) => request.tool_names().iter().any(|n| n == t),
            Cond::NotOffersTool(t) => !request.tool_names().iter().any(|n| n == t),
            Cond::Model(m) => request.body["model"].as_str() == Some(m.as_str()),
        })
    }
}

/// A named condition with a queue of replies.
#[derive(Debug, Clone)]
pub struct Rule {
    name: String,
    matcher: Match,
    queue: VecDeque<Reply>,
    always: Option<Reply>,
}

impl Rule {
    /// A rule called `name` (recorded with each request it answers) for
    /// requests that meet `matcher`, with no replies yet.
    pub fn new(name: impl Into<String>, matcher: Match) -> Rule {
        Rule {
            name: name.into(),
            matcher,
            queue: VecDeque::new(),
            always: None,
        }
    }

    /// Queues `reply`.
    pub fn reply(mut self, reply: Reply) -> Rule {
        self.queue.push_back(reply);
        self
    }

    /// Queues every reply of `replies`, in order.
    pub fn replies(mut self, replies: impl IntoIterator<Item = Reply>) -> Rule {
        self.queue.extend(replies);
        self
    }

    /// Once the queue is empty, answers every matching request with `reply`.
    pub fn then_always(mut self, reply: Reply) -> Rule {
        self.always = Some(reply);
        self
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The URL path.
    pub path: String,
    /// The wire format, from the path.
    pub wire: Wire,
    /// Headers, names in lower case.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (`Null` if it was not JSON).
    pub body: Value,
    /// The rule that answered, or `None` for the fallback.
    pub rule: Option<String>,
    /// When it arrived.
    pub at: Instant,
}

/// The text of a content value: a string, or the text of a list of parts
/// or blocks (`text` blocks, and for `tool_result` blocks their content).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("tool_result") => content_text(&p["content"]),
                Some("tool_use") => p["input"].to_string(),
                _ => p.get("text").and_then(Value::as_str).unwrap_or("").into(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The text blocks of a content value, leaving out tool results.
fn text_blocks(content: &Value) -> String {
    match content {
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        other => content_text(other),
    }
}

impl Recorded {
    /// The messages of the body.
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The system prompt: OpenAI's system messages, Anthropic's `system`.
    pub fn system(&self) -> String {
        let mut parts = vec![content_text(&self.body["system"])];
        parts.extend(
            self.messages()
                .iter()
                .filter(|m| matches!(m["role"].as_str(), Some("system" | "developer")))
                .map(|m| content_text(&m["content"])),
        );
        parts.retain(|p| !p.is_empty());
        parts.join("\n\n")
    }

    /// The text of the last user message (Anthropic: its text blocks).
    pub fn last_user_text(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| text_blocks(&m["content"]))
            .unwrap_or_default()
    }

    /// Every user message's text, oldest first (Anthropic: text blocks).
    pub fn user_texts(&self) -> Vec<String> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| text_blocks(&m["content"]))
            .filter(|t| !t.is_empty())
            .collect()
    }

    /// The system prompt and every message's text, tool calls and tool
    /// results, as one text.
    pub fn all_text(&self) -> String {
        let mut out = self.system();
        for m in self.messages() {
            out.push('\n');
            out.push_str(&content_text(&m["content"]));
            if let Some(calls) = m["tool_calls"].as_array() {
                for c in calls {
                    out.push('\n');
                    out.push_str(&c.to_string());
                }
            }
        }
        out
    }

    /// Whether [`Recorded::all_text`] contains `text`.
    pub fn contains(&self, text: &str) -> bool {
        self.all_text().contains(text)
    }

    /// The names of the tools the request offers.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| {
                        t["function"]["name"]
                            .as_str()
                            .or_else(|| t["name"].as_str())
                            .map(str::to_string)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The tool results the request carries, as (call id, content), in
    /// order: OpenAI `tool` messages, Anthropic `tool_result` blocks.
    pub fn tool_results(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for m in self.messages() {
            if m["role"] == "tool" {
                out.push((
                    m["tool_call_id"].as_str().unwrap_or("").to_string(),
                    content_text(&m["content"]),
                ));
            } else if let Some(blocks) = m["content"].as_array() {
                for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
                    out.push((
                        b["tool_use_id"].as_str().unwrap_or("").to_string(),
                        content_text(&b["content"]),
                    ));
                }
            }
        }
        out
    }

    /// The tool calls the assistant made earlier in the conversation, as
    /// (call id, tool name), in order.
    pub fn tool_calls(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for m in self.messages().iter().filter(|m| m["role"] == "assistant") {
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                out.push((
                    c["id"].as_str().unwrap_or("").to_string(),
                    c["function"]["name"].as_str().unwrap_or("").to_string(),
                ));
            }
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_use" {
                    out.push((
                        b["id"].as_str().unwrap_or("").to_string(),
                        b["name"].as_str().unwrap_or("").to_string(),
                    ));
                }
            }
        }
        out
    }
}

/// The scripted state, behind one lock: rules are matched and their queues
/// popped atomically, so concurrent callers never get the same reply.
struct Script {
    rules: Vec<Rule>,
    fallback: Reply,
    requests: Vec<Recorded>,
}

struct Shared {
    script: Mutex<Script>,
    ids: AtomicU64,
    /// Requests being answered now, and the most there were at once.
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
    /// Each reply's status and when it was sent.
    answered: Mutex<Vec<(u16, Instant)>>,
    /// Until when every request is refused, as by a saturated provider, and
    /// whether with `429` and `Retry-After` (or `529` without it).
    saturated_until: Mutex<Option<(Instant, bool)>>,
}

/// Counts a request in flight while it lives (a streamed reply's until its
/// last event is sent).
struct InFlight(Arc<Shared>);

impl InFlight {
    fn enter(shared: &Arc<Shared>) -> InFlight {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A scripted LLM server on `127.0.0.1`; it stops when dropped.
pub struct MockLlm {
    url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm").field("url", &self.url).finish()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockLlm {
    /// Starts a server with no rules: every request gets the fallback, a
    /// 400 that says no rule matched (not retried by the providers, so a
    /// test missing a rule fails fast with a clear error).
    pub async fn start() -> MockLlm {
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                rules: Vec::new(),
                fallback: Reply::status(400, "MockLlm: no rule matched this request"),
                requests: Vec::new(),
            }),
            ids: AtomicU64::new(1),
            in_flight: AtomicU64::new(0),
            peak_in_flight: AtomicU64::new(0),
            answered: Mutex::new(Vec::new()),
            saturated_until: Mutex::new(None),
        });
        let state = shared.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move { answer(state, method, uri, headers, body).await }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("cannot bind the mock LLM server to 127.0.0.1");
        let url = format!(
            "http://{}",
            listener.local_addr().expect("the listener has an address")
        );
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("the mock LLM server stopped: {e}");
            }
        });
        MockLlm { url, shared, task }
    }

    /// Starts a server that answers every request with `replies` in order,
    /// then with the fallback.
    pub async fn with_script(replies: impl IntoIterator<Item = Reply>) -> MockLlm {
        let llm = MockLlm::start().await;
        llm.add(Rule::new("script", Match::new()).replies(replies));
        llm
    }

    /// The most requests that were being answered at once.
    pub fn peak_in_flight(&self) -> u64 {
        self.shared.peak_in_flight.load(Ordering::SeqCst)
    }

    /// Each reply's status and when it was sent, in order.
    pub fn answered(&self) -> Vec<(u16, Instant)> {
        self.shared
            .answered
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// From now until `window` has passed, answers every request with `429`
    /// and a `Retry-After` of the seconds left (rounded up), as a provider
    /// does while it is saturated; those requests are recorded under the
    /// rule name `saturated`.
    pub fn saturate(&self, window: Duration) {
        *self
            .shared
            .saturated_until
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Some((Instant::now() + window, true));
    }

    /// From now until `window` has passed, answers every request with `529`
    /// (`overloaded`, Anthropic's way) and no `Retry-After`, so each caller
    /// has only its own backoff to go by; recorded as `saturated`.
    pub fn overload(&self, window: Duration) {
        *self
            .shared
            .saturated_until
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Some((Instant::now() + window, false));
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The base URL for an OpenAI client (`OPENAI_BASE_URL`): `<url>/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.url)
    }

    /// The base URL for an Anthropic client (`ANTHROPIC_BASE_URL`).
    pub fn anthropic_base_url(&self) -> String {
        self.url.clone()
    }

    /// The environment that points every role at this server as an
    /// OpenAI-compatible provider serving `model`.
    pub fn openai_env(&self, model: &str) -> Vec<(String, String)> {
        vec![
            ("SWARM_PROVIDER".into(), "openai".into()),
            ("SWARM_MODEL".into(), model.into()),
            ("OPENAI_BASE_URL".into(), self.openai_base_url()),
            ("OPENAI_API_KEY".into(), "test".into()),
        ]
    }

    /// The environment that points every role at this server as the
    /// Anthropic provider serving `model`.
    pub fn anthropic_env(&self, model: &str) -> Vec<(String, String)> {
        vec![
            ("SWARM_PROVIDER".into(), "anthropic".into()),
            ("SWARM_MODEL".into(), model.into()),
            ("ANTHROPIC_BASE_URL".into(), self.anthropic_base_url()),
            ("ANTHROPIC_API_KEY".into(), "test".into()),
        ]
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        // A panic while the lock is held (a test's assertion elsewhere)
        // leaves the script usable.
        self.shared
            .script
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds `rule` after the existing ones.
    pub fn add(&self, rule: Rule) {
        self.script().rules.push(rule);
    }

    /// Queues more replies on the rule called `name`. Panics if there is none.
    pub fn push(&self, name: &str, reply: Reply) {
        let mut script = self.script();
        let rule = script
            .rules
            .iter_mut()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("MockLlm has no rule {name:?}"));
        rule.queue.push_back(reply);
    }

    /// Replaces the fallback reply.
    pub fn set_fallback(&self, reply: Reply) {
        self.script().fallback = reply;
    }

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<Recorded> {
        self.script().requests.clone()
    }

    /// The requests answered by the rule `name`, oldest first.
    pub fn requests_for(&self, name: &str) -> Vec<Recorded> {
        self.script()
            .requests
            .iter()
            .filter(|r| r.rule.as_deref() == Some(name))
            .cloned()
            .collect()
    }

    /// Replies still queued on the rule `name` (0 if there is none).
    pub fn pending(&self, name: &str) -> usize {
        self.script()
            .rules
            .iter()
            .find(|r| r.name == name)
            .map_or(0, |r| r.queue.len())
    }

    /// Waits until `count` requests meet `pred`, and returns them; `None`
    /// after `timeout`.
    pub async fn wait_for(
        &self,
        count: usize,
        timeout: Duration,
        pred: impl Fn(&Recorded) -> bool,
    ) -> Option<Vec<Recorded>> {
        let deadline = Instant::now() + timeout;
        loop {
            let found: Vec<Recorded> = self
                .script()
                .requests
                .iter()
                .filter(|r| pred(r))
                .cloned()
                .collect();
            if found.len() >= count {
                return Some(found);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A summary of every request (path, rule, last user text), for
    /// failure messages.
    pub fn describe_requests(&self) -> String {
        self.requests()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut last = r.last_user_text();
                if last.len() > 200 {
                    let mut cut = 200;
                    while !last.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    last.truncate(cut);
                }
                format!(
                    "#{i} {} rule={:?} tools={:?} last user: {last:?}",
                    r.path,
                    r.rule,
                    r.tool_names()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

async fn answer(
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let wire = Wire::of(&path);
    let mut recorded = Recorded {
        path,
        wire,
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        rule: None,
        at: Instant::now(),
    };
    let saturated = shared
        .saturated_until
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .and_then(|(until, told)| Some((until.checked_duration_since(recorded.at)?, told)))
        .filter(|(left, _)| !left.is_zero());
    let reply = {
        let mut script = shared
            .script
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut chosen = saturated.map(|(left, told)| {
            recorded.rule = Some("saturated".into());
            if told {
                Reply::rate_limited(left.as_secs_f64().ceil() as u64)
            } else {
                Reply::status(529, "overloaded (the mock)")
            }
        });
        for rule in script.rules.iter_mut().filter(|_| chosen.is_none()) {
            if !rule.matcher.matches(&recorded) {
                continue;
            }
            if let Some(r) = rule.queue.pop_front().or_else(|| rule.always.clone()) {
                recorded.rule = Some(rule.name.clone());
                chosen = Some(r);
                break;
            }
        }
        let reply = match chosen {
            Some(reply) => reply,
            None if wire == Wire::Unknown || method != Method::POST => Reply::status(
                404,
                "MockLlm serves POST /v1/chat/completions and /v1/messages",
            ),
            None => script.fallback.clone(),
        };
        script.requests.push(recorded.clone());
        reply
    };
    respond(&shared, &recorded, reply).await
}

async fn respond(shared: &Arc<Shared>, request: &Recorded, mut reply: Reply) -> Response {
    let counted = InFlight::enter(shared);
    let mut every = Duration::ZERO;
    let response = loop {
        match reply {
            Reply::Delayed(delay, inner) => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            Reply::Trickled(gap, inner) => {
                every = gap;
                reply = *inner;
            }
            Reply::Hang => std::future::pending::<()>().await,
            other => break render(shared, request, other, every, counted),
        }
    };
    shared
        .answered
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push((response.status().as_u16(), Instant::now()));
    response
}

fn render(
    shared: &Shared,
    request: &Recorded,
    reply: Reply,
    every: Duration,
    counted: InFlight,
) -> Response {
    let model = request.body["model"].as_str().unwrap_or("mock-model");
    let next_id = |prefix: &str| format!("{prefix}_{}", shared.ids.fetch_add(1, Ordering::Relaxed));
    let streamed = request.body["stream"] == json!(true);
    match reply {
        Reply::Text { text, usage } if streamed => {
            let events = match request.wire {
                Wire::Anthropic => anthropic_events(model, &text, &[], "end_turn", usage),
                _ => openai_events(model, &text, &[], "stop", usage),
            };
            event_stream(events, every, counted)
        }
        Reply::ToolCalls { text, calls, usage } if streamed => {
            let wire = request.wire;
            let prefix = if wire == Wire::Anthropic {
                "toolu"
            } else {
                "call"
            };
            let calls: Vec<(String, String, Value)> = calls
                .into_iter()
                .map(|c| (c.id.unwrap_or_else(|| next_id(prefix)), c.name, c.arguments))
                .collect();
            let events = match wire {
                Wire::Anthropic => anthropic_events(model, &text, &calls, "tool_use", usage),
                _ => openai_events(model, &text, &calls, "tool_calls", usage),
            };
            event_stream(events, every, counted)
        }
        Reply::Text { text, usage } => {
            let body = match request.wire {
                Wire::Anthropic => anthropic_text(model, &text, usage),
                _ => openai_text(model, &text, usage),
            };
            json_response(200, &[], &body)
        }
        Reply::ToolCalls { text, calls, usage } => {
            let prefix = if request.wire == Wire::Anthropic {
                "toolu"
            } else {
                "call"
            };
            let calls: Vec<(String, String, Value)> = calls
                .into_iter()
                .map(|c| (c.id.unwrap_or_else(|| next_id(prefix)), c.name, c.arguments))
                .collect();
            let body = match request.wire {
                Wire::Anthropic => anthropic_tool_use(model, &text, &calls, usage),
                _ => openai_tool_calls(model, &text, &calls, usage),
            };
            json_response(200, &[], &body)
        }
        Reply::Json {
            status,
            headers,
            body,
        } => json_response(status, &headers, &body),
        Reply::Raw {
            status,
            content_type,
            body,
        } => {
            let mut response = (status_code(status), body).into_response();
            if let Ok(v) = HeaderValue::from_str(&content_type) {
                response.headers_mut().insert("content-type", v);
            }
            response
        }
        // Unwrapped by `respond`.
        Reply::Delayed(..) | Reply::Trickled(..) | Reply::Hang => {
            (StatusCode::INTERNAL_SERVER_ERROR, "unreachable").into_response()
        }
    }
}

/// A `200` whose body is `events`, `every` apart, the request counted in
/// flight until the last is sent.
fn event_stream(events: Vec<String>, every: Duration, counted: InFlight) -> Response {
    use futures::StreamExt;
    let body = futures::stream::iter(events.into_iter().enumerate()).then(move |(i, event)| {
        let _counted = &counted;
        async move {
            if i > 0 && !every.is_zero() {
                tokio::time::sleep(every).await;
            }
            Ok::<_, std::convert::Infallible>(event)
        }
    });
    let mut response = axum::body::Body::from_stream(body).into_response();
    response.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/event-stream"),
    );
    response
        .headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

/// `text` in pieces of a word or two, as a model streams it.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut words = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' || c == '\n' {
            words += 1;
            if words == 2 {
                out.push(&text[start..i + 1]);
                start = i + 1;
                words = 0;
            }
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// `text` cut in two at a character boundary near its middle (a streamed
/// tool call's arguments arrive in pieces).
fn halves(text: &str) -> [&str; 2] {
    let mut cut = text.len() / 2;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    [&text[..cut], &text[cut..]]
}

/// An OpenAI chat-completions reply as its stream of `chat.completion.chunk`
/// events: the text, then each call's name and arguments in pieces, the
/// finish reason, the usage (as `stream_options.include_usage` asks) and
/// `[DONE]`.
pub fn openai_events(
    model: &str,
    text: &str,
    calls: &[(String, String, Value)],
    finish: &str,
    (input, output): (u64, u64),
) -> Vec<String> {
    let chunk = |choices: Value| {
        let c = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk",
                       "created": 1_700_000_000, "model": model, "choices": choices});
        format!("data: {c}\n\n")
    };
    let delta = |d: Value| chunk(json!([{"index": 0, "delta": d, "finish_reason": null}]));
    let mut events = vec![delta(json!({"role": "assistant", "content": ""}))];
    events.extend(
        pieces(text)
            .into_iter()
            .map(|p| delta(json!({"content": p}))),
    );
    for (i, (id, name, args)) in calls.iter().enumerate() {
        events.push(delta(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}),
        ));
        let args = args.to_string();
        for half in halves(&args) {
            events.push(delta(
                json!({"tool_calls": [{"index": i, "function": {"arguments": half}}]}),
            ));
        }
    }
    events.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
    ));
    let usage = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "model": model,
        "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output,
        "total_tokens": input + output}});
    events.push(format!("data: {usage}\n\n"));
    events.push("data: [DONE]\n\n".to_string());
    events
}

/// An Anthropic Messages reply as its stream of events: `message_start`, a
/// text block in `text_delta`s, each `tool_use` block's input in
/// `input_json_delta`s, `message_delta` with the stop reason and usage, and
/// `message_stop`, with a `ping` as the API sends.
pub fn anthropic_events(
    model: &str,
    text: &str,
    calls: &[(String, String, Value)],
    stop: &str,
    (input, output): (u64, u64),
) -> Vec<String> {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut events = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_mock", "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": {"input_tokens": input, "output_tokens": 1}}}),
        ),
        event("ping", json!({"type": "ping"})),
    ];
    // One content block: its start, its deltas, its stop.
    let mut blocks: Vec<(Value, Vec<Value>)> = Vec::new();
    if !text.is_empty() {
        let deltas = pieces(text)
            .into_iter()
            .map(|p| json!({"type": "text_delta", "text": p}))
            .collect();
        blocks.push((json!({"type": "text", "text": ""}), deltas));
    }
    for (id, name, args) in calls {
        let args = args.to_string();
        let deltas = halves(&args)
            .into_iter()
            .map(|half| json!({"type": "input_json_delta", "partial_json": half}))
            .collect();
        blocks.push((
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            deltas,
        ));
    }
    for (index, (block, deltas)) in blocks.into_iter().enumerate() {
        events.push(event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        for delta in deltas {
            events.push(event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        events.push(event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push(event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": output}}),
    ));
    events.push(event("message_stop", json!({"type": "message_stop"})));
    events
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn json_response(status: u16, headers: &[(String, String)], body: &Value) -> Response {
    let mut response = (
        status_code(status),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response();
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            response.headers_mut().insert(k, v);
        }
    }
    response
}

/// An OpenAI chat-completions reply with a final text.
pub fn openai_text(model: &str, text: &str, usage: (u64, u64)) -> Value {
    openai_reply(
        model,
        json!({"role": "assistant", "content": text}),
        "stop",
        usage,
    )
}

/// An OpenAI chat-completions reply that calls tools: (id, name, arguments).
/// The arguments are sent as a JSON string, as OpenAI does.
pub fn openai_tool_calls(
    model: &str,
    text: &str,
    calls: &[(String, String, Value)],
    usage: (u64, u64),
) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    let content = if text.is_empty() {
        Value::Null
    } else {
        Value::String(text.to_string())
    };
    openai_reply(
        model,
        json!({"role": "assistant", "content": content, "tool_calls": calls}),
        "tool_calls",
        usage,
    )
}

fn openai_reply(model: &str, message: Value, finish: &str, (input, output): (u64, u64)) -> Value {
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}
    })
}

/// An Anthropic Messages reply with a final text.
pub fn anthropic_text(model: &str, text: &str, usage: (u64, u64)) -> Value {
    anthropic_reply(
        model,
        vec![json!({"type": "text", "text": text})],
        "end_turn",
        usage,
    )
}

/// An Anthropic Messages reply that uses tools: (id, name, input).
pub fn anthropic_tool_use(
    model: &str,
    text: &str,
    calls: &[(String, String, Value)],
    usage: (u64, u64),
) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for (id, name, input) in calls {
        content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
    }
    anthropic_reply(model, content, "tool_use", usage)
}

fn anthropic_reply(
    model: &str,
    content: Vec<Value>,
    stop: &str,
    (input, output): (u64, u64),
) -> Value {
    json!({
        "id": "msg_mock",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn post(url: &str, body: &Value) -> (u16, HeaderMapLite, String) {
        // A minimal HTTP/1.1 client over a TCP stream keeps reqwest out of
        // the test kit's dependencies.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_once('/').unwrap();
        let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
        let body = body.to_string();
        let request = format!(
            "POST /{path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
             x-api-key: k\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        let status: u16 = lines
            .next()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        (status, headers, body.to_string())
    }

    type HeaderMapLite = BTreeMap<String, String>;

    #[tokio::test]
    async fn rules_choose_replies_in_each_wire_format_and_requests_are_recorded() {
        let llm = MockLlm::start().await;
        llm.add(
            Rule::new("planner", Match::new().system_contains("planner"))
                .reply(Reply::rate_limited(2))
                .reply(Reply::text("{\"plan\": 1}").usage(7, 3)),
        );
        llm.add(
            Rule::new("worker", Match::new().offers_tool("calc"))
                .reply(Reply::tool_call("calc", json!({"expression": "1+1"})))
                .then_always(Reply::text("2")),
        );
        let openai = format!("{}/chat/completions", llm.openai_base_url());
        let plan = json!({"model": "m", "messages": [
            {"role": "system", "content": "You are the planner"},
            {"role": "user", "content": "plan it"}]});
        let (status, headers, _) = post(&openai, &plan).await;
        assert_eq!(status, 429);
        assert_eq!(headers["retry-after"], "2");
        let (status, _, body) = post(&openai, &plan).await;
        assert_eq!(status, 200);
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "{\"plan\": 1}");
        assert_eq!(body["usage"]["prompt_tokens"], 7);
        // The planner's queue is empty: the fallback answers.
        assert_eq!(post(&openai, &plan).await.0, 400);

        let work = json!({"model": "claude", "system": "You work", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "add"}]}],
            "tools": [{"name": "calc", "input_schema": {"type": "object"}}]});
        let messages = format!("{}/v1/messages", llm.anthropic_base_url());
        let (_, _, body) = post(&messages, &work).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["content"][0]["type"], "tool_use");
        assert_eq!(body["content"][0]["input"], json!({"expression": "1+1"}));
        assert!(
            body["content"][0]["id"]
                .as_str()
                .unwrap()
                .starts_with("toolu_")
        );
        let (_, _, body) = post(&messages, &work).await;
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["content"][0]["text"], "2");

        let requests = llm.requests();
        assert_eq!(requests.len(), 5);
        assert_eq!(requests[0].rule.as_deref(), Some("planner"));
        assert_eq!(requests[0].system(), "You are the planner");
        assert_eq!(requests[0].last_user_text(), "plan it");
        assert_eq!(requests[2].rule, None);
        assert_eq!(requests[3].wire, Wire::Anthropic);
        assert_eq!(requests[3].headers["x-api-key"], "k");
        assert_eq!(requests[3].tool_names(), ["calc"]);
        assert_eq!(llm.requests_for("worker").len(), 2);
    }

    #[test]
    fn tool_results_and_calls_read_from_both_formats() {
        let openai = Recorded {
            path: "/v1/chat/completions".into(),
            wire: Wire::OpenAi,
            headers: BTreeMap::new(),
            body: json!({"messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"}]}),
            rule: None,
            at: Instant::now(),
        };
        assert_eq!(openai.tool_calls(), [("c1".into(), "calc".into())]);
        assert_eq!(openai.tool_results(), [("c1".into(), "42".into())]);
        assert!(openai.contains("42"));
        let anthropic = Recorded {
            wire: Wire::Anthropic,
            body: json!({"system": "s", "messages": [
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "calc", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "42"},
                    {"type": "text", "text": "the gate failed"}]}]}),
            ..openai
        };
        assert_eq!(anthropic.tool_calls(), [("t1".into(), "calc".into())]);
        assert_eq!(anthropic.tool_results(), [("t1".into(), "42".into())]);
        assert_eq!(anthropic.last_user_text(), "the gate failed");
        assert_eq!(anthropic.system(), "s");
        assert!(Match::new().last_user_contains("gate").matches(&anthropic));
        assert!(!Match::new().last_user_contains("42").matches(&anthropic));
    }
}
