//! Choosing and building a provider: [`ProviderConfig`] from the
//! environment or from [`ProviderArgs`] flags, then [`ProviderConfig::build`]
//! makes the offline provider ([`crate::offline`]) or one of the HTTP
//! providers.
//!
//! | variable | meaning |
//! |---|---|
//! | `SWARM_PROVIDER` | `offline` (default), `openai`, `anthropic` |
//! | `SWARM_MODEL` | the model name |
//! | `SWARM_<ROLE>_PROVIDER`, `SWARM_<ROLE>_MODEL` | the same for one role (`BOSS`, `MANAGER`, `WORKER`) |
//! | `OPENAI_API_KEY`, `OPENAI_BASE_URL` | the OpenAI-compatible endpoint |
//! | `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` | the Anthropic endpoint |
//! | `SWARM_PROVIDER_TIMEOUT` | seconds per HTTP attempt (default 120) |
//! | `SWARM_PROVIDER_MAX_RETRIES` | retries on 429 and 5xx (default 4) |
//! | `SWARM_PROVIDER_STREAM` | `true` (default): ask for streamed replies, so their text shows as it is written; `false`: whole replies only |
//! | `SWARM_PRICE_INPUT_PER_MTOK`, `SWARM_PRICE_OUTPUT_PER_MTOK` | the model's price in USD per million tokens, overriding the built-in table |

use std::sync::Arc;
use std::time::Duration;

use super::Provider;
use super::anthropic::AnthropicProvider;
use super::openai::OpenAiProvider;
use super::pricing::{PriceTable, Pricing};
use crate::offline::OfflineProvider;

/// The model used for OpenAI when none is configured.
pub const OPENAI_DEFAULT_MODEL: &str = "gpt-4o-mini";
/// The model used for Anthropic when none is configured.
pub const ANTHROPIC_DEFAULT_MODEL: &str = "claude-sonnet-4-5";
/// Seconds per HTTP attempt when none is configured.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Retries when none is configured.
pub const DEFAULT_MAX_RETRIES: u32 = 4;

/// Which backend answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ProviderKind {
    /// The deterministic offline provider.
    #[default]
    Offline,
    /// An OpenAI-compatible chat-completions endpoint.
    #[value(name = "openai")]
    OpenAi,
    /// The Anthropic Messages API.
    Anthropic,
}

impl std::str::FromStr for ProviderKind {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "offline" | "" => Ok(ProviderKind::Offline),
            "openai" | "open-ai" | "openai-compatible" => Ok(ProviderKind::OpenAi),
            "anthropic" | "claude" => Ok(ProviderKind::Anthropic),
            other => Err(ConfigError(format!(
                "unknown provider {other:?}; the providers are offline, openai, anthropic"
            ))),
        }
    }
}

/// A provider configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("provider configuration: {0}")]
pub struct ConfigError(pub String);

/// Everything needed to build a provider.
#[derive(Clone, PartialEq)]
pub struct ProviderConfig {
    /// Which backend.
    pub kind: ProviderKind,
    /// The model name (ignored by the offline provider).
    pub model: String,
    /// The endpoint; the provider's public API when `None`.
    pub base_url: Option<String>,
    /// The API key.
    pub api_key: Option<String>,
    /// Longest one HTTP attempt may take.
    pub timeout: Duration,
    /// Retries on 429, 5xx, timeouts and transport errors.
    pub max_retries: u32,
    /// The first backoff delay; it doubles (with jitter) up to 30 s. A
    /// `Retry-After` from the server takes its place.
    pub retry_min_delay: Duration,
    /// The model's price, overriding the built-in table.
    pub pricing: Option<Pricing>,
    /// A cap on each reply's length, in tokens.
    pub max_tokens: Option<u32>,
    /// Whether replies are asked for as event streams, their text told as
    /// it is written; a server that answers with whole JSON is read as well.
    pub stream: bool,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("kind", &self.kind)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_min_delay", &self.retry_min_delay)
            .field("pricing", &self.pricing)
            .field("max_tokens", &self.max_tokens)
            .field("stream", &self.stream)
            .finish()
    }
}

impl Default for ProviderConfig {
    fn default() -> Self {
        ProviderConfig::offline()
    }
}

impl ProviderConfig {
    fn of(kind: ProviderKind, model: &str) -> ProviderConfig {
        ProviderConfig {
            kind,
            model: model.to_string(),
            base_url: None,
            api_key: None,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            max_retries: DEFAULT_MAX_RETRIES,
            retry_min_delay: Duration::from_millis(500),
            pricing: None,
            max_tokens: None,
            stream: true,
        }
    }

    /// The offline provider.
    pub fn offline() -> ProviderConfig {
        ProviderConfig::of(ProviderKind::Offline, "offline")
    }

    /// An OpenAI-compatible provider for `model`, with defaults for the rest.
    pub fn openai(model: &str) -> ProviderConfig {
        ProviderConfig::of(ProviderKind::OpenAi, model)
    }

    /// An Anthropic provider for `model`, with defaults for the rest.
    pub fn anthropic(model: &str) -> ProviderConfig {
        ProviderConfig::of(ProviderKind::Anthropic, model)
    }

    /// Reads the configuration from the environment (see the module
    /// documentation). With `role_prefix` `Some("BOSS")`, `SWARM_BOSS_PROVIDER`
    /// and `SWARM_BOSS_MODEL` take precedence over the unprefixed variables.
    pub fn from_env(role_prefix: Option<&str>) -> Result<ProviderConfig, ConfigError> {
        ProviderConfig::from_lookup(role_prefix, |name| std::env::var(name).ok())
    }

    /// [`ProviderConfig::from_env`] with the variables read through `var`.
    pub fn from_lookup(
        role_prefix: Option<&str>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<ProviderConfig, ConfigError> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let per_role = |suffix: &str| {
            role_prefix
                .and_then(|p| get(&format!("SWARM_{}_{suffix}", p.to_ascii_uppercase())))
                .or_else(|| get(&format!("SWARM_{suffix}")))
        };
        let kind: ProviderKind = per_role("PROVIDER").unwrap_or_default().parse()?;
        ProviderConfig::resolve(kind, per_role("MODEL"), &get)
    }

    /// A configuration for `kind` and `model`, the rest from `get`.
    fn resolve(
        kind: ProviderKind,
        model: Option<String>,
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ProviderConfig, ConfigError> {
        let mut config = match kind {
            ProviderKind::Offline => ProviderConfig::offline(),
            ProviderKind::OpenAi => ProviderConfig {
                base_url: get("OPENAI_BASE_URL"),
                api_key: get("OPENAI_API_KEY"),
                ..ProviderConfig::openai(model.as_deref().unwrap_or(OPENAI_DEFAULT_MODEL))
            },
            ProviderKind::Anthropic => ProviderConfig {
                base_url: get("ANTHROPIC_BASE_URL"),
                api_key: get("ANTHROPIC_API_KEY"),
                ..ProviderConfig::anthropic(model.as_deref().unwrap_or(ANTHROPIC_DEFAULT_MODEL))
            },
        };
        let number = |name: &str| -> Result<Option<f64>, ConfigError> {
            get(name)
                .map(|v| {
                    v.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|n| n.is_finite() && *n >= 0.0)
                        .ok_or_else(|| {
                            ConfigError(format!("{name} must be a non-negative number, not {v:?}"))
                        })
                })
                .transpose()
        };
        if let Some(secs) = number("SWARM_PROVIDER_TIMEOUT")? {
            config.timeout = Duration::from_secs_f64(secs.max(0.001));
        }
        if let Some(n) = number("SWARM_PROVIDER_MAX_RETRIES")? {
            config.max_retries = n as u32;
        }
        if let Some(v) = get("SWARM_PROVIDER_STREAM") {
            config.stream = parse_bool(&v).ok_or_else(|| {
                ConfigError(format!(
                    "SWARM_PROVIDER_STREAM must be true or false, not {v:?}"
                ))
            })?;
        }
        match (
            number("SWARM_PRICE_INPUT_PER_MTOK")?,
            number("SWARM_PRICE_OUTPUT_PER_MTOK")?,
        ) {
            (None, None) => {}
            (input, output) => {
                config.pricing = Some(Pricing::new(input.unwrap_or(0.0), output.unwrap_or(0.0)))
            }
        }
        Ok(config)
    }

    /// The price table for this configuration: the built-in one, with the
    /// configured price (if any) for this model.
    pub fn prices(&self) -> PriceTable {
        match self.pricing {
            Some(p) => {
                let mut t = PriceTable::empty();
                t.set(self.model.clone(), p);
                t
            }
            None => PriceTable::default(),
        }
    }

    /// Builds the provider. A remote provider without the key it needs, or
    /// with a base URL that is not http(s), is a [`ConfigError`].
    pub fn build(&self) -> Result<Arc<dyn Provider>, ConfigError> {
        self.build_limited(None)
    }

    /// [`build`](Self::build), with the HTTP providers' every attempt going
    /// through `limiter`'s shared limits when one is given (the offline
    /// provider has none).
    pub fn build_limited(
        &self,
        limiter: Option<Arc<dyn super::limit::CallLimiter>>,
    ) -> Result<Arc<dyn Provider>, ConfigError> {
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(ConfigError(format!(
                "the base URL {url:?} must start with http:// or https://"
            )));
        }
        if self.kind != ProviderKind::Offline && self.model.trim().is_empty() {
            return Err(ConfigError("no model is configured (SWARM_MODEL)".into()));
        }
        let provider: Arc<dyn Provider> = match self.kind {
            ProviderKind::Offline => Arc::new(OfflineProvider::new()),
            ProviderKind::OpenAi => {
                // A custom endpoint (vLLM, Ollama, ...) often needs no key;
                // OpenAI itself always does.
                if self.base_url.is_none() && self.api_key.is_none() {
                    return Err(ConfigError(
                        "the openai provider needs OPENAI_API_KEY (or OPENAI_BASE_URL for a \
                         local OpenAI-compatible server)"
                            .into(),
                    ));
                }
                let p = OpenAiProvider::new(self).map_err(|e| ConfigError(e.to_string()))?;
                match limiter {
                    Some(l) => Arc::new(p.with_limiter(l)),
                    None => Arc::new(p),
                }
            }
            ProviderKind::Anthropic => {
                if self.api_key.is_none() {
                    return Err(ConfigError(
                        "the anthropic provider needs ANTHROPIC_API_KEY".into(),
                    ));
                }
                let p = AnthropicProvider::new(self).map_err(|e| ConfigError(e.to_string()))?;
                match limiter {
                    Some(l) => Arc::new(p.with_limiter(l)),
                    None => Arc::new(p),
                }
            }
        };
        Ok(provider)
    }
}

/// Flags to choose a provider, for a binary to `#[command(flatten)]`. Keys
/// and endpoints come only from the environment, so they never show in a
/// process listing.
#[derive(Debug, Clone, clap::Args)]
pub struct ProviderArgs {
    /// Which model backend answers.
    #[arg(long = "provider", env = "SWARM_PROVIDER", value_enum, default_value_t = ProviderKind::Offline)]
    pub provider: ProviderKind,
    /// The model name (default: gpt-4o-mini for openai, claude-sonnet-4-5 for anthropic).
    #[arg(long = "model", env = "SWARM_MODEL")]
    pub model: Option<String>,
    /// Seconds one provider HTTP attempt may take.
    #[arg(long = "provider-timeout", env = "SWARM_PROVIDER_TIMEOUT", default_value_t = DEFAULT_TIMEOUT_SECS)]
    pub provider_timeout: u64,
    /// Retries on 429, 5xx and timeouts.
    #[arg(long = "provider-max-retries", env = "SWARM_PROVIDER_MAX_RETRIES", default_value_t = DEFAULT_MAX_RETRIES)]
    pub provider_max_retries: u32,
    /// Ask for streamed replies, so a task's answer shows as it is written
    /// (`false`: whole replies only).
    #[arg(long = "provider-stream", env = "SWARM_PROVIDER_STREAM", default_value = "true", value_parser = parse_bool_arg, action = clap::ArgAction::Set)]
    pub provider_stream: bool,
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Some(true),
        "false" | "0" | "no" | "off" => Some(false),
        _ => None,
    }
}

fn parse_bool_arg(v: &str) -> Result<bool, String> {
    parse_bool(v).ok_or_else(|| format!("{v:?} is not true or false"))
}

impl ProviderArgs {
    /// The configuration these flags choose, with keys, endpoints and prices
    /// from the environment.
    pub fn config(&self) -> Result<ProviderConfig, ConfigError> {
        self.config_with(|name| std::env::var(name).ok())
    }

    /// [`ProviderArgs::config`] with the variables read through `var`.
    pub fn config_with(
        &self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<ProviderConfig, ConfigError> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let mut config = ProviderConfig::resolve(self.provider, self.model.clone(), &get)?;
        config.timeout = Duration::from_secs(self.provider_timeout.max(1));
        config.max_retries = self.provider_max_retries;
        config.stream = self.provider_stream;
        Ok(config)
    }

    /// Builds the provider these flags choose.
    pub fn build(&self) -> Result<Arc<dyn Provider>, ConfigError> {
        self.config()?.build()
    }

    /// The configuration for one role (`BOSS`, `MANAGER`, `WORKER`): the
    /// role's own `SWARM_<ROLE>_PROVIDER` / `SWARM_<ROLE>_MODEL` when set (so
    /// one environment can give each role its own model), else these flags
    /// and `SWARM_PROVIDER` / `SWARM_MODEL`.
    pub fn config_for_role(&self, role: &str) -> Result<ProviderConfig, ConfigError> {
        let role_var = format!("SWARM_{}_PROVIDER", role.to_ascii_uppercase());
        if std::env::var(&role_var).is_ok_and(|v| !v.trim().is_empty()) {
            ProviderConfig::from_env(Some(role))
        } else {
            self.config()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clap::Parser;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_environment_chooses_the_provider() {
        let c = ProviderConfig::from_lookup(None, env(&[])).unwrap();
        assert_eq!(c.kind, ProviderKind::Offline);
        assert_eq!(c.build().unwrap().name(), "offline");

        let vars = env(&[
            ("SWARM_PROVIDER", "openai"),
            ("SWARM_MODEL", "llama3.1"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1"),
            ("SWARM_BOSS_PROVIDER", "anthropic"),
            ("SWARM_BOSS_MODEL", "claude-opus-4-1"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("SWARM_PROVIDER_TIMEOUT", "2.5"),
            ("SWARM_PRICE_INPUT_PER_MTOK", "1"),
        ]);
        let worker = ProviderConfig::from_lookup(Some("worker"), &vars).unwrap();
        assert_eq!(worker.kind, ProviderKind::OpenAi);
        assert_eq!(worker.model, "llama3.1");
        assert_eq!(worker.api_key, None);
        assert_eq!(worker.timeout, Duration::from_millis(2500));
        assert_eq!(worker.pricing, Some(Pricing::new(1.0, 0.0)));
        assert_eq!(worker.build().unwrap().name(), "openai:llama3.1");
        let boss = ProviderConfig::from_lookup(Some("boss"), &vars).unwrap();
        assert_eq!(boss.kind, ProviderKind::Anthropic);
        assert_eq!(boss.model, "claude-opus-4-1");
        assert!(!format!("{boss:?}").contains("sk-ant"));
        assert_eq!(boss.build().unwrap().name(), "anthropic:claude-opus-4-1");
    }

    #[test]
    fn missing_keys_and_bad_values_are_clear_errors() {
        let e = ProviderConfig::from_lookup(None, env(&[("SWARM_PROVIDER", "anthropic")]))
            .unwrap()
            .build()
            .err()
            .unwrap();
        assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
        let e = ProviderConfig::from_lookup(None, env(&[("SWARM_PROVIDER", "openai")]))
            .unwrap()
            .build()
            .err()
            .unwrap();
        assert!(e.to_string().contains("OPENAI_API_KEY"), "{e}");
        let e = ProviderConfig::from_lookup(None, env(&[("SWARM_PROVIDER", "gpt")])).unwrap_err();
        assert!(e.to_string().contains("offline, openai, anthropic"), "{e}");
        let e = ProviderConfig::from_lookup(
            None,
            env(&[
                ("SWARM_PROVIDER", "openai"),
                ("SWARM_PROVIDER_TIMEOUT", "soon"),
            ]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("SWARM_PROVIDER_TIMEOUT"), "{e}");
        let mut c = ProviderConfig::openai("m");
        c.base_url = Some("ftp://x".into());
        assert!(c.build().is_err());
    }

    #[test]
    fn flags_flatten_into_a_binary() {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            provider: ProviderArgs,
        }
        let cli =
            Cli::try_parse_from(["worker", "--provider", "openai", "--model", "qwen"]).unwrap();
        let c = cli
            .provider
            .config_with(env(&[("OPENAI_API_KEY", "sk")]))
            .unwrap();
        assert_eq!(c.kind, ProviderKind::OpenAi);
        assert_eq!(c.model, "qwen");
        assert_eq!(c.api_key.as_deref(), Some("sk"));
        assert_eq!(c.timeout, Duration::from_secs(DEFAULT_TIMEOUT_SECS));
    }
}
