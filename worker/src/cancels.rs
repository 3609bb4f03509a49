//! Which swarms a worker has been told to stop: a flag per swarm that its
//! running tasks watch, and a bounded memory of cancelled swarms so that
//! their assignments still queued in the stream are skipped.
//!
//! The memory is bounded because cancels are cheap to send: a flood of
//! cancels for swarms that never existed must not grow a worker without
//! end. Past [`REMEMBERED`] cancelled swarms, the oldest that no task
//! watches is forgotten; an assignment of it that comes later runs and its
//! result is ignored by the manager (the swarm has ended), which wastes work
//! but decides nothing.

use std::collections::{HashMap, VecDeque};

use tokio::sync::watch;

/// Cancelled swarms remembered beyond those with running tasks.
pub const REMEMBERED: usize = 4096;

/// The cancel flags of one worker.
#[derive(Debug, Default)]
pub struct Cancels {
    flags: HashMap<String, watch::Sender<bool>>,
    /// Cancelled swarms, oldest first (ids may repeat; each is checked when
    /// it reaches the front).
    order: VecDeque<String>,
}

impl Cancels {
    /// The flag a task of `swarm_id` watches (already set if the swarm was
    /// cancelled).
    pub fn flag(&mut self, swarm_id: &str) -> watch::Receiver<bool> {
        self.flags
            .entry(swarm_id.to_string())
            .or_insert_with(|| watch::channel(false).0)
            .subscribe()
    }

    /// Stops the swarm's running tasks and remembers it for its queued ones.
    pub fn cancel(&mut self, swarm_id: &str) {
        self.flags
            .entry(swarm_id.to_string())
            .or_insert_with(|| watch::channel(false).0)
            .send_replace(true);
        self.order.push_back(swarm_id.to_string());
        while self.order.len() > REMEMBERED {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if self
                .flags
                .get(&oldest)
                .is_some_and(|f| f.receiver_count() == 0)
                && !self.order.contains(&oldest)
            {
                self.flags.remove(&oldest);
            }
        }
    }

    /// Forgets a swarm's flag once no task watches it, unless it was
    /// cancelled (that one is kept for the swarm's queued assignments).
    pub fn release(&mut self, swarm_id: &str) {
        if self
            .flags
            .get(swarm_id)
            .is_some_and(|f| f.receiver_count() == 0 && !*f.borrow())
        {
            self.flags.remove(swarm_id);
        }
    }

    /// How many swarms have a flag.
    pub fn len(&self) -> usize {
        self.flags.len()
    }

    /// Whether no swarm has a flag.
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_reaches_running_and_queued_tasks() {
        let mut c = Cancels::default();
        let running = c.flag("s1");
        c.cancel("s1");
        assert!(*running.borrow());
        drop(running);
        c.release("s1");
        assert!(*c.flag("s1").borrow(), "a queued task of s1 is skipped");
        let other = c.flag("s2");
        assert!(!*other.borrow());
        drop(other);
        c.release("s2");
        assert_eq!(
            c.len(),
            1,
            "an uncancelled flag nobody watches is forgotten"
        );
    }

    #[test]
    fn a_flood_of_cancels_for_unknown_swarms_stays_bounded() {
        let mut c = Cancels::default();
        let watched = c.flag("real");
        c.cancel("real");
        for i in 0..5 * REMEMBERED {
            c.cancel(&format!("forged-{i}"));
        }
        assert!(c.len() <= REMEMBERED + 1, "{} flags", c.len());
        assert!(*watched.borrow(), "a watched swarm keeps its flag");
        assert!(c.flags.contains_key("real"));
        assert!(*c.flag(&format!("forged-{}", 5 * REMEMBERED - 1)).borrow());
    }
}
