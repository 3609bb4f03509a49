//! Remote A2A agents as workers: a persona whose `a2a_url` names an outside
//! A2A v1.0 agent has its tasks done by that agent instead of this worker's
//! agent loop. The worker is the agent's client (JSON-RPC binding): it
//! sends the task as a message, follows the remote task to its end, and
//! hands over its artifacts (or its failure) as the task's result, which
//! then meets the task's gates and the manager's review like any other.
//!
//! Durable: sending is a journaled step whose outcome is the remote task's
//! id, so a redelivered assignment (after this worker died) follows the
//! same remote task instead of sending it again. The message carries ids
//! made from the assignment (`swarm-<swarm>-<task>-a<attempt>-r<revision>`
//! as its context, that and `-i<round>` as its message id); a redelivery
//! whose journal lacks the id, because the worker died between the send
//! and the journal's write, first looks for a task of that context on the
//! agent (`ListTasks`) before it sends. A remote task that needs input
//! becomes a question to the swarm's person, and the answer goes back to
//! the same remote task.
//!
//! Which agents a worker may reach is the operator's choice, not the
//! plan's: `--a2a-allow` lists URL prefixes, and a persona naming any other
//! agent fails its tasks, saying so. Credentials are referred to by name;
//! the token is the worker's `SWARM_A2A_CREDENTIAL_<NAME>`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::{Value, json};
use swarm_agent::AgentTask;
use swarm_agent::agent_loop::AgentOutcome;
use swarm_agent::gates::GateChain;
use swarm_agent::tools::ToolError;
use swarm_common::{Envelope, ErrorBody, ErrorCode, GateVerdict, TaskAssignment, TaskStatus};
use tokio::sync::Mutex;
use tracing::info;

use crate::ctx::Ctx;
use crate::{decide, journal, questions};

/// The journal step that sends a message to a remote agent.
const SEND_STEP: &str = "a2a_send";
/// The provider name a remote agent's results carry.
pub const PROVIDER: &str = "a2a";
/// How long one request to a remote agent may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read from a remote agent.
const MAX_ANSWER_BYTES: usize = 8 << 20;

/// Which remote agents this worker may reach, and with which tokens.
#[derive(Debug, Clone, Default)]
pub struct RemoteConfig {
    /// URL prefixes a persona's `a2a_url` must start with.
    pub allow: Vec<String>,
    /// Credential name (upper case) → token.
    pub credentials: HashMap<String, String>,
}

impl RemoteConfig {
    /// The allow-list from `--a2a-allow` (comma-separated prefixes) and
    /// the credentials from the `SWARM_A2A_CREDENTIAL_<NAME>` variables.
    pub fn from_env_and(allow: &str) -> RemoteConfig {
        let credentials = std::env::vars()
            .filter_map(|(k, v)| {
                let name = k.strip_prefix("SWARM_A2A_CREDENTIAL_")?;
                (!name.is_empty() && !v.is_empty()).then(|| (name.to_ascii_uppercase(), v))
            })
            .collect();
        RemoteConfig {
            allow: allow
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
            credentials,
        }
    }

    /// Whether `url` is one this worker may reach: it starts with an
    /// allowed prefix at a boundary (so `https://a.example` does not allow
    /// `https://a.example.evil`).
    pub fn allows(&self, url: &str) -> bool {
        self.allow.iter().any(|prefix| {
            url.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?'])
            })
        })
    }
}

/// The worker's A2A client: one HTTP client, and each agent's JSON-RPC
/// endpoint once its card has been read.
pub struct Remotes {
    config: RemoteConfig,
    http: reqwest::Client,
    endpoints: Mutex<HashMap<String, String>>,
}

impl Remotes {
    /// A client within `config`.
    pub fn new(config: RemoteConfig) -> anyhow::Result<Remotes> {
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("swarm-worker/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("building the A2A client")?;
        Ok(Remotes {
            config,
            http,
            endpoints: Mutex::new(HashMap::new()),
        })
    }
}

/// Why a remote call failed: the agent's own error, or no answer.
type CallResult = Result<Value, String>;

/// One remote agent, as a persona names it.
struct Agent<'a> {
    remotes: &'a Remotes,
    url: String,
    token: Option<String>,
}

impl Agent<'_> {
    /// The agent's JSON-RPC endpoint, from its card.
    async fn endpoint(&self) -> Result<String, String> {
        if let Some(e) = self.remotes.endpoints.lock().await.get(&self.url) {
            return Ok(e.clone());
        }
        let card_url = format!(
            "{}/.well-known/agent-card.json",
            self.url.trim_end_matches('/')
        );
        let card = self.get_json(&card_url).await?;
        let interfaces = card
            .get("supportedInterfaces")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let endpoint = interfaces
            .iter()
            .find(|i| {
                i.get("protocolBinding").and_then(Value::as_str) == Some("JSONRPC")
                    && i.get("protocolVersion")
                        .and_then(Value::as_str)
                        .is_none_or(|v| v.starts_with("1."))
            })
            .and_then(|i| i.get("url").and_then(Value::as_str))
            .ok_or_else(|| {
                format!(
                    "the agent at {} offers no A2A 1.x JSON-RPC interface",
                    self.url
                )
            })?
            .to_owned();
        // The card names where to call: that must be allowed too.
        if !self.remotes.config.allows(&endpoint) {
            return Err(format!(
                "the agent's card sends calls to {endpoint}, which this worker's --a2a-allow does \
                 not allow"
            ));
        }
        self.remotes
            .endpoints
            .lock()
            .await
            .insert(self.url.clone(), endpoint.clone());
        Ok(endpoint)
    }

    async fn read_body(response: reqwest::Response) -> Result<Value, String> {
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| e.to_string())?;
        if bytes.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "answered {} bytes, more than the {MAX_ANSWER_BYTES} read",
                bytes.len()
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "answered {status} with a body that is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            )
        })
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let mut request = self.remotes.http.get(url);
        if let Some(t) = &self.token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.map_err(|e| chain(&e))?;
        if !response.status().is_success() {
            return Err(format!("GET {url} answered {}", response.status()));
        }
        Self::read_body(response).await
    }

    /// A JSON-RPC call: its result, or the agent's error as text.
    async fn call(&self, method: &str, params: Value) -> CallResult {
        let endpoint = self.endpoint().await?;
        let mut request = self
            .remotes
            .http
            .post(&endpoint)
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}));
        if let Some(t) = &self.token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.map_err(|e| chain(&e))?;
        let body = Self::read_body(response).await?;
        if let Some(error) = body.get("error") {
            return Err(format!(
                "{method}: {} ({})",
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("an error"),
                error.get("code").map(Value::to_string).unwrap_or_default()
            ));
        }
        body.get("result")
            .cloned()
            .ok_or_else(|| format!("{method}: the answer has no result"))
    }
}

/// An error and its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// The text of a message's (or an artifact's) parts: text as it is, data
/// as JSON, a file named by its URL.
fn parts_text(parts: Option<&Value>) -> String {
    parts
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        Some(t.to_owned())
                    } else if let Some(d) = p.get("data") {
                        Some(d.to_string())
                    } else {
                        p.get("url").and_then(Value::as_str).map(str::to_owned)
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Where a remote task that is no longer at work stands.
#[derive(Debug, PartialEq)]
enum Remote {
    /// Done: its artifacts' text.
    Completed(String),
    /// It needs a person: the question.
    Input(String),
    /// It ended without a result: why.
    Failed(String),
}

/// Reads a task's state from its `Task` object (`None`: still at work).
fn state_of(task: &Value) -> Option<Remote> {
    let status = task.get("status");
    let state = status
        .and_then(|s| s.get("state"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let said = parts_text(
        status
            .and_then(|s| s.get("message"))
            .and_then(|m| m.get("parts")),
    );
    Some(match state {
        "TASK_STATE_COMPLETED" => {
            let artifacts: Vec<String> = task
                .get("artifacts")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|a| parts_text(a.get("parts"))).collect())
                .unwrap_or_default();
            let text = artifacts
                .into_iter()
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join("\n\n");
            Remote::Completed(if text.is_empty() { said } else { text })
        }
        "TASK_STATE_INPUT_REQUIRED" => Remote::Input(if said.is_empty() {
            "the remote agent needs more input".to_owned()
        } else {
            said
        }),
        "TASK_STATE_FAILED"
        | "TASK_STATE_REJECTED"
        | "TASK_STATE_CANCELED"
        | "TASK_STATE_AUTH_REQUIRED" => Remote::Failed(format!(
            "the remote agent's task ended {}{}",
            state.trim_start_matches("TASK_STATE_"),
            if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            }
        )),
        _ => return None,
    })
}

/// What [`run_rounds`] hands back: as the agent loop's run would.
pub(crate) struct RemoteRun {
    pub(crate) outcome: AgentOutcome,
    pub(crate) gate_verdicts: Vec<GateVerdict>,
}

fn outcome(
    status: TaskStatus,
    result: String,
    error: Option<ErrorBody>,
    sent: u32,
) -> AgentOutcome {
    AgentOutcome {
        status,
        result,
        steps: Vec::new(),
        metrics: [("a2a_messages".to_owned(), f64::from(sent))].into(),
        error,
        provider: PROVIDER.to_owned(),
    }
}

fn failed(reason: String, sent: u32) -> RemoteRun {
    RemoteRun {
        outcome: outcome(
            TaskStatus::Failed,
            String::new(),
            Some(ErrorBody::new(ErrorCode::ToolFailed, reason)),
            sent,
        ),
        gate_verdicts: Vec::new(),
    }
}

/// Does `env`'s task through the remote agent its persona names, through
/// as many rounds as the agent asks for input. `Err` leaves the task to be
/// redelivered (the broker failed); every end of the remote task is a
/// result.
pub(crate) async fn run_rounds(
    ctx: &Ctx,
    env: &Envelope<TaskAssignment>,
    task: &AgentTask,
    delivered: i64,
) -> anyhow::Result<RemoteRun> {
    let a = &env.body;
    let Some(url) = a.persona.a2a_url.clone() else {
        return Ok(failed("the persona names no remote agent".into(), 0));
    };
    if !ctx.remotes.config.allows(&url) {
        return Ok(failed(
            format!(
                "the persona {:?} names the A2A agent {url}, which this worker may not reach \
                 (its --a2a-allow does not list it)",
                a.persona.name
            ),
            0,
        ));
    }
    let token = match &a.persona.a2a_credential {
        None => None,
        Some(name) => match ctx
            .remotes
            .config
            .credentials
            .get(&name.to_ascii_uppercase())
        {
            Some(t) => Some(t.clone()),
            None => {
                return Ok(failed(
                    format!(
                        "the persona {:?} needs the credential {name:?}, which this worker does \
                         not hold (SWARM_A2A_CREDENTIAL_{})",
                        a.persona.name,
                        name.to_ascii_uppercase()
                    ),
                    0,
                ));
            }
        },
    };
    let agent = Agent {
        remotes: &ctx.remotes,
        url: url.clone(),
        token,
    };
    let context_id = format!(
        "swarm-{}-{}-a{}-r{}",
        env.swarm_id, a.task_id, a.attempt, a.revision
    );
    let mut text = swarm_agent::render_task_message(task);
    let mut remote_id: Option<String> = None;
    let mut round = 0u32;
    loop {
        let journal = journal::Journal::open(
            ctx.journal.clone(),
            &env.swarm_id,
            &a.task_id,
            a.attempt,
            a.revision,
            round,
            decide::replays_journal(delivered, round),
        )
        .await
        .context("opening the step journal")?;
        let message_id = format!("{context_id}-i{round}");
        let arguments = json!({"url": url, "messageId": message_id});
        let send = async {
            // An earlier delivery may have sent it and died before the
            // journal heard back: look for its task first.
            if delivered > 1 && round == 0 {
                let found = agent
                    .call("ListTasks", json!({"contextId": context_id, "pageSize": 1}))
                    .await
                    .ok()
                    .and_then(|r| {
                        r.get("tasks")?
                            .as_array()?
                            .first()?
                            .get("id")?
                            .as_str()
                            .map(str::to_owned)
                    });
                if let Some(id) = found {
                    info!(swarm_id = %env.swarm_id, task_id = %a.task_id, remote = %id, "found the remote task an earlier delivery sent");
                    return Ok::<_, ToolError>(Ok(id));
                }
            }
            let mut message = json!({
                "messageId": message_id,
                "contextId": context_id,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            });
            if let Some(id) = &remote_id {
                message["taskId"] = json!(id);
            }
            let sent = agent
                .call(
                    "SendMessage",
                    json!({"message": message, "configuration": {"returnImmediately": true}}),
                )
                .await;
            Ok(match sent {
                Ok(result) => match result
                    .get("task")
                    .and_then(|t| t.get("id"))
                    .and_then(Value::as_str)
                {
                    Some(id) => Ok(id.to_owned()),
                    // An agent that answers with a message has no task to follow.
                    None => match result.get("message") {
                        Some(m) => Ok(format!("message:{}", parts_text(m.get("parts")))),
                        None => Err(ToolError::Failed(
                            "SendMessage answered neither a task nor a message".into(),
                        )),
                    },
                },
                Err(e) => Err(ToolError::Failed(e)),
            })
        };
        let sent = journal::with_journal(
            journal.clone(),
            journal::journaled(SEND_STEP, arguments, send),
        )
        .await;
        let id = match sent {
            Ok(id) => id,
            Err(e) => {
                return Ok(failed(format!("the A2A agent {url}: {e}"), round + 1));
            }
        };
        let state = match id.strip_prefix("message:") {
            Some(reply) => Remote::Completed(reply.to_owned()),
            None => {
                info!(swarm_id = %env.swarm_id, task_id = %a.task_id, remote = %id, round, "following the remote task");
                remote_id = Some(id.clone());
                follow(&agent, &id).await
            }
        };
        match state {
            Remote::Completed(result) => return Ok(judge(ctx, a, result, round + 1).await),
            Remote::Failed(reason) => return Ok(failed(format!("{url}: {reason}"), round + 1)),
            Remote::Input(question) => {
                let answer = questions::ask(ctx, env, &question).await?;
                info!(swarm_id = %env.swarm_id, task_id = %a.task_id, "the remote agent's question answered; sending it on");
                text = answer;
                round += 1;
            }
        }
    }
}

/// Follows remote task `id` until it ends or asks for input; a failing
/// read is tried again (the task's time limit bounds the whole).
async fn follow(agent: &Agent<'_>, id: &str) -> Remote {
    let mut wait = Duration::from_millis(100);
    let mut failures = 0;
    loop {
        match agent
            .call("GetTask", json!({"id": id, "historyLength": 0}))
            .await
        {
            Ok(task) => {
                failures = 0;
                if let Some(state) = state_of(&task) {
                    return state;
                }
            }
            Err(e) => {
                failures += 1;
                if failures >= 10 {
                    return Remote::Failed(format!("reading the task failed ten times: {e}"));
                }
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(2));
    }
}

/// The task's gates on the remote agent's result: passed, it is the
/// result; failed, the task fails saying which gate and why (a remote
/// agent is not asked to correct itself; the manager may ask a revision).
async fn judge(ctx: &Ctx, a: &TaskAssignment, result: String, sent: u32) -> RemoteRun {
    let chain = GateChain::from_specs(&a.gates, &ctx.gate_options);
    let mut verdicts = Vec::new();
    let mut failures = Vec::new();
    for (gate, check) in chain.check(&result).await {
        if !check.passed {
            failures.push(format!("{gate}: {}", check.reason));
        }
        verdicts.push(GateVerdict {
            gate,
            passed: check.passed,
            reason: check.reason,
            revision: a.revision,
        });
    }
    let run = if failures.is_empty() {
        outcome(TaskStatus::Completed, result, None, sent)
    } else {
        outcome(
            TaskStatus::Failed,
            String::new(),
            Some(ErrorBody::new(
                ErrorCode::ValidationFailed,
                format!(
                    "the remote agent's result failed its gates: {}",
                    failures.join("; ")
                ),
            )),
            sent,
        )
    };
    RemoteRun {
        outcome: run,
        gate_verdicts: verdicts,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_allowed_prefixes_are_reached() {
        let c = RemoteConfig {
            allow: vec![
                "https://agents.example.com".into(),
                "http://127.0.0.1:9/a2a/".into(),
            ],
            credentials: HashMap::new(),
        };
        assert!(c.allows("https://agents.example.com"));
        assert!(c.allows("https://agents.example.com/x"));
        assert!(!c.allows("https://agents.example.com.evil.net"));
        assert!(!c.allows("https://agents.example.co"));
        assert!(c.allows("http://127.0.0.1:9/a2a/writer"));
        assert!(!c.allows("http://127.0.0.1:9/"));
        assert!(!RemoteConfig::default().allows("https://agents.example.com"));
    }

    #[test]
    fn a_task_object_says_where_the_remote_task_stands() {
        let done = json!({"id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"parts": [{"text": "forty-two"}]}, {"parts": [{"data": {"n": 42}}]}]});
        assert_eq!(
            state_of(&done),
            Some(Remote::Completed("forty-two\n\n{\"n\":42}".into()))
        );
        let asks = json!({"status": {"state": "TASK_STATE_INPUT_REQUIRED",
            "message": {"parts": [{"text": "Which colour?"}]}}});
        assert_eq!(state_of(&asks), Some(Remote::Input("Which colour?".into())));
        let failed = json!({"status": {"state": "TASK_STATE_FAILED",
            "message": {"parts": [{"text": "out of paint"}]}}});
        assert_eq!(
            state_of(&failed),
            Some(Remote::Failed(
                "the remote agent's task ended FAILED: out of paint".into()
            ))
        );
        assert_eq!(
            state_of(&json!({"status": {"state": "TASK_STATE_WORKING"}})),
            None
        );
        assert_eq!(state_of(&json!({})), None);
    }
}
