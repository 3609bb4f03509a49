//! The skills agents learned, in KV `skills` ([`swarm_common::skill`]),
//! as each role uses them: a worker's task is offered the best-scored ones
//! that fit it and may record new ones ([`SkillBook::offered`],
//! [`SkillBook::record`]); the manager moves their scores by its verdict on
//! each version of a result ([`SkillBook::score`]); the boss's planner is
//! given the best for a mission, and its desk removes one a person names
//! ([`SkillBook::remove`]); `swarm skills` lists them ([`SkillBook::list`]).
//!
//! A scope's skills are read at most every [`FRESH_FOR`] per process (a
//! change made here reads again at once), so a burst of tasks costs one
//! listing, not one each. The store failing costs a task nothing: it runs
//! without skills, and the failure is logged.

use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use bytes::Bytes;
use chrono::Utc;
use futures::StreamExt;
use swarm_common::skill::{self, LearnedSkill};
use tokio::sync::Mutex;
use tracing::warn;

/// How long a listing of the skills is used before it is read again.
pub const FRESH_FOR: Duration = Duration::from_secs(2);

/// Compare-and-swap tries for one score before the move is given up.
const SCORE_TRIES: usize = 8;

/// A process's view of the `skills` bucket.
pub struct SkillBook {
    kv: kv::Store,
    cached: Mutex<Option<(Instant, String, Vec<LearnedSkill>)>>,
}

impl SkillBook {
    /// The skills in `kv`.
    pub fn new(kv: kv::Store) -> SkillBook {
        SkillBook {
            kv,
            cached: Mutex::new(None),
        }
    }

    /// Every skill of `scope`, from the cache while it is fresh.
    pub async fn all(&self, scope: &str) -> anyhow::Result<Vec<LearnedSkill>> {
        let scope = skill::scope_token(scope);
        let mut cached = self.cached.lock().await;
        if let Some((at, s, skills)) = cached.as_ref()
            && *s == scope
            && at.elapsed() < FRESH_FOR
        {
            return Ok(skills.clone());
        }
        let skills = self.read(&scope).await?;
        *cached = Some((Instant::now(), scope, skills.clone()));
        Ok(skills)
    }

    /// Every skill, of `scope` or of all scopes, by scope then score
    /// (highest first) then name.
    pub async fn list(&self, scope: Option<&str>) -> anyhow::Result<Vec<LearnedSkill>> {
        let mut all = match scope {
            Some(scope) => self.read(&skill::scope_token(scope)).await?,
            None => self.read_prefix("").await?,
        };
        all.sort_by(|a, b| {
            (
                a.scope.as_str(),
                std::cmp::Reverse(a.score),
                a.name.as_str(),
            )
                .cmp(&(
                    b.scope.as_str(),
                    std::cmp::Reverse(b.score),
                    b.name.as_str(),
                ))
        });
        Ok(all)
    }

    async fn read(&self, scope: &str) -> anyhow::Result<Vec<LearnedSkill>> {
        self.read_prefix(&format!("{scope}.")).await
    }

    async fn read_prefix(&self, prefix: &str) -> anyhow::Result<Vec<LearnedSkill>> {
        let mut keys = self.kv.keys().await?;
        let mut out = Vec::new();
        while let Some(key) = keys.next().await {
            let key = key?;
            if !key.starts_with(prefix) {
                continue;
            }
            // A value that does not parse (written by a peer that should
            // not) is passed over, not offered.
            if let Some(value) = self.kv.get(&key).await?
                && let Ok(s) = serde_json::from_slice::<LearnedSkill>(&value)
            {
                out.push(s);
            }
            // Bounded even if the bucket holds more than it should.
            if out.len() >= 2 * skill::MAX_SKILLS {
                break;
            }
        }
        Ok(out)
    }

    /// The skills of `scope` that fit `text` best, at most [`skill::OFFERED`];
    /// none when the store cannot be read.
    pub async fn offered(&self, scope: &str, text: &str) -> Vec<LearnedSkill> {
        self.best(scope, text, skill::OFFERED).await
    }

    /// The skills of `scope` that fit `text` best, at most `n`; none when
    /// the store cannot be read.
    pub async fn best(&self, scope: &str, text: &str, n: usize) -> Vec<LearnedSkill> {
        match self.all(scope).await {
            Ok(all) => skill::best(&all, text, n).into_iter().cloned().collect(),
            Err(e) => {
                warn!(error = %e, "the skills cannot be read; the task runs without them");
                Vec::new()
            }
        }
    }

    /// Records `new`; a skill of the same name keeps its score and takes
    /// the new how-to. Past [`skill::MAX_SKILLS`] the lowest-scored goes.
    /// Returns its key.
    pub async fn record(&self, new: LearnedSkill) -> anyhow::Result<String> {
        let key = new.key();
        let mut value = new.clone();
        if let Some(old) = self.kv.get(&key).await? {
            if let Ok(old) = serde_json::from_slice::<LearnedSkill>(&old) {
                value.score = old.score;
                value.passes = old.passes;
                value.fails = old.fails;
                value.recorded_at = old.recorded_at;
                value.verdicts = old.verdicts;
            }
        } else {
            let all = self.read(&skill::scope_token(&new.scope)).await?;
            if all.len() >= skill::MAX_SKILLS
                && let Some(worst) = all.iter().min_by_key(|s| (s.score, s.updated_at))
            {
                self.kv.delete(worst.key()).await?;
            }
        }
        self.kv
            .put(&key, Bytes::from(serde_json::to_vec(&value)?))
            .await?;
        *self.cached.lock().await = None;
        Ok(key)
    }

    /// Moves the score of each skill in `keys` for the version of a result
    /// judged `verdict` ([`skill::verdict_id`]) that `passed` or failed; a
    /// skill removed meanwhile is passed over, and one that has counted
    /// this verdict already is left as it is.
    pub async fn score(&self, keys: &[String], passed: bool, verdict: &str) {
        for key in keys {
            if let Err(e) = self.score_one(key, passed, verdict).await {
                warn!(%key, error = %e, "a skill's score could not be moved");
            }
        }
        *self.cached.lock().await = None;
    }

    /// Removes the skill at `key`; `None` when there is none.
    pub async fn remove(&self, key: &str) -> anyhow::Result<Option<LearnedSkill>> {
        let Some(entry) = self.kv.entry(key).await? else {
            return Ok(None);
        };
        if matches!(
            entry.operation,
            kv::Operation::Delete | kv::Operation::Purge
        ) {
            return Ok(None);
        }
        let removed = serde_json::from_slice::<LearnedSkill>(&entry.value).ok();
        self.kv.delete(key).await?;
        *self.cached.lock().await = None;
        Ok(removed)
    }

    async fn score_one(&self, key: &str, passed: bool, verdict: &str) -> anyhow::Result<()> {
        for _ in 0..SCORE_TRIES {
            let Some(entry) = self.kv.entry(key).await? else {
                return Ok(());
            };
            if matches!(
                entry.operation,
                kv::Operation::Delete | kv::Operation::Purge
            ) {
                return Ok(());
            }
            let mut s: LearnedSkill = serde_json::from_slice(&entry.value)?;
            if !s.scored(passed, verdict, Utc::now()) {
                return Ok(());
            }
            let value = Bytes::from(serde_json::to_vec(&s)?);
            if self.kv.update(key, value, entry.revision).await.is_ok() {
                return Ok(());
            }
        }
        anyhow::bail!("{SCORE_TRIES} writers raced for it")
    }
}
