//! A token and cost budget, checked by the agent loop before every provider
//! call. It carries what earlier work of the same mission already spent, so
//! a mission's budget holds across its tasks.
//!
//! A call's cost is known only after it returns, so a run can overshoot by
//! at most one call; it never starts a call once the budget is spent.

use serde::{Deserialize, Serialize};
use swarm_common::{ErrorBody, ErrorCode};

/// Bounds on tokens and estimated cost, with what was already spent.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Budget {
    /// The most tokens (input plus output), if bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The most estimated cost in US dollars, if bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Tokens spent before this run (by earlier tasks of the mission).
    #[serde(default)]
    pub spent_tokens: u64,
    /// Dollars spent before this run.
    #[serde(default)]
    pub spent_cost_usd: f64,
}

impl Budget {
    /// No bounds.
    pub fn unlimited() -> Budget {
        Budget::default()
    }

    /// Whether another call may start, given what this run has used so far.
    /// A spent budget is a [`ErrorCode::LimitExceeded`] error that says which
    /// bound was reached.
    pub fn check(&self, run_tokens: u64, run_cost_usd: f64) -> Result<(), ErrorBody> {
        let tokens = self.spent_tokens.saturating_add(run_tokens);
        if let Some(max) = self.max_tokens
            && tokens >= max
        {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "the mission's token budget is spent: {tokens} of {max} tokens used \
                     ({run_tokens} by this task); no further model call was made"
                ),
            )
            .with_detail("budget", "tokens")
            .with_detail("max_tokens", max)
            .with_detail("spent_tokens", tokens));
        }
        let cost = self.spent_cost_usd + run_cost_usd;
        if let Some(max) = self.max_cost_usd
            && cost >= max
        {
            return Err(ErrorBody::new(
                ErrorCode::LimitExceeded,
                format!(
                    "the mission's cost budget is spent: ${cost:.4} of ${max:.4} used \
                     (${run_cost_usd:.4} by this task); no further model call was made"
                ),
            )
            .with_detail("budget", "cost_usd")
            .with_detail("max_cost_usd", max)
            .with_detail("spent_cost_usd", cost));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spent_budget_names_its_bound() {
        assert!(Budget::unlimited().check(u64::MAX, 1e9).is_ok());
        let b = Budget {
            max_tokens: Some(100),
            max_cost_usd: Some(0.5),
            spent_tokens: 60,
            spent_cost_usd: 0.25,
        };
        assert!(b.check(39, 0.0).is_ok());
        let e = b.check(40, 0.0).unwrap_err();
        assert_eq!(e.code, ErrorCode::LimitExceeded);
        assert!(e.message.contains("100 of 100 tokens"), "{}", e.message);
        let e = b.check(0, 0.25).unwrap_err();
        assert!(e.message.contains("cost budget"), "{}", e.message);
        assert!(!e.retriable);
    }
}
