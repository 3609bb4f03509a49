//! Connection settings every binary shares, read from flags or the NATS
//! ecosystem's environment variables (`NATS_URL`, ...).

use std::path::PathBuf;
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event};
use clap::{Args, ValueEnum};
use tracing::{info, warn};

use crate::RuntimeError;

/// The server a binary connects to when given none.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// The help section the connection flags are listed under.
const HEADING: &str = "NATS connection";

/// How to reach and authenticate to NATS.
///
/// Every flag is global: a command with subcommands (`swarm`) accepts it
/// before or after the subcommand, as the `nats` CLI does.
#[derive(Debug, Clone, Args)]
pub struct NatsArgs {
    /// Server URL(s), comma-separated.
    #[arg(
        short = 's',
        long = "nats-url",
        env = "NATS_URL",
        default_value = DEFAULT_NATS_URL,
        global = true,
        help_heading = HEADING
    )]
    pub url: String,
    /// User name (with --nats-password).
    #[arg(
        long = "nats-user",
        env = "NATS_USER",
        global = true,
        help_heading = HEADING
    )]
    pub user: Option<String>,
    /// Password (with --nats-user).
    #[arg(
        long = "nats-password",
        env = "NATS_PASSWORD",
        hide_env_values = true,
        global = true,
        help_heading = HEADING
    )]
    pub password: Option<String>,
    /// Authentication token.
    #[arg(
        long = "nats-token",
        env = "NATS_TOKEN",
        hide_env_values = true,
        global = true,
        help_heading = HEADING
    )]
    pub token: Option<String>,
    /// NATS credentials file (JWT and NKey seed).
    #[arg(
        long = "nats-creds",
        env = "NATS_CREDS",
        global = true,
        help_heading = HEADING
    )]
    pub creds: Option<PathBuf>,
    /// CA certificate (PEM) to verify the server with.
    #[arg(
        long = "tls-ca-file",
        env = "NATS_CA",
        global = true,
        help_heading = HEADING
    )]
    pub tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS (with --tls-key-file).
    #[arg(
        long = "tls-cert-file",
        env = "NATS_CERT",
        global = true,
        help_heading = HEADING
    )]
    pub tls_cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS (with --tls-cert-file).
    #[arg(
        long = "tls-key-file",
        env = "NATS_KEY",
        global = true,
        help_heading = HEADING
    )]
    pub tls_key: Option<PathBuf>,
    /// Refuse to talk to the server without TLS.
    #[arg(
        long = "tls-required",
        env = "NATS_TLS_REQUIRED",
        global = true,
        help_heading = HEADING
    )]
    pub tls_required: bool,
    /// Seconds to wait for the first connection.
    #[arg(
        long = "connect-timeout",
        env = "NATS_CONNECT_TIMEOUT",
        default_value_t = 5,
        global = true,
        help_heading = HEADING
    )]
    pub connect_timeout: u64,
}

impl NatsArgs {
    /// Settings for a server at `url` with no authentication.
    pub fn local(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            user: None,
            password: None,
            token: None,
            creds: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            tls_required: false,
            connect_timeout: 5,
        }
    }

    /// Connects, logs connection events, and checks the server's version.
    pub async fn connect(&self, client_name: &str) -> Result<Client, RuntimeError> {
        let connect_err = |reason: String| RuntimeError::Connect {
            url: self.url.clone(),
            reason,
        };
        let mut opts = ConnectOptions::new()
            .name(client_name)
            .connection_timeout(Duration::from_secs(self.connect_timeout.max(1)))
            .event_callback(|event| async move {
                match event {
                    Event::Connected => info!("connected to NATS"),
                    Event::Disconnected => warn!("disconnected from NATS; reconnecting"),
                    other => info!(event = %other, "NATS client event"),
                }
            });
        if let Some(creds) = &self.creds {
            opts = opts.credentials_file(creds).await.map_err(|e| {
                connect_err(format!("cannot read credentials {}: {e}", creds.display()))
            })?;
        }
        match (&self.user, &self.password) {
            (Some(u), Some(p)) => opts = opts.user_and_password(u.clone(), p.clone()),
            (Some(_), None) | (None, Some(_)) => {
                return Err(connect_err(
                    "--nats-user and --nats-password go together".into(),
                ));
            }
            (None, None) => {}
        }
        if let Some(t) = &self.token {
            opts = opts.token(t.clone());
        }
        if let Some(ca) = &self.tls_ca {
            opts = opts.add_root_certificates(ca.clone());
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => opts = opts.add_client_certificate(c.clone(), k.clone()),
            (Some(_), None) | (None, Some(_)) => {
                return Err(connect_err(
                    "--tls-cert-file and --tls-key-file go together".into(),
                ));
            }
            (None, None) => {}
        }
        if self.tls_required {
            opts = opts.require_tls(true);
        }
        // A comma-separated list names several servers of one cluster.
        let servers = self
            .url
            .split(',')
            .map(|u| u.trim().parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| connect_err(format!("not a server URL: {e}")))?;
        let client = opts
            .connect(servers)
            .await
            .map_err(|e| connect_err(e.to_string()))?;
        crate::version::check(&client.server_info().version)?;
        Ok(client)
    }
}

/// How logs are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Flags every role binary takes.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// NATS connection.
    #[command(flatten)]
    pub nats: NatsArgs,
    /// This process's agent id (appears as `sender_agent`); random when absent.
    #[arg(long = "agent-id", env = "SWARM_AGENT_ID")]
    pub agent_id: Option<String>,
    /// Seconds to finish in-flight work after SIGTERM before draining the connection.
    #[arg(
        long = "drain-timeout",
        env = "SWARM_DRAIN_TIMEOUT",
        default_value_t = 10
    )]
    pub drain_timeout: u64,
    /// Log format.
    #[arg(long = "log-format", env = "SWARM_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl CommonArgs {
    /// The agent id, or `<role>-<random>`.
    pub fn agent_id(&self, role: &str) -> String {
        self.agent_id.clone().unwrap_or_else(|| {
            let id = uuid_like();
            format!("{role}-{id}")
        })
    }

    /// The drain deadline.
    pub fn drain_timeout(&self) -> Duration {
        Duration::from_secs(self.drain_timeout)
    }
}

fn uuid_like() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}
