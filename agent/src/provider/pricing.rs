//! Cost estimates: prices per million tokens by model family, so a run can
//! report what it spent and a budget can stop it. The table is a small
//! snapshot of list prices, not a bill; any entry can be overridden.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Usage;

/// What a model costs, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Pricing {
    /// Per million prompt (input) tokens.
    pub input_per_million: f64,
    /// Per million completion (output) tokens.
    pub output_per_million: f64,
}

impl Pricing {
    /// A price of `input` and `output` dollars per million tokens.
    pub const fn new(input: f64, output: f64) -> Pricing {
        Pricing {
            input_per_million: input,
            output_per_million: output,
        }
    }

    /// The cost of `usage`, in US dollars.
    pub fn cost_usd(&self, usage: Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_per_million
            + usage.output_tokens as f64 * self.output_per_million)
            / 1_000_000.0
    }
}

/// List prices by model-name prefix (the longest matching prefix wins).
const DEFAULT_PRICES: &[(&str, Pricing)] = &[
    ("gpt-4o-mini", Pricing::new(0.15, 0.60)),
    ("gpt-4o", Pricing::new(2.50, 10.00)),
    ("gpt-4.1-nano", Pricing::new(0.10, 0.40)),
    ("gpt-4.1-mini", Pricing::new(0.40, 1.60)),
    ("gpt-4.1", Pricing::new(2.00, 8.00)),
    ("gpt-5-nano", Pricing::new(0.05, 0.40)),
    ("gpt-5-mini", Pricing::new(0.25, 2.00)),
    ("gpt-5", Pricing::new(1.25, 10.00)),
    ("o4-mini", Pricing::new(1.10, 4.40)),
    ("o3", Pricing::new(2.00, 8.00)),
    ("claude-3-5-haiku", Pricing::new(0.80, 4.00)),
    ("claude-3-haiku", Pricing::new(0.25, 1.25)),
    ("claude-haiku-4", Pricing::new(1.00, 5.00)),
    ("claude-3-5-sonnet", Pricing::new(3.00, 15.00)),
    ("claude-3-7-sonnet", Pricing::new(3.00, 15.00)),
    ("claude-sonnet-4", Pricing::new(3.00, 15.00)),
    ("claude-opus-4", Pricing::new(15.00, 75.00)),
];

/// Prices by model-name prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    prices: BTreeMap<String, Pricing>,
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable {
            prices: DEFAULT_PRICES
                .iter()
                .map(|(prefix, p)| (prefix.to_string(), *p))
                .collect(),
        }
    }
}

impl PriceTable {
    /// A table with no prices: every model costs 0.
    pub fn empty() -> PriceTable {
        PriceTable {
            prices: BTreeMap::new(),
        }
    }

    /// Sets the price of every model whose name starts with `prefix`.
    pub fn set(&mut self, prefix: impl Into<String>, pricing: Pricing) {
        self.prices.insert(prefix.into(), pricing);
    }

    /// The price of `model` (case-insensitive, the longest matching prefix;
    /// a `provider/` prefix such as `openai/` is ignored), if known.
    pub fn lookup(&self, model: &str) -> Option<Pricing> {
        let model = model.to_ascii_lowercase();
        let model = model.rsplit('/').next().unwrap_or(&model);
        self.prices
            .iter()
            .filter(|(prefix, _)| model.starts_with(&prefix.to_ascii_lowercase()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, p)| *p)
    }

    /// The cost of `usage` on `model`: 0 for a model the table does not know.
    pub fn cost_usd(&self, model: &str, usage: Usage) -> f64 {
        self.lookup(model).map_or(0.0, |p| p.cost_usd(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_prefix_prices_a_model() {
        let t = PriceTable::default();
        assert_eq!(
            t.lookup("gpt-4o-mini-2024-07-18"),
            Some(Pricing::new(0.15, 0.60))
        );
        assert_eq!(
            t.lookup("gpt-4o-2024-08-06"),
            Some(Pricing::new(2.50, 10.00))
        );
        assert_eq!(t.lookup("openai/GPT-4o"), Some(Pricing::new(2.50, 10.00)));
        assert_eq!(t.lookup("llama3.1:8b"), None);
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 500_000,
        };
        assert!((t.cost_usd("claude-sonnet-4-5", usage) - 10.5).abs() < 1e-9);
        assert_eq!(t.cost_usd("llama3.1:8b", usage), 0.0);
        let mut t = PriceTable::empty();
        t.set("llama", Pricing::new(1.0, 1.0));
        assert!((t.cost_usd("llama3.1:8b", usage) - 1.5).abs() < 1e-9);
    }
}
