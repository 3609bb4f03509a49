//! Connection settings every binary shares, read from flags or the NATS
//! ecosystem's environment variables (`NATS_URL`, ...).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, ServerAddr};
use clap::{Args, ValueEnum};
use tracing::{info, warn};

use crate::RuntimeError;

/// The server a binary connects to when given none.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// The help section the connection flags are listed under.
const HEADING: &str = "NATS connection";

/// What marks a password as copied from an example rather than made for a
/// deployment (matched without regard to case): the values the manifests
/// once shipped with, `change-me-boss-placeholder` and the like.
const PLACEHOLDER_MARKS: [&str; 2] = ["change-me", "placeholder"];

/// The mark `secret` carries if it is a known placeholder, not a password.
pub fn placeholder_mark(secret: &str) -> Option<&'static str> {
    let lower = secret.to_lowercase();
    PLACEHOLDER_MARKS
        .into_iter()
        .find(|mark| lower.contains(mark))
}

/// Whether a server URL's host is this machine (`localhost` or a loopback
/// address), where a placeholder password reaches nobody else.
fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

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

    /// The servers of the comma-separated URL list.
    fn servers(&self) -> Result<Vec<ServerAddr>, RuntimeError> {
        self.url
            .split(',')
            .map(|u| u.trim().parse::<ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RuntimeError::Connect {
                url: self.url.clone(),
                source: format!("not a server URL: {e}").into(),
            })
    }

    /// Refuses a placeholder password or token (say the example
    /// `change-me-boss-placeholder`) unless every server is on this machine:
    /// a deployment that kept one would let in anyone who has read the
    /// example. Local development may use whatever it likes.
    pub fn refuse_placeholder(&self) -> Result<(), RuntimeError> {
        let servers = self.servers()?;
        if servers.iter().all(|s| is_loopback_host(s.host())) {
            return Ok(());
        }
        let given = [
            (
                "password (--nats-password, NATS_PASSWORD)",
                self.password.as_deref(),
            ),
            ("token (--nats-token, NATS_TOKEN)", self.token.as_deref()),
        ]
        .into_iter()
        .chain(
            servers
                .iter()
                .map(|s| ("password in the server URL", s.password())),
        );
        for (what, secret) in given {
            if let Some(mark) = secret.and_then(placeholder_mark) {
                return Err(RuntimeError::Connect {
                    url: self.url.clone(),
                    source: format!(
                        "refusing to start: the NATS {what} is a placeholder (it contains \
                         \"{mark}\"), not a secret; make real passwords with deploy/secrets.sh \
                         (docs/deploy.md, \"Secrets\"). Placeholders are accepted only for a \
                         server on this machine (localhost, 127.0.0.1, ::1)"
                    )
                    .into(),
                });
            }
        }
        Ok(())
    }

    /// Connects, logs connection events, and checks the server's version.
    /// A user's replies come to inboxes under `_INBOX.<user>`, so the
    /// production config lets each user read its own replies only.
    /// Refuses a placeholder password for a remote server first
    /// ([`refuse_placeholder`](Self::refuse_placeholder)).
    pub async fn connect(&self, client_name: &str) -> Result<Client, RuntimeError> {
        self.refuse_placeholder()?;
        let connect_err = |source: crate::Cause| RuntimeError::Connect {
            url: self.url.clone(),
            source,
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
                connect_err(format!("cannot read credentials {}: {e}", creds.display()).into())
            })?;
        }
        match (&self.user, &self.password) {
            (Some(u), Some(p)) => {
                opts = opts
                    .user_and_password(u.clone(), p.clone())
                    .custom_inbox_prefix(inbox_prefix(u));
            }
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
        let servers = self.servers()?;
        let client = opts
            .connect(servers)
            .await
            .map_err(|e| connect_err(e.into()))?;
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

/// The codec a role writes its messages in (`--codec`); every role reads
/// all three, by each message's `Content-Type`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum WireCodec {
    /// MessagePack with named fields: compact, the default.
    #[default]
    Msgpack,
    /// JSON: readable with the `nats` CLI, for debugging.
    Json,
    /// Protobuf (`proto/a2ap.proto`), for peers with generated code.
    Protobuf,
}

impl From<WireCodec> for swarm_common::Codec {
    fn from(c: WireCodec) -> Self {
        match c {
            WireCodec::Msgpack => swarm_common::Codec::MsgPack,
            WireCodec::Json => swarm_common::Codec::Json,
            WireCodec::Protobuf => swarm_common::Codec::Protobuf,
        }
    }
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
    /// What this process writes its A2AP messages in (`json` to read them
    /// with the `nats` CLI); it reads every codec whatever this says.
    #[arg(long = "codec", env = "SWARM_CODEC", value_enum, default_value_t = WireCodec::Msgpack)]
    pub codec: WireCodec,
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

/// Where the replies to `user` go: `_INBOX.<user>`, or the library's
/// `_INBOX` for a name that is not one subject token.
pub fn inbox_prefix(user: &str) -> String {
    if swarm_common::subjects::is_token(user) {
        format!("_INBOX.{user}")
    } else {
        "_INBOX".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str, password: Option<&str>) -> NatsArgs {
        let mut args = NatsArgs::local(url);
        args.user = password.map(|_| "boss".to_owned());
        args.password = password.map(str::to_owned);
        args
    }

    #[test]
    fn placeholders_are_recognised_whatever_their_case() {
        for p in [
            "change-me-boss-placeholder",
            "CHANGE-ME",
            "please-Change-Me-now",
            "placeholder-not-a-key",
            "MyPlaceHolder1",
        ] {
            assert!(placeholder_mark(p).is_some(), "{p}");
        }
        for p in [
            "DAQbVvzo4d32KnMuaLkuTl8FfCa0mrnJkegxnfKr",
            "test-boss-secret",
            "",
        ] {
            assert_eq!(placeholder_mark(p), None, "{p}");
        }
    }

    #[test]
    fn a_placeholder_password_is_refused_for_a_remote_server() {
        let e = args("nats://nats:4222", Some("change-me-boss-placeholder"))
            .refuse_placeholder()
            .unwrap_err()
            .to_string();
        assert!(e.contains("refusing to start"), "{e}");
        assert!(e.contains("placeholder"), "{e}");
        assert!(e.contains("deploy/secrets.sh"), "{e}");
        // The password itself is not repeated.
        assert!(!e.contains("change-me-boss"), "{e}");
    }

    #[test]
    fn one_remote_server_in_the_list_is_enough_to_refuse() {
        let a = args(
            "nats://127.0.0.1:4222, nats://nats-1.nats-headless:4222",
            Some("Placeholder"),
        );
        assert!(a.refuse_placeholder().is_err());
    }

    #[test]
    fn a_placeholder_token_or_url_password_is_refused_too() {
        let mut token = args("tls://nats.example.invalid:4222", None);
        token.token = Some("change-me".to_owned());
        let e = token.refuse_placeholder().unwrap_err().to_string();
        assert!(e.contains("token"), "{e}");
        let in_url = args("nats://boss:change-me@10.0.0.7:4222", None);
        let e = in_url.refuse_placeholder().unwrap_err().to_string();
        assert!(e.contains("server URL"), "{e}");
    }

    #[test]
    fn loopback_servers_accept_a_placeholder_for_local_development() {
        for url in [
            "nats://127.0.0.1:4222",
            "127.0.0.2:4222",
            "nats://localhost:4222",
            "nats://LOCALHOST",
            "nats://[::1]:4222",
            "nats://127.0.0.1:4222,nats://localhost:4223",
        ] {
            args(url, Some("change-me-boss-placeholder"))
                .refuse_placeholder()
                .unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn real_passwords_and_none_pass_anywhere() {
        for password in [Some("DAQbVvzo4d32KnMuaLkuTl8FfCa0mrnJkegxnfKr"), None] {
            args("nats://nats:4222", password)
                .refuse_placeholder()
                .unwrap();
        }
    }

    #[tokio::test]
    async fn connect_refuses_before_it_dials() {
        // 0.0.0.0 is not a loopback name, and had the check not come first
        // the dial would reach this machine only.
        let e = args("nats://0.0.0.0:9", Some("change-me-boss-placeholder"))
            .connect("placeholder-test")
            .await
            .unwrap_err();
        assert!(e.to_string().contains("refusing to start"), "{e}");
    }

    #[tokio::test]
    async fn a_failed_connection_keeps_the_clients_error_and_its_kind() {
        let mut a = args("nats://127.0.0.1:1", None);
        a.connect_timeout = 1;
        let e = a.connect("cause-test").await.unwrap_err();
        let RuntimeError::Connect { source, .. } = &e else {
            panic!("{e:?}");
        };
        let cause = source
            .downcast_ref::<async_nats::ConnectError>()
            .unwrap_or_else(|| panic!("the cause is not the client's error: {source:?}"));
        assert_eq!(cause.kind(), async_nats::ConnectErrorKind::Io, "{cause}");
        // The same error through `source()`, as anyhow's chain reads it.
        let via = std::error::Error::source(&e).expect("a source");
        assert!(via.downcast_ref::<async_nats::ConnectError>().is_some());
        assert!(
            e.to_string()
                .starts_with("cannot connect to NATS at nats://127.0.0.1:1: "),
            "{e}"
        );
    }
}
