//! MCP servers as tool sources: each server the operator names (a child
//! process over stdio, or a streamable HTTP endpoint) is started when the
//! worker starts, its tools are listed and offered as
//! `mcp__<server>__<tool>` beside the built-ins, and a call is sent to it
//! with a time limit.
//!
//! The server's annotations decide how a call is treated, read the way the
//! MCP specification defines their defaults: a tool not marked
//! `readOnlyHint` changes something, so its results are journaled (a replay
//! does not call it twice); one whose `destructiveHint` is true or absent
//! (the specification's default for a tool that is not read-only) waits for
//! a person's approval, like the shell. `isError` is a failed call with the
//! tool's text as the reason.
//!
//! A server that stops (its process died, its connection closed) is started
//! again with exponential backoff by its supervisor; calls meanwhile wait
//! for it up to their time limit. The tools are those listed at startup: a
//! restarted server is not listed again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable as _};
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _};
use serde::Deserialize;
use serde_json::Value;
use swarm_agent::tools::{Tool, ToolAnnotations, ToolError, ToolSpec};
use tokio::sync::watch;
use tracing::{info, warn};

/// The longest name a model API accepts for a tool (OpenAI's and
/// Anthropic's limit), and what every exposed name is cut to.
pub const MAX_TOOL_NAME: usize = 64;
/// The most tools taken from one server; more are left out with a warning.
pub const MAX_TOOLS_PER_SERVER: usize = 256;
/// The longest description kept of a server's tool, in bytes.
const MAX_DESCRIPTION: usize = 4096;
/// The largest input schema accepted of a server's tool, in bytes of JSON.
const MAX_SCHEMA: usize = 64 * 1024;
/// The most text a call's result gives the agent, in bytes.
pub const MAX_OUTPUT: usize = 256 * 1024;
/// The longest line of a server's stderr that is logged, in bytes.
const MAX_STDERR_LINE: usize = 2048;
/// What a stdio server inherits of the worker's environment: enough to run
/// (the MCP SDKs pass the same), never the worker's credentials.
const PASSED_ENV: &[&str] = &[
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR",
];

/// How a worker reaches one MCP server.
#[derive(Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Environment it gets beside [`PASSED_ENV`].
        env: BTreeMap<String, String>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint's URL.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
        /// A bearer token (`SWARM_MCP_TOKEN_<NAME>`).
        token: Option<String>,
    },
}

impl std::fmt::Debug for McpTransport {
    // Header values and tokens are secrets: their names only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            McpTransport::Stdio { command, args, env } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
            McpTransport::Http {
                url,
                headers,
                token,
            } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .field("token", &token.as_ref().map(|_| "…"))
                .finish(),
        }
    }
}

/// One MCP server a worker takes tools from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name: the `<server>` of `mcp__<server>__<tool>`.
    pub name: String,
    /// How it is reached.
    pub transport: McpTransport,
}

/// The MCP servers of a worker and its limits on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// The servers, in the order given.
    pub servers: Vec<McpServerConfig>,
    /// How long one call may take before it fails.
    pub call_timeout: Duration,
    /// How long a server may take to start and answer `initialize`.
    pub start_timeout: Duration,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            servers: Vec::new(),
            call_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(30),
        }
    }
}

/// A config file in the shape MCP clients share (Claude Desktop's
/// `mcpServers`, or VS Code's `servers`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default, rename = "mcpServers", alias = "servers")]
    servers: BTreeMap<String, FileServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    disabled: bool,
}

impl McpConfig {
    /// The servers of `--mcp-server NAME=COMMAND ARGS...` flags (the command
    /// line split as a shell would), `--mcp-url NAME=URL` flags and a
    /// config file, checked: names of letters, digits, `-` and `_` without
    /// `__`, each used once. A URL server's token is read from
    /// `SWARM_MCP_TOKEN_<NAME>` by `token`.
    pub fn parse(
        commands: &[String],
        urls: &[String],
        file: Option<&Path>,
        token: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<McpConfig> {
        let mut servers = Vec::new();
        for flag in commands.iter().filter(|f| !f.trim().is_empty()) {
            let (name, line) = split_flag(flag, "--mcp-server", "NAME=COMMAND ARGS...")?;
            let mut words = shlex::split(line)
                .with_context(|| format!("--mcp-server {name}: unbalanced quotes in {line:?}"))?
                .into_iter();
            let Some(command) = words.next() else {
                bail!("--mcp-server {name}: no command after '='");
            };
            servers.push(McpServerConfig {
                name: name.to_owned(),
                transport: McpTransport::Stdio {
                    command,
                    args: words.collect(),
                    env: BTreeMap::new(),
                },
            });
        }
        for flag in urls.iter().filter(|f| !f.trim().is_empty()) {
            let (name, url) = split_flag(flag, "--mcp-url", "NAME=URL")?;
            servers.push(McpServerConfig {
                name: name.to_owned(),
                transport: McpTransport::Http {
                    url: url.trim().to_owned(),
                    headers: BTreeMap::new(),
                    token: token(name),
                },
            });
        }
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the MCP config {}", path.display()))?;
            let parsed: ConfigFile = serde_json::from_str(&text)
                .with_context(|| format!("the MCP config {}", path.display()))?;
            for (name, s) in parsed.servers {
                if s.disabled {
                    continue;
                }
                let transport = match (s.command, s.url) {
                    (Some(command), None) => McpTransport::Stdio {
                        command,
                        args: s.args,
                        env: s.env,
                    },
                    (None, Some(url)) => McpTransport::Http {
                        url,
                        headers: s.headers,
                        token: token(&name),
                    },
                    _ => bail!(
                        "the MCP config {}: server {name:?} needs either \"command\" or \"url\"",
                        path.display()
                    ),
                };
                if let Some(kind) = &s.kind {
                    let fits = match &transport {
                        McpTransport::Stdio { .. } => kind == "stdio",
                        McpTransport::Http { .. } => kind == "http" || kind == "streamable-http",
                    };
                    anyhow::ensure!(
                        fits,
                        "the MCP config {}: server {name:?} has type {kind:?}, which does not fit its {}",
                        path.display(),
                        if kind == "sse" {
                            "URL (the old SSE transport is not supported; use streamable HTTP)"
                        } else {
                            "fields"
                        }
                    );
                }
                servers.push(McpServerConfig { name, transport });
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for s in &servers {
            check_name(&s.name)?;
            anyhow::ensure!(
                seen.insert(s.name.clone()),
                "the MCP server name {:?} is used twice",
                s.name
            );
            if let McpTransport::Http { url, .. } = &s.transport {
                anyhow::ensure!(
                    url.starts_with("http://") || url.starts_with("https://"),
                    "the MCP server {}: {url:?} is not an http(s) URL",
                    s.name
                );
            }
        }
        Ok(McpConfig {
            servers,
            ..McpConfig::default()
        })
    }
}

fn split_flag<'a>(flag: &'a str, what: &str, form: &str) -> anyhow::Result<(&'a str, &'a str)> {
    let Some((name, rest)) = flag.split_once('=') else {
        bail!("{what} {flag:?} is not {form}");
    };
    Ok((name.trim(), rest))
}

fn check_name(name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !name.is_empty()
            && name.len() <= 32
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !name.contains("__"),
        "the MCP server name {name:?} must be 1 to 32 letters, digits, '-' or '_', without '__'"
    );
    Ok(())
}

/// The environment variable holding the token of the MCP server `name`.
pub fn token_var(name: &str) -> String {
    format!(
        "SWARM_MCP_TOKEN_{}",
        name.to_ascii_uppercase().replace('-', "_")
    )
}

/// The name a model calls `tool` of `server` by: `mcp__<server>__<tool>`,
/// with characters model APIs refuse turned into `_`, and a name longer
/// than [`MAX_TOOL_NAME`] cut and ended with a hash of the whole, so two
/// long names stay apart.
pub fn exposed_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("mcp__{server}__{clean}");
    if name.len() <= MAX_TOOL_NAME {
        return name;
    }
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{server}\0{tool}").as_bytes());
    let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}_{hash}", &name[..MAX_TOOL_NAME - 9])
}

/// Our annotations of an MCP tool's, with the specification's defaults: not
/// read-only, destructive, not idempotent.
pub fn annotations_of(hints: Option<&rmcp::model::ToolAnnotations>) -> ToolAnnotations {
    let read_only = hints.and_then(|h| h.read_only_hint).unwrap_or(false);
    if read_only {
        return ToolAnnotations::READ_ONLY;
    }
    ToolAnnotations {
        read_only: false,
        destructive: hints.and_then(|h| h.destructive_hint).unwrap_or(true),
        idempotent: hints.and_then(|h| h.idempotent_hint).unwrap_or(false),
    }
}

/// What a model is told of an MCP tool, or why it is left out.
fn spec_of(server: &str, tool: &rmcp::model::Tool) -> Result<ToolSpec, String> {
    let name = exposed_name(server, &tool.name);
    let mut parameters = Value::Object((*tool.input_schema).clone());
    if serde_json::to_vec(&parameters).map_or(0, |b| b.len()) > MAX_SCHEMA {
        return Err(format!("its input schema is over {MAX_SCHEMA} bytes"));
    }
    // Model APIs want an object schema with properties; MCP requires the
    // first and servers often leave the second out.
    if let Value::Object(schema) = &mut parameters {
        schema
            .entry("type")
            .or_insert_with(|| Value::String("object".into()));
        schema
            .entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    let mut description = tool
        .description
        .as_deref()
        .map(str::to_owned)
        .or_else(|| tool.title.clone())
        .unwrap_or_else(|| format!("{} (from the MCP server {server})", tool.name));
    truncate(&mut description, MAX_DESCRIPTION);
    Ok(ToolSpec {
        name,
        description,
        parameters,
        annotations: annotations_of(tool.annotations.as_ref()),
    })
}

fn truncate(text: &mut String, max: usize) -> usize {
    if text.len() <= max {
        return 0;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let dropped = text.len() - cut;
    text.truncate(cut);
    dropped
}

/// A call's result as the agent sees it: its text (or its structured
/// content when it has no text), or the tool's error.
pub fn outcome(result: &rmcp::model::CallToolResult) -> Result<String, ToolError> {
    // Read as the wire's JSON: the content kinds are the protocol's, not
    // the SDK's types, which grow with each version of the specification.
    let value = serde_json::to_value(result).unwrap_or(Value::Null);
    let mut parts: Vec<String> = Vec::new();
    for block in value["content"].as_array().into_iter().flatten() {
        let part = match block["type"].as_str() {
            Some("text") => block["text"].as_str().unwrap_or_default().to_owned(),
            Some(kind @ ("image" | "audio")) => format!(
                "[{kind}: {}, {} bytes of base64]",
                block["mimeType"].as_str().unwrap_or("unknown type"),
                block["data"].as_str().map_or(0, str::len)
            ),
            Some("resource") => match block["resource"]["text"].as_str() {
                Some(text) => text.to_owned(),
                None => format!(
                    "[resource {}]",
                    block["resource"]["uri"].as_str().unwrap_or("?")
                ),
            },
            Some("resource_link") => {
                format!("[resource link {}]", block["uri"].as_str().unwrap_or("?"))
            }
            _ => continue,
        };
        parts.push(part);
    }
    let mut text = parts.join("\n");
    if text.is_empty()
        && let Some(structured) = value.get("structuredContent").filter(|v| !v.is_null())
    {
        text = structured.to_string();
    }
    let dropped = truncate(&mut text, MAX_OUTPUT);
    if dropped > 0 {
        text.push_str(&format!("\n… ({dropped} bytes more not shown)"));
    }
    if result.is_error == Some(true) {
        if text.is_empty() {
            text = "the tool reported an error and gave no reason".into();
        }
        return Err(ToolError::Failed(text));
    }
    Ok(text)
}

/// A running MCP server: its current connection (none while it restarts),
/// kept by its supervisor.
pub struct McpServer {
    config: McpServerConfig,
    call_timeout: Duration,
    start_timeout: Duration,
    root: PathBuf,
    /// The live connection and its generation (restarts so far).
    peer: watch::Sender<Option<(u64, Peer<RoleClient>)>>,
    /// Why the last start failed, for a call that finds the server down.
    last_error: std::sync::Mutex<String>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.config.name)
            .finish()
    }
}

/// The MCP servers of a worker, started, with their tools; dropping it
/// stops the supervisors and so the servers.
#[derive(Default)]
pub struct McpServers {
    /// The tools of every server, named `mcp__<server>__<tool>`.
    pub tools: Vec<Arc<dyn Tool>>,
    servers: Vec<Arc<McpServer>>,
    supervisors: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for McpServers {
    fn drop(&mut self) {
        for s in &self.supervisors {
            s.abort();
        }
    }
}

impl McpServers {
    /// Starts every server of `config` (child processes work in `root`) and
    /// lists their tools. A server that cannot be started or listed fails
    /// the worker's start with the reason: a worker is not offered without
    /// the tools it was configured with.
    pub async fn start(config: &McpConfig, root: &Path) -> anyhow::Result<McpServers> {
        let mut out = McpServers::default();
        let mut names = std::collections::BTreeSet::new();
        for server_config in &config.servers {
            let name = server_config.name.clone();
            let server = Arc::new(McpServer {
                config: server_config.clone(),
                call_timeout: config.call_timeout,
                start_timeout: config.start_timeout,
                root: root.to_path_buf(),
                peer: watch::Sender::new(None),
                last_error: std::sync::Mutex::new(String::new()),
            });
            let service = server
                .connect()
                .await
                .with_context(|| format!("starting the MCP server {name}"))?;
            let listed = tokio::time::timeout(config.start_timeout, service.list_all_tools())
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "it did not list its tools within {:?}",
                        config.start_timeout
                    )
                })
                .and_then(|r| r.map_err(anyhow::Error::from))
                .with_context(|| format!("listing the tools of the MCP server {name}"))?;
            let total = listed.len();
            for tool in listed.into_iter().take(MAX_TOOLS_PER_SERVER) {
                match spec_of(&name, &tool) {
                    Ok(spec) if names.insert(spec.name.clone()) => {
                        out.tools.push(Arc::new(McpTool {
                            server: server.clone(),
                            remote_name: tool.name.to_string(),
                            spec,
                        }))
                    }
                    Ok(spec) => {
                        warn!(server = %name, tool = %tool.name, exposed = %spec.name, "left out: another tool has the same name")
                    }
                    Err(why) => warn!(server = %name, tool = %tool.name, %why, "left out"),
                }
            }
            if total > MAX_TOOLS_PER_SERVER {
                warn!(server = %name, total, kept = MAX_TOOLS_PER_SERVER, "the MCP server lists more tools than are taken");
            }
            info!(server = %name, tools = total.min(MAX_TOOLS_PER_SERVER), "MCP server ready");
            server.peer.send_replace(Some((1, service.peer().clone())));
            out.supervisors
                .push(tokio::spawn(server.clone().supervise(service)));
            out.servers.push(server);
        }
        Ok(out)
    }
}

impl McpServer {
    /// Starts the server (or opens its connection) and runs the MCP
    /// handshake, within the start timeout.
    async fn connect(&self) -> anyhow::Result<RunningService<RoleClient, ()>> {
        let name = &self.config.name;
        let started = match &self.config.transport {
            McpTransport::Stdio { command, args, env } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).current_dir(&self.root).env_clear();
                for var in PASSED_ENV {
                    if let Some(value) = std::env::var_os(var) {
                        cmd.env(var, value);
                    }
                }
                cmd.envs(env);
                let (transport, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .with_context(|| format!("running {command:?}"))?;
                let pid = transport.id();
                if let Some(stderr) = stderr {
                    tokio::spawn(log_stderr(name.clone(), stderr));
                }
                info!(server = %name, ?pid, %command, "MCP server process started");
                tokio::time::timeout(self.start_timeout, ().serve(transport)).await
            }
            McpTransport::Http {
                url,
                headers,
                token,
            } => {
                let mut custom = HashMap::new();
                for (k, v) in headers {
                    let k = reqwest013::header::HeaderName::from_bytes(k.as_bytes())
                        .with_context(|| format!("header name {k:?}"))?;
                    let v = reqwest013::header::HeaderValue::from_str(v)
                        .with_context(|| format!("the value of header {k}"))?;
                    custom.insert(k, v);
                }
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                if let Some(token) = token {
                    config = config.auth_header(token.clone());
                }
                let transport = StreamableHttpClientTransport::with_client(http_client()?, config);
                tokio::time::timeout(self.start_timeout, ().serve(transport)).await
            }
        };
        let service = started
            .map_err(|_| {
                anyhow::anyhow!("no answer to initialize within {:?}", self.start_timeout)
            })?
            .context("the MCP handshake")?;
        Ok(service)
    }

    /// Restarts the server whenever its connection ends, with exponential
    /// backoff between failed starts (0.5 s doubling to 30 s, jittered).
    async fn supervise(self: Arc<Self>, first: RunningService<RoleClient, ()>) {
        let name = self.config.name.clone();
        let mut service = first;
        let mut generation = 1;
        loop {
            let reason = service.waiting().await;
            self.peer.send_replace(None);
            warn!(server = %name, ?reason, "the MCP server stopped; starting it again");
            let backoff = ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(30))
                .with_jitter()
                .without_max_times();
            let started = (|| self.connect())
                .retry(backoff)
                .notify(|e, wait| {
                    let why = format!("{e:#}");
                    warn!(server = %name, error = %why, ?wait, "the MCP server did not start");
                    if let Ok(mut last) = self.last_error.lock() {
                        *last = why;
                    }
                })
                .await;
            match started {
                Ok(s) => {
                    generation += 1;
                    info!(server = %name, generation, "MCP server started again");
                    self.peer.send_replace(Some((generation, s.peer().clone())));
                    service = s;
                }
                Err(e) => {
                    // Unreachable with no limit on tries; kept as an end.
                    warn!(server = %name, error = %format!("{e:#}"), "giving up on the MCP server");
                    return;
                }
            }
        }
    }

    /// The live connection, waiting for a restart until `deadline`; one of
    /// a generation after `after`, when the last one failed under a call.
    async fn live(
        &self,
        deadline: tokio::time::Instant,
        after: u64,
    ) -> Result<(u64, Peer<RoleClient>), ToolError> {
        let mut rx = self.peer.subscribe();
        let found = tokio::time::timeout_at(
            deadline,
            rx.wait_for(|p| p.as_ref().is_some_and(|(g, _)| *g > after)),
        )
        .await;
        if let Ok(Ok(p)) = &found
            && let Some(live) = p.as_ref()
        {
            return Ok(live.clone());
        }
        drop(found);
        let last = self
            .last_error
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        Err(ToolError::Failed(format!(
            "the MCP server {} is not running and did not start again within {:?}{}",
            self.config.name,
            self.call_timeout,
            if last.is_empty() {
                String::new()
            } else {
                format!(": {last}")
            }
        )))
    }

    /// Calls `tool` with `arguments` within the call timeout. A read-only
    /// tool whose server went away under the call is called once more on
    /// the restarted server; any other is not (it may have done its work).
    async fn call(
        &self,
        exposed: &str,
        tool: &str,
        arguments: Value,
        read_only: bool,
    ) -> Result<String, ToolError> {
        let arguments = match arguments {
            Value::Null => serde_json::Map::new(),
            Value::Object(map) => map,
            other => {
                return Err(ToolError::InvalidArguments(format!(
                    "{exposed}: the arguments must be an object, not {other}"
                )));
            }
        };
        let deadline = tokio::time::Instant::now() + self.call_timeout;
        let mut after = 0;
        loop {
            let (generation, peer) = self.live(deadline, after).await?;
            let params = rmcp::model::CallToolRequestParams::new(tool.to_owned())
                .with_arguments(arguments.clone());
            let answer = tokio::time::timeout_at(deadline, peer.call_tool(params)).await;
            return match answer {
                Err(_) => Err(ToolError::Failed(format!(
                    "{exposed} gave no answer within {:?}",
                    self.call_timeout
                ))),
                Ok(Ok(result)) => outcome(&result),
                Ok(Err(ServiceError::McpError(e))) => {
                    let message = e.message.to_string();
                    if e.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                        Err(ToolError::InvalidArguments(format!("{exposed}: {message}")))
                    } else {
                        Err(ToolError::Failed(format!(
                            "{exposed}: the MCP server answered error {}: {message}",
                            e.code.0
                        )))
                    }
                }
                Ok(Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_)))) => {
                    if read_only && after == 0 {
                        after = generation;
                        continue;
                    }
                    Err(ToolError::Failed(format!(
                        "the MCP server {} went away during the call of {exposed} ({e}); it may or may not have done it",
                        self.config.name
                    )))
                }
                Ok(Err(e)) => Err(ToolError::Failed(format!("{exposed}: {e}"))),
            };
        }
    }
}

/// The HTTP client of streamable HTTP servers, with the ring provider
/// (the one the rest of the workspace's TLS uses).
fn http_client() -> anyhow::Result<reqwest013::Client> {
    // Installing twice is refused and harmless: the first one stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest013::Client::builder()
        .build()
        .context("building the MCP HTTP client")
}

/// Logs a server's stderr line by line, each cut to [`MAX_STDERR_LINE`].
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use futures::StreamExt as _;
    let codec = tokio_util::codec::LinesCodec::new_with_max_length(MAX_STDERR_LINE);
    let mut lines = tokio_util::codec::FramedRead::new(stderr, codec);
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) => info!(server = %server, "mcp stderr: {line}"),
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {
                info!(server = %server, "mcp stderr: (a line over {MAX_STDERR_LINE} bytes)")
            }
            Err(_) => break,
        }
    }
}

/// One tool of an MCP server, as the worker offers it.
struct McpTool {
    server: Arc<McpServer>,
    /// Its name on the server.
    remote_name: String,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, arguments: Value) -> Result<String, ToolError> {
        self.server
            .call(
                &self.spec.name,
                &self.remote_name,
                arguments,
                self.spec.annotations.read_only,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_token(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn flags_and_files_make_servers() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp.json");
        std::fs::write(
            &file,
            r#"{"mcpServers": {
                "files": {"command": "npx", "args": ["-y", "fs-server", "/data"], "env": {"A": "1"}},
                "docs": {"type": "http", "url": "https://docs.example/mcp", "headers": {"X-Key": "k"}},
                "off": {"command": "nothing", "disabled": true}
            }}"#,
        )
        .unwrap();
        let config = McpConfig::parse(
            &["time=python3 -m mcp_server_time --local-timezone 'Europe/Paris'".into()],
            &["search=http://127.0.0.1:9/mcp".into()],
            Some(&file),
            |name| (name == "docs").then(|| "secret".to_string()),
        )
        .unwrap();
        let names: Vec<_> = config.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["time", "search", "docs", "files"]);
        assert_eq!(
            config.servers[0].transport,
            McpTransport::Stdio {
                command: "python3".into(),
                args: vec![
                    "-m".into(),
                    "mcp_server_time".into(),
                    "--local-timezone".into(),
                    "Europe/Paris".into()
                ],
                env: BTreeMap::new(),
            }
        );
        let McpTransport::Http { token, headers, .. } = &config.servers[2].transport else {
            panic!("docs is an HTTP server");
        };
        assert_eq!(token.as_deref(), Some("secret"));
        assert_eq!(headers["X-Key"], "k");
        let shown = format!("{:?}", config.servers[2]);
        assert!(
            !shown.contains("secret") && !shown.contains("\"k\""),
            "{shown}"
        );
        assert_eq!(token_var("my-docs"), "SWARM_MCP_TOKEN_MY_DOCS");
    }

    #[test]
    fn bad_configs_are_refused_with_the_reason() {
        let refused = |commands: &[&str], urls: &[&str]| {
            let commands: Vec<String> = commands.iter().map(|s| s.to_string()).collect();
            let urls: Vec<String> = urls.iter().map(|s| s.to_string()).collect();
            format!(
                "{:#}",
                McpConfig::parse(&commands, &urls, None, no_token).unwrap_err()
            )
        };
        assert!(refused(&["time"], &[]).contains("NAME=COMMAND"));
        assert!(refused(&["time="], &[]).contains("no command"));
        assert!(refused(&["time=echo 'open"], &[]).contains("quotes"));
        assert!(refused(&["a__b=echo"], &[]).contains("without '__'"));
        assert!(refused(&["a.b=echo"], &[]).contains("letters"));
        assert!(refused(&["t=echo", "t=cat"], &[]).contains("used twice"));
        assert!(refused(&[], &["d=ftp://x"]).contains("not an http"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp.json");
        std::fs::write(&file, r#"{"mcpServers": {"x": {"comand": "a"}}}"#).unwrap();
        let e = McpConfig::parse(&[], &[], Some(&file), no_token).unwrap_err();
        assert!(format!("{e:#}").contains("comand"), "{e:#}");
        std::fs::write(
            &file,
            r#"{"mcpServers": {"x": {"type": "sse", "url": "http://a/sse"}}}"#,
        )
        .unwrap();
        let e = McpConfig::parse(&[], &[], Some(&file), no_token).unwrap_err();
        assert!(format!("{e:#}").contains("SSE transport"), "{e:#}");
    }

    #[test]
    fn exposed_names_are_what_model_apis_accept() {
        assert_eq!(
            exposed_name("time", "get_current_time"),
            "mcp__time__get_current_time"
        );
        assert_eq!(exposed_name("fs", "read.file/v2"), "mcp__fs__read_file_v2");
        let long_a = exposed_name("server", &"a".repeat(80));
        let long_b = exposed_name("server", &format!("{}b", "a".repeat(79)));
        assert_eq!(long_a.len(), MAX_TOOL_NAME);
        assert_ne!(long_a, long_b);
        for name in [long_a, long_b] {
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{name}"
            );
        }
    }

    #[test]
    fn annotations_follow_the_specifications_defaults() {
        use rmcp::model::ToolAnnotations as Hints;
        assert_eq!(
            annotations_of(None),
            ToolAnnotations {
                read_only: false,
                destructive: true,
                idempotent: false
            }
        );
        let read_only = Hints::new().read_only(true);
        assert_eq!(annotations_of(Some(&read_only)), ToolAnnotations::READ_ONLY);
        let additive = Hints::new().read_only(false).destructive(false);
        let mapped = annotations_of(Some(&additive));
        assert!(!mapped.read_only && !mapped.destructive && !mapped.idempotent);
    }

    #[test]
    fn results_become_text_or_the_tools_error() {
        let result: rmcp::model::CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": "12:00"}, {"type": "image", "data": "aGk=", "mimeType": "image/png"}],
        }))
        .unwrap();
        assert_eq!(
            outcome(&result).unwrap(),
            "12:00\n[image: image/png, 4 bytes of base64]"
        );
        let structured: rmcp::model::CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [], "structuredContent": {"hour": 12}
        }))
        .unwrap();
        assert_eq!(outcome(&structured).unwrap(), r#"{"hour":12}"#);
        let failed: rmcp::model::CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": "no such zone"}], "isError": true
        }))
        .unwrap();
        assert_eq!(
            outcome(&failed).unwrap_err(),
            ToolError::Failed("no such zone".into())
        );
        let big: rmcp::model::CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": "é".repeat(MAX_OUTPUT)}]
        }))
        .unwrap();
        let text = outcome(&big).unwrap();
        assert!(text.len() < MAX_OUTPUT + 100 && text.ends_with("bytes more not shown)"));
    }
}
