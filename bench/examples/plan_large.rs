//! The offline planner on large missions: is its time linear in the
//! mission's length?
//!
//! `cargo run --release -p swarm-bench --example plan_large`
//!
//! Plans missions of 16, 64 and 256 KB (256 KB is the most `boss.missions`
//! accepts) in shapes that used to make the planner rescan the text: one
//! long line with no "then", one line of many "then"s, many short lines,
//! many unclosed quotes. For each it prints the best of a few runs and the
//! time per KB; linear work keeps the time per KB flat as the size grows
//! (the quadratic planner's grew fourfold with each step and took about
//! 10 s at 256 KB).

use std::time::{Duration, Instant};

const SIZES_KB: [usize; 3] = [16, 64, 256];
const RUNS: usize = 5;

/// A mission of about `bytes` bytes: `unit` repeated, cut on a character.
fn fill(unit: &str, bytes: usize) -> String {
    let mut s = unit.repeat(bytes / unit.len() + 1);
    let end = (0..=bytes)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    s.truncate(end);
    s
}

fn main() {
    let tools = swarm_agent::tools::ToolRegistry::builtin(".").names();
    let shapes: [(&str, &str); 4] = [
        (
            "one long line",
            "count the words in notes.txt and the lines of it, ",
        ),
        ("many thens", "read a.txt then "),
        ("many lines", "- count the words in notes.txt\n"),
        ("unclosed quotes", "echo 'a 'b “c "),
    ];
    println!(
        "{:<16} {:>6} {:>10} {:>9} {:>7}",
        "shape", "KB", "time", "per KB", "tasks"
    );
    for (shape, unit) in shapes {
        for kb in SIZES_KB {
            let mission = fill(unit, kb * 1024);
            let mut best = Duration::MAX;
            let mut tasks = 0;
            for _ in 0..RUNS {
                let started = Instant::now();
                let plan = swarm_agent::offline_plan(&mission, &tools);
                best = best.min(started.elapsed());
                tasks = plan.tasks.len();
            }
            println!(
                "{shape:<16} {kb:>6} {:>8.2}ms {:>7.1}µs {tasks:>7}",
                best.as_secs_f64() * 1e3,
                best.as_secs_f64() * 1e6 / kb as f64
            );
        }
    }
}
