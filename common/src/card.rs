//! Agent cards: what each running replica says of itself (its role and id,
//! version, pool, skills and tools, the protocol versions and codecs it
//! speaks, where it is reached), kept in the KV bucket `agents` while it
//! runs and in its NATS service's metadata. A card is written when its
//! replica starts and again every [`CARD_REFRESH`]; the bucket forgets
//! entries after [`CARD_TTL`], so a replica that died leaves the list
//! within that time, and one that stops cleanly removes its card at once.
//! `swarm agents` lists them.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How long the bucket keeps a card that is not written again.
pub const CARD_TTL: Duration = Duration::from_secs(30);
/// How often a running replica writes its card.
pub const CARD_REFRESH: Duration = Duration::from_secs(10);
/// Most cards read from the bucket (a bound on a bucket anyone with the
/// right may fill).
pub const MAX_CARDS: usize = 10_000;

/// What a running replica says of itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentCard {
    /// The replica's agent id.
    pub agent_id: String,
    /// `boss`, `manager`, `worker` or `gateway`.
    pub role: String,
    /// Its build's version.
    pub version: String,
    /// The pool it serves (workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// What it can be asked for: a persona's `skill` is matched against
    /// these ids (a worker's configured skills, then one per tool).
    #[serde(default)]
    pub skills: Vec<String>,
    /// The tools it runs (workers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// The protocol versions it speaks.
    pub protocol_versions: Vec<String>,
    /// The content types it reads and writes.
    pub codecs: Vec<String>,
    /// Where it is reached from outside NATS (the gateway's A2A URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// When the replica started.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub started_at: DateTime<Utc>,
    /// When it last wrote its card.
    #[serde(with = "crate::timestamp")]
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub updated_at: DateTime<Utc>,
}

impl AgentCard {
    /// Its key in the `agents` bucket: `<role>.<agent id>`, the id's
    /// characters that cannot be in a key replaced by `_`.
    pub fn key(&self) -> String {
        key(&self.role, &self.agent_id)
    }

    /// The card as NATS service metadata (string values; lists
    /// comma-separated).
    pub fn metadata(&self) -> HashMap<String, String> {
        let mut m = HashMap::from([
            ("role".to_owned(), self.role.clone()),
            ("agent_id".to_owned(), self.agent_id.clone()),
            (
                "protocol_versions".to_owned(),
                self.protocol_versions.join(","),
            ),
            ("codecs".to_owned(), self.codecs.join(",")),
            ("skills".to_owned(), self.skills.join(",")),
        ]);
        if let Some(pool) = &self.pool {
            m.insert("pool".to_owned(), pool.clone());
        }
        if !self.tools.is_empty() {
            m.insert("tools".to_owned(), self.tools.join(","));
        }
        if let Some(url) = &self.url {
            m.insert("url".to_owned(), url.clone());
        }
        m
    }

    /// Whether the card offers skill `id`.
    pub fn offers(&self, id: &str) -> bool {
        self.skills.iter().any(|s| s == id)
    }
}

/// The key of `role`'s replica `agent_id` in the `agents` bucket.
pub fn key(role: &str, agent_id: &str) -> String {
    let clean = |s: &str| -> String {
        let out: String = s
            .chars()
            .take(128)
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if out.is_empty() { "_".to_owned() } else { out }
    };
    format!("{}.{}", clean(role), clean(agent_id))
}

/// The pools whose running workers offer skill `id`, most workers first
/// (ties by name): where a persona that asks for the skill is sent.
pub fn pools_offering(cards: &[AgentCard], id: &str) -> Vec<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for c in cards.iter().filter(|c| c.role == "worker" && c.offers(id)) {
        if let Some(pool) = &c.pool {
            *counts.entry(pool.as_str()).or_default() += 1;
        }
    }
    let mut pools: Vec<(&str, usize)> = counts.into_iter().collect();
    pools.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    pools.into_iter().map(|(p, _)| p.to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(role: &str, id: &str, pool: Option<&str>, skills: &[&str]) -> AgentCard {
        AgentCard {
            agent_id: id.into(),
            role: role.into(),
            version: "0.1.0".into(),
            pool: pool.map(Into::into),
            skills: skills.iter().map(|s| s.to_string()).collect(),
            tools: Vec::new(),
            protocol_versions: vec!["1.0".into()],
            codecs: vec!["application/json".into()],
            url: None,
            started_at: Utc::now(),
            updated_at: Utc::now(),
        }
    }

    #[test]
    fn keys_are_made_of_key_characters() {
        assert_eq!(key("worker", "worker-1"), "worker.worker-1");
        assert_eq!(key("worker", "pod.name/x y"), "worker.pod_name_x_y");
        assert_eq!(key("boss", ""), "boss._");
    }

    #[test]
    fn a_skill_is_routed_to_the_pools_that_offer_it_most_first() {
        let cards = [
            card("worker", "a1", Some("gpu"), &["render", "calc"]),
            card("worker", "b1", Some("general"), &["calc"]),
            card("worker", "b2", Some("general"), &["calc"]),
            card("boss", "boss-1", None, &["render"]),
        ];
        assert_eq!(pools_offering(&cards, "calc"), ["general", "gpu"]);
        assert_eq!(pools_offering(&cards, "render"), ["gpu"]);
        assert!(pools_offering(&cards, "fly").is_empty());
        let m = cards[0].metadata();
        assert_eq!(m["pool"], "gpu");
        assert_eq!(m["skills"], "render,calc");
    }
}
