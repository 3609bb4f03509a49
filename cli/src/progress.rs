//! Following a swarm for a person: a live progress bar on a terminal (tasks
//! done of total, failures, elapsed time, the tasks running now), one plain
//! line per update otherwise, or JSON lines with `--json`.
//!
//! The bar is drawn only when stdout is a terminal, and coloured only when
//! `NO_COLOR` is unset; piped output gets the plain lines and no ANSI codes.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use swarm_client::client::Update;
use swarm_common::{SwarmState, TaskStatus};

use crate::display;

/// The most the bar's message says; `{wide_msg}` cuts it further to the
/// terminal's width.
const MESSAGE_CHARS: usize = 160;

/// How a task looks to a watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Known, not started (or waiting for its dependencies).
    Waiting,
    /// A worker is on it (or it waits for a person).
    Running,
    /// A result was accepted or submitted as completed.
    Done,
    /// Its last word was a failure.
    Failed,
}

/// What a watcher knows of a swarm's tasks, from its state and its updates.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    /// The number of tasks, once known (the deployment or the state says).
    total: Option<usize>,
    /// Task id to how it looks; ordered so the running list is stable.
    tasks: BTreeMap<String, Mark>,
}

impl Tracker {
    /// A tracker seeded from the swarm's state, if a manager has stored one.
    pub fn new(state: Option<&SwarmState>) -> Self {
        let mut t = Tracker::default();
        if let Some(s) = state {
            t.total = Some(s.tasks.len());
            for task in &s.tasks {
                let mark = match task.status {
                    TaskStatus::Pending | TaskStatus::Assigned => Mark::Waiting,
                    TaskStatus::InProgress | TaskStatus::InputRequired => Mark::Running,
                    TaskStatus::Completed | TaskStatus::Skipped => Mark::Done,
                    TaskStatus::Failed | TaskStatus::Cancelled => Mark::Failed,
                };
                t.tasks.insert(task.definition.task_id.clone(), mark);
            }
        }
        t
    }

    /// Takes one update into account.
    pub fn apply(&mut self, update: &Update) {
        match update {
            Update::Deployed { tasks } => {
                self.total = Some(tasks.len());
                for id in tasks {
                    self.tasks.entry(id.clone()).or_insert(Mark::Waiting);
                }
            }
            Update::Progress(p) => {
                let mark = match p.status {
                    TaskStatus::Pending | TaskStatus::Assigned => Mark::Waiting,
                    TaskStatus::InProgress | TaskStatus::InputRequired => Mark::Running,
                    TaskStatus::Completed | TaskStatus::Skipped => Mark::Done,
                    TaskStatus::Failed | TaskStatus::Cancelled => Mark::Failed,
                };
                // A late progress line of a task already reported on does
                // not bring it back; a revision starts with a new one.
                let current = self.tasks.get(&p.task_id).copied();
                if mark != Mark::Running
                    || p.revision > 0
                    || !matches!(current, Some(Mark::Done | Mark::Failed))
                {
                    self.tasks.insert(p.task_id.clone(), mark);
                }
            }
            Update::Result(r) => {
                let mark = if r.status == TaskStatus::Completed {
                    Mark::Done
                } else {
                    Mark::Failed
                };
                self.tasks.insert(r.task_id.clone(), mark);
            }
            Update::Error(e) => {
                if let Some(task) = &e.task_id {
                    self.tasks.insert(task.clone(), Mark::Failed);
                }
            }
            Update::Report(r) => {
                self.total = Some(r.task_results.len());
                for t in &r.task_results {
                    let mark = match t.status {
                        TaskStatus::Completed | TaskStatus::Skipped => Mark::Done,
                        TaskStatus::Failed | TaskStatus::Cancelled => Mark::Failed,
                        _ => Mark::Waiting,
                    };
                    self.tasks.insert(t.task_id.clone(), mark);
                }
            }
        }
    }

    fn count(&self, mark: Mark) -> usize {
        self.tasks.values().filter(|m| **m == mark).count()
    }

    /// Tasks done.
    pub fn done(&self) -> usize {
        self.count(Mark::Done)
    }

    /// Tasks failed.
    pub fn failed(&self) -> usize {
        self.count(Mark::Failed)
    }

    /// The number of tasks, once known; never fewer than those seen.
    pub fn total(&self) -> Option<usize> {
        self.total.map(|n| n.max(self.tasks.len()))
    }

    /// The tasks running now, in id order.
    pub fn running(&self) -> Vec<&str> {
        self.tasks
            .iter()
            .filter(|(_, m)| **m == Mark::Running)
            .map(|(id, _)| id.as_str())
            .collect()
    }
}

/// The bar's message: `2/5 done, 1 failed | running: a, b`, within about
/// `max_chars` characters (the running list is cut). The elapsed time is
/// the bar's own, drawn beside it on every tick.
pub fn bar_message(tracker: &Tracker, max_chars: usize) -> String {
    let total = tracker
        .total()
        .map_or_else(|| "?".to_string(), |n| n.to_string());
    let mut head = format!("{}/{total} done", tracker.done());
    let failed = tracker.failed();
    if failed > 0 {
        head.push_str(&format!(", {failed} failed"));
    }
    let running = tracker.running();
    if running.is_empty() {
        return head;
    }
    let mut out = format!("{head} | running: ");
    for (i, id) in running.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        // Room is kept for saying how many were left out.
        let more = format!(" +{} more", running.len() - i);
        if i > 0 && out.chars().count() + sep.len() + id.chars().count() + more.len() > max_chars {
            out.push_str(&more);
            return out;
        }
        out.push_str(sep);
        out.push_str(id);
    }
    out
}

/// Whether output may be coloured: `NO_COLOR` unset (any value, even empty,
/// turns colour off, as no-color.org asks).
pub fn colour_allowed() -> bool {
    std::env::var_os("NO_COLOR").is_none()
}

/// How a swarm is followed.
pub enum Follow {
    /// One JSON object per update.
    Json,
    /// One plain line per update.
    Lines,
    /// A live bar, with the notable updates printed above it.
    Bar {
        /// The bar.
        bar: ProgressBar,
        /// What it shows.
        tracker: Tracker,
    },
}

impl Follow {
    /// JSON lines with `json`; else a bar when stdout is a terminal and
    /// plain lines when it is not. `state` (if stored) seeds the totals and
    /// `accepted_at` starts the elapsed time.
    pub fn new(json: bool, state: Option<&SwarmState>, accepted_at: DateTime<Utc>) -> Self {
        if json {
            return Follow::Json;
        }
        if !std::io::stdout().is_terminal() {
            return Follow::Lines;
        }
        let template = if colour_allowed() {
            "{spinner:.green} [{bar:24.cyan/blue}] {elapsed:>4} {wide_msg}"
        } else {
            "{spinner} [{bar:24}] {elapsed:>4} {wide_msg}"
        };
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stdout());
        bar.set_style(style);
        // Elapsed since the swarm was accepted, not since the watch began.
        bar.set_elapsed((Utc::now() - accepted_at).to_std().unwrap_or_default());
        bar.enable_steady_tick(Duration::from_millis(120));
        let follow = Follow::Bar {
            bar,
            tracker: Tracker::new(state),
        };
        follow.redraw();
        follow
    }

    /// Shows one update.
    pub fn update(&mut self, update: &Update) {
        match self {
            Follow::Json => println!("{}", display::update_json(update)),
            Follow::Lines => println!("{}", display::update_line(update)),
            Follow::Bar { bar, tracker, .. } => {
                tracker.apply(update);
                match update {
                    Update::Progress(_) => {}
                    Update::Report(_) => bar.finish_and_clear(),
                    _ => bar.println(display::update_line(update)),
                }
                self.redraw();
            }
        }
    }

    fn redraw(&self) {
        if let Follow::Bar { bar, tracker } = self {
            if bar.is_finished() {
                return;
            }
            if let Some(total) = tracker.total() {
                bar.set_length(total as u64);
            }
            bar.set_position(tracker.done() as u64);
            bar.set_message(bar_message(tracker, MESSAGE_CHARS));
        }
    }

    /// Clears the bar, if any, so what follows starts on a clean line.
    pub fn finish(&self) {
        if let Follow::Bar { bar, .. } = self {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use swarm_common::{ProgressUpdate, ResultSubmission};

    fn progress(task: &str, status: TaskStatus, revision: u32) -> Update {
        Update::Progress(ProgressUpdate {
            task_id: task.into(),
            status,
            progress_percentage: 10,
            message: String::new(),
            attempt: 1,
            revision,
            metrics: Default::default(),
        })
    }

    fn result(task: &str, status: TaskStatus) -> Update {
        let now = Utc::now();
        Update::Result(ResultSubmission {
            skills: Default::default(),
            artifacts: Vec::new(),
            token: String::new(),
            task_id: task.into(),
            status,
            result: "r".into(),
            attempt: 1,
            revision: 0,
            provider: "offline".into(),
            worker_id: "w".into(),
            started_at: now,
            completed_at: now,
            steps: Vec::new(),
            metrics: Default::default(),
            error: None,
            gate_verdicts: Vec::new(),
        })
    }

    #[test]
    fn the_bar_counts_done_failed_and_running_tasks() {
        let mut t = Tracker::new(None);
        assert_eq!(bar_message(&t, 80), "0/? done");
        t.apply(&Update::Deployed {
            tasks: vec!["a".into(), "b".into(), "c".into(), "d".into()],
        });
        t.apply(&progress("a", TaskStatus::InProgress, 0));
        t.apply(&progress("b", TaskStatus::InProgress, 0));
        t.apply(&progress("c", TaskStatus::InProgress, 0));
        assert_eq!(bar_message(&t, 80), "0/4 done | running: a, b, c");
        t.apply(&result("a", TaskStatus::Completed));
        t.apply(&result("b", TaskStatus::Failed));
        // A progress line that arrives after the result changes nothing.
        t.apply(&progress("a", TaskStatus::InProgress, 0));
        assert_eq!(bar_message(&t, 80), "1/4 done, 1 failed | running: c");
        // A revision runs the task again.
        t.apply(&progress("a", TaskStatus::InProgress, 1));
        assert_eq!(bar_message(&t, 80), "0/4 done, 1 failed | running: a, c");
    }

    #[test]
    fn a_long_running_list_is_cut() {
        let mut t = Tracker::new(None);
        let ids: Vec<String> = (0..30).map(|i| format!("task-{i:02}")).collect();
        t.apply(&Update::Deployed { tasks: ids.clone() });
        for id in &ids {
            t.apply(&progress(id, TaskStatus::InProgress, 0));
        }
        let m = bar_message(&t, 60);
        assert!(
            m.starts_with("0/30 done | running: task-00, task-01"),
            "{m}"
        );
        assert!(m.ends_with(" more"), "{m}");
        assert!(m.chars().count() <= 60, "{m}");
    }
}
