//! Skills that bubble up: a named how-to an agent found while doing a
//! task, kept in KV `skills` for later tasks and missions. A skill starts
//! at [`INITIAL_SCORE`]; each task that was offered it (or recorded it)
//! moves its score up by [`PASS_GAIN`] when the task's result passed its
//! gates, down by [`FAIL_LOSS`] when it failed. The best-scored skills that
//! fit a new task ([`best`]) go into the worker's system prompt.
//!
//! **Invariant:** a scope holds at most [`MAX_SKILLS`] skills and a score
//! stays within 0..=100.

use chrono::{DateTime, Utc};
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

/// One learned skill, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub recorded_at: DateTime<Utc>,
    /// When its score last moved.
    pub updated_at: DateTime<Utc>,
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
        }
    }

    /// Its key in the bucket.
    pub fn key(&self) -> String {
        key(&self.scope, &self.name)
    }

    /// Moves its score for a task that `passed` (or failed) with it.
    pub fn scored(&mut self, passed: bool, now: DateTime<Utc>) {
        if passed {
            self.score = self.score.saturating_add(PASS_GAIN).min(100);
            self.passes = self.passes.saturating_add(1);
        } else {
            self.score = self.score.saturating_sub(FAIL_LOSS);
            self.fails = self.fails.saturating_add(1);
        }
        self.updated_at = now;
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
        s.scored(true, Utc::now());
        assert_eq!((s.score, s.passes), (60, 1));
        s.scored(false, Utc::now());
        assert_eq!((s.score, s.fails), (45, 1));
        for _ in 0..10 {
            s.scored(true, Utc::now());
        }
        assert_eq!(s.score, 100);
        for _ in 0..10 {
            s.scored(false, Utc::now());
        }
        assert_eq!(s.score, 0);
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
