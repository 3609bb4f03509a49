//! The process's own metrics, under the names every Prometheus client
//! library uses (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! ...), so the usual dashboards and alerts work on Swarm's roles unchanged.
//!
//! They are read from `/proc/self` at each scrape and written straight into
//! the text [`super::render`] returns, rather than through the `metrics`
//! facade: the facade's counters are integers (CPU seconds are not), and a
//! gauge set on every scrape would only copy what `/proc` already holds.
//! Reading four small files needs no dependency (the crate
//! `metrics-process` would bring `procfs` and, elsewhere, platform crates);
//! on a system without `/proc` the metrics are left out.

use std::fmt::Write as _;

/// User and system CPU time, in seconds.
pub const CPU_SECONDS_TOTAL: &str = "process_cpu_seconds_total";
/// Resident memory, in bytes.
pub const RESIDENT_MEMORY_BYTES: &str = "process_resident_memory_bytes";
/// Virtual memory, in bytes.
pub const VIRTUAL_MEMORY_BYTES: &str = "process_virtual_memory_bytes";
/// Open file descriptors.
pub const OPEN_FDS: &str = "process_open_fds";
/// The soft limit on open file descriptors.
pub const MAX_FDS: &str = "process_max_fds";
/// When the process started, in seconds since the Unix epoch.
pub const START_TIME_SECONDS: &str = "process_start_time_seconds";
/// The process's threads.
pub const THREADS: &str = "process_threads";

/// Clock ticks per second of the CPU times and the start time in
/// `/proc/<pid>/stat`: the kernel reports them in `USER_HZ`, which is 100
/// on every architecture Swarm builds for (Prometheus's own Go `procfs`
/// library assumes the same rather than asking `sysconf`).
const USER_HZ: f64 = 100.0;

/// One reading of the process's metrics; a field `/proc` did not give is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// User plus system CPU seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident set size, bytes.
    pub resident_bytes: Option<u64>,
    /// Virtual memory size, bytes.
    pub virtual_bytes: Option<u64>,
    /// Open file descriptors.
    pub open_fds: Option<u64>,
    /// Soft limit on file descriptors (`None` when unlimited).
    pub max_fds: Option<u64>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_seconds: Option<f64>,
    /// Threads.
    pub threads: Option<u64>,
}

impl Snapshot {
    /// Reads `/proc/self` (and the boot time in `/proc/stat`).
    pub fn read() -> Snapshot {
        let file = |path: &str| std::fs::read_to_string(path).ok();
        let stat = file("/proc/self/stat").and_then(|s| parse_stat(&s));
        let status = file("/proc/self/status").map(|s| parse_status(&s));
        let boot = file("/proc/stat").and_then(|s| boot_time(&s));
        let open_fds = std::fs::read_dir("/proc/self/fd")
            .ok()
            // The directory's own descriptor, open while it is read, is one of them.
            .map(|dir| (dir.count() as u64).saturating_sub(1));
        let max_fds = file("/proc/self/limits").and_then(|s| max_open_files(&s));
        let status = status.unwrap_or_default();
        Snapshot {
            cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / USER_HZ),
            resident_bytes: status.resident_bytes,
            virtual_bytes: status.virtual_bytes,
            open_fds,
            max_fds,
            start_time_seconds: stat
                .zip(boot)
                .map(|(s, boot)| boot as f64 + s.starttime as f64 / USER_HZ),
            threads: status.threads,
        }
    }

    /// Appends the metrics it has to `out` in the Prometheus text format,
    /// each series labelled `role`.
    pub fn render(&self, role: &str, out: &mut String) {
        let role = escape(role);
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        let mut one = |name: &str, kind: &str, help: &str, value: Option<String>| {
            if let Some(value) = value {
                // Writing to a String cannot fail.
                let _ = write!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{role=\"{role}\"}} {value}\n\n"
                );
            }
        };
        let int = |v: Option<u64>| v.map(|v| v.to_string());
        let float = |v: Option<f64>| v.map(|v| format!("{v}"));
        one(
            CPU_SECONDS_TOTAL,
            "counter",
            "Total user and system CPU time spent in seconds.",
            float(self.cpu_seconds),
        );
        one(
            RESIDENT_MEMORY_BYTES,
            "gauge",
            "Resident memory size in bytes.",
            int(self.resident_bytes),
        );
        one(
            VIRTUAL_MEMORY_BYTES,
            "gauge",
            "Virtual memory size in bytes.",
            int(self.virtual_bytes),
        );
        one(
            OPEN_FDS,
            "gauge",
            "Number of open file descriptors.",
            int(self.open_fds),
        );
        one(
            MAX_FDS,
            "gauge",
            "Maximum number of open file descriptors.",
            int(self.max_fds),
        );
        one(
            START_TIME_SECONDS,
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            float(self.start_time_seconds),
        );
        one(
            THREADS,
            "gauge",
            "Number of OS threads in the process.",
            int(self.threads),
        );
    }
}

/// A label value as the text format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The fields of `/proc/<pid>/stat` that are read, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    starttime: u64,
}

/// Parses `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may hold spaces and parentheses itself, so fields are counted from
/// the last `)`: field 3 (`state`) is the first after it.
fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field n (1-based, as proc(5) numbers them) is fields[n - 3].
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
    })
}

/// What `/proc/<pid>/status` gives.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Status {
    resident_bytes: Option<u64>,
    virtual_bytes: Option<u64>,
    threads: Option<u64>,
}

/// Parses `/proc/<pid>/status`: `VmRSS` and `VmSize` (in kB), `Threads`.
fn parse_status(text: &str) -> Status {
    let mut status = Status::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let number = || value.split_whitespace().next()?.parse::<u64>().ok();
        match key {
            "VmRSS" => status.resident_bytes = number().map(|kb| kb * 1024),
            "VmSize" => status.virtual_bytes = number().map(|kb| kb * 1024),
            "Threads" => status.threads = number(),
            _ => {}
        }
    }
    status
}

/// The boot time (`btime`, seconds since the epoch) in `/proc/stat`.
fn boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft limit of `Max open files` in `/proc/<pid>/limits`; `None` if
/// unlimited or absent.
fn max_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        // A command name with a space and a parenthesis of its own.
        let line = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 1000 0 0 0 \
                    250 50 0 0 20 0 7 0 123456 104857600 2560 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                utime: 250,
                stime: 50,
                starttime: 123456
            })
        );
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn status_gives_memory_in_bytes_and_threads() {
        let text =
            "Name:\tboss\nVmPeak:\t  999 kB\nVmSize:\t  2048 kB\nVmRSS:\t  512 kB\nThreads:\t7\n";
        assert_eq!(
            parse_status(text),
            Status {
                resident_bytes: Some(512 * 1024),
                virtual_bytes: Some(2048 * 1024),
                threads: Some(7)
            }
        );
        assert_eq!(parse_status("Name:\tx\n"), Status::default());
    }

    #[test]
    fn boot_time_and_the_open_files_limit() {
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(boot_time("cpu 1\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max processes             63432                63432                processes\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files\n"
            ),
            None
        );
    }

    #[test]
    fn renders_what_it_has_with_the_role_label() {
        let snapshot = Snapshot {
            cpu_seconds: Some(1.25),
            threads: Some(3),
            ..Snapshot::default()
        };
        let mut out = String::new();
        snapshot.render("wor\"ker", &mut out);
        assert!(
            out.contains("# TYPE process_cpu_seconds_total counter\n"),
            "{out}"
        );
        assert!(
            out.contains("process_cpu_seconds_total{role=\"wor\\\"ker\"} 1.25\n"),
            "{out}"
        );
        assert!(
            out.contains("process_threads{role=\"wor\\\"ker\"} 3\n"),
            "{out}"
        );
        assert!(
            !out.contains("process_open_fds"),
            "absent values are left out: {out}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_itself() {
        let s = Snapshot::read();
        assert!(s.cpu_seconds.is_some_and(|c| c >= 0.0), "{s:?}");
        assert!(s.resident_bytes.is_some_and(|b| b > 0), "{s:?}");
        assert!(s.virtual_bytes >= s.resident_bytes, "{s:?}");
        assert!(
            s.open_fds.is_some_and(|n| n >= 3),
            "stdin, stdout, stderr: {s:?}"
        );
        assert!(s.threads.is_some_and(|n| n >= 1), "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = s.start_time_seconds.unwrap();
        assert!(
            started <= now + 1.0 && started > now - 86_400.0 * 365.0,
            "{s:?}"
        );
    }
}
