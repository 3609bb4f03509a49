//! The HTML report: turns a manager's `FinalReport` into one self-contained page.
//!
//! All the logic lives here, in Rust: statuses become labels and badge
//! classes, timestamps become RFC 3339 UTC strings, durations become human
//! text (`1.24 s`, `3 min 05 s`). The result is a small serializable view
//! model that `templates/report.html` only lays out, with minijinja's HTML
//! auto-escaping on for every value: nothing a worker or a mission writes can
//! inject markup into the page. The page has inline CSS, no scripts and no
//! external assets, so it can be stored, mailed and printed as one file.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value};
use serde::Serialize;
use swarm_common::{
    FinalReport, GateVerdict, SwarmDeploymentPlan, SwarmStatus, TaskOutcome, TaskStatus,
    WorkerDeploymentPlan,
};

/// The template's name: `.html`, the ending minijinja escapes HTML for by default.
const TEMPLATE_NAME: &str = "report.html";

/// The template, embedded so the boss binary carries its report layout.
const TEMPLATE_SOURCE: &str = include_str!("../templates/report.html");

/// Most characters of the mission in the page's title and heading.
const TITLE_CHARS: usize = 100;

/// What a report is rendered from.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// The swarm that carried out the mission.
    pub swarm_id: &'a str,
    /// The mission's text as the boss accepted it.
    pub mission: &'a str,
    /// The caller's id for the mission, if it gave one.
    pub mission_id: Option<&'a str>,
    /// The plan that was deployed, if the boss still has it.
    pub plan: Option<&'a SwarmDeploymentPlan>,
    /// The manager's final report.
    pub report: &'a FinalReport,
    /// The boss agent that renders the page.
    pub rendered_by: &'a str,
}

/// Why a report could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The view model could not be turned into template values.
    #[error("the report's view model could not be serialized: {0}")]
    ViewModel(#[from] serde_json::Error),
    /// The template failed to parse or to render.
    #[error("the report template failed: {0}")]
    Template(#[from] minijinja::Error),
}

/// Renders the final report of a swarm as one self-contained HTML page.
pub fn render_html(input: &ReportInput<'_>) -> Result<String, ReportError> {
    render_at(input, Utc::now())
}

/// [`render_html`] with the rendering time given, so tests are deterministic.
fn render_at(input: &ReportInput<'_>, rendered_at: DateTime<Utc>) -> Result<String, ReportError> {
    let page = PageView::build(input, rendered_at);
    let context = to_template_value(serde_json::to_value(&page)?);
    let html = environment()?
        .get_template(TEMPLATE_NAME)?
        .render(context)?;
    Ok(html)
}

/// The template environment, with the page's template compiled once per
/// process rather than once per report (compiling it cost more than
/// rendering a 50-task report).
fn environment() -> Result<&'static Environment<'static>, ReportError> {
    static ENV: std::sync::OnceLock<Result<Environment<'static>, minijinja::Error>> =
        std::sync::OnceLock::new();
    let env = ENV.get_or_init(|| {
        let mut env = Environment::new();
        // The `.html` name already selects HTML escaping; say so explicitly, so a
        // renamed template can never render unescaped worker output.
        env.set_auto_escape_callback(|_| AutoEscape::Html);
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_syntax(
            SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()?,
        );
        env.add_template(TEMPLATE_NAME, TEMPLATE_SOURCE)?;
        Ok(env)
    });
    env.as_ref()
        .map_err(|e| ReportError::Template(minijinja::Error::new(e.kind(), e.to_string())))
}

/// Turns serialized JSON into template values. (minijinja's own serde support
/// is an optional feature; this keeps the view model serializable without it.)
fn to_template_value(value: serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s),
        serde_json::Value::Array(items) => {
            Value::from(items.into_iter().map(to_template_value).collect::<Vec<_>>())
        }
        serde_json::Value::Object(map) => Value::from(
            map.into_iter()
                .map(|(k, v)| (k, to_template_value(v)))
                .collect::<BTreeMap<String, Value>>(),
        ),
    }
}

/// Everything the template shows, already formatted.
#[derive(Debug, Serialize)]
struct PageView {
    title: String,
    mission: String,
    swarm_id: String,
    mission_id: Option<String>,
    status: BadgeView,
    started_at: String,
    completed_at: String,
    duration: String,
    summary: String,
    insights: Vec<String>,
    counts: Vec<CountView>,
    metrics: Vec<MetricView>,
    plan: Option<PlanView>,
    tasks: Vec<TaskView>,
    rendered_by: String,
    rendered_at: String,
    swarm_version: String,
    protocol_version: String,
}

/// A status as the page shows it.
#[derive(Debug, Serialize)]
struct BadgeView {
    /// The protocol's name for it (`TimedOut`), for `data-status`.
    code: String,
    /// The words shown (`Timed out`).
    label: String,
    /// The CSS colour class (`ok`, `bad`, `muted`, `warn`, `info`).
    class: String,
}

/// How many tasks ended in one status.
#[derive(Debug, Serialize)]
struct CountView {
    label: String,
    class: String,
    count: usize,
}

/// One row of the metrics table.
#[derive(Debug, Serialize)]
struct MetricView {
    name: String,
    key: String,
    value: String,
    /// A readable form of the value, for durations in milliseconds.
    hint: Option<String>,
}

/// The deployed plan.
#[derive(Debug, Serialize)]
struct PlanView {
    manager_directive: String,
    planner: String,
    success_criteria: Vec<String>,
    planned_tasks: usize,
    workers: Vec<PersonaView>,
}

/// One worker persona of the plan.
#[derive(Debug, Serialize)]
struct PersonaView {
    name: String,
    anchor: String,
    role: String,
    pool: String,
    tools: Vec<String>,
    collaborators: Vec<String>,
    system_prompt: String,
}

/// One task of the report.
#[derive(Debug, Serialize)]
struct TaskView {
    id: String,
    anchor: String,
    title: String,
    description: String,
    assigned_to: String,
    /// The persona's anchor in the plan section, when the plan has it.
    persona_anchor: Option<String>,
    pool: Option<String>,
    dependencies: Vec<LinkView>,
    status: BadgeView,
    attempts: u32,
    revisions: u32,
    assigned_at: String,
    started_at: String,
    completed_at: String,
    duration: String,
    provider: String,
    result: String,
    result_bytes: String,
    result_truncated: bool,
    result_seq: Option<u64>,
    error: Option<String>,
    revisions_judged: Vec<RevisionView>,
    gates_passed: usize,
    gates_failed: usize,
}

/// A reference to another task, linked when the report has it.
#[derive(Debug, Serialize)]
struct LinkView {
    id: String,
    anchor: Option<String>,
}

/// The gate verdicts on one revision of a result.
#[derive(Debug, Serialize)]
struct RevisionView {
    revision: u32,
    passed: bool,
    verdicts: Vec<VerdictView>,
}

/// One gate verdict.
#[derive(Debug, Serialize)]
struct VerdictView {
    gate: String,
    passed: bool,
    reason: String,
}

impl PageView {
    fn build(input: &ReportInput<'_>, rendered_at: DateTime<Utc>) -> Self {
        let report = input.report;
        let mission = if input.mission.trim().is_empty() {
            report.mission.clone()
        } else {
            input.mission.to_string()
        };
        let personas: Vec<PersonaView> = input
            .plan
            .map(|p| {
                p.workers
                    .iter()
                    .enumerate()
                    .map(|(i, w)| PersonaView::build(i, w))
                    .collect()
            })
            .unwrap_or_default();
        let task_anchors: BTreeMap<&str, String> = report
            .task_results
            .iter()
            .enumerate()
            .map(|(i, t)| (t.task_id.as_str(), anchor("task", i, &t.task_id)))
            .collect();
        let tasks = report
            .task_results
            .iter()
            .enumerate()
            .map(|(i, t)| TaskView::build(i, t, &task_anchors, input.plan, &personas))
            .collect();
        let plan = input.plan.map(|p| PlanView {
            manager_directive: p.manager_directive.clone(),
            planner: p.planner.clone(),
            success_criteria: p.success_criteria.clone(),
            planned_tasks: p.tasks.len(),
            workers: personas,
        });
        Self {
            title: shorten(&mission, TITLE_CHARS),
            mission,
            swarm_id: input.swarm_id.to_string(),
            mission_id: input.mission_id.map(str::to_string),
            status: swarm_badge(report.overall_status),
            started_at: timestamp(report.started_at),
            completed_at: timestamp(report.completed_at),
            duration: human_duration(report.completed_at - report.started_at),
            summary: report.summary.clone(),
            insights: report.insights.clone(),
            counts: task_counts(&report.task_results),
            metrics: report
                .metrics
                .iter()
                .map(|(k, v)| MetricView::build(k, *v))
                .collect(),
            plan,
            tasks,
            rendered_by: input.rendered_by.to_string(),
            rendered_at: timestamp(rendered_at),
            swarm_version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: swarm_common::PROTOCOL_VERSION.to_string(),
        }
    }
}

impl PersonaView {
    fn build(index: usize, w: &WorkerDeploymentPlan) -> Self {
        Self {
            name: w.name.clone(),
            anchor: anchor("persona", index, &w.name),
            role: w.role.clone(),
            pool: w.pool.clone(),
            tools: w.tools.clone(),
            collaborators: w.collaborators.clone(),
            system_prompt: w.system_prompt.clone(),
        }
    }
}

impl TaskView {
    fn build(
        index: usize,
        t: &TaskOutcome,
        task_anchors: &BTreeMap<&str, String>,
        plan: Option<&SwarmDeploymentPlan>,
        personas: &[PersonaView],
    ) -> Self {
        let persona = personas.iter().find(|p| p.name == t.assigned_to);
        let pool = plan.and_then(|p| {
            p.workers
                .iter()
                .find(|w| w.name == t.assigned_to)
                .map(|w| w.pool.clone())
        });
        let revisions_judged = group_verdicts(&t.gate_verdicts);
        let gates_passed = t.gate_verdicts.iter().filter(|v| v.passed).count();
        Self {
            id: t.task_id.clone(),
            anchor: anchor("task", index, &t.task_id),
            title: t.title.clone(),
            description: t.description.clone(),
            assigned_to: t.assigned_to.clone(),
            persona_anchor: persona.map(|p| p.anchor.clone()),
            pool,
            dependencies: t
                .dependencies
                .iter()
                .map(|d| LinkView {
                    id: d.clone(),
                    anchor: task_anchors.get(d.as_str()).cloned(),
                })
                .collect(),
            status: task_badge(t.status),
            attempts: t.attempts,
            revisions: t.revisions,
            assigned_at: optional_timestamp(t.assigned_at),
            started_at: optional_timestamp(t.started_at),
            completed_at: optional_timestamp(t.completed_at),
            duration: match (t.started_at, t.completed_at) {
                (Some(start), Some(end)) => human_duration(end - start),
                _ => NONE.to_string(),
            },
            provider: t.provider.clone(),
            result: t.result.clone(),
            result_bytes: human_bytes(t.result.len()),
            result_truncated: t.result_truncated,
            result_seq: t.result_seq,
            error: t.error.clone().filter(|e| !e.trim().is_empty()),
            revisions_judged,
            gates_passed,
            gates_failed: t.gate_verdicts.len() - gates_passed,
        }
    }
}

impl MetricView {
    fn build(key: &str, value: f64) -> Self {
        let hint = if value.is_finite()
            && value >= 0.0
            && (key.ends_with("_ms") || key.ends_with("_millis"))
        {
            TimeDelta::try_milliseconds(value.round() as i64).map(human_duration)
        } else {
            None
        };
        Self {
            name: humanize_key(key),
            key: key.to_string(),
            value: format_number(value),
            hint,
        }
    }
}

/// Shown where a value is missing.
const NONE: &str = "—";

/// A fragment id that is unique (by position) and safe in any attribute.
fn anchor(kind: &str, index: usize, name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("{kind}-{index}-{safe}")
}

/// The verdicts grouped by the revision they judged, oldest revision first,
/// each group in the order the gates ran.
fn group_verdicts(verdicts: &[GateVerdict]) -> Vec<RevisionView> {
    let mut by_revision: BTreeMap<u32, Vec<VerdictView>> = BTreeMap::new();
    for v in verdicts {
        by_revision
            .entry(v.revision)
            .or_default()
            .push(VerdictView {
                gate: v.gate.clone(),
                passed: v.passed,
                reason: v.reason.clone(),
            });
    }
    by_revision
        .into_iter()
        .map(|(revision, verdicts)| RevisionView {
            revision,
            passed: verdicts.iter().all(|v| v.passed),
            verdicts,
        })
        .collect()
}

/// How many tasks ended in each status, in a fixed order, skipping zeros.
fn task_counts(tasks: &[TaskOutcome]) -> Vec<CountView> {
    let mut counts: BTreeMap<TaskStatus, usize> = BTreeMap::new();
    for t in tasks {
        *counts.entry(t.status).or_insert(0) += 1;
    }
    counts
        .into_iter()
        .map(|(status, count)| {
            let badge = task_badge(status);
            CountView {
                label: badge.label,
                class: badge.class,
                count,
            }
        })
        .collect()
}

fn badge(code: &str, label: &str, class: &str) -> BadgeView {
    BadgeView {
        code: code.to_string(),
        label: label.to_string(),
        class: class.to_string(),
    }
}

/// The badge of a swarm's overall status.
fn swarm_badge(status: SwarmStatus) -> BadgeView {
    match status {
        SwarmStatus::Running => badge("Running", "Running", "info"),
        SwarmStatus::Completed => badge("Completed", "Completed", "ok"),
        SwarmStatus::Failed => badge("Failed", "Failed", "bad"),
        SwarmStatus::Cancelled => badge("Cancelled", "Cancelled", "muted"),
        SwarmStatus::TimedOut => badge("TimedOut", "Timed out", "warn"),
    }
}

/// The badge of a task's status.
fn task_badge(status: TaskStatus) -> BadgeView {
    match status {
        TaskStatus::Pending => badge("Pending", "Pending", "muted"),
        TaskStatus::Assigned => badge("Assigned", "Assigned", "info"),
        TaskStatus::InProgress => badge("InProgress", "In progress", "info"),
        TaskStatus::InputRequired => badge("InputRequired", "Input required", "warn"),
        TaskStatus::Completed => badge("Completed", "Completed", "ok"),
        TaskStatus::Failed => badge("Failed", "Failed", "bad"),
        TaskStatus::Cancelled => badge("Cancelled", "Cancelled", "muted"),
    }
}

/// RFC 3339 in UTC to the second: `2025-01-31T09:05:00Z`.
fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn optional_timestamp(t: Option<DateTime<Utc>>) -> String {
    t.map(timestamp).unwrap_or_else(|| NONE.to_string())
}

/// A duration for people: `340 ms`, `1.24 s`, `3 min 05 s`, `2 h 03 min 09 s`,
/// `1 d 04 h 10 min`. A negative span (clock skew) keeps its sign.
fn human_duration(d: TimeDelta) -> String {
    let micros = d
        .num_microseconds()
        .unwrap_or_else(|| d.num_milliseconds().saturating_mul(1000));
    let sign = if micros < 0 { "-" } else { "" };
    let micros = micros.unsigned_abs();
    let millis = (micros + 500) / 1000;
    if millis < 1000 {
        return format!("{sign}{millis} ms");
    }
    let centis = (micros + 5_000) / 10_000;
    if centis < 6000 {
        return format!("{sign}{}.{:02} s", centis / 100, centis % 100);
    }
    let secs = (micros + 500_000) / 1_000_000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (hours, rest) = (rest / 3600, rest % 3600);
    let (mins, secs) = (rest / 60, rest % 60);
    if days > 0 {
        format!("{sign}{days} d {hours:02} h {mins:02} min")
    } else if hours > 0 {
        format!("{sign}{hours} h {mins:02} min {secs:02} s")
    } else {
        format!("{sign}{mins} min {secs:02} s")
    }
}

/// A byte count for people: `512 B`, `3.4 KiB`, `1.2 MiB`.
fn human_bytes(n: usize) -> String {
    const KIB: f64 = 1024.0;
    let f = n as f64;
    if f < KIB {
        format!("{n} B")
    } else if f < KIB * KIB {
        format!("{:.1} KiB", f / KIB)
    } else {
        format!("{:.1} MiB", f / (KIB * KIB))
    }
}

/// A metric value: whole numbers without decimals, others to three places.
fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `tasks_completed` becomes `Tasks completed`.
fn humanize_key(key: &str) -> String {
    let spaced = key.replace(['_', '.'], " ");
    let mut chars = spaced.trim().chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => key.to_string(),
    }
}

/// At most `max` characters of the first line of `text`, with `…` if cut.
fn shorten(text: &str, max: usize) -> String {
    let text = text.trim();
    let line = text.lines().next().unwrap_or("").trim();
    if line.len() == text.len() && line.chars().count() <= max {
        return line.to_string();
    }
    let cut: String = line.chars().take(max).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 14, h, m, s).unwrap()
    }

    fn outcome(id: &str, status: TaskStatus) -> TaskOutcome {
        TaskOutcome {
            task_id: id.to_string(),
            title: format!("Title of {id}"),
            description: format!("Describe {id}"),
            assigned_to: "researcher".to_string(),
            dependencies: Vec::new(),
            status,
            result: String::new(),
            result_truncated: false,
            result_seq: None,
            attempts: 1,
            revisions: 0,
            assigned_at: None,
            started_at: None,
            completed_at: None,
            error: None,
            gate_verdicts: Vec::new(),
            provider: "offline".to_string(),
        }
    }

    fn fixture() -> (FinalReport, SwarmDeploymentPlan) {
        let mut gather = outcome("gather-facts", TaskStatus::Completed);
        gather.result = "Found: <script>alert(1)</script> & more".to_string();
        gather.result_truncated = true;
        gather.result_seq = Some(42);
        gather.assigned_at = Some(at(9, 0, 0));
        gather.started_at = Some(at(9, 0, 1));
        gather.completed_at = Some(at(9, 3, 6));
        gather.gate_verdicts = vec![GateVerdict {
            gate: "non_empty".to_string(),
            passed: true,
            reason: String::new(),
            revision: 0,
        }];

        let mut analyse = outcome("analyse_data", TaskStatus::Failed);
        analyse.assigned_to = "analyst".to_string();
        analyse.dependencies = vec!["gather-facts".to_string()];
        analyse.attempts = 2;
        analyse.revisions = 1;
        analyse.started_at = Some(at(9, 4, 0));
        analyse.completed_at = Some(at(9, 4, 2));
        analyse.error = Some("model refused: quota exceeded".to_string());
        analyse.gate_verdicts = vec![
            GateVerdict {
                gate: "max_bytes".to_string(),
                passed: false,
                reason: "result is 9000 bytes; the limit is 4096".to_string(),
                revision: 0,
            },
            GateVerdict {
                gate: "max_bytes".to_string(),
                passed: true,
                reason: String::new(),
                revision: 1,
            },
        ];

        let mut write = outcome("write-summary", TaskStatus::Cancelled);
        write.assigned_to = "writer".to_string();
        write.dependencies = vec!["analyse_data".to_string(), "missing-dep".to_string()];
        write.attempts = 0;
        write.error = Some("dependency analyse_data failed".to_string());

        let report = FinalReport {
            overall_status: SwarmStatus::Failed,
            mission: "Compare three rust web frameworks".to_string(),
            summary: "Facts were gathered; analysis failed.".to_string(),
            insights: vec!["Axum is popular".to_string()],
            task_results: vec![gather, analyse, write],
            metrics: BTreeMap::from([
                ("tasks_completed".to_string(), 1.0),
                ("duration_ms".to_string(), 185_000.0),
                ("tokens_per_step".to_string(), 12.3456),
            ]),
            started_at: at(9, 0, 0),
            completed_at: at(9, 5, 5),
        };
        let worker = |name: &str, role: &str| WorkerDeploymentPlan {
            name: name.to_string(),
            role: role.to_string(),
            system_prompt: format!("You are the {name}. Use <b>care</b>."),
            tools: vec!["web_search".to_string(), "calculator".to_string()],
            collaborators: Vec::new(),
            pool: "general".to_string(),
        };
        let plan = SwarmDeploymentPlan {
            manager_directive: "Deliver a comparison table.".to_string(),
            workers: vec![
                worker("researcher", "Finds facts"),
                worker("analyst", "Compares"),
                worker("writer", "Writes"),
            ],
            tasks: Vec::new(),
            success_criteria: vec!["Names three frameworks".to_string()],
            planner: "offline-planner".to_string(),
        };
        (report, plan)
    }

    fn render(report: &FinalReport, plan: Option<&SwarmDeploymentPlan>) -> String {
        render_html(&ReportInput {
            swarm_id: "swarm-1234",
            mission: &report.mission,
            mission_id: Some("mission-77"),
            plan,
            report,
            rendered_by: "boss-a1",
        })
        .unwrap()
    }

    #[test]
    fn full_report_renders_every_task() {
        let (report, plan) = fixture();
        let html = render(&report, Some(&plan));
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("Compare three rust web frameworks"));
        assert!(html.contains("swarm-1234"));
        assert!(html.contains("mission-77"));
        assert!(html.contains(r#"data-status="Failed""#));
        for id in ["gather-facts", "analyse_data", "write-summary"] {
            assert!(html.contains(id), "task {id} missing");
        }
        for status in ["Completed", "Failed", "Cancelled"] {
            assert!(
                html.contains(&format!(">{status}<")),
                "status {status} missing"
            );
        }
        assert!(html.contains("model refused: quota exceeded"));
        assert!(html.contains("result is 9000 bytes; the limit is 4096"));
        assert!(html.contains("truncated"));
        assert!(html.contains("offline-planner"));
        assert!(html.contains("Deliver a comparison table."));
        assert!(html.contains("web_search"));
        assert!(html.contains("<details"));
        assert!(html.contains("3 min 05 s"));
        assert!(html.contains("2.00 s"));
        assert!(html.contains("5 min 05 s"));
        assert!(html.contains("2025-03-14T09:00:01Z"));
        assert!(html.contains("12.346"));
        assert!(html.contains("boss-a1"));
        assert!(html.contains(swarm_common::PROTOCOL_VERSION));
    }

    #[test]
    fn worker_output_is_escaped() {
        let (report, plan) = fixture();
        let html = render(&report, Some(&plan));
        assert!(html.contains("&lt;script&gt;alert(1)"));
        assert!(!html.contains("<script>alert(1)</script>"));
        assert!(!html.to_ascii_lowercase().contains("<script"));
        assert!(html.contains("&lt;b&gt;care"));
        assert!(html.contains("&amp; more"));
    }

    #[test]
    fn report_without_plan_renders() {
        let (report, _) = fixture();
        let html = render(&report, None);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.contains("write-summary"));
        assert!(html.contains("plan was not available"));
    }

    #[test]
    fn page_is_self_contained() {
        let (report, plan) = fixture();
        let html = render(&report, Some(&plan));
        assert!(!html.contains("http://"));
        assert!(!html.contains("https://"));
        assert!(!html.contains("<link"));
        assert!(!html.contains(" src="));
        assert!(html.contains("<style>"));
    }

    #[test]
    fn empty_report_renders() {
        let report = FinalReport {
            overall_status: SwarmStatus::TimedOut,
            mission: String::new(),
            summary: String::new(),
            insights: Vec::new(),
            task_results: Vec::new(),
            metrics: BTreeMap::new(),
            started_at: at(1, 0, 0),
            completed_at: at(1, 0, 0),
        };
        let html = render_html(&ReportInput {
            swarm_id: "s",
            mission: "",
            mission_id: None,
            plan: None,
            report: &report,
            rendered_by: "boss",
        })
        .unwrap();
        assert!(html.contains("Timed out"));
        assert!(html.contains(r#"data-status="TimedOut""#));
    }

    #[test]
    fn errors_travel_through_anyhow() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<ReportError>();
    }

    #[test]
    fn statuses_have_their_colours() {
        assert_eq!(swarm_badge(SwarmStatus::Completed).class, "ok");
        assert_eq!(swarm_badge(SwarmStatus::Failed).class, "bad");
        assert_eq!(swarm_badge(SwarmStatus::Cancelled).class, "muted");
        assert_eq!(swarm_badge(SwarmStatus::TimedOut).class, "warn");
    }

    #[test]
    fn durations_read_well() {
        let ms = TimeDelta::milliseconds;
        assert_eq!(human_duration(ms(0)), "0 ms");
        assert_eq!(human_duration(ms(340)), "340 ms");
        assert_eq!(human_duration(ms(1240)), "1.24 s");
        assert_eq!(human_duration(ms(59_996)), "1 min 00 s");
        assert_eq!(human_duration(ms(185_000)), "3 min 05 s");
        assert_eq!(human_duration(ms(7_389_000)), "2 h 03 min 09 s");
        assert_eq!(human_duration(ms(101_400_000)), "1 d 04 h 10 min");
        assert_eq!(human_duration(ms(-1500)), "-1.50 s");
    }

    #[test]
    fn small_helpers() {
        assert_eq!(format_number(3.0), "3");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(humanize_key("tasks_completed"), "Tasks completed");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(anchor("task", 2, "a b<c"), "task-2-a_b_c");
        assert_eq!(shorten("short", 80), "short");
        assert_eq!(shorten("line one\nline two", 80), "line one…");
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(timestamp(at(9, 5, 5)), "2025-03-14T09:05:05Z");
    }
}
