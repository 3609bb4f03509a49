//! How long the boss takes to render a final report as HTML, for reports of
//! 1, 50 and 1,000 tasks, against a baseline measured in the same process:
//! writing the same report as JSON.
//!
//! Run with `cargo bench -p swarm-bench --bench report`. Prints microseconds
//! per report and the multiple of the baseline; asserts nothing.

use std::collections::BTreeMap;
use std::hint::black_box;

use swarm_bench::stats::per_call_us;

use chrono::{TimeDelta, Utc};
use swarm_boss::{ReportInput, render_html};
use swarm_common::{FinalReport, SwarmStatus, TaskOutcome, TaskStatus};

/// A completed chain of `n` echo tasks, as the manager reports it.
fn report(n: usize) -> FinalReport {
    let start = Utc::now();
    let task_results = (0..n)
        .map(|i| TaskOutcome {
            skills: Default::default(),
            child_swarm: None,
            task_id: format!("t{i}"),
            title: format!("Echo step {i}"),
            description: format!("call echo with the text of step {i}"),
            assigned_to: "echoer".into(),
            dependencies: if i == 0 {
                vec![]
            } else {
                vec![format!("t{}", i - 1)]
            },
            status: TaskStatus::Completed,
            result: format!("step {i}"),
            result_truncated: false,
            result_seq: Some(i as u64 + 1),
            attempts: 1,
            revisions: 0,
            assigned_at: Some(start + TimeDelta::milliseconds(i as i64)),
            started_at: Some(start + TimeDelta::milliseconds(i as i64)),
            completed_at: Some(start + TimeDelta::milliseconds(i as i64 + 1)),
            error: None,
            gate_verdicts: vec![],
            provider: "offline".into(),
            asked_by: None,
        })
        .collect();
    FinalReport {
        skills: Default::default(),
        trace_id: None,
        overall_status: SwarmStatus::Completed,
        mission: "benchmark chain".into(),
        summary: format!("{n} of {n} tasks completed."),
        insights: vec![],
        task_results,
        metrics: BTreeMap::from([("tasks_completed".to_string(), n as f64)]),
        started_at: start,
        completed_at: start + TimeDelta::milliseconds(n as i64 + 1),
    }
}

fn main() {
    println!("| tasks | HTML bytes | render HTML | baseline: write JSON | multiple |");
    println!("|---|---|---|---|---|");
    for n in [1, 50, 1000] {
        let report = report(n);
        let input = ReportInput {
            swarm_id: "0b6e3c1a-9f2d-4c8e-a1b7-5d4f3e2a1c0b",
            mission: &report.mission,
            mission_id: Some("bench"),
            plan: None,
            report: &report,
            rendered_by: "boss-1",
        };
        let rounds = if n >= 1000 { 20 } else { 500 };
        let bytes = render_html(&input).expect("renders").len();
        let html = per_call_us(rounds, || {
            black_box(render_html(black_box(&input)).expect("renders"));
        });
        let json = per_call_us(rounds, || {
            black_box(serde_json::to_string(black_box(&report)).expect("encodes"));
        });
        println!(
            "| {n} | {bytes} | {html:.0} µs | {json:.0} µs | {:.1}x |",
            html / json
        );
    }
}
