//! Which CPUs a child process runs on: the CPUs this process may use, and
//! [`NatsCpus`], the choice of CPUs for a local nats-server (shared with
//! the roles, or some of its own). A child inherits the CPUs of the thread
//! that starts it, so a spawn on given CPUs narrows that thread for the
//! moment of the spawn only.

use anyhow::Context as _;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The CPUs this process may run on (1 if that cannot be told).
pub(crate) fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// The numbers of the CPUs this process may run on, in order (empty if they
/// cannot be told).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Runs `f` (a spawn) with this thread on the CPUs `cpus` only, then puts
/// the thread back where it was: a child inherits the CPUs of the thread
/// that starts it, every thread of the child too.
pub(crate) fn on_cpus<T>(cpus: &[usize], f: impl FnOnce() -> T) -> anyhow::Result<T> {
    let this_thread = Pid::from_raw(0);
    let before = sched_getaffinity(this_thread).context("reading this thread's CPUs")?;
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)
            .with_context(|| format!("CPU {cpu} is beyond this system's CPUs"))?;
    }
    sched_setaffinity(this_thread, &set)
        .context("this process may not run on those CPUs (taskset, cgroup)")?;
    let out = f();
    // The child is started by now and must not be lost to an error here: a
    // thread left narrowed (putting back the set it had does not fail in
    // practice) only runs this supervisor's later work on fewer CPUs.
    if let Err(e) = sched_setaffinity(this_thread, &before) {
        tracing::warn!(error = %e, "cannot put this thread back on its CPUs");
    }
    Ok(out)
}

/// `0,2,5`: CPU numbers as `taskset -c` and `/proc/<pid>/status` write them.
pub(crate) fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Which CPUs a local nats-server runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NatsCpus {
    /// Wherever the supervisor may run, beside the roles (the default; the
    /// tests start many servers side by side, which must not share one CPU).
    #[default]
    Shared,
    /// CPUs of its own when the supervisor may use two or more: the last
    /// half of them (at least one), the rest left to the roles. For a server
    /// that is the only one on the machine (`swarm up`, the harness). On a
    /// 2-vCPU machine it took a chain of 50 down 3-11 % and the one-task
    /// round trip 2-6 % against a server that may run anywhere, and the
    /// sustained load no slower (docs/decisions.md, "CPUs of a local
    /// nats-server").
    Own,
    /// Exactly these CPUs (`taskset -c` numbers).
    List(Vec<usize>),
}

impl NatsCpus {
    /// The CPUs a server started by this process gets; `None`: no CPUs of
    /// its own.
    pub fn here(&self) -> Option<Vec<usize>> {
        self.pick(&allowed_cpus())
    }

    /// The CPUs a server gets when this process may run on `allowed`;
    /// `None`: no CPUs of its own.
    pub fn pick(&self, allowed: &[usize]) -> Option<Vec<usize>> {
        match self {
            NatsCpus::Shared => None,
            NatsCpus::Own if allowed.len() < 2 => None,
            NatsCpus::Own => Some(allowed[allowed.len() - (allowed.len() / 2).max(1)..].to_vec()),
            NatsCpus::List(cpus) => Some(cpus.clone()),
        }
    }
}

impl std::str::FromStr for NatsCpus {
    type Err = String;

    /// `shared`, `own`, or a list of CPU numbers such as `1` or `2,3`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "shared" => Ok(NatsCpus::Shared),
            "own" => Ok(NatsCpus::Own),
            list => {
                let cpus = list
                    .split(',')
                    .map(|n| n.trim().parse::<usize>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| {
                        format!("{s:?} is not `shared`, `own` or a list of CPU numbers like `1` or `2,3`")
                    })?;
                Ok(NatsCpus::List(cpus))
            }
        }
    }
}

impl std::fmt::Display for NatsCpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsCpus::Shared => f.write_str("shared"),
            NatsCpus::Own => f.write_str("own"),
            NatsCpus::List(cpus) => f.write_str(&cpu_list(cpus)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_of_its_own_gets_the_last_half_of_the_cpus() {
        assert_eq!(NatsCpus::Shared.pick(&[0, 1, 2, 3]), None);
        assert_eq!(NatsCpus::Own.pick(&[]), None);
        assert_eq!(NatsCpus::Own.pick(&[0]), None, "one CPU is shared");
        assert_eq!(NatsCpus::Own.pick(&[0, 1]), Some(vec![1]));
        assert_eq!(NatsCpus::Own.pick(&[0, 1, 2]), Some(vec![2]));
        assert_eq!(
            NatsCpus::Own.pick(&(0..8).collect::<Vec<_>>()),
            Some(vec![4, 5, 6, 7])
        );
        // The CPUs this process may use, not CPU numbers from 0.
        assert_eq!(NatsCpus::Own.pick(&[2, 5, 7, 9]), Some(vec![7, 9]));
        assert_eq!(NatsCpus::List(vec![3]).pick(&[0, 1]), Some(vec![3]));
    }

    #[test]
    fn nats_cpus_are_read_and_written_as_on_the_command_line() {
        for (text, cpus) in [
            ("shared", NatsCpus::Shared),
            ("own", NatsCpus::Own),
            ("1", NatsCpus::List(vec![1])),
            ("2,3", NatsCpus::List(vec![2, 3])),
        ] {
            assert_eq!(text.parse::<NatsCpus>(), Ok(cpus.clone()));
            assert_eq!(cpus.to_string(), text);
        }
        assert_eq!(" 2, 3".parse(), Ok(NatsCpus::List(vec![2, 3])));
        for bad in ["", "all", "1,,2", "-1", "1-3"] {
            let err = bad.parse::<NatsCpus>().unwrap_err();
            assert!(err.contains("`own`"), "{bad:?}: {err}");
        }
    }
}
