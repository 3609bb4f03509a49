//! Skills that bubble up: a named how-to an agent found while doing a
//! task, kept in KV `skills` for later tasks and missions. A skill starts
//! at [`INITIAL_SCORE`]; each task that was offered it (or recorded it)
//! moves its score up by [`PASS_GAIN`] when the task's result passed its
//! gates, down by [`FAIL_LOSS`] when it failed. The best-scored skills that
//! fit a new task ([`best`]) go into the worker's system prompt and the
//! boss's planner. The manager moves the scores when it judges a version of
//! a result (its gates and review), once per version: the verdict's id is
//! kept with the skill ([`LearnedSkill::scored`]).
//!
//! **Invariant:** a scope holds at most [`MAX_SKILLS`] skills and a score
//! stays within 0..=100.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The scope of a deployment's skills when a mission names none.
pub const DEFAULT_SCOPE: &str = "deployment";
/// A new skill's score.
pub const INITIAL_SCORE: u8 = 50;
/// What a passed task adds to the score of each skill it used.
pub const PASS_GAIN: u8 = 10;
/// What a failed task takes from it.
pub const FAIL_LOSS: u8 = 15;
/// The most skills one scope keeps; a new one past it replaces the
/// lowest-scored.
pub const MAX_SKILLS: usize = 200;
/// How many skills a task is offered.
pub const OFFERED: usize = 3;
/// How many skills one task may record.
pub const MAX_RECORDED_PER_TASK: usize = 5;
/// How many verdict ids a skill keeps, so a verdict applied again (a
/// manager's replay) moves its score once.
pub const RECENT_VERDICTS: usize = 32;
/// How many skills the boss's planner is given for a mission.
pub const FOR_PLANNER: usize = 5;

/// A skill named in a result or report: its key and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct SkillRef {
    /// Its key in KV `skills` (`<scope>.<slug>`).
    pub key: String,
    /// Its name.
    pub name: String,
}

/// Adds to `into` each of `from` it does not hold yet (by key).
pub fn merge(into: &mut Vec<SkillRef>, from: &[SkillRef]) {
    for r in from {
        if !into.iter().any(|have| have.key == r.key) {
            into.push(r.clone());
        }
    }
}

/// One learned skill, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LearnedSkill {
    /// Its name, as the agent gave it.
    pub name: String,
    /// How to do it.
    pub how_to: String,
    /// The scope it belongs to.
    pub scope: String,
    /// The swarm and task it came from.
    pub swarm_id: String,
    /// The task it came from.
    pub task_id: String,
    /// 0 to 100.
    pub score: u8,
    /// Tasks whose result passed with it.
    pub passes: u32,
    /// Tasks whose result failed with it.
    pub fails: u32,
    /// When it was recorded.
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub recorded_at: DateTime<Utc>,
    /// When its score last moved.
    #[schemars(schema_with = "crate::timestamp::schema")]
    pub updated_at: DateTime<Utc>,
    /// The latest verdicts that moved its score, at most
    /// [`RECENT_VERDICTS`], newest last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<String>,
}

impl LearnedSkill {
    /// A new skill from `swarm_id`'s task `task_id`.
    pub fn new(
        scope: &str,
        name: &str,
        how_to: &str,
        swarm_id: &str,
        task_id: &str,
        now: DateTime<Utc>,
    ) -> LearnedSkill {
        LearnedSkill {
            name: name.trim().to_string(),
            how_to: how_to.trim().to_string(),
            scope: scope.to_string(),
            swarm_id: swarm_id.to_string(),
            task_id: task_id.to_string(),
            score: INITIAL_SCORE,
            passes: 0,
            fails: 0,
            recorded_at: now,
            updated_at: now,
            verdicts: Vec::new(),
        }
    }

    /// How results and reports name it.
    pub fn reference(&self) -> SkillRef {
        SkillRef {
            key: self.key(),
            name: self.name.clone(),
        }
    }

    /// Its key in the bucket.
    pub fn key(&self) -> String {
        key(&self.scope, &self.name)
    }

    /// Moves its score for the version of a result judged `verdict` that
    /// `passed` (or failed) with it; a verdict it has counted already
    /// changes nothing (`false`).
    pub fn scored(&mut self, passed: bool, verdict: &str, now: DateTime<Utc>) -> bool {
        if self.verdicts.iter().any(|v| v == verdict) {
            return false;
        }
        if self.verdicts.len() >= RECENT_VERDICTS {
            self.verdicts.remove(0);
        }
        self.verdicts.push(verdict.to_string());
        if passed {
            self.score = self.score.saturating_add(PASS_GAIN).min(100);
            self.passes = self.passes.saturating_add(1);
        } else {
            self.score = self.score.saturating_sub(FAIL_LOSS);
            self.fails = self.fails.saturating_add(1);
        }
        self.updated_at = now;
        true
    }
}

/// A name as a key token: lower-case letters, digits and `-`, at most 64.
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 64 {
            break;
        }
    }
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        "skill".to_string()
    } else {
        out
    }
}

/// A scope as a key token (`-` for anything but letters, digits, `-`, `_`).
pub fn scope_token(scope: &str) -> String {
    let token: String = scope
        .trim()
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if token.is_empty() {
        DEFAULT_SCOPE.to_string()
    } else {
        token
    }
}

/// The id of the verdict on one version of a task's result.
pub fn verdict_id(swarm_id: &str, task_id: &str, attempt: u32, revision: u32) -> String {
    format!("{swarm_id}/{task_id}/a{attempt}/r{revision}")
}

/// The key of the skill `name` in `scope`.
pub fn key(scope: &str, name: &str) -> String {
    format!("{}.{}", scope_token(scope), slug(name))
}

/// The words of `text` worth matching on: four letters or more, lower case.
fn words(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 4)
        .map(str::to_lowercase)
        .collect()
}

/// The `n` skills that fit `text` best: those sharing words with it, by
/// score times the words shared, then by name. A skill sharing none is not
/// offered, however high its score.
pub fn best<'a>(skills: &'a [LearnedSkill], text: &str, n: usize) -> Vec<&'a LearnedSkill> {
    let wanted = words(text);
    let mut fit: Vec<(u64, &LearnedSkill)> = skills
        .iter()
        .filter_map(|s| {
            let shared = words(&format!("{} {}", s.name, s.how_to))
                .intersection(&wanted)
                .count() as u64;
            (shared > 0 && s.score > 0).then(|| (shared * u64::from(s.score), s))
        })
        .collect();
    fit.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    fit.into_iter().take(n).map(|(_, s)| s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, how_to: &str, score: u8) -> LearnedSkill {
        LearnedSkill {
            score,
            ..LearnedSkill::new(DEFAULT_SCOPE, name, how_to, "s1", "t1", Utc::now())
        }
    }

    #[test]
    fn scores_move_with_outcomes_and_stay_in_bounds() {
        let mut s = skill("x", "y", INITIAL_SCORE);
        assert!(s.scored(true, "v1", Utc::now()));
        assert_eq!((s.score, s.passes), (60, 1));
        assert!(!s.scored(true, "v1", Utc::now()), "a verdict counts once");
        assert_eq!((s.score, s.passes), (60, 1));
        assert!(s.scored(false, "v2", Utc::now()));
        assert_eq!((s.score, s.fails), (45, 1));
        for i in 0..10 {
            s.scored(true, &format!("p{i}"), Utc::now());
        }
        assert_eq!(s.score, 100);
        for i in 0..40 {
            s.scored(false, &format!("f{i}"), Utc::now());
        }
        assert_eq!(s.score, 0);
        assert_eq!(
            s.verdicts.len(),
            RECENT_VERDICTS,
            "the ids kept are bounded"
        );
    }

    #[test]
    fn merged_references_are_kept_once() {
        let a = skill("A", "x", 50).reference();
        let b = skill("B", "x", 50).reference();
        let mut into = vec![a.clone()];
        merge(&mut into, &[b.clone(), a.clone()]);
        assert_eq!(into, [a, b]);
    }

    #[test]
    fn keys_are_tokens() {
        assert_eq!(
            key("deployment", "Summarise a CSV, by column!"),
            "deployment.summarise-a-csv-by-column"
        );
        assert_eq!(key("team a.b", "  "), "team-a-b.skill");
        assert!(slug(&"é".repeat(100)).len() <= 64);
        assert!(slug(&"ab ".repeat(100)).len() <= 64);
    }

    #[test]
    fn the_best_fit_is_offered_first_and_unrelated_skills_not_at_all() {
        let skills = vec![
            skill(
                "Parse CSV files",
                "Split each line on commas; the header names the columns.",
                50,
            ),
            skill("Parse CSV quickly", "Read the columns you need only.", 90),
            skill("Write haiku", "Five, seven, five syllables.", 100),
        ];
        let offered = best(
            &skills,
            "Summarise the columns of sales.csv (a CSV file)",
            3,
        );
        let names: Vec<&str> = offered.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["Parse CSV quickly", "Parse CSV files"],
            "by score times the words shared"
        );
        assert!(best(&skills, "Translate this poem", 3).is_empty());
        assert_eq!(best(&skills, "csv columns", 1).len(), 1);
    }
}
