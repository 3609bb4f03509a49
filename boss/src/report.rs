//! The HTML report: turns a manager's `FinalReport` into one self-contained page.
//!
//! All the logic lives here, in Rust: statuses become labels and badge
//! classes, timestamps become UTC text to the millisecond
//! (`2026-12-02 12:40:01.234 UTC`, RFC 3339 in `<time datetime>`), durations
//! become human text with sub-millisecond precision where it matters
//! (`0.4 ms`, `140 ms`, `1.24 s`, `3 min 05 s`), and metric keys become names
//! a person reads with values in their unit (`Cost (USD)`: `$0.0123`). A
//! report that did not complete opens with a box naming the tasks that
//! failed or were cancelled and why, failures first, and lists its tasks in
//! that order too. The result is a small serializable view model that
//! `templates/report.html` only lays out, with minijinja's HTML auto-escaping
//! on for every value: nothing a worker or a mission writes can inject markup
//! into the page. The page has inline CSS, no scripts and no external assets,
//! so it can be stored, mailed and printed as one file.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDate, SecondsFormat, TimeDelta, Timelike, Utc};
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
    /// The mission's trace, when it was traced.
    trace_id: Option<String>,
    status: BadgeView,
    started_at: TimeView,
    completed_at: TimeView,
    duration: String,
    /// Why the mission did not complete, for the top of the page; `None`
    /// when it completed.
    failure: Option<FailureView>,
    summary: String,
    insights: Vec<String>,
    counts: Vec<CountView>,
    metrics: Vec<MetricView>,
    /// The learned skills the tasks recorded and were offered.
    skills: Vec<SkillView>,
    plan: Option<PlanView>,
    /// Failed tasks first, then cancelled ones, then the rest, each group in
    /// plan order.
    tasks: Vec<TaskView>,
    /// Whether that order differs from the plan's, so the page can say so.
    tasks_reordered: bool,
    /// The task graph and the timeline, as inline SVG (escaped where it
    /// is made, in [`crate::graph`]).
    graph_svg: String,
    timeline_svg: String,
    graph_css: &'static str,
    rendered_by: String,
    rendered_at: TimeView,
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

/// A point in time as the page shows it.
#[derive(Debug, Serialize)]
struct TimeView {
    /// RFC 3339 with milliseconds, for `<time datetime>`.
    iso: String,
    /// `2026-12-02 12:40:01.234 UTC`.
    text: String,
    /// The time of day alone (`12:40:01.234`) when it falls on the day the
    /// mission started, for the task table; otherwise `text`.
    short: String,
}

/// The box at the top of a report that did not complete.
#[derive(Debug, Serialize)]
struct FailureView {
    heading: String,
    lead: String,
    entries: Vec<FailureEntryView>,
}

/// Tasks that ended the same way for the same reason: one failed task, or
/// every task cancelled with one reason (a timeout cancels them all alike).
#[derive(Debug, Serialize)]
struct FailureEntryView {
    status: BadgeView,
    tasks: Vec<TaskRefView>,
    reason: Option<String>,
}

/// A task named in the failure box, linked to its details.
#[derive(Debug, Serialize)]
struct TaskRefView {
    id: String,
    anchor: String,
    title: String,
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
    /// What a person calls it (`Input tokens`).
    name: String,
    /// The value in its unit (`1,234`, `$0.0123`, `3 min 05 s`).
    value: String,
    /// A second form of the value, where one helps (the exact byte count).
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
    /// The task whose ask for help this task answered.
    asked_by: Option<LinkView>,
    status: BadgeView,
    attempts: u32,
    revisions: u32,
    assigned_at: Option<TimeView>,
    started_at: Option<TimeView>,
    completed_at: Option<TimeView>,
    /// Assigned to started.
    waiting: String,
    /// Started to completed.
    running: String,
    /// Assigned (or, if unknown, started) to completed.
    duration: String,
    provider: String,
    /// The child swarm that ran a sub-manager's task.
    child_swarm: Option<String>,
    result: String,
    result_bytes: String,
    result_truncated: bool,
    result_seq: Option<u64>,
    error: Option<String>,
    /// Why a skipped task's condition did not hold (shown neutral, not as an error).
    skip_reason: Option<String>,
    revisions_judged: Vec<RevisionView>,
    gates_passed: usize,
    gates_failed: usize,
}

/// One learned skill of the report, with the tasks that recorded it and
/// those that were offered it.
#[derive(Debug, Serialize)]
struct SkillView {
    name: String,
    key: String,
    learned_by: Vec<LinkView>,
    used_by: Vec<LinkView>,
}

/// The report's skills in its order, each with its tasks (linked).
fn skill_views(report: &FinalReport, anchors: &BTreeMap<&str, String>) -> Vec<SkillView> {
    let link = |t: &TaskOutcome| LinkView {
        id: t.task_id.clone(),
        anchor: anchors.get(t.task_id.as_str()).cloned(),
    };
    let tasks_with = |key: &str, pick: fn(&TaskOutcome) -> &[swarm_common::skill::SkillRef]| {
        report
            .task_results
            .iter()
            .filter(|t| pick(t).iter().any(|r| r.key == key))
            .map(link)
            .collect()
    };
    let mut all = report.skills.learned.clone();
    swarm_common::skill::merge(&mut all, &report.skills.used);
    all.into_iter()
        .map(|r| SkillView {
            learned_by: tasks_with(&r.key, |t| &t.skills.learned),
            used_by: tasks_with(&r.key, |t| &t.skills.used),
            name: r.name,
            key: r.key,
        })
        .collect()
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
        let day = report.started_at.date_naive();
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
        // Anchors follow plan positions, so a link to a task stays the same
        // whatever order the page lists the tasks in.
        let task_anchors: BTreeMap<&str, String> = report
            .task_results
            .iter()
            .enumerate()
            .map(|(i, t)| (t.task_id.as_str(), anchor("task", i, &t.task_id)))
            .collect();
        let mut ordered: Vec<(usize, &TaskOutcome)> =
            report.task_results.iter().enumerate().collect();
        // A stable sort: plan order holds within each group.
        ordered.sort_by_key(|(_, t)| attention_rank(t.status));
        let tasks_reordered = ordered.iter().enumerate().any(|(pos, (i, _))| pos != *i);
        let tasks = ordered
            .iter()
            .map(|(i, t)| TaskView::build(*i, t, &task_anchors, input.plan, &personas, day))
            .collect();
        let failure = FailureView::build(report.overall_status, &ordered);
        let (graph_svg, timeline_svg) = drawings(report, &task_anchors);
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
            trace_id: report.trace_id.clone(),
            status: swarm_badge(report.overall_status),
            started_at: TimeView::new(report.started_at, day),
            completed_at: TimeView::new(report.completed_at, day),
            duration: human_duration(report.completed_at - report.started_at),
            failure,
            summary: report.summary.clone(),
            insights: report.insights.clone(),
            counts: task_counts(&report.task_results),
            metrics: metric_views(&report.metrics),
            skills: skill_views(report, &task_anchors),
            plan,
            tasks,
            tasks_reordered,
            graph_svg,
            timeline_svg,
            graph_css: crate::graph::CSS,
            rendered_by: input.rendered_by.to_string(),
            rendered_at: TimeView::new(rendered_at, day),
            swarm_version: env!("CARGO_PKG_VERSION").to_string(),
            protocol_version: swarm_common::PROTOCOL_VERSION.to_string(),
        }
    }
}

/// The report's task graph (each node a link to its task's details) and
/// its timeline: a row per pool, a bar per task from its start to its end.
fn drawings(report: &FinalReport, anchors: &BTreeMap<&str, String>) -> (String, String) {
    let nodes: Vec<crate::graph::Node<'_>> = report
        .task_results
        .iter()
        .map(|t| crate::graph::Node {
            id: &t.task_id,
            title: &t.title,
            status: t.status,
            dependencies: &t.dependencies,
            href: anchors.get(t.task_id.as_str()).map(|a| format!("#{a}")),
        })
        .collect();
    let bars: Vec<crate::graph::Bar> = report
        .task_results
        .iter()
        .filter_map(|t| {
            let start = t.started_at.or(t.assigned_at)?;
            Some(crate::graph::Bar {
                row: if t.assigned_to.is_empty() {
                    "unassigned".to_owned()
                } else {
                    t.assigned_to.clone()
                },
                task_id: t.task_id.clone(),
                label: format!(
                    "{} attempt(s), {} revision(s)",
                    t.attempts.max(1),
                    t.revisions
                ),
                start,
                end: Some(t.completed_at.unwrap_or(report.completed_at)),
                status: t.status,
            })
        })
        .collect();
    (
        crate::graph::graph_svg(&nodes),
        crate::graph::timeline_svg(&bars, report.completed_at),
    )
}

impl TimeView {
    /// `day` is the mission's start day, on which `short` leaves the date out.
    fn new(t: DateTime<Utc>, day: NaiveDate) -> Self {
        let date = t.date_naive();
        let clock = clock_time(t);
        let text = format!("{date} {clock} UTC");
        Self {
            iso: t.to_rfc3339_opts(SecondsFormat::Millis, true),
            short: if date == day { clock } else { text.clone() },
            text,
        }
    }
}

impl FailureView {
    /// The box for a report whose status is not `Completed`, naming every task
    /// that did not complete, failed ones first; `tasks` is in page order.
    fn build(status: SwarmStatus, tasks: &[(usize, &TaskOutcome)]) -> Option<Self> {
        let heading = match status {
            SwarmStatus::Completed => return None,
            SwarmStatus::Failed => "Why the mission failed",
            SwarmStatus::TimedOut => "Why the mission timed out",
            SwarmStatus::Cancelled => "Why the mission was cancelled",
            SwarmStatus::Running => "What has not finished yet",
        };
        let mut entries: Vec<(TaskStatus, FailureEntryView)> = Vec::new();
        let (mut failed, mut cancelled, mut unfinished) = (0, 0, 0);
        for (i, t) in tasks {
            match t.status {
                // A skip is an outcome, not why a mission did not complete.
                TaskStatus::Completed | TaskStatus::Skipped => continue,
                TaskStatus::Failed => failed += 1,
                TaskStatus::Cancelled => cancelled += 1,
                _ => unfinished += 1,
            }
            let reason = t.error.clone().filter(|e| !e.trim().is_empty());
            let task = TaskRefView {
                id: t.task_id.clone(),
                anchor: anchor("task", *i, &t.task_id),
                title: t.title.clone(),
            };
            // Each failure has its own cause and stands alone; tasks that were
            // stopped for one shared reason are named together under it.
            let shared = if t.status == TaskStatus::Failed {
                None
            } else {
                entries
                    .iter_mut()
                    .find(|(status, e)| *status == t.status && e.reason == reason)
            };
            match shared {
                Some((_, entry)) => entry.tasks.push(task),
                None => entries.push((
                    t.status,
                    FailureEntryView {
                        status: task_badge(t.status),
                        tasks: vec![task],
                        reason,
                    },
                )),
            }
        }
        let mut parts = Vec::new();
        if failed > 0 {
            parts.push(format!("{} failed", tasks_word(failed)));
        }
        if cancelled > 0 {
            let verb = if cancelled == 1 { "was" } else { "were" };
            parts.push(format!("{} {verb} cancelled", tasks_word(cancelled)));
        }
        if unfinished > 0 {
            parts.push(format!("{} did not finish", tasks_word(unfinished)));
        }
        let lead = match parts.as_slice() {
            [] => "No task failed or was cancelled; the summary below says how the mission ended."
                .to_string(),
            [only] => format!("{only}."),
            [init @ .., last] => format!("{} and {last}.", init.join(", ")),
        };
        Some(Self {
            heading: heading.to_string(),
            lead,
            entries: entries.into_iter().map(|(_, e)| e).collect(),
        })
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
        day: NaiveDate,
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
        let span = |from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>| match (from, to) {
            (Some(from), Some(to)) => human_duration(to - from),
            _ => NONE.to_string(),
        };
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
            asked_by: t.asked_by.as_ref().map(|a| LinkView {
                id: a.clone(),
                anchor: task_anchors.get(a.as_str()).cloned(),
            }),
            status: task_badge(t.status),
            attempts: t.attempts,
            revisions: t.revisions,
            assigned_at: t.assigned_at.map(|at| TimeView::new(at, day)),
            started_at: t.started_at.map(|at| TimeView::new(at, day)),
            completed_at: t.completed_at.map(|at| TimeView::new(at, day)),
            waiting: span(t.assigned_at, t.started_at),
            running: span(t.started_at, t.completed_at),
            duration: span(t.assigned_at.or(t.started_at), t.completed_at),
            provider: t.provider.clone(),
            child_swarm: t.child_swarm.clone(),
            result: t.result.clone(),
            result_bytes: human_bytes(t.result.len() as u64),
            result_truncated: t.result_truncated,
            result_seq: t.result_seq,
            error: t
                .error
                .clone()
                .filter(|e| !e.trim().is_empty() && t.status != TaskStatus::Skipped),
            skip_reason: t
                .error
                .clone()
                .filter(|e| !e.trim().is_empty() && t.status == TaskStatus::Skipped),
            revisions_judged,
            gates_passed,
            gates_failed: t.gate_verdicts.len() - gates_passed,
        }
    }
}

/// What a metric's value measures, which decides how it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// A whole number of things: `12,345`.
    Count,
    /// Milliseconds, written as a duration.
    Millis,
    /// Seconds, written as a duration.
    Seconds,
    /// US dollars: `$0.0123`.
    Usd,
    /// Bytes: `3.4 KiB`.
    Bytes,
    /// Anything else: the number itself.
    Plain,
}

/// The metric keys the manager writes (`manager/src/report.rs`, and the
/// model usage it adds up from workers and reviews), with what a person
/// calls them, in the order the page lists them.
const KNOWN_METRICS: &[(&str, &str, Unit)] = &[
    ("tasks_total", "Tasks", Unit::Count),
    ("tasks_completed", "Tasks completed", Unit::Count),
    ("tasks_failed", "Tasks failed", Unit::Count),
    ("tasks_cancelled", "Tasks cancelled", Unit::Count),
    ("duration_seconds", "Duration", Unit::Seconds),
    ("duration_ms", "Duration", Unit::Millis),
    ("elapsed_ms", "Elapsed", Unit::Millis),
    ("attempts_total", "Attempts", Unit::Count),
    ("revisions_total", "Revisions", Unit::Count),
    ("gate_failures", "Gate failures", Unit::Count),
    ("input_tokens", "Input tokens", Unit::Count),
    ("output_tokens", "Output tokens", Unit::Count),
    ("cost_usd", "Cost (USD)", Unit::Usd),
    ("model_wait_ms", "Waiting for model limits", Unit::Millis),
    ("result_bytes_total", "Result size", Unit::Bytes),
    ("result_bytes", "Result size", Unit::Bytes),
];

/// Key endings that name a unit, for keys not in [`KNOWN_METRICS`]; the
/// ending is dropped from the label (`retries_total` reads `Retries`).
const UNIT_SUFFIXES: &[(&str, Unit)] = &[
    ("_total", Unit::Count),
    ("_count", Unit::Count),
    ("_ms", Unit::Millis),
    ("_millis", Unit::Millis),
    ("_seconds", Unit::Seconds),
    ("_secs", Unit::Seconds),
    ("_usd", Unit::Usd),
    ("_bytes", Unit::Bytes),
];

/// The metrics table: known keys in [`KNOWN_METRICS`] order, then the rest
/// in key order.
fn metric_views(metrics: &BTreeMap<String, f64>) -> Vec<MetricView> {
    let known = KNOWN_METRICS.iter().filter_map(|(key, label, unit)| {
        metrics
            .get(*key)
            .map(|v| MetricView::build((*label).to_string(), *unit, *v))
    });
    let unknown = metrics
        .iter()
        .filter(|(key, _)| !KNOWN_METRICS.iter().any(|(k, _, _)| k == key))
        .map(|(key, v)| {
            let (label, unit) = metric_label(key);
            MetricView::build(label, unit, *v)
        });
    known.chain(unknown).collect()
}

/// The label and unit of a key not in [`KNOWN_METRICS`]: `retries_total`
/// reads `Retries`, `queue_wait_ms` reads `Queue wait`, `budget_usd` reads
/// `Budget (USD)`.
fn metric_label(key: &str) -> (String, Unit) {
    for (suffix, unit) in UNIT_SUFFIXES {
        let Some(stem) = key.strip_suffix(suffix) else {
            continue;
        };
        let stem = sentence_case(stem);
        if stem.is_empty() {
            break;
        }
        let label = match unit {
            Unit::Usd => format!("{stem} (USD)"),
            Unit::Bytes => format!("{stem} size"),
            _ => stem,
        };
        return (label, *unit);
    }
    (sentence_case(key), Unit::Plain)
}

impl MetricView {
    fn build(name: String, unit: Unit, v: f64) -> Self {
        let mut hint = None;
        let value = match unit {
            _ if !v.is_finite() => format_number(v),
            Unit::Count => group_digits(v.round()),
            Unit::Millis => duration_from_secs(v / 1000.0)
                .map(human_duration)
                .unwrap_or_else(|| format_number(v)),
            Unit::Seconds => duration_from_secs(v)
                .map(human_duration)
                .unwrap_or_else(|| format_number(v)),
            Unit::Usd => format_usd(v),
            Unit::Bytes if v >= 0.0 && v < u64::MAX as f64 => {
                let n = v.round() as u64;
                if n >= 1024 {
                    hint = Some(format!("{} bytes", group_digits(n as f64)));
                }
                human_bytes(n)
            }
            Unit::Bytes | Unit::Plain => format_number(v),
        };
        Self { name, value, hint }
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

/// Where a task goes in the page's lists: failures first, as what a reader
/// most needs, then cancellations (usually their consequence), then the rest.
fn attention_rank(status: TaskStatus) -> u8 {
    match status {
        TaskStatus::Failed => 0,
        TaskStatus::Cancelled => 1,
        _ => 2,
    }
}

/// `1 task`, `3 tasks`.
fn tasks_word(n: usize) -> String {
    if n == 1 {
        "1 task".to_string()
    } else {
        format!("{n} tasks")
    }
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
        TaskStatus::Skipped => badge("Skipped", "Skipped", "muted"),
    }
}

/// The time of day to the millisecond: `09:05:00.123`. Milliseconds are cut,
/// not rounded, so a time never reads later than it was.
fn clock_time(t: DateTime<Utc>) -> String {
    let nano = t.nanosecond();
    // chrono keeps a leap second as second 59 with a nanosecond count past
    // one second; written as second 60, as RFC 3339 does.
    let (second, nano) = if nano >= 1_000_000_000 {
        (60, nano - 1_000_000_000)
    } else {
        (t.second(), nano)
    };
    format!(
        "{:02}:{:02}:{second:02}.{:03}",
        t.hour(),
        t.minute(),
        nano / 1_000_000
    )
}

/// A duration for people: `0.4 ms`, `140 ms`, `1.24 s`, `3 min 05 s`,
/// `2 h 03 min 09 s`, `1 d 04 h 10 min`. Anything shorter than 0.1 ms but
/// not zero is `<0.1 ms`, so a quick task never reads as taking no time. A
/// longer negative span (clock skew) keeps its sign.
fn human_duration(d: TimeDelta) -> String {
    // `subsec_nanos` carries the sign of the whole, so this is exact.
    let nanos = i128::from(d.num_seconds()) * 1_000_000_000 + i128::from(d.subsec_nanos());
    if nanos == 0 {
        return "0 ms".to_string();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let nanos = nanos.unsigned_abs();
    if nanos < 100_000 {
        return "<0.1 ms".to_string();
    }
    let tenth_millis = (nanos + 50_000) / 100_000;
    if tenth_millis < 100 {
        return format!("{sign}{}.{} ms", tenth_millis / 10, tenth_millis % 10);
    }
    let millis = (nanos + 500_000) / 1_000_000;
    if millis < 1000 {
        return format!("{sign}{millis} ms");
    }
    let centis = (nanos + 5_000_000) / 10_000_000;
    if centis < 6000 {
        return format!("{sign}{}.{:02} s", centis / 100, centis % 100);
    }
    let secs = (nanos + 500_000_000) / 1_000_000_000;
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

/// A span of `secs` seconds to the microsecond, if it is finite and fits.
fn duration_from_secs(secs: f64) -> Option<TimeDelta> {
    let micros = (secs * 1e6).round();
    // i64 microseconds cover ±292,000 years; the bound keeps the cast exact.
    (micros.is_finite() && micros.abs() < 9e18).then(|| TimeDelta::microseconds(micros as i64))
}

/// A byte count for people: `512 B`, `3.4 KiB`, `1.2 MiB`.
fn human_bytes(n: u64) -> String {
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

/// A number with thousands separators: whole numbers without decimals,
/// others to three places: `1,234`, `12.346`.
fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let fixed = format!("{:.3}", v.abs());
    let fixed = fixed.trim_end_matches('0').trim_end_matches('.');
    let (whole, frac) = fixed.split_once('.').unwrap_or((fixed, ""));
    let sign = if v < 0.0 && fixed != "0" { "-" } else { "" };
    let dot = if frac.is_empty() { "" } else { "." };
    format!("{sign}{}{dot}{frac}", group_thousands(whole))
}

/// A whole number with thousands separators: `-1,234,567`.
fn group_digits(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let sign = if v < 0.0 && digits != "0" { "-" } else { "" };
    format!("{sign}{}", group_thousands(&digits))
}

/// `1234567` becomes `1,234,567`.
fn group_thousands(digits: &str) -> String {
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// US dollars: cents under a dollar are too coarse for model costs, so
/// amounts below $1 get four places (`$0.0123`), larger ones two
/// (`$1,234.57`).
fn format_usd(v: f64) -> String {
    let sign = if v < 0.0 { "-" } else { "" };
    let a = v.abs();
    let ten_thousandths = (a * 10_000.0).round();
    if a > 0.0 && ten_thousandths == 0.0 {
        return format!("{sign}<$0.0001");
    }
    if ten_thousandths < 10_000.0 {
        return format!("{sign}${:.4}", ten_thousandths / 10_000.0);
    }
    let cents = (a * 100.0).round();
    format!(
        "{sign}${}.{:02}",
        group_digits((cents / 100.0).trunc()),
        (cents % 100.0) as u32
    )
}

/// `tasks_completed` becomes `Tasks completed`.
fn sentence_case(text: &str) -> String {
    let spaced = text.replace(['_', '.'], " ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let joined = words.join(" ");
    let mut chars = joined.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
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
            skills: Default::default(),
            child_swarm: None,
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
            asked_by: None,
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
        // Asked for help by the task before it: the page links it.
        write.asked_by = Some("analyse_data".to_string());

        let report = FinalReport {
            skills: Default::default(),
            trace_id: None,
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
            a2a_url: None,
            a2a_credential: None,
            skill: None,
        };
        let plan = SwarmDeploymentPlan {
            seed: Default::default(),
            sub_managers: Vec::new(),
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
        assert!(html.contains("3 min 06 s"));
        assert!(html.contains("1.00 s"));
        assert!(html.contains("2.00 s"));
        assert!(html.contains("5 min 05 s"));
        assert!(html.contains("2025-03-14 09:00:01.000 UTC"));
        assert!(html.contains(r#"datetime="2025-03-14T09:00:01.000Z""#));
        assert!(html.contains("12.346"));
        assert!(html.contains("boss-a1"));
        assert!(html.contains(swarm_common::PROTOCOL_VERSION));
        assert!(html.contains("<dt>Asked by</dt>"), "asked_by shown");
    }

    #[test]
    fn learned_skills_are_listed_with_their_tasks() {
        let (mut report, plan) = fixture();
        assert!(!render(&report, Some(&plan)).contains("Learned skills"));
        let csv = swarm_common::skill::SkillRef {
            key: "deployment.read-a-csv".into(),
            name: "Read a <CSV>".into(),
        };
        let old = swarm_common::skill::SkillRef {
            key: "deployment.cite-sources".into(),
            name: "Cite sources".into(),
        };
        report.task_results[0].skills.learned = vec![csv.clone()];
        report.task_results[1].skills.used = vec![csv.clone(), old.clone()];
        report.skills.learned = vec![csv];
        report.skills.used = vec![old];
        let html = render(&report, Some(&plan));
        assert!(html.contains("Learned skills"));
        assert!(html.contains("Read a &lt;CSV&gt;"), "names are escaped");
        assert!(html.contains("deployment.cite-sources"));
        assert!(
            html.contains("an earlier mission"),
            "a skill learned before"
        );
        assert!(html.contains(r##"href="#skills""##));
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
            skills: Default::default(),
            trace_id: None,
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
        let us = TimeDelta::microseconds;
        assert_eq!(human_duration(ms(0)), "0 ms");
        assert_eq!(human_duration(TimeDelta::nanoseconds(1)), "<0.1 ms");
        assert_eq!(human_duration(us(99)), "<0.1 ms");
        assert_eq!(human_duration(us(400)), "0.4 ms");
        assert_eq!(human_duration(us(2_340)), "2.3 ms");
        assert_eq!(human_duration(us(9_960)), "10 ms");
        assert_eq!(human_duration(ms(140)), "140 ms");
        assert_eq!(human_duration(us(999_600)), "1.00 s");
        assert_eq!(human_duration(ms(340)), "340 ms");
        assert_eq!(human_duration(ms(1240)), "1.24 s");
        assert_eq!(human_duration(ms(59_996)), "1 min 00 s");
        assert_eq!(human_duration(ms(185_000)), "3 min 05 s");
        assert_eq!(human_duration(ms(7_389_000)), "2 h 03 min 09 s");
        assert_eq!(human_duration(ms(101_400_000)), "1 d 04 h 10 min");
        assert_eq!(human_duration(ms(-1500)), "-1.50 s");
        assert_eq!(human_duration(us(-400)), "-0.4 ms");
    }

    #[test]
    fn small_helpers() {
        assert_eq!(format_number(3.0), "3");
        assert_eq!(format_number(0.5), "0.5");
        assert_eq!(format_number(-0.5), "-0.5");
        assert_eq!(format_number(1_234_567.0), "1,234,567");
        assert_eq!(format_number(-1234.5678), "-1,234.568");
        assert_eq!(sentence_case("tasks_completed"), "Tasks completed");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(2048), "2.0 KiB");
        assert_eq!(anchor("task", 2, "a b<c"), "task-2-a_b_c");
        assert_eq!(shorten("short", 80), "short");
        assert_eq!(shorten("line one\nline two", 80), "line one…");
        assert_eq!(shorten("abcdef", 3), "abc…");
    }

    /// The instant `h:m:s.ms` on 2026-12-02.
    fn at_ms(h: u32, m: u32, s: u32, ms: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, h, m, s).unwrap() + TimeDelta::milliseconds(ms.into())
    }

    /// A report of `tasks` with the given status, started at 12:40:00.000.
    fn report_of(status: SwarmStatus, tasks: Vec<TaskOutcome>) -> FinalReport {
        FinalReport {
            skills: Default::default(),
            trace_id: None,
            overall_status: status,
            mission: "Summarise the notes".to_string(),
            summary: "The manager's summary.".to_string(),
            insights: Vec::new(),
            task_results: tasks,
            metrics: BTreeMap::new(),
            started_at: at_ms(12, 40, 0, 0),
            completed_at: at_ms(12, 40, 2, 500),
        }
    }

    #[test]
    fn a_time_on_another_day_keeps_its_date() {
        let day = at_ms(12, 0, 0, 0).date_naive();
        let next = Utc.with_ymd_and_hms(2026, 12, 3, 0, 0, 1).unwrap();
        let view = TimeView::new(next, day);
        assert_eq!(view.short, "2026-12-03 00:00:01.000 UTC");
        assert_eq!(view.text, view.short);
        assert_eq!(view.iso, "2026-12-03T00:00:01.000Z");
        assert_eq!(TimeView::new(at_ms(9, 5, 5, 42), day).short, "09:05:05.042");
    }

    #[test]
    fn metric_values_follow_their_unit() {
        assert_eq!(
            metric_label("snake_case_total"),
            ("Snake case".to_string(), Unit::Count)
        );
        assert_eq!(
            metric_label("queue_wait_ms"),
            ("Queue wait".to_string(), Unit::Millis)
        );
        assert_eq!(
            metric_label("budget_usd"),
            ("Budget (USD)".to_string(), Unit::Usd)
        );
        assert_eq!(
            metric_label("payload_bytes"),
            ("Payload size".to_string(), Unit::Bytes)
        );
        assert_eq!(metric_label("steps"), ("Steps".to_string(), Unit::Plain));
        assert_eq!(metric_label("_total"), ("Total".to_string(), Unit::Plain));
        assert_eq!(format_usd(0.0), "$0.0000");
        assert_eq!(format_usd(0.000_01), "<$0.0001");
        assert_eq!(format_usd(0.012_34), "$0.0123");
        assert_eq!(format_usd(0.999_99), "$1.00");
        assert_eq!(format_usd(1234.567), "$1,234.57");
        assert_eq!(format_usd(-0.5), "-$0.5000");
        assert_eq!(group_digits(999.0), "999");
        assert_eq!(group_digits(1000.0), "1,000");
        assert_eq!(group_digits(-1_234_567.0), "-1,234,567");
        let count = MetricView::build("Attempts".to_string(), Unit::Count, 2.6);
        assert_eq!(count.value, "3");
        let nan = MetricView::build("Cost".to_string(), Unit::Usd, f64::NAN);
        assert_eq!(nan.value, "NaN");
        let seconds = MetricView::build("Duration".to_string(), Unit::Seconds, 185.0);
        assert_eq!(seconds.value, "3 min 05 s");
        let small = MetricView::build("Result size".to_string(), Unit::Bytes, 512.0);
        assert_eq!((small.value.as_str(), small.hint), ("512 B", None));
    }

    #[test]
    fn plan_order_holds_within_each_group() {
        let tasks = vec![
            outcome("a-done", TaskStatus::Completed),
            outcome("b-cancelled", TaskStatus::Cancelled),
            outcome("c-failed", TaskStatus::Failed),
            outcome("d-done", TaskStatus::Completed),
            outcome("e-failed", TaskStatus::Failed),
            outcome("f-cancelled", TaskStatus::Cancelled),
        ];
        let report = report_of(SwarmStatus::Failed, tasks);
        let page = PageView::build(
            &ReportInput {
                swarm_id: "s",
                mission: "",
                mission_id: None,
                plan: None,
                report: &report,
                rendered_by: "boss",
            },
            at_ms(13, 0, 0, 0),
        );
        let order: Vec<&str> = page.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(
            order,
            [
                "c-failed",
                "e-failed",
                "b-cancelled",
                "f-cancelled",
                "a-done",
                "d-done"
            ]
        );
        assert!(page.tasks_reordered);
        // Anchors keep the plan position, so links do not move with the order.
        assert_eq!(page.tasks[0].anchor, "task-2-c-failed");
        let failure = page.failure.expect("a failed report has the box");
        let named: Vec<&str> = failure
            .entries
            .iter()
            .flat_map(|e| e.tasks.iter().map(|t| t.id.as_str()))
            .collect();
        assert_eq!(
            named,
            ["c-failed", "e-failed", "b-cancelled", "f-cancelled"]
        );
    }

    #[test]
    fn a_skipped_task_is_neutral_and_says_why() {
        let mut review = outcome("review", TaskStatus::Skipped);
        review.error = Some("condition not met: check's \"/needs_review\" is false".into());
        let report = report_of(
            SwarmStatus::Completed,
            vec![outcome("check", TaskStatus::Completed), review],
        );
        let html = render(&report, None);
        assert!(html.contains(r#"<span class="badge muted" data-status="Skipped">Skipped</span>"#));
        assert!(html.contains(r#"<div class="callout muted"><strong>Skipped</strong>"#));
        assert!(html.contains("condition not met: check"));
        assert!(
            !html.contains(r#"<div class="callout bad">"#),
            "a skip is no error"
        );
        assert!(
            !html.contains(r#"id="failure""#),
            "a completed mission has no failure box"
        );
    }
}
