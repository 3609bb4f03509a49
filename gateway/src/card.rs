//! The gateway's agent card (`/.well-known/agent-card.json`): who the swarm
//! is, where and how it is reached, what it can do (a skill per persona the
//! planner staffs, tagged with its tools), and how callers authenticate.

use serde::Serialize;
use serde_json::{Value, json};

/// The card, in ProtoJSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// The agent's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Where it is reached, by binding.
    pub supported_interfaces: Vec<AgentInterface>,
    /// Who runs it.
    pub provider: AgentProvider,
    /// Its version (this build's).
    pub version: String,
    /// What it can do beyond the core operations.
    pub capabilities: AgentCapabilities,
    /// How callers authenticate, by name.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub security_schemes: serde_json::Map<String, Value>,
    /// Which schemes a caller must satisfy (any one of them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<Value>,
    /// Media types it takes.
    pub default_input_modes: Vec<String>,
    /// Media types it answers in.
    pub default_output_modes: Vec<String>,
    /// What it is good at.
    pub skills: Vec<AgentSkill>,
}

/// One way to reach the agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// Its URL.
    pub url: String,
    /// `JSONRPC` or `HTTP+JSON`.
    pub protocol_binding: String,
    /// The A2A version it speaks.
    pub protocol_version: String,
}

/// Who runs the agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentProvider {
    /// The organisation.
    pub organization: String,
    /// Its URL.
    pub url: String,
}

/// Optional capabilities.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// `SendStreamingMessage` and `SubscribeToTask` are served.
    pub streaming: bool,
    /// Push notifications are served.
    pub push_notifications: bool,
    /// An extended card is served to authenticated callers.
    pub extended_agent_card: bool,
}

/// A skill.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// Its id.
    pub id: String,
    /// A name for people.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Keywords (here: the tools it uses).
    pub tags: Vec<String>,
    /// Missions that use it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// The name of the bearer scheme in the card.
pub const BEARER_SCHEME: &str = "bearer";
/// The name of the API key scheme in the card.
pub const API_KEY_SCHEME: &str = "apiKey";
/// The header an API key is sent in.
pub const API_KEY_HEADER: &str = "X-API-Key";

/// What the card is made from.
#[derive(Debug, Clone)]
pub struct CardInputs {
    /// Base URL of the gateway as callers reach it (no trailing `/`).
    pub public_url: String,
    /// The tools the workers offer.
    pub tool_names: Vec<String>,
    /// Whether callers must authenticate.
    pub authenticated: bool,
    /// Where the A2A NATS binding is reached (`nats://host:port/<subject>`),
    /// if the card names it.
    pub nats_url: Option<String>,
    /// Skills the running worker pools offer beyond their tools (their
    /// `--skills`), each with the pools that offer it.
    pub pool_skills: Vec<(String, Vec<String>)>,
}

/// How long the served card is kept before the running pools' cards are
/// read again.
const CARD_FRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// The served card: built from what the running worker pools offer (their
/// agent cards' tools and skills), read again every [`CARD_FRESH`]; from
/// the gateway's own tool flags while no worker's card is there.
pub struct CardSource {
    configured: CardInputs,
    agents: Option<async_nats::jetstream::kv::Store>,
    cached: tokio::sync::Mutex<Option<(std::time::Instant, AgentCard)>>,
}

impl CardSource {
    /// A source from `configured` inputs and the `agents` bucket, if open.
    pub fn new(configured: CardInputs, agents: Option<async_nats::jetstream::kv::Store>) -> Self {
        CardSource {
            configured,
            agents,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The inputs as the running pools' cards say, or the configured ones.
    async fn inputs(&self) -> CardInputs {
        let mut inputs = self.configured.clone();
        let Some(kv) = &self.agents else {
            return inputs;
        };
        let cards = match swarm_runtime::cards::read_all(kv).await {
            Ok(cards) => cards,
            Err(e) => {
                tracing::debug!(error = %format!("{e:#}"), "reading the agent cards for the A2A card");
                return inputs;
            }
        };
        let workers: Vec<_> = cards.iter().filter(|c| c.role == "worker").collect();
        if workers.is_empty() {
            return inputs;
        }
        let mut tools: Vec<String> = workers.iter().flat_map(|c| c.tools.clone()).collect();
        tools.sort();
        tools.dedup();
        let mut pool_skills: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for w in &workers {
            for skill in w.skills.iter().filter(|s| !w.tools.contains(s)) {
                let pools = pool_skills.entry(skill.clone()).or_default();
                if let Some(pool) = &w.pool
                    && !pools.contains(pool)
                {
                    pools.push(pool.clone());
                }
            }
        }
        inputs.tool_names = tools;
        inputs.pool_skills = pool_skills.into_iter().collect();
        inputs
    }

    /// The card to serve now.
    pub async fn current(&self) -> AgentCard {
        let mut cached = self.cached.lock().await;
        if let Some((at, card)) = cached.as_ref()
            && at.elapsed() < CARD_FRESH
        {
            return card.clone();
        }
        let fresh = card(&self.inputs().await);
        *cached = Some((std::time::Instant::now(), fresh.clone()));
        fresh
    }
}

/// Examples of missions, for the skills whose tools they use.
const EXAMPLES: &[(&str, &str)] = &[
    ("calc", "Compute (17 * 23) + 2^10"),
    ("count", "Count the words in README.md"),
    ("checksum", "Checksum the previous result"),
    ("list_files", "List the files in docs"),
    ("grep", "Find the lines mentioning NATS in README.md"),
];

/// The card.
pub fn card(inputs: &CardInputs) -> AgentCard {
    let base = inputs.public_url.trim_end_matches('/');
    let interface = |binding: &str| AgentInterface {
        url: base.to_owned(),
        protocol_binding: binding.to_owned(),
        protocol_version: "1.0".into(),
    };
    let mut skills = vec![AgentSkill {
        id: "mission".into(),
        name: "Run a mission".into(),
        description: "Plans a team for a mission (text, or a SwarmDeploymentPlan as a data \
            part), runs its tasks with reviews and quality gates, and answers with a summary, \
            each task's result, the final report as JSON and the HTML report. Numbered steps \
            run in order; bulleted lines run in parallel."
            .into(),
        tags: vec!["swarm".into(), "planning".into(), "multi-agent".into()],
        examples: vec!["1. Count the words in README.md\n2. Checksum the previous result".into()],
    }];
    for p in swarm_agent::offline::personas(&inputs.tool_names) {
        skills.push(AgentSkill {
            id: p.name.to_owned(),
            name: p.name.to_owned(),
            description: p.role.to_owned(),
            examples: EXAMPLES
                .iter()
                .filter(|(tool, _)| p.tools.iter().any(|t| t == tool))
                .map(|(_, e)| (*e).to_owned())
                .collect(),
            tags: p.tools,
        });
    }
    for (skill, pools) in &inputs.pool_skills {
        skills.push(AgentSkill {
            id: skill.clone(),
            name: skill.clone(),
            description: format!(
                "Offered by the worker pool(s) {}: a persona of a plan may ask for it with \
                 \"skill\": \"{skill}\"",
                pools.join(", ")
            ),
            tags: pools.clone(),
            examples: Vec::new(),
        });
    }
    let (security_schemes, security_requirements) = if inputs.authenticated {
        let mut schemes = serde_json::Map::new();
        schemes.insert(
            BEARER_SCHEME.into(),
            json!({"httpAuthSecurityScheme": {
                "scheme": "Bearer",
                "description": "A token the gateway's operator issued (SWARM_GATEWAY_TOKENS)"
            }}),
        );
        schemes.insert(
            API_KEY_SCHEME.into(),
            json!({"apiKeySecurityScheme": {
                "location": "header",
                "name": API_KEY_HEADER,
                "description": "The same token, as an API key"
            }}),
        );
        // Either scheme will do.
        let requirements = [BEARER_SCHEME, API_KEY_SCHEME]
            .iter()
            .map(|s| json!({"schemes": {*s: {"list": []}}}))
            .collect();
        (schemes, requirements)
    } else {
        (serde_json::Map::new(), Vec::new())
    };
    AgentCard {
        name: "Swarm".into(),
        description: "A hierarchical swarm of AI agents on NATS JetStream: a boss plans a \
            team for each mission, a manager runs its tasks through reviews and quality gates, \
            workers act with tools. A task is completed only when every step did what it was \
            asked."
            .into(),
        supported_interfaces: {
            let mut interfaces = vec![interface("JSONRPC"), interface("HTTP+JSON")];
            if let Some(url) = &inputs.nats_url {
                interfaces.push(AgentInterface {
                    url: url.clone(),
                    protocol_binding: crate::nats::BINDING.into(),
                    protocol_version: "1.0".into(),
                });
            }
            interfaces
        },
        provider: AgentProvider {
            organization: "Swarm".into(),
            url: base.to_owned(),
        },
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: AgentCapabilities {
            streaming: true,
            push_notifications: true,
            extended_agent_card: false,
        },
        security_schemes,
        security_requirements,
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec![
            "text/plain".into(),
            "application/json".into(),
            "text/html".into(),
        ],
        skills,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn inputs(authenticated: bool) -> CardInputs {
        CardInputs {
            public_url: "http://127.0.0.1:8080/".into(),
            tool_names: ["calc", "count", "checksum", "echo", "read_file"]
                .map(String::from)
                .to_vec(),
            authenticated,
            nats_url: None,
            pool_skills: Vec::new(),
        }
    }

    #[test]
    fn the_card_names_both_bindings_and_a_skill_per_persona_with_its_tools() {
        let c = serde_json::to_value(card(&inputs(false))).unwrap();
        assert_eq!(c["supportedInterfaces"][0]["url"], "http://127.0.0.1:8080");
        assert_eq!(c["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
        assert_eq!(c["supportedInterfaces"][1]["protocolBinding"], "HTTP+JSON");
        assert_eq!(c["supportedInterfaces"][1]["protocolVersion"], "1.0");
        assert_eq!(c["capabilities"]["streaming"], true);
        let ids: Vec<&str> = c["skills"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            [
                "mission",
                "calculator",
                "text-analyst",
                "file-analyst",
                "generalist"
            ]
        );
        assert_eq!(c["skills"][1]["tags"], json!(["calc"]));
        assert!(c.get("securitySchemes").is_none());
    }

    #[test]
    fn a_skill_a_pool_offers_beyond_its_tools_is_a_skill_of_the_card() {
        let mut with = inputs(false);
        with.pool_skills = vec![("render".into(), vec!["gpu".into()])];
        let c = card(&with);
        assert_eq!(c.skills.last().unwrap().id, "render");
        let render = c.skills.iter().find(|s| s.id == "render").unwrap();
        assert_eq!(render.tags, ["gpu"]);
        assert!(render.description.contains("\"skill\": \"render\""));
    }

    #[test]
    fn the_nats_binding_is_listed_by_its_uri_when_named() {
        let c = serde_json::to_value(card(&inputs(false))).unwrap();
        assert_eq!(c["supportedInterfaces"].as_array().unwrap().len(), 2);
        let mut with = inputs(false);
        with.nats_url = Some("nats://nats:4222/a2a.rpc".into());
        let c = serde_json::to_value(card(&with)).unwrap();
        let nats = &c["supportedInterfaces"][2];
        assert_eq!(nats["protocolBinding"], crate::nats::BINDING);
        assert_eq!(nats["url"], "nats://nats:4222/a2a.rpc");
        assert_eq!(nats["protocolVersion"], "1.0");
    }

    #[test]
    fn an_authenticated_gateway_says_which_schemes_it_takes() {
        let c = serde_json::to_value(card(&inputs(true))).unwrap();
        assert_eq!(
            c["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
            "Bearer"
        );
        assert_eq!(
            c["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"],
            "X-API-Key"
        );
        assert_eq!(c["securityRequirements"].as_array().unwrap().len(), 2);
    }
}
