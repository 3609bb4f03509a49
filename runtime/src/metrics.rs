//! The Prometheus metrics every Swarm binary exports on `/metrics`, one named
//! helper per event, so the roles never spell a metric name themselves.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `swarm_missions_total` | counter | `status` | missions by outcome: `accepted`, `duplicate`, `refused` at intake; `completed`, `failed`, `cancelled`, ... when reported |
//! | `swarm_missions_refused_total` | counter | `code` | refused missions by error code |
//! | `swarm_mission_duration_seconds` | histogram | `status` | from acceptance to the final report |
//! | `swarm_tasks_total` | counter | `status` | finished task attempts by status |
//! | `swarm_task_duration_seconds` | histogram | `status` | time a worker spent on one attempt |
//! | `swarm_tasks_in_flight` | gauge | | tasks a worker runs now |
//! | `swarm_redeliveries_total` | counter | `consumer` | JetStream messages delivered more than once |
//! | `swarm_takeovers_total` | counter | `kind` | work taken over from another (dead or slow) replica |
//! | `swarm_llm_tokens_total` | counter | `provider`, `kind` | LLM tokens, `kind` is `prompt` or `completion` |
//! | `swarm_control_dropped_total` | counter | | control messages for swarms that were never deployed, dropped by a manager |
//! | `swarm_build_info` | gauge | `version` | always 1 |
//!
//! Every series also carries the label `role` (`boss`, `manager`, `worker`).
//! The helpers are cheap no-ops until [`install`] has run (it runs when the
//! health server starts), so libraries and tests can call them freely.

use std::sync::OnceLock;

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Missions by status.
pub const MISSIONS_TOTAL: &str = "swarm_missions_total";
/// Refused missions by error code.
pub const MISSIONS_REFUSED_TOTAL: &str = "swarm_missions_refused_total";
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
/// Build information (always 1).
pub const BUILD_INFO: &str = "swarm_build_info";

/// Histogram buckets for task latency, in seconds: tools take milliseconds,
/// LLM calls seconds to minutes.
const TASK_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// Histogram buckets for mission latency, in seconds.
const MISSION_BUCKETS: &[f64] = &[
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide Prometheus recorder, labelling every series
/// with `role`. Idempotent: later calls return the first handle. `None` if
/// another recorder was installed first (say by a test harness).
pub fn install(role: &str) -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .add_global_label("role", role.to_owned())
                .set_buckets_for_metric(Matcher::Full(TASK_DURATION.into()), TASK_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(MISSION_DURATION.into()),
                        MISSION_BUCKETS,
                    )
                });
            // Both bucket lists are constant and non-empty, the only error case.
            let builder = builder.ok()?;
            let handle = builder.install_recorder().ok()?;
            describe();
            gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            Some(handle)
        })
        .clone()
}

/// The current metrics in the Prometheus text format; empty before [`install`].
pub fn render() -> String {
    match HANDLE.get() {
        Some(Some(handle)) => {
            // Drains histogram samples into their buckets; cheap, and keeps
            // memory flat between scrapes.
            handle.run_upkeep();
            handle.render()
        }
        _ => String::new(),
    }
}

fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(MISSIONS_TOTAL, "Missions by status");
    describe_counter!(MISSIONS_REFUSED_TOTAL, "Refused missions by error code");
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
    describe_gauge!(BUILD_INFO, "Build information; always 1");
}

/// The boss accepted a new mission.
pub fn mission_accepted() {
    counter!(MISSIONS_TOTAL, "status" => "accepted").increment(1);
}

/// The boss answered a mission it had accepted before (same mission id).
pub fn mission_duplicate() {
    counter!(MISSIONS_TOTAL, "status" => "duplicate").increment(1);
}

/// The boss refused a mission with the error `code` (e.g. `invalid_mission`).
pub fn mission_refused(code: &str) {
    counter!(MISSIONS_TOTAL, "status" => "refused").increment(1);
    counter!(MISSIONS_REFUSED_TOTAL, "code" => code.to_owned()).increment(1);
}

/// A mission's final report was stored with `status` (`completed`,
/// `failed`, ...), `seconds` after the mission was accepted (if known).
pub fn mission_reported(status: &str, seconds: Option<f64>) {
    counter!(MISSIONS_TOTAL, "status" => status.to_owned()).increment(1);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_show_up_in_the_rendering() {
        // Every test of this crate installs with role "test": one recorder per process.
        let handle = install("test");
        assert!(handle.is_some(), "the recorder installs once per process");
        assert!(install("other").is_some(), "install is idempotent");
        mission_accepted();
        mission_refused("invalid_mission");
        mission_reported("completed", Some(3.0));
        task_started();
        task_finished("completed", 0.2);
        redelivered("worker-general");
        takeover("task");
        llm_tokens("openai", 10, 5);
        let text = render();
        for needle in [
            "swarm_missions_total{role=\"test\",status=\"accepted\"} 1",
            "swarm_missions_refused_total{role=\"test\",code=\"invalid_mission\"} 1",
            "swarm_mission_duration_seconds_bucket{role=\"test\",status=\"completed\",le=\"5\"} 1",
            "swarm_tasks_total{role=\"test\",status=\"completed\"} 1",
            "swarm_task_duration_seconds_count{role=\"test\",status=\"completed\"} 1",
            "swarm_tasks_in_flight{role=\"test\"} 0",
            "swarm_redeliveries_total{role=\"test\",consumer=\"worker-general\"} 1",
            "swarm_takeovers_total{role=\"test\",kind=\"task\"} 1",
            "swarm_llm_tokens_total{role=\"test\",provider=\"openai\",kind=\"prompt\"} 10",
            "swarm_build_info{role=\"test\",version=",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
