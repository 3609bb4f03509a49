//! How the CLI shows things: progress lines, the status table, report summaries.

use chrono::{DateTime, Utc};
use swarm_common::{FinalReport, SwarmState, TaskStatus, mission::MissionRecord};

use crate::client::Update;

/// One line for a watcher.
pub fn update_line(update: &Update) -> String {
    match update {
        Update::Progress(p) => format!(
            "  [{}] {:?} {:>3}%  {}{}",
            p.task_id,
            p.status,
            p.progress_percentage,
            p.message,
            if p.revision > 0 {
                format!(" (revision {})", p.revision)
            } else {
                String::new()
            }
        ),
        Update::Result(r) => format!(
            "  [{}] {:?}: result submitted by {} ({} bytes, {}, {}){}",
            r.task_id,
            r.status,
            r.worker_id,
            r.result.len(),
            r.provider,
            duration(Some(r.started_at), Some(r.completed_at)),
            r.error
                .as_ref()
                .map(|e| format!(": {}", e.message))
                .unwrap_or_default()
        ),
        Update::Error(e) => format!(
            "  [{}] error {}: {}",
            e.task_id.as_deref().unwrap_or("swarm"),
            e.error.code,
            e.error.message
        ),
        Update::Report(r) => format!("final report: {:?}. {}", r.overall_status, r.summary),
    }
}

/// A span of time for people: milliseconds under a second (a tool call
/// takes a few), seconds with two decimals above.
fn duration(from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> String {
    match (from, to) {
        (Some(a), Some(b)) => {
            let us = (b - a).num_microseconds().unwrap_or(i64::MAX).max(0);
            if us < 1_000_000 {
                format!("{:.1} ms", us as f64 / 1000.0)
            } else {
                format!("{:.2} s", us as f64 / 1_000_000.0)
            }
        }
        _ => "-".into(),
    }
}

fn clip(s: &str, n: usize) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        let cut: String = one_line.chars().take(n.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// The state of a swarm as a table.
pub fn status_table(state: &SwarmState, record: Option<&MissionRecord>) -> String {
    let mut out = String::new();
    out.push_str(&format!("swarm     {}\n", state.swarm_id));
    out.push_str(&format!("status    {:?}\n", state.status));
    out.push_str(&format!("mission   {}\n", clip(&state.mission, 100)));
    out.push_str(&format!("planner   {}\n", state.planner));
    if !state.last_manager.is_empty() {
        out.push_str(&format!(
            "manager   {} (last to change the state)\n",
            state.last_manager
        ));
    }
    out.push_str(&format!(
        "accepted  {}\n",
        state.accepted_at.format("%Y-%m-%d %H:%M:%S UTC")
    ));
    out.push_str(&format!(
        "elapsed   {}\n",
        duration(
            Some(state.accepted_at),
            Some(state.completed_at.unwrap_or_else(Utc::now))
        )
    ));
    let counts = state.counts();
    let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{s:?} {n}")).collect();
    out.push_str(&format!(
        "tasks     {} ({})\n",
        state.tasks.len(),
        summary.join(", ")
    ));
    if let Some(file) = record.and_then(|r| r.report_file.as_deref()) {
        out.push_str(&format!("report    {file}\n"));
    }
    out.push('\n');
    let rows: Vec<[String; 10]> = state
        .tasks
        .iter()
        .map(|t| {
            [
                t.definition.task_id.clone(),
                clip(&t.definition.title, 32),
                t.definition.assigned_to.clone(),
                t.worker_id.clone().unwrap_or_else(|| "-".into()),
                format!("{:?}", t.status),
                t.attempt.to_string(),
                t.revision.to_string(),
                t.redeliveries.to_string(),
                duration(t.assigned_at, t.completed_at),
                if t.status == TaskStatus::Completed {
                    clip(&t.result_preview, 48)
                } else {
                    clip(t.error.as_deref().unwrap_or(""), 48)
                },
            ]
        })
        .collect();
    let header = [
        "TASK",
        "TITLE",
        "WORKER",
        "STATUS",
        "ATT",
        "REV",
        "TIME",
        "RESULT / ERROR",
    ];
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$}  ", w = *w));
            }
        }
        l.trim_end().to_string() + "\n"
    };
    out.push_str(&line(header.to_vec()));
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A short account of a final report.
pub fn report_summary(report: &FinalReport) -> String {
    let mut out = format!(
        "overall status: {:?}\n{}\n",
        report.overall_status, report.summary
    );
    for i in &report.insights {
        out.push_str(&format!("  - {i}\n"));
    }
    for t in &report.task_results {
        out.push_str(&format!(
            "  {} {:?}: {}\n",
            t.task_id,
            t.status,
            clip(
                if t.result.is_empty() {
                    t.error.as_deref().unwrap_or("")
                } else {
                    &t.result
                },
                90
            )
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_spans_read_in_milliseconds_and_long_ones_in_seconds() {
        let at = |us: i64| Some(DateTime::<Utc>::UNIX_EPOCH + chrono::TimeDelta::microseconds(us));
        assert_eq!(duration(at(0), at(2_345)), "2.3 ms");
        assert_eq!(duration(at(0), at(1_250_000)), "1.25 s");
        assert_eq!(duration(at(5), at(0)), "0.0 ms");
        assert_eq!(duration(None, at(0)), "-");
    }
}
