//! The Prometheus metrics every Swarm binary exports on `/metrics`, one named
//! helper per event, so the roles never spell a metric name themselves.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `swarm_missions_intake_total` | counter | `state` | missions at the boss's intake: `accepted`, `duplicate` (the same mission id again), `refused` |
//! | `swarm_missions_refused_total` | counter | `code` | refused missions by error code |
//! | `swarm_mission_outcomes_total` | counter | `status` | final reports stored, by the mission's outcome: `completed`, `failed`, `cancelled`, `timedout`, ... |
//! | `swarm_mission_duration_seconds` | histogram | `status` | from acceptance to the final report |
//! | `swarm_tasks_total` | counter | `status` | finished task attempts by status |
//! | `swarm_task_duration_seconds` | histogram | `status` | time a worker spent on one attempt |
//! | `swarm_tasks_in_flight` | gauge | | tasks a worker runs now |
//! | `swarm_redeliveries_total` | counter | `consumer` | JetStream messages delivered more than once |
//! | `swarm_takeovers_total` | counter | `kind` | work taken over from another (dead or slow) replica |
//! | `swarm_llm_tokens_total` | counter | `provider`, `kind` | LLM tokens, `kind` is `prompt` or `completion` |
//! | `swarm_control_dropped_total` | counter | | control messages for swarms that were never deployed, dropped by a manager |
//! | `swarm_model_limit_wait_seconds` | histogram | `reason` | model calls that waited for the shared model limits, and how long, by what they waited for last: `paused`, `concurrency`, `requests`, `tokens` |
//! | `swarm_model_pauses_total` | counter | | `429`/`529` replies that paused every worker of an endpoint |
//! | `swarm_model_limits_unavailable_total` | counter | | model calls that went without the limits because their store could not be reached |
//! | `swarm_build_info` | gauge | `version` | always 1 |
//! | `process_*` | | | the process: CPU, memory, file descriptors, threads, start time ([`process`]) |
//!
//! Intake and outcomes are two metrics: a mission is counted once when it
//! comes in and once when it ends, and summing the two in one metric (as
//! `swarm_missions_total{status}` once did) counted it twice.
//!
//! Every series also carries the label `role` (`boss`, `manager`, `worker`,
//! `gateway`). The helpers are cheap no-ops until [`install`] has run (it
//! runs when the health server starts), so libraries and tests can call
//! them freely. [`EXPORTED`] names every metric, for the dashboard's check
//! (`k8s/components/monitoring/swarm-dashboard.json`).

pub mod process;

use std::sync::OnceLock;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Missions at intake, by state (`accepted`, `duplicate`, `refused`).
pub const MISSIONS_INTAKE_TOTAL: &str = "swarm_missions_intake_total";
/// Refused missions by error code.
pub const MISSIONS_REFUSED_TOTAL: &str = "swarm_missions_refused_total";
/// Reported missions by outcome.
pub const MISSION_OUTCOMES_TOTAL: &str = "swarm_mission_outcomes_total";
/// Mission latency, acceptance to final report.
pub const MISSION_DURATION: &str = "swarm_mission_duration_seconds";
/// Finished task attempts by status.
pub const TASKS_TOTAL: &str = "swarm_tasks_total";
/// Task attempt latency on a worker.
pub const TASK_DURATION: &str = "swarm_task_duration_seconds";
/// Tasks running on a worker now.
pub const TASKS_IN_FLIGHT: &str = "swarm_tasks_in_flight";
/// Messages delivered more than once.
pub const REDELIVERIES_TOTAL: &str = "swarm_redeliveries_total";
/// Work taken over from another replica.
pub const TAKEOVERS_TOTAL: &str = "swarm_takeovers_total";
/// LLM tokens used.
pub const LLM_TOKENS_TOTAL: &str = "swarm_llm_tokens_total";
/// Control messages for swarms that do not exist, dropped.
pub const CONTROL_DROPPED_TOTAL: &str = "swarm_control_dropped_total";
/// How long model calls waited for the shared limits, by reason.
pub const MODEL_LIMIT_WAIT: &str = "swarm_model_limit_wait_seconds";
/// Replies that paused every caller of an endpoint.
pub const MODEL_PAUSES_TOTAL: &str = "swarm_model_pauses_total";
/// Model calls that went without the limits (their store unreachable).
pub const MODEL_LIMITS_UNAVAILABLE_TOTAL: &str = "swarm_model_limits_unavailable_total";
/// Manager partitions this replica owns now: 1 for each it pulls, 0 for
/// one it let go.
pub const MANAGER_PARTITION_OWNED: &str = "swarm_manager_partition_owned";
/// Build information (always 1).
pub const BUILD_INFO: &str = "swarm_build_info";

/// Every metric a role's `/metrics` may show (a histogram by its base
/// name; Prometheus adds `_bucket`, `_sum` and `_count`), Swarm's and the
/// process's.
pub const EXPORTED: &[&str] = &[
    MISSIONS_INTAKE_TOTAL,
    MISSIONS_REFUSED_TOTAL,
    MISSION_OUTCOMES_TOTAL,
    MISSION_DURATION,
    TASKS_TOTAL,
    TASK_DURATION,
    TASKS_IN_FLIGHT,
    REDELIVERIES_TOTAL,
    TAKEOVERS_TOTAL,
    LLM_TOKENS_TOTAL,
    CONTROL_DROPPED_TOTAL,
    MODEL_LIMIT_WAIT,
    MODEL_PAUSES_TOTAL,
    MODEL_LIMITS_UNAVAILABLE_TOTAL,
    MANAGER_PARTITION_OWNED,
    BUILD_INFO,
    process::CPU_SECONDS_TOTAL,
    process::RESIDENT_MEMORY_BYTES,
    process::VIRTUAL_MEMORY_BYTES,
    process::OPEN_FDS,
    process::MAX_FDS,
    process::START_TIME_SECONDS,
    process::THREADS,
];

/// The metrics of [`EXPORTED`] that are histograms.
pub const HISTOGRAMS: &[&str] = &[MISSION_DURATION, TASK_DURATION, MODEL_LIMIT_WAIT];

/// Histogram buckets for task latency, in seconds: tools take milliseconds,
/// LLM calls seconds to minutes.
const TASK_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// Histogram buckets for mission latency, in seconds.
const MISSION_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Histogram buckets for waits for the model limits, in seconds: a slot
/// frees in milliseconds, a provider's pause lasts seconds to a minute.
const WAIT_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// The recorder's handle and the role it labels every series with.
struct Installed {
    handle: PrometheusHandle,
    role: String,
}

static INSTALLED: OnceLock<Option<Installed>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder, labelling every series
/// with `role`. Idempotent: later calls return the first handle. `None` if
/// another recorder was installed first (say by a test harness).
pub fn install(role: &str) -> Option<PrometheusHandle> {
    INSTALLED
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .add_global_label("role", role.to_owned())
                .set_buckets_for_metric(Matcher::Full(TASK_DURATION.into()), TASK_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(MISSION_DURATION.into()),
                        MISSION_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(MODEL_LIMIT_WAIT.into()), WAIT_BUCKETS)
                });
            // The bucket lists are constant and non-empty, the only error case.
            let builder = builder.ok()?;
            let handle = builder.install_recorder().ok()?;
            describe();
            gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            Some(Installed {
                handle,
                role: role.to_owned(),
            })
        })
        .as_ref()
        .map(|i| i.handle.clone())
}

/// The current metrics in the Prometheus text format, the process's
/// included (read now); empty before [`install`].
pub fn render() -> String {
    match INSTALLED.get() {
        Some(Some(installed)) => {
            // Drains histogram samples into their buckets; cheap, and keeps
            // memory flat between scrapes.
            installed.handle.run_upkeep();
            let mut text = installed.handle.render();
            process::Snapshot::read().render(&installed.role, &mut text);
            text
        }
        _ => String::new(),
    }
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        MISSIONS_INTAKE_TOTAL,
        "Missions at intake: accepted, duplicate or refused"
    );
    describe_counter!(MISSIONS_REFUSED_TOTAL, "Refused missions by error code");
    describe_counter!(
        MISSION_OUTCOMES_TOTAL,
        "Missions reported, by outcome (the final report's status)"
    );
    describe_histogram!(
        MISSION_DURATION,
        Unit::Seconds,
        "Time from accepting a mission to its final report"
    );
    describe_counter!(TASKS_TOTAL, "Finished task attempts by status");
    describe_histogram!(
        TASK_DURATION,
        Unit::Seconds,
        "Time a worker spent on one task attempt"
    );
    describe_gauge!(TASKS_IN_FLIGHT, "Tasks this worker runs now");
    describe_counter!(
        REDELIVERIES_TOTAL,
        "JetStream messages delivered more than once"
    );
    describe_counter!(TAKEOVERS_TOTAL, "Work taken over from another replica");
    describe_counter!(LLM_TOKENS_TOTAL, "LLM tokens by provider and kind");
    describe_counter!(
        CONTROL_DROPPED_TOTAL,
        "Control messages for swarms that were never deployed, dropped"
    );
    describe_histogram!(
        MODEL_LIMIT_WAIT,
        Unit::Seconds,
        "Time model calls waited for the shared model limits, by reason"
    );
    describe_counter!(
        MODEL_PAUSES_TOTAL,
        "Provider replies (429, 529) that paused every worker of an endpoint"
    );
    describe_counter!(
        MODEL_LIMITS_UNAVAILABLE_TOTAL,
        "Model calls that went without the shared limits (their store unreachable)"
    );
    describe_gauge!(
        MANAGER_PARTITION_OWNED,
        "Manager partitions this replica owns (1) or let go (0)"
    );
    describe_gauge!(BUILD_INFO, "Build information; always 1");
}

/// The boss accepted a new mission.
pub fn mission_accepted() {
    counter!(MISSIONS_INTAKE_TOTAL, "state" => "accepted").increment(1);
}

/// The boss answered a mission it had accepted before (same mission id).
pub fn mission_duplicate() {
    counter!(MISSIONS_INTAKE_TOTAL, "state" => "duplicate").increment(1);
}

/// The boss refused a mission with the error `code` (e.g. `invalid_mission`).
pub fn mission_refused(code: &str) {
    counter!(MISSIONS_INTAKE_TOTAL, "state" => "refused").increment(1);
    counter!(MISSIONS_REFUSED_TOTAL, "code" => code.to_owned()).increment(1);
}

/// A mission's final report was stored with `status` (`completed`,
/// `failed`, ...), `seconds` after the mission was accepted (if known).
pub fn mission_reported(status: &str, seconds: Option<f64>) {
    counter!(MISSION_OUTCOMES_TOTAL, "status" => status.to_owned()).increment(1);
    if let Some(s) = seconds {
        histogram!(MISSION_DURATION, "status" => status.to_owned()).record(s.max(0.0));
    }
}

/// A worker started a task attempt.
pub fn task_started() {
    gauge!(TASKS_IN_FLIGHT).increment(1.0);
}

/// A worker finished a task attempt with `status` (`completed`, `failed`,
/// ...) after `seconds`. Pair with [`task_started`].
pub fn task_finished(status: &'static str, seconds: f64) {
    gauge!(TASKS_IN_FLIGHT).decrement(1.0);
    counter!(TASKS_TOTAL, "status" => status).increment(1);
    histogram!(TASK_DURATION, "status" => status).record(seconds.max(0.0));
}

/// A message of the durable `consumer` arrived for at least the second time
/// (its delivery count is above 1).
pub fn redelivered(consumer: &str) {
    counter!(REDELIVERIES_TOTAL, "consumer" => consumer.to_owned()).increment(1);
}

/// This manager replica took (`true`) or let go of manager partition
/// `partition`.
pub fn partition_owned(partition: u32, owned: bool) {
    gauge!(MANAGER_PARTITION_OWNED, "partition" => partition.to_string()).set(if owned {
        1.0
    } else {
        0.0
    });
}

/// A control message for a swarm that was never deployed was dropped.
pub fn dropped_control() {
    counter!(CONTROL_DROPPED_TOTAL).increment(1);
}

/// This replica took over work of `kind` (`task`, `swarm`, ...) from
/// another replica.
pub fn takeover(kind: &str) {
    counter!(TAKEOVERS_TOTAL, "kind" => kind.to_owned()).increment(1);
}

/// An LLM call of `provider` used `prompt` input and `completion` output tokens.
pub fn llm_tokens(provider: &str, prompt: u64, completion: u64) {
    counter!(LLM_TOKENS_TOTAL, "provider" => provider.to_owned(), "kind" => "prompt")
        .increment(prompt);
    counter!(LLM_TOKENS_TOTAL, "provider" => provider.to_owned(), "kind" => "completion")
        .increment(completion);
}

/// A model call waited `seconds` for the shared limits, last for `reason`
/// (`paused`, `concurrency`, `requests`, `tokens`).
pub fn model_limit_waited(reason: &'static str, seconds: f64) {
    histogram!(MODEL_LIMIT_WAIT, "reason" => reason).record(seconds.max(0.0));
}

/// A provider's reply (`429`, `529`) paused every caller of its endpoint.
pub fn model_paused() {
    counter!(MODEL_PAUSES_TOTAL).increment(1);
}

/// A model call went without the shared limits: their store could not be
/// reached.
pub fn model_limits_unavailable() {
    counter!(MODEL_LIMITS_UNAVAILABLE_TOTAL).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the series `series` (its name and labels, exactly as
    /// rendered) in `text`.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn helpers_show_up_in_the_rendering() {
        // Every test of this crate installs with role "test": one recorder per process.
        let handle = install("test");
        assert!(handle.is_some(), "the recorder installs once per process");
        assert!(install("other").is_some(), "install is idempotent");
        mission_accepted();
        mission_accepted();
        mission_duplicate();
        mission_refused("invalid_mission");
        mission_reported("completed", Some(3.0));
        mission_reported("failed", None);
        task_started();
        task_finished("completed", 0.2);
        redelivered("worker-general");
        takeover("task");
        llm_tokens("openai", 10, 5);
        dropped_control();
        model_limit_waited("paused", 2.0);
        model_paused();
        model_limits_unavailable();
        partition_owned(3, true);
        partition_owned(4, false);
        let text = render();
        for needle in [
            "swarm_missions_refused_total{role=\"test\",code=\"invalid_mission\"} 1",
            "swarm_mission_duration_seconds_bucket{role=\"test\",status=\"completed\",le=\"5\"} 1",
            "swarm_tasks_total{role=\"test\",status=\"completed\"} 1",
            "swarm_task_duration_seconds_count{role=\"test\",status=\"completed\"} 1",
            "swarm_tasks_in_flight{role=\"test\"} 0",
            "swarm_redeliveries_total{role=\"test\",consumer=\"worker-general\"} 1",
            "swarm_takeovers_total{role=\"test\",kind=\"task\"} 1",
            "swarm_llm_tokens_total{role=\"test\",provider=\"openai\",kind=\"prompt\"} 10",
            "swarm_control_dropped_total{role=\"test\"} 1",
            "swarm_model_limit_wait_seconds_bucket{role=\"test\",reason=\"paused\",le=\"2.5\"} 1",
            "swarm_model_pauses_total{role=\"test\"} 1",
            "swarm_model_limits_unavailable_total{role=\"test\"} 1",
            "swarm_manager_partition_owned{role=\"test\",partition=\"3\"} 1",
            "swarm_manager_partition_owned{role=\"test\",partition=\"4\"} 0",
            "swarm_build_info{role=\"test\",version=",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
        // Every metric the module names is there (the process's on Linux,
        // where /proc is read).
        for name in EXPORTED {
            if name.starts_with("process_") && !cfg!(target_os = "linux") {
                continue;
            }
            assert!(
                text.contains(&format!("\n{name}{{")) || text.contains(&format!("\n{name}_")),
                "missing {name} in\n{text}"
            );
        }
    }

    #[test]
    fn intake_and_outcomes_are_apart() {
        install("test");
        let intake = |state: &str| {
            value(
                &render(),
                &format!("swarm_missions_intake_total{{role=\"test\",state=\"{state}\"}}"),
            )
            .unwrap_or(0.0)
        };
        let outcome = |status: &str| {
            value(
                &render(),
                &format!("swarm_mission_outcomes_total{{role=\"test\",status=\"{status}\"}}"),
            )
            .unwrap_or(0.0)
        };
        let (accepted, refused, cancelled) =
            (intake("accepted"), intake("refused"), outcome("cancelled"));
        mission_accepted();
        mission_refused("limit_exceeded");
        mission_reported("cancelled", Some(1.0));
        assert_eq!(intake("accepted"), accepted + 1.0);
        assert_eq!(intake("refused"), refused + 1.0);
        assert_eq!(outcome("cancelled"), cancelled + 1.0);
        // Neither metric carries the other's values.
        let text = render();
        for line in text.lines() {
            if line.starts_with(MISSIONS_INTAKE_TOTAL) {
                assert!(!line.contains("status="), "{line}");
                assert!(
                    !line.contains("cancelled") && !line.contains("completed"),
                    "{line}"
                );
            }
            if line.starts_with(MISSION_OUTCOMES_TOTAL) {
                assert!(!line.contains("state="), "{line}");
                assert!(
                    !line.contains("accepted") && !line.contains("refused"),
                    "{line}"
                );
            }
        }
        assert!(
            !text.contains("swarm_missions_total"),
            "the old metric is gone"
        );
    }

    /// The metric names a PromQL expression reads: each `swarm_...` or
    /// `process_...` identifier, a histogram's `_bucket`, `_sum` or
    /// `_count` taken back to its base name.
    fn queried(expr: &str) -> Vec<String> {
        let mut names = Vec::new();
        let bytes = expr.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let at_word_start =
                i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
            let rest = &expr[i..];
            if at_word_start && (rest.starts_with("swarm_") || rest.starts_with("process_")) {
                let len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let name = &rest[..len];
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix).filter(|b| HISTOGRAMS.contains(b)))
                    .unwrap_or(name);
                names.push(base.to_owned());
                i += len;
            } else {
                i += 1;
            }
        }
        names
    }

    /// Every `expr` (a panel's query) and `query` (a query variable's) in
    /// a dashboard; a data source variable's `query` is a plugin's name.
    fn expressions(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map)
                if map.get("type").and_then(|t| t.as_str()) == Some("datasource") => {}
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                        ("query", serde_json::Value::String(s)) => out.push(s.clone()),
                        ("query", serde_json::Value::Object(q)) => {
                            if let Some(serde_json::Value::String(s)) = q.get("query") {
                                out.push(s.clone());
                            }
                        }
                        _ => expressions(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| expressions(v, out)),
            _ => {}
        }
    }

    #[test]
    fn queried_names_take_histograms_to_their_base_name() {
        assert_eq!(
            queried(
                "histogram_quantile(0.95, sum by (le) (rate(swarm_task_duration_seconds_bucket[5m])))"
            ),
            ["swarm_task_duration_seconds"]
        );
        assert_eq!(
            queried("sum(rate(swarm_tasks_total{status!=\"x\"}[5m])) / process_open_fds"),
            ["swarm_tasks_total", "process_open_fds"]
        );
        assert_eq!(
            queried("label_values(swarm_build_info, role)"),
            ["swarm_build_info"]
        );
        assert!(queried("my_swarm_x + 1").is_empty());
    }

    /// The Grafana dashboard of the monitoring component queries only
    /// metrics this module exports, so it cannot drift from the code.
    #[test]
    fn the_dashboard_queries_only_exported_metrics() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../k8s/components/monitoring/swarm-dashboard.json"
        );
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let dashboard: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut exprs = Vec::new();
        expressions(&dashboard, &mut exprs);
        assert!(exprs.len() > 10, "the dashboard's queries: {exprs:?}");
        let mut used = std::collections::BTreeSet::new();
        for expr in &exprs {
            let names = queried(expr);
            assert!(!names.is_empty(), "{expr} reads no Swarm or process metric");
            for name in names {
                assert!(
                    EXPORTED.contains(&name.as_str()),
                    "the dashboard queries {name}, which is not exported: {expr}"
                );
                used.insert(name);
            }
        }
        // Intake and outcomes both have their panels.
        assert!(used.contains(MISSIONS_INTAKE_TOTAL) && used.contains(MISSION_OUTCOMES_TOTAL));
    }
}
