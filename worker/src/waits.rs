//! What this worker waits on for a person, by swarm: approval requests and
//! questions. A swarm's end closes them; a wait that ends any other way
//! (decided, answered, expired, its task stopped) leaves the set through
//! its [`Waiting`] guard.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Ids (approval ids, task ids) waited on, by swarm.
#[derive(Debug, Clone, Default)]
pub struct Waits {
    by_swarm: Arc<Mutex<HashMap<String, HashSet<String>>>>,
}

impl Waits {
    /// Notes that `id` of `swarm_id` is waited on until the guard drops.
    pub fn enter(&self, swarm_id: &str, id: &str) -> Waiting {
        if let Ok(mut map) = self.by_swarm.lock() {
            map.entry(swarm_id.to_string())
                .or_default()
                .insert(id.to_string());
        }
        Waiting {
            waits: self.clone(),
            swarm_id: swarm_id.to_string(),
            id: id.to_string(),
        }
    }

    /// The ids of `swarm_id` waited on now. Taken before the swarm's tasks
    /// are stopped, as their waits then leave.
    pub fn of(&self, swarm_id: &str) -> Vec<String> {
        self.by_swarm
            .lock()
            .map(|map| {
                map.get(swarm_id)
                    .map(|ids| ids.iter().cloned().collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }
}

/// One wait in [`Waits`]; leaves it when dropped.
#[derive(Debug)]
pub struct Waiting {
    waits: Waits,
    swarm_id: String,
    id: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Ok(mut map) = self.waits.by_swarm.lock()
            && let Some(ids) = map.get_mut(&self.swarm_id)
        {
            ids.remove(&self.id);
            if ids.is_empty() {
                map.remove(&self.swarm_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_leaves_when_its_guard_drops() {
        let waits = Waits::default();
        let a = waits.enter("s1", "a");
        let b = waits.enter("s1", "b");
        let mut ids = waits.of("s1");
        ids.sort();
        assert_eq!(ids, ["a", "b"]);
        drop(a);
        assert_eq!(waits.of("s1"), ["b"]);
        drop(b);
        assert!(waits.of("s1").is_empty());
        assert!(waits.by_swarm.lock().unwrap().is_empty());
    }
}
