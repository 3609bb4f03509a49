//! How much memory a worker (or a manager) spends checking the deepest JSON
//! schema the limits allow. The schema library checks a schema against its
//! meta-schema level by level and keeps what it compiled for each level for
//! the life of the process, so depth is what costs (645 MiB at 90 levels).
//! One test in its own binary, so the process's peak is this check's.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

use serde_json::json;
use swarm_agent::gates::{GateChain, GateOptions, GateSpec};
use swarm_common::Limits;

/// The process's peak resident size so far, in KiB (`VmHWM`).
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("Linux /proc");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/self/status")
}

/// The deepest schema allowed, in its costliest shape: every level a schema
/// of its own (`not` inside `not`), so the meta-schema is applied at each.
fn deepest(limits: &Limits, draft: Option<&str>) -> serde_json::Value {
    let mut v = json!({"type": "integer"});
    for _ in 1..limits.task.max_schema_depth {
        v = json!({ "not": v });
    }
    if let Some(d) = draft {
        v["$schema"] = json!(d);
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checking_the_deepest_schema_allowed_stays_small() {
    let limits = Limits::default();
    let before = peak_kib();
    let chain = GateChain::from_specs(
        &[GateSpec::JsonSchema {
            schema: deepest(&limits, None),
        }],
        &GateOptions::default(),
    );
    let verdicts = chain.check("{}").await;
    assert!(verdicts[0].1.passed, "{:?}", verdicts[0].1);
    let default_draft = peak_kib() - before;
    // Then the same depth in every other draft the library knows: each keeps
    // its own meta-schema's levels.
    for draft in [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-06/schema#",
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
    ] {
        let chain = GateChain::from_specs(
            &[GateSpec::JsonSchema {
                schema: deepest(&limits, Some(draft)),
            }],
            &GateOptions::default(),
        );
        let verdicts = chain.check("{}").await;
        assert!(verdicts[0].1.passed, "{draft}: {:?}", verdicts[0].1);
    }
    let every_draft = peak_kib() - before;
    eprintln!(
        "peak above the start for a schema {} levels deep: {} MiB (draft 2020-12), \
         {} MiB after every draft",
        limits.task.max_schema_depth,
        default_draft / 1024,
        every_draft / 1024
    );
    assert!(default_draft < 150 * 1024, "{default_draft} KiB");
    assert!(every_draft < 250 * 1024, "{every_draft} KiB");
}
