//! How the CLI shows things: progress lines, tables (`status`, `list`,
//! `approvals`), report summaries and the JSON forms of updates.
//!
//! Tables are drawn by comfy-table, one line per row (long cells are cut
//! with `…`). On a terminal they fit its width; otherwise they are laid out
//! for [`PLAIN_WIDTH`] columns, so piped output and tests do not depend on
//! where they run. No cell is styled, so no ANSI code is ever written.

use std::collections::HashMap;
use std::io::IsTerminal as _;

use chrono::{DateTime, Utc};
use comfy_table::{Cell, ColumnConstraint, ContentArrangement, Row as TableRow, Table, presets};
use serde::Serialize;
use swarm_client::client::Update;
use swarm_client::list::Row;
use swarm_common::{
    FinalReport, SwarmState, TaskStatus, approval::ApprovalRecord, mission::MissionRecord,
    state::TaskState,
};

/// The width tables are laid out for when stdout is not a terminal.
pub const PLAIN_WIDTH: u16 = 160;

/// The width to lay tables out for: `None` on a terminal (comfy-table then
/// asks the terminal), [`PLAIN_WIDTH`] otherwise.
pub fn stdout_width() -> Option<u16> {
    if std::io::stdout().is_terminal() {
        None
    } else {
        Some(PLAIN_WIDTH)
    }
}

/// How a column fits a table that is too wide for its width.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// Keeps its content's width (ids, statuses, numbers).
    Whole,
    /// Gives way, its cells cut with `…` (free text).
    Shrink,
    /// Keeps its width, but is left out, lowest rank first, when the
    /// table cannot fit otherwise.
    Optional(u8),
}

/// One column of a table: its header, how it fits, and its cell for an item.
type Column<T> = (&'static str, Fit, fn(&T) -> String);

/// The least a shrinking column is given before optional ones are left out.
const SHRUNK: u16 = 12;

/// A table of `items` with `columns`: headers and cells come from the same
/// list, so they cannot drift apart.
fn table<T>(columns: &[Column<T>], items: &[T], width: Option<u16>) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_truncation_indicator("…");
    if let Some(w) = width {
        t.force_no_tty().set_width(w);
    }
    let mut header = TableRow::from(columns.iter().map(|(h, _, _)| Cell::new(h)));
    header.max_height(1);
    t.set_header(header);
    for item in items {
        let mut row = TableRow::from(columns.iter().map(|(_, _, cell)| Cell::new(cell(item))));
        row.max_height(1);
        t.add_row(row);
    }
    let hidden = left_out(columns, &t.column_max_content_widths(), t.width());
    for (i, (_, fit, _)) in columns.iter().enumerate() {
        let Some(c) = t.column_mut(i) else { continue };
        // The first column needs no margin of its own.
        if i == 0 {
            c.set_padding((0, 1));
        }
        if hidden[i] {
            c.set_constraint(ColumnConstraint::Hidden);
        } else if *fit != Fit::Shrink {
            c.set_constraint(ColumnConstraint::ContentWidth);
        }
    }
    let mut out = t.trim_fmt();
    out.push('\n');
    out
}

/// Which columns to leave out so the rest fit `width`: optional ones, lowest
/// rank first, until the whole columns, the shrinking ones at [`SHRUNK`]
/// and the margins fit.
fn left_out<T>(columns: &[Column<T>], widths: &[u16], width: Option<u16>) -> Vec<bool> {
    let mut hidden = vec![false; columns.len()];
    let Some(width) = width else {
        return hidden;
    };
    let need = |hidden: &[bool]| -> u32 {
        columns
            .iter()
            .zip(widths)
            .enumerate()
            .filter(|(i, _)| !hidden[*i])
            .map(|(i, ((_, fit, _), w))| {
                let margin = if i == 0 { 1 } else { 2 };
                let w = if *fit == Fit::Shrink {
                    (*w).min(SHRUNK)
                } else {
                    *w
                };
                u32::from(w) + margin
            })
            .sum()
    };
    let mut optional: Vec<(u8, usize)> = columns
        .iter()
        .enumerate()
        .filter_map(|(i, (_, fit, _))| match fit {
            Fit::Optional(rank) => Some((*rank, i)),
            _ => None,
        })
        .collect();
    optional.sort_unstable();
    for (_, i) in optional {
        if need(&hidden) <= u32::from(width) {
            break;
        }
        hidden[i] = true;
    }
    hidden
}

/// One line for a watcher.
pub fn update_line(update: &Update) -> String {
    match update {
        Update::Deployed { tasks } => format!(
            "  deployed: {} task{} ({})",
            tasks.len(),
            if tasks.len() == 1 { "" } else { "s" },
            clip(&tasks.join(", "), 90)
        ),
        Update::Progress(p) => format!(
            "  [{}] {:?} {:>3}%  {}{}",
            p.task_id,
            p.status,
            p.progress_percentage,
            progress_message(&p.message),
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
        Update::Report(r) => format!("final report: {:?}", r.overall_status),
    }
}

/// One update as a JSON object with its kind in `type`: `deployed`,
/// `progress`, `result`, `error` or `report` (then the `FinalReport`'s fields).
pub fn update_json(update: &Update) -> serde_json::Value {
    fn tagged(kind: &str, body: &impl Serialize) -> serde_json::Value {
        let mut v = serde_json::to_value(body).unwrap_or(serde_json::Value::Null);
        match &mut v {
            serde_json::Value::Object(m) => {
                m.insert("type".into(), kind.into());
                v
            }
            _ => serde_json::json!({"type": kind, "body": v}),
        }
    }
    match update {
        Update::Deployed { tasks } => serde_json::json!({"type": "deployed", "tasks": tasks}),
        Update::Progress(p) => tagged("progress", p),
        Update::Result(r) => tagged("result", r),
        Update::Error(e) => tagged("error", e),
        Update::Report(r) => tagged("report", r.as_ref()),
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

/// An age for people, in its largest whole unit: `12s`, `5m`, `3h`, `4d`.
pub fn age(from: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - from).num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A progress message as a watcher's line shows it: a reply being written
/// (up to a thousand bytes, often several lines) by its last words.
fn progress_message(message: &str) -> String {
    swarm_client::client::written_tail(message, 110).unwrap_or_else(|| message.to_string())
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

fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// The columns of `swarm status`.
const TASK_COLUMNS: [Column<TaskState>; 10] = [
    ("TASK", Fit::Whole, |t| match &t.asked_by {
        Some(asker) => format!("{} (asked by {asker})", t.definition.task_id),
        None => t.definition.task_id.clone(),
    }),
    ("TITLE", Fit::Shrink, |t| clip(&t.definition.title, 60)),
    ("PERSONA", Fit::Optional(3), |t| {
        t.definition.assigned_to.clone()
    }),
    ("WORKER", Fit::Shrink, |t| {
        t.worker_id.clone().unwrap_or_else(|| "-".into())
    }),
    ("STATUS", Fit::Whole, |t| format!("{:?}", t.status)),
    ("ATTEMPT", Fit::Optional(4), |t| t.attempt.to_string()),
    ("REVISION", Fit::Optional(2), |t| t.revision.to_string()),
    ("REDELIVERIES", Fit::Optional(1), |t| {
        t.redeliveries.to_string()
    }),
    ("TIME", Fit::Optional(5), |t| {
        duration(t.assigned_at, t.completed_at)
    }),
    ("RESULT / ERROR", Fit::Shrink, |t| {
        if t.status == TaskStatus::Completed {
            clip(&t.result_preview, 200)
        } else {
            clip(t.error.as_deref().unwrap_or(""), 200)
        }
    }),
];

/// The state of a swarm: a few lines about it, then its tasks as a table
/// laid out for `width` (see [`stdout_width`]); `now` ends a running swarm's
/// elapsed time.
pub fn status_table(
    state: &SwarmState,
    record: Option<&MissionRecord>,
    now: DateTime<Utc>,
    width: Option<u16>,
) -> String {
    let mut out = String::new();
    out.push_str(&format!("swarm     {}\n", state.swarm_id));
    out.push_str(&format!("status    {:?}\n", state.status));
    out.push_str(&format!("mission   {}\n", clip(&state.mission, 100)));
    out.push_str(&format!("planner   {}\n", state.planner));
    if let Some(trace_id) = &state.trace_id {
        out.push_str(&format!("trace     {trace_id}\n"));
    }
    if !state.last_manager.is_empty() {
        out.push_str(&format!(
            "manager   {} (last to change the state)\n",
            state.last_manager
        ));
    }
    out.push_str(&format!("accepted  {} UTC\n", time(state.accepted_at)));
    out.push_str(&format!(
        "elapsed   {}\n",
        duration(
            Some(state.accepted_at),
            Some(state.completed_at.unwrap_or(now))
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
    if let Some(p) = &state.parent {
        out.push_str(&format!(
            "parent    swarm {} task {} (attempt {}, revision {})\n",
            p.swarm_id, p.task_id, p.attempt, p.revision
        ));
    }
    out.push('\n');
    out.push_str(&table(&TASK_COLUMNS, &state.tasks, width));
    out
}

/// The child swarms below `state`, one line each, indented by depth:
/// the parent's task, the child's id, its status and how many of its tasks
/// are done. `children` holds the states read so far, by swarm id; a child
/// not among them is shown as not started.
pub fn child_tree(state: &SwarmState, children: &HashMap<String, SwarmState>) -> String {
    fn walk(
        state: &SwarmState,
        children: &HashMap<String, SwarmState>,
        depth: usize,
        out: &mut String,
    ) {
        for task in &state.tasks {
            let Some(id) = state.child_of(task) else {
                continue;
            };
            let indent = "  ".repeat(depth);
            match children.get(&id) {
                Some(child) => {
                    let done = child
                        .tasks
                        .iter()
                        .filter(|t| t.status.is_terminal())
                        .count();
                    out.push_str(&format!(
                        "{indent}{} -> {id} {:?} ({done}/{} tasks)\n",
                        task.definition.task_id,
                        child.status,
                        child.tasks.len()
                    ));
                    walk(child, children, depth + 1, out);
                }
                None => out.push_str(&format!(
                    "{indent}{} -> {id} (not started)\n",
                    task.definition.task_id
                )),
            }
        }
    }
    let mut out = String::new();
    walk(state, children, 1, &mut out);
    if out.is_empty() {
        return out;
    }
    format!("\nchild swarms\n{out}")
}

/// A row of `swarm list` with the time it is shown at.
struct ListItem {
    /// The swarm.
    row: Row,
    /// Now, for its age.
    now: DateTime<Utc>,
}

fn count(n: Option<usize>) -> String {
    n.map_or_else(|| "-".into(), |n| n.to_string())
}

/// The columns of `swarm list`.
const LIST_COLUMNS: [Column<ListItem>; 8] = [
    ("SWARM", Fit::Whole, |i| i.row.swarm_id.clone()),
    ("STATUS", Fit::Whole, |i| format!("{:?}", i.row.status)),
    ("TASKS", Fit::Whole, |i| {
        format!("{}/{}", count(i.row.tasks_done), count(i.row.tasks_total))
    }),
    ("FAILED", Fit::Optional(4), |i| count(i.row.tasks_failed)),
    ("AGE", Fit::Optional(3), |i| age(i.row.accepted_at, i.now)),
    ("STARTED (UTC)", Fit::Optional(2), |i| {
        time(i.row.accepted_at)
    }),
    ("ENDED (UTC)", Fit::Optional(1), |i| {
        i.row.ended_at.map_or_else(|| "-".into(), time)
    }),
    ("MISSION", Fit::Shrink, |i| {
        i.row
            .mission
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    }),
];

/// `swarm list`'s table, newest first as given.
pub fn list_table(rows: &[Row], now: DateTime<Utc>, width: Option<u16>) -> String {
    let items: Vec<ListItem> = rows
        .iter()
        .map(|row| ListItem {
            row: row.clone(),
            now,
        })
        .collect();
    table(&LIST_COLUMNS, &items, width)
}

/// The columns of `swarm approvals`.
const APPROVAL_COLUMNS: [Column<ApprovalRecord>; 9] = [
    ("APPROVAL", Fit::Whole, |r| r.approval_id.clone()),
    ("STATUS", Fit::Whole, |r| format!("{:?}", r.status)),
    ("TOOL", Fit::Whole, |r| r.tool.clone()),
    ("ARGUMENTS", Fit::Shrink, |r| r.arguments.to_string()),
    ("SWARM", Fit::Shrink, |r| {
        r.swarm_id.clone().unwrap_or_else(|| "-".into())
    }),
    ("TASK", Fit::Shrink, |r| {
        r.task_id.clone().unwrap_or_else(|| "-".into())
    }),
    ("ASKED BY", Fit::Optional(3), |r| r.requested_by.clone()),
    ("ASKED (UTC)", Fit::Optional(2), |r| time(r.requested_at)),
    ("EXPIRES (UTC)", Fit::Optional(1), |r| time(r.expires_at)),
];

/// `swarm approvals`' table.
pub fn approvals_table(records: &[ApprovalRecord], width: Option<u16>) -> String {
    table(&APPROVAL_COLUMNS, records, width)
}

const SKILL_COLUMNS: [Column<swarm_common::skill::LearnedSkill>; 6] = [
    ("KEY", Fit::Whole, |s| s.key()),
    ("SCORE", Fit::Whole, |s| s.score.to_string()),
    ("PASSED", Fit::Optional(2), |s| s.passes.to_string()),
    ("FAILED", Fit::Optional(2), |s| s.fails.to_string()),
    ("FROM", Fit::Optional(1), |s| {
        format!("{}/{}", s.swarm_id, s.task_id)
    }),
    ("HOW TO", Fit::Shrink, |s| s.how_to.clone()),
];

/// `swarm skills`' table.
pub fn skills_table(skills: &[swarm_common::skill::LearnedSkill], width: Option<u16>) -> String {
    table(&SKILL_COLUMNS, skills, width)
}

/// A short account of a final report.
pub fn report_summary(report: &FinalReport) -> String {
    let mut out = format!(
        "overall status: {:?}\n{}\n",
        report.overall_status, report.summary
    );
    if let Some(trace_id) = &report.trace_id {
        out.push_str(&format!("trace: {trace_id}\n"));
    }
    for i in &report.insights {
        out.push_str(&format!("  - {i}\n"));
    }
    let names = |refs: &[swarm_common::skill::SkillRef]| {
        refs.iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    if !report.skills.learned.is_empty() {
        out.push_str(&format!(
            "skills learned: {}\n",
            names(&report.skills.learned)
        ));
    }
    if !report.skills.used.is_empty() {
        out.push_str(&format!("skills used: {}\n", names(&report.skills.used)));
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

/// The agents table of `swarm agents`: one line per card, its skills
/// last (they may be many), and how long ago it was written.
pub fn agents_table(cards: &[swarm_common::card::AgentCard], now: DateTime<Utc>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if cards.is_empty() {
        return out;
    }
    let id_width = cards
        .iter()
        .map(|c| c.agent_id.chars().count())
        .max()
        .unwrap_or(2)
        .clamp(2, 40);
    let _ = writeln!(
        out,
        "{:<8} {:<id_width$} {:<12} {:<8} {:<5} SKILLS",
        "ROLE", "ID", "POOL", "VERSION", "SEEN"
    );
    for c in cards {
        let mut skills = c.skills.join(",");
        if let Some(url) = &c.url {
            skills = format!("{url} {skills}");
        }
        let _ = writeln!(
            out,
            "{:<8} {:<id_width$} {:<12} {:<8} {:<5} {}",
            clip(&c.role, 8),
            clip(&c.agent_id, id_width),
            clip(c.pool.as_deref().unwrap_or("-"), 12),
            clip(&c.version, 8),
            age(c.updated_at, now),
            skills
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_being_written_shows_on_one_line_by_its_last_words() {
        assert_eq!(
            progress_message("step 2: called calc"),
            "step 2: called calc"
        );
        assert_eq!(
            progress_message("writing: Two\nlines"),
            "writing: Two lines"
        );
        let long = format!("writing: …{} last words", "word ".repeat(300));
        let shown = progress_message(&long);
        assert!(shown.starts_with("writing: …") && shown.ends_with("word last words"));
        assert_eq!(shown.chars().count(), 110);
        assert!(!shown.contains('\n'));
    }

    #[test]
    fn short_spans_read_in_milliseconds_and_long_ones_in_seconds() {
        let at = |us: i64| Some(DateTime::<Utc>::UNIX_EPOCH + chrono::TimeDelta::microseconds(us));
        assert_eq!(duration(at(0), at(2_345)), "2.3 ms");
        assert_eq!(duration(at(0), at(1_250_000)), "1.25 s");
        assert_eq!(duration(at(5), at(0)), "0.0 ms");
        assert_eq!(duration(None, at(0)), "-");
    }

    #[test]
    fn the_agents_table_has_a_line_per_card() {
        let now = Utc::now();
        let card = |role: &str, id: &str, pool: Option<&str>| swarm_common::card::AgentCard {
            agent_id: id.into(),
            role: role.into(),
            version: "0.1.0".into(),
            pool: pool.map(Into::into),
            skills: vec!["calc".into(), "echo".into()],
            tools: Vec::new(),
            protocol_versions: vec!["1.0".into()],
            codecs: Vec::new(),
            url: None,
            started_at: now,
            updated_at: now - chrono::Duration::seconds(4),
        };
        let table = agents_table(
            &[
                card("boss", "boss-1", None),
                card("worker", "worker-1", Some("gpu")),
            ],
            now,
        );
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("ROLE"));
        assert!(
            lines[2].contains("worker-1") && lines[2].contains("gpu"),
            "{table}"
        );
        assert!(lines[2].ends_with("calc,echo"), "{table}");
        assert!(agents_table(&[], now).is_empty());
    }

    #[test]
    fn ages_read_in_their_largest_unit() {
        let t0 = DateTime::<Utc>::UNIX_EPOCH;
        let after = |s: i64| t0 + chrono::TimeDelta::seconds(s);
        assert_eq!(age(t0, after(12)), "12s");
        assert_eq!(age(t0, after(300)), "5m");
        assert_eq!(age(t0, after(3 * 3600 + 5)), "3h");
        assert_eq!(age(t0, after(4 * 86_400)), "4d");
        assert_eq!(age(after(10), t0), "0s");
    }
}
