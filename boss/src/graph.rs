//! A swarm's task graph and timeline as SVG, drawn the same way in the
//! HTML report (inline, so the page stays one file) and in the gateway's
//! console (which then changes each node's status as the swarm runs).
//!
//! The graph is layered left to right: a task's column is the length of
//! the longest chain of dependencies before it, and the tasks of a column
//! are ordered by where their dependencies sit (one barycentre pass), which
//! keeps most edges short without the cost of a full crossing minimiser.
//! The timeline has a row per worker (or pool), one bar per attempt or
//! revision, bars that overlap in time stacked in lanes.
//!
//! The elements are for HTML pages (no `xmlns`). Every text from a mission or a model is escaped here; the drawings use
//! classes only (`node`, `edge`, `bar`, `st-<status>`), styled by
//! [`CSS`], so a page's Content-Security-Policy need not allow inline
//! styles.

use std::collections::HashMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use swarm_common::TaskStatus;

/// One task of the graph.
#[derive(Debug, Clone)]
pub struct Node<'a> {
    /// The task's id.
    pub id: &'a str,
    /// Its title.
    pub title: &'a str,
    /// Where it stands.
    pub status: TaskStatus,
    /// The tasks it waits for (ids not in the graph are ignored).
    pub dependencies: &'a [String],
    /// Where a click on it leads (`None`: nowhere).
    pub href: Option<String>,
}

/// One attempt (or revision) of a task on the timeline.
#[derive(Debug, Clone)]
pub struct Bar {
    /// The row: the worker, or the pool, that ran it.
    pub row: String,
    /// The task.
    pub task_id: String,
    /// What the bar's tooltip adds (attempt, revision, outcome).
    pub label: String,
    /// When it started.
    pub start: DateTime<Utc>,
    /// When it ended (`None`: still running, drawn up to the timeline's end).
    pub end: Option<DateTime<Utc>>,
    /// How it ended, or where it stands.
    pub status: TaskStatus,
}

/// The styles of the drawings, for a page's stylesheet.
pub const CSS: &str = r#"
svg.swarm-graph, svg.swarm-timeline { font: 12px system-ui, sans-serif; max-width: none; }
.swarm-graph .edge { fill: none; stroke: #8a94a6; stroke-width: 1.5; }
.swarm-graph .node rect { stroke: #4a5568; stroke-width: 1; rx: 6; }
.swarm-graph .node text { fill: #111827; }
.swarm-graph .node .status { fill: #374151; font-size: 11px; }
.swarm-graph a:focus rect, .swarm-graph .node.selected rect { stroke: #1d4ed8; stroke-width: 3; }
.st-pending rect, rect.st-pending { fill: #e5e7eb; }
.st-assigned rect, rect.st-assigned { fill: #dbeafe; }
.st-in-progress rect, rect.st-in-progress { fill: #bfdbfe; }
.st-input-required rect, rect.st-input-required { fill: #fde68a; }
.st-completed rect, rect.st-completed { fill: #bbf7d0; }
.st-failed rect, rect.st-failed { fill: #fecaca; }
.st-cancelled rect, rect.st-cancelled { fill: #e7e5e4; }
.st-skipped rect, rect.st-skipped { fill: #f3f4f6; }
.swarm-timeline .axis { stroke: #9ca3af; }
.swarm-timeline text { fill: #111827; }
.swarm-timeline .tick { fill: #4b5563; font-size: 11px; }
.swarm-timeline rect.bar { stroke: #4a5568; stroke-width: 0.5; }
"#;

const NODE_W: u32 = 176;
const NODE_H: u32 = 44;
const GAP_X: u32 = 56;
const GAP_Y: u32 = 14;
const PAD: u32 = 8;
const TITLE_CHARS: usize = 24;

/// The class of a status: `st-completed`, `st-in-progress`, ...
pub fn status_class(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Pending => "st-pending",
        TaskStatus::Assigned => "st-assigned",
        TaskStatus::InProgress => "st-in-progress",
        TaskStatus::InputRequired => "st-input-required",
        TaskStatus::Completed => "st-completed",
        TaskStatus::Failed => "st-failed",
        TaskStatus::Cancelled => "st-cancelled",
        TaskStatus::Skipped => "st-skipped",
    }
}

/// A status in words, as a node shows it.
pub fn status_word(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Pending => "pending",
        TaskStatus::Assigned => "assigned",
        TaskStatus::InProgress => "in progress",
        TaskStatus::InputRequired => "input required",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
        TaskStatus::Skipped => "skipped",
    }
}

/// `text` safe inside an XML (and so HTML) element or attribute.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters are not allowed in XML 1.0 at all.
            c if c.is_control() && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn shorten(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// Each node's column: the longest chain of dependencies before it.
fn columns(nodes: &[Node<'_>], index: &HashMap<&str, usize>) -> Vec<usize> {
    // Iterative, with a mark for "being computed", so a cycle (which
    // validation refuses, but a drawing must not hang on) ends at once.
    let mut column: Vec<Option<usize>> = vec![None; nodes.len()];
    let mut visiting = vec![false; nodes.len()];
    for start in 0..nodes.len() {
        let mut stack = vec![start];
        while let Some(&i) = stack.last() {
            if column[i].is_some() {
                stack.pop();
                continue;
            }
            visiting[i] = true;
            let mut ready = true;
            let mut col = 0;
            for d in nodes[i].dependencies {
                let Some(&j) = index.get(d.as_str()) else {
                    continue;
                };
                match column[j] {
                    Some(c) => col = col.max(c + 1),
                    None if visiting[j] => {}
                    None => {
                        ready = false;
                        stack.push(j);
                    }
                }
            }
            if ready {
                column[i] = Some(col);
                visiting[i] = false;
                stack.pop();
            }
        }
    }
    column.into_iter().map(Option::unwrap_or_default).collect()
}

/// The task graph as an `<svg>` element.
pub fn graph_svg(nodes: &[Node<'_>]) -> String {
    let index: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
    let column = columns(nodes, &index);
    let width_cols = column.iter().max().map_or(0, |c| c + 1);
    let mut layers: Vec<Vec<usize>> = vec![Vec::new(); width_cols];
    for (i, &c) in column.iter().enumerate() {
        layers[c].push(i);
    }
    // Each column ordered by the mean row of its dependencies.
    let mut row = vec![0usize; nodes.len()];
    for layer in &mut layers {
        let key = |i: &usize| {
            let rows: Vec<usize> = nodes[*i]
                .dependencies
                .iter()
                .filter_map(|d| index.get(d.as_str()))
                .map(|&j| row[j])
                .collect();
            if rows.is_empty() {
                (*i as f64, *i)
            } else {
                (rows.iter().sum::<usize>() as f64 / rows.len() as f64, *i)
            }
        };
        let mut keyed: Vec<((f64, usize), usize)> = layer.iter().map(|i| (key(i), *i)).collect();
        keyed.sort_by(|a, b| a.0.0.total_cmp(&b.0.0).then(a.0.1.cmp(&b.0.1)));
        *layer = keyed.into_iter().map(|(_, i)| i).collect();
        for (r, &i) in layer.iter().enumerate() {
            row[i] = r;
        }
    }
    let tallest = layers.iter().map(Vec::len).max().unwrap_or(0) as u32;
    let width =
        PAD * 2 + (width_cols as u32) * (NODE_W + GAP_X) - GAP_X.min(width_cols as u32 * GAP_X);
    let height = PAD * 2 + tallest * (NODE_H + GAP_Y) - GAP_Y.min(tallest * GAP_Y);
    let at = |i: usize| {
        (
            PAD + column[i] as u32 * (NODE_W + GAP_X),
            PAD + row[i] as u32 * (NODE_H + GAP_Y),
        )
    };
    let mut svg = String::with_capacity(256 + nodes.len() * 420);
    let _ = write!(
        svg,
        r#"<svg class="swarm-graph" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="Task graph: {n} task(s)">"#,
        w = width.max(1),
        h = height.max(1),
        n = nodes.len()
    );
    svg.push_str(r#"<g class="edges">"#);
    for (i, n) in nodes.iter().enumerate() {
        let (x2, y2) = at(i);
        for d in n.dependencies {
            let Some(&j) = index.get(d.as_str()) else {
                continue;
            };
            let (x1, y1) = at(j);
            let (sx, sy) = (x1 + NODE_W, y1 + NODE_H / 2);
            let (ex, ey) = (x2, y2 + NODE_H / 2);
            let mid = (sx + ex) / 2;
            let _ = write!(
                svg,
                r#"<path class="edge" data-from="{}" data-to="{}" d="M{sx} {sy} C{mid} {sy} {mid} {ey} {ex} {ey}"/>"#,
                escape(d),
                escape(n.id),
            );
        }
    }
    svg.push_str("</g>");
    for (i, n) in nodes.iter().enumerate() {
        let (x, y) = at(i);
        let class = status_class(n.status);
        let id = escape(n.id);
        let word = status_word(n.status);
        let title = if n.title.trim().is_empty() {
            n.id
        } else {
            n.title
        };
        if let Some(href) = &n.href {
            let _ = write!(svg, r#"<a href="{}">"#, escape(href));
        }
        let _ = write!(
            svg,
            r#"<g class="node {class}" data-task="{id}" data-status="{status}" transform="translate({x} {y})"><title>{id}: {full} ({word})</title><rect width="{NODE_W}" height="{NODE_H}"/><text x="8" y="17">{short}</text><text class="status" x="8" y="34">{sid} · <tspan class="word">{word}</tspan></text></g>"#,
            status = &class[3..],
            full = escape(title),
            short = escape(&shorten(title, TITLE_CHARS)),
            sid = escape(&shorten(n.id, 12)),
        );
        if n.href.is_some() {
            svg.push_str("</a>");
        }
    }
    svg.push_str("</svg>");
    svg
}

const TL_LABEL_W: f64 = 150.0;
const TL_PLOT_W: f64 = 640.0;
const TL_LANE_H: f64 = 20.0;
const TL_ROW_GAP: f64 = 8.0;
const TL_AXIS_H: f64 = 22.0;

/// A span of seconds in a few characters: `0.4 ms`, `850 ms`, `12.4 s`,
/// `3 min 5 s`. Under 10 ms it keeps a tenth, and a span too short for that
/// reads `<0.1 ms`, so a quick attempt never reads as taking no time.
fn short_duration(secs: f64) -> String {
    if secs <= 0.0 {
        "0 ms".to_owned()
    } else if secs < 0.000_05 {
        "<0.1 ms".to_owned()
    } else if secs < 0.009_95 {
        let tenths = (secs * 10_000.0).round() as u32;
        if tenths.is_multiple_of(10) {
            format!("{} ms", tenths / 10)
        } else {
            format!("{}.{} ms", tenths / 10, tenths % 10)
        }
    } else if secs < 1.0 {
        format!("{:.0} ms", secs * 1000.0)
    } else if secs < 60.0 {
        format!("{secs:.1} s")
    } else {
        let m = (secs / 60.0).floor();
        format!("{m:.0} min {:.0} s", secs - m * 60.0)
    }
}

/// The timeline as an `<svg>` element: a row per worker, a bar per attempt;
/// a bar still running reaches `now`.
pub fn timeline_svg(bars: &[Bar], now: DateTime<Utc>) -> String {
    let Some(first) = bars.iter().map(|b| b.start).min() else {
        return String::from(
            r#"<svg class="swarm-timeline" width="1" height="1" role="img" aria-label="Timeline: nothing has run yet"></svg>"#,
        );
    };
    let last = bars
        .iter()
        .map(|b| b.end.unwrap_or(now).max(b.start))
        .max()
        .unwrap_or(first);
    let span = ((last - first).num_microseconds().unwrap_or(0) as f64 / 1e6).max(0.001);
    let x_of = |t: DateTime<Utc>| {
        let s = (t - first).num_microseconds().unwrap_or(0) as f64 / 1e6;
        TL_LABEL_W + (s / span).clamp(0.0, 1.0) * TL_PLOT_W
    };
    // Rows in order of their first bar; within a row, bars that overlap go
    // to lanes of their own.
    let mut order: Vec<usize> = (0..bars.len()).collect();
    order.sort_by_key(|&i| (bars[i].start, i));
    let mut rows: Vec<(&str, Vec<Vec<usize>>)> = Vec::new();
    for &i in &order {
        let b = &bars[i];
        let r = match rows.iter().position(|(name, _)| *name == b.row.as_str()) {
            Some(r) => r,
            None => {
                rows.push((b.row.as_str(), Vec::new()));
                rows.len() - 1
            }
        };
        let lanes = &mut rows[r].1;
        let free = lanes.iter().position(|lane| {
            lane.last()
                .is_none_or(|&j| bars[j].end.unwrap_or(now) <= b.start)
        });
        match free {
            Some(l) => lanes[l].push(i),
            None => lanes.push(vec![i]),
        }
    }
    let lanes_total: usize = rows.iter().map(|(_, l)| l.len()).sum();
    let height = TL_AXIS_H + lanes_total as f64 * TL_LANE_H + rows.len() as f64 * TL_ROW_GAP + 4.0;
    let width = TL_LABEL_W + TL_PLOT_W + 40.0;
    let mut svg = String::with_capacity(256 + bars.len() * 200);
    let _ = write!(
        svg,
        r#"<svg class="swarm-timeline" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img" aria-label="Timeline: {} attempt(s) on {} worker(s) over {}">"#,
        bars.len(),
        rows.len(),
        short_duration(span)
    );
    for k in 0..=4 {
        let x = TL_LABEL_W + TL_PLOT_W * f64::from(k) / 4.0;
        let _ = write!(
            svg,
            r#"<line class="axis" x1="{x:.1}" y1="14" x2="{x:.1}" y2="{:.1}"/><text class="tick" x="{x:.1}" y="11" text-anchor="middle">{}</text>"#,
            height - 2.0,
            if k == 0 {
                "0".to_owned()
            } else {
                short_duration(span * f64::from(k) / 4.0)
            }
        );
    }
    let mut y = TL_AXIS_H;
    for (name, lanes) in &rows {
        let row_h = lanes.len() as f64 * TL_LANE_H;
        let _ = write!(
            svg,
            r#"<text x="4" y="{:.1}"><title>{}</title>{}</text>"#,
            y + row_h / 2.0 + 4.0,
            escape(name),
            escape(&shorten(name, 20))
        );
        for (l, lane) in lanes.iter().enumerate() {
            let top = y + l as f64 * TL_LANE_H + 2.0;
            for &i in lane {
                let b = &bars[i];
                let end = b.end.unwrap_or(now).max(b.start);
                let x1 = x_of(b.start);
                let w = (x_of(end) - x1).max(2.0);
                let secs = (end - b.start).num_microseconds().unwrap_or(0) as f64 / 1e6;
                let _ = write!(
                    svg,
                    r#"<rect class="bar {}" data-task="{}" x="{x1:.1}" y="{top:.1}" width="{w:.1}" height="{:.1}"><title>{}: {} — {}, {}</title></rect>"#,
                    status_class(b.status),
                    escape(&b.task_id),
                    TL_LANE_H - 4.0,
                    escape(&b.task_id),
                    escape(&b.label),
                    status_word(b.status),
                    short_duration(secs)
                );
            }
        }
        y += row_h + TL_ROW_GAP;
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn short_spans_never_read_as_nothing() {
        assert_eq!(short_duration(0.0), "0 ms");
        assert_eq!(short_duration(0.000_01), "<0.1 ms");
        assert_eq!(short_duration(0.000_4), "0.4 ms");
        assert_eq!(short_duration(0.002_7), "2.7 ms");
        assert_eq!(short_duration(0.001), "1 ms");
        assert_eq!(short_duration(0.012), "12 ms");
        assert_eq!(short_duration(0.85), "850 ms");
        assert_eq!(short_duration(12.44), "12.4 s");
        assert_eq!(short_duration(185.0), "3 min 5 s");
    }

    #[test]
    fn columns_follow_the_longest_chain_and_survive_cycles() {
        let (a, b, c, d) = (deps(&[]), deps(&["a"]), deps(&["a", "b"]), deps(&["d"]));
        let nodes = [
            Node {
                id: "c",
                title: "",
                status: TaskStatus::Pending,
                dependencies: &c,
                href: None,
            },
            Node {
                id: "a",
                title: "",
                status: TaskStatus::Pending,
                dependencies: &a,
                href: None,
            },
            Node {
                id: "b",
                title: "",
                status: TaskStatus::Pending,
                dependencies: &b,
                href: None,
            },
            Node {
                id: "d",
                title: "",
                status: TaskStatus::Pending,
                dependencies: &d,
                href: None,
            },
        ];
        let index = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
        assert_eq!(columns(&nodes, &index), vec![2, 0, 1, 0]);
    }

    #[test]
    fn the_graph_escapes_what_missions_and_models_wrote() {
        let none = deps(&[]);
        let after = deps(&["<x>"]);
        let nodes = [
            Node {
                id: "<x>",
                title: "<script>alert(1)</script>",
                status: TaskStatus::Completed,
                dependencies: &none,
                href: Some("#t\"><script>".into()),
            },
            Node {
                id: "y",
                title: "a & b",
                status: TaskStatus::InProgress,
                dependencies: &after,
                href: None,
            },
        ];
        let svg = graph_svg(&nodes);
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"));
        assert!(svg.contains("a &amp; b"));
        assert!(svg.contains(r#"data-task="y" data-status="in-progress""#));
        assert!(svg.contains(r#"class="edge" data-from="&lt;x&gt;" data-to="y""#));
    }

    #[test]
    fn overlapping_bars_of_one_worker_get_lanes_and_running_ones_reach_now() {
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let s = chrono::TimeDelta::seconds;
        let bar = |task: &str, from: i64, to: Option<i64>| Bar {
            row: "w1".into(),
            task_id: task.into(),
            label: "attempt 1".into(),
            start: t0 + s(from),
            end: to.map(|t| t0 + s(t)),
            status: if to.is_some() {
                TaskStatus::Completed
            } else {
                TaskStatus::InProgress
            },
        };
        let svg = timeline_svg(
            &[
                bar("a", 0, Some(4)),
                bar("b", 1, Some(2)),
                bar("c", 5, None),
            ],
            t0 + s(8),
        );
        assert_eq!(svg.matches("<rect class=\"bar").count(), 3);
        // b overlaps a: a second lane, so the svg is two lanes tall.
        assert!(svg.contains("height=\"74\""), "{svg}");
        assert!(svg.contains("8.0 s"), "the axis reaches now: {svg}");
        assert!(timeline_svg(&[], t0).contains("nothing has run yet"));
    }
}
