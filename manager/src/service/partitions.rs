//! Which manager partitions this replica owns, and pulling them: the
//! replicas announce themselves on a core NATS heartbeat, and every replica
//! computes the same owner for each partition from the live ones
//! (rendezvous hashing with even shares, [`assign`]), so a replica that
//! joins or leaves moves little more than its own share. The server's pin on each partition's consumer stays the
//! guarantee of one owner at a time: two replicas that briefly disagree
//! both pull, and only the pinned one is served (docs/decisions.md,
//! "Partitioned managers").

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::PullConsumer};
use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use swarm_common::subjects;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// How often a replica says it is alive.
pub(super) const HEARTBEAT_EVERY: Duration = Duration::from_millis(250);
/// How long a replica counts as alive after its last heartbeat.
pub(super) const ALIVE_FOR: Duration = Duration::from_secs(1);
/// How long a starting replica listens to the others before it claims
/// partitions: long enough to hear every live replica once, so that it
/// does not pull (and perhaps get pinned to) partitions it is about to
/// find are another's.
pub(super) const SETTLE: Duration = HEARTBEAT_EVERY.saturating_mul(2);
/// The most replicas one replica keeps track of: heartbeats past it are
/// ignored (only managers may send them; this bounds a faulty one).
const MAX_MEMBERS: usize = 256;
/// The largest heartbeat read.
const MAX_HEARTBEAT: usize = 1024;
/// The longest replica id taken.
const MAX_ID: usize = 256;

/// What a replica says on [`swarm_common::subjects::MANAGER_HEARTBEAT`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Heartbeat {
    /// The replica: its agent id and a process id of its own.
    pub id: String,
    /// Whether it is shutting down (its partitions move at once).
    #[serde(default)]
    pub leaving: bool,
}

impl Heartbeat {
    /// Reads a heartbeat, or `None` for bytes that are not one.
    pub(super) fn read(payload: &[u8]) -> Option<Heartbeat> {
        if payload.len() > MAX_HEARTBEAT {
            return None;
        }
        serde_json::from_slice::<Heartbeat>(payload)
            .ok()
            .filter(|h| !h.id.is_empty() && h.id.len() <= MAX_ID)
    }
}

/// The replicas this one has heard from, and when.
#[derive(Debug)]
pub(super) struct Members {
    me: String,
    seen: HashMap<String, Instant>,
}

impl Members {
    /// Only `me`, so far.
    pub(super) fn new(me: impl Into<String>) -> Members {
        Members {
            me: me.into(),
            seen: HashMap::new(),
        }
    }

    /// Takes in a heartbeat heard at `now`.
    pub(super) fn heard(&mut self, beat: Heartbeat, now: Instant) {
        if beat.id == self.me {
            return;
        }
        if beat.leaving {
            self.seen.remove(&beat.id);
        } else if self.seen.len() < MAX_MEMBERS || self.seen.contains_key(&beat.id) {
            self.seen.insert(beat.id, now);
        }
    }

    /// The live replicas at `now`, this one included, in order.
    pub(super) fn live(&mut self, now: Instant) -> Vec<String> {
        self.seen
            .retain(|_, at| now.saturating_duration_since(*at) < ALIVE_FOR);
        let mut ids: Vec<String> = self.seen.keys().cloned().collect();
        ids.push(self.me.clone());
        ids.sort();
        ids
    }

    /// The partitions of `partitions` this replica owns at `now`.
    pub(super) fn owned(&mut self, partitions: u32, now: Instant) -> BTreeSet<u32> {
        let live = self.live(now);
        assign(partitions, &live)
            .into_iter()
            .enumerate()
            .filter(|(_, owner)| *owner == Some(self.me.as_str()))
            .map(|(p, _)| p as u32)
            .collect()
    }
}

/// What this replica holds: a puller for each partition it owns, feeding
/// one channel, and the pin each partition was last delivered under.
pub(super) struct Holdings {
    a2ap: jetstream::stream::Stream,
    consumers: Vec<PullConsumer>,
    /// How long each pull request lasts: well within the pin's lifetime.
    expires: Duration,
    tx: mpsc::Sender<(u32, jetstream::Message)>,
    pullers: BTreeMap<u32, JoinHandle<()>>,
    pins: HashMap<u32, String>,
}

impl Holdings {
    /// Holds nothing yet; `consumers[k]` is partition k's consumer.
    pub(super) fn new(
        a2ap: jetstream::stream::Stream,
        consumers: Vec<PullConsumer>,
        expires: Duration,
        tx: mpsc::Sender<(u32, jetstream::Message)>,
    ) -> Holdings {
        Holdings {
            a2ap,
            consumers,
            expires,
            tx,
            pullers: BTreeMap::new(),
            pins: HashMap::new(),
        }
    }

    /// How many partitions there are.
    pub(super) fn partitions(&self) -> u32 {
        self.consumers.len() as u32
    }

    /// Pulls exactly the partitions of `want`: starts a puller for each one
    /// gained and stops (and unpins, if it was pinned here) each one lost.
    pub(super) fn hold(&mut self, want: &BTreeSet<u32>) {
        let lost: Vec<u32> = self
            .pullers
            .keys()
            .filter(|p| !want.contains(p))
            .copied()
            .collect();
        for p in lost {
            self.release(p);
        }
        for &p in want {
            let Some(consumer) = self.consumers.get(p as usize) else {
                continue;
            };
            if self.pullers.contains_key(&p) {
                continue;
            }
            info!(partition = p, "pulling manager partition");
            swarm_runtime::metrics::partition_owned(p, true);
            let puller = tokio::spawn(pull(p, consumer.clone(), self.expires, self.tx.clone()));
            self.pullers.insert(p, puller);
        }
    }

    /// Notes that a message of `partition` came with pin `pin`; `true` if
    /// the pin is new (the server just made this replica the partition's
    /// owner, so cached states may be behind the previous owner's writes).
    /// A message of a partition no longer held changes nothing.
    pub(super) fn pinned(&mut self, partition: u32, pin: &str) -> bool {
        if !self.pullers.contains_key(&partition) {
            return false;
        }
        if self.pins.get(&partition).map(String::as_str) == Some(pin) {
            return false;
        }
        info!(partition, pin, "this replica manages the partition");
        self.pins.insert(partition, pin.to_owned());
        true
    }

    /// Stops pulling `partition`, and hands its pin over at once rather
    /// than when it lapses. Only a pin this replica was given is released:
    /// a replica that never got one would take the owner's.
    fn release(&mut self, partition: u32) {
        if let Some(puller) = self.pullers.remove(&partition) {
            puller.abort();
        }
        swarm_runtime::metrics::partition_owned(partition, false);
        info!(partition, "letting manager partition go");
        if self.pins.remove(&partition).is_some() {
            let a2ap = self.a2ap.clone();
            tokio::spawn(async move { unpin(&a2ap, partition).await });
        }
    }

    /// Stops pulling everything and releases every pin held (shutdown).
    pub(super) async fn release_all(&mut self) {
        for (_, puller) in std::mem::take(&mut self.pullers) {
            puller.abort();
        }
        for (partition, _) in std::mem::take(&mut self.pins) {
            unpin(&self.a2ap, partition).await;
        }
    }
}

/// Releases this replica's pin on `partition`'s consumer.
async fn unpin(a2ap: &jetstream::stream::Stream, partition: u32) {
    let name = subjects::manager_consumer(partition);
    if let Err(e) = a2ap.unpin_consumer(&name, subjects::MANAGER_GROUP).await {
        debug!(partition, error = %e, "could not release the pin; it lapses on its own");
    }
}

/// Pulls one partition's events into `tx` until aborted (or the loop
/// that reads `tx` is gone).
async fn pull(
    partition: u32,
    consumer: PullConsumer,
    expires: Duration,
    tx: mpsc::Sender<(u32, jetstream::Message)>,
) {
    let open = || {
        consumer
            .stream()
            .group(subjects::MANAGER_GROUP)
            .expires(expires)
            .heartbeat(expires / 2)
            .messages()
    };
    let mut messages = None;
    loop {
        let Some(stream) = messages.as_mut() else {
            match open().await {
                Ok(fresh) => messages = Some(fresh),
                Err(e) => {
                    warn!(partition, error = %e, "cannot pull the partition yet");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            continue;
        };
        match stream.next().await {
            Some(Ok(msg)) => {
                if tx.send((partition, msg)).await.is_err() {
                    return;
                }
            }
            Some(Err(e)) => {
                warn!(partition, error = %e, "pulling the partition failed; pulling again");
                tokio::time::sleep(Duration::from_millis(200)).await;
                messages = None;
            }
            None => {
                warn!(
                    partition,
                    "the partition's message stream ended; pulling again"
                );
                messages = None;
            }
        }
    }
}

/// The owner of each partition among `members`: partition by partition,
/// the member that ranks it highest (rendezvous hashing) among those still
/// under their share, so that every member's share is the same to within
/// one, and a member's arrival or departure moves little more than its own
/// share. Every replica that sees the same members computes the same.
pub(super) fn assign(partitions: u32, members: &[String]) -> Vec<Option<&str>> {
    if members.is_empty() {
        return vec![None; partitions as usize];
    }
    let m = members.len();
    let floor = partitions as usize / m;
    // How many members may hold one more than `floor`.
    let mut extra = partitions as usize % m;
    let mut load = vec![0usize; m];
    (0..partitions)
        .map(|p| {
            let chosen = (0..m)
                .filter(|&i| load[i] < floor || (load[i] == floor && extra > 0))
                .max_by_key(|&i| (weight(&members[i], p), members[i].as_str()))?;
            if load[chosen] == floor {
                extra -= 1;
            }
            load[chosen] += 1;
            Some(members[chosen].as_str())
        })
        .collect()
}

/// FNV-1a (64 bits) of the member and partition, finished with
/// SplitMix64's mixer: FNV alone leaves ids that differ in their last
/// characters too close together.
fn weight(member: &str, partition: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.bytes().chain([b'/']).chain(partition.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("manager-{i}")).collect()
    }

    fn shares(assigned: &[Option<&str>]) -> HashMap<String, usize> {
        let mut shares = HashMap::new();
        for owner in assigned {
            *shares.entry(owner.unwrap().to_owned()).or_insert(0) += 1;
        }
        shares
    }

    #[test]
    fn every_partition_has_one_owner_and_shares_differ_by_at_most_one() {
        for (partitions, members) in [(8, 3), (8, 5), (16, 3), (8, 1), (3, 5), (16, 16)] {
            let members_ids = ids(members);
            let assigned = assign(partitions, &members_ids);
            assert_eq!(assigned.len(), partitions as usize);
            let shares = shares(&assigned);
            let (lo, hi) = (
                shares.values().min().copied().unwrap_or(0),
                shares.values().max().copied().unwrap_or(0),
            );
            let owners = shares.len();
            assert!(hi - lo <= 1, "{partitions} over {members}: {shares:?}");
            assert_eq!(owners, members.min(partitions as usize), "{shares:?}");
        }
        assert_eq!(assign(2, &[]), vec![None, None]);
    }

    #[test]
    fn a_joining_replica_moves_little_more_than_its_share() {
        for partitions in [8u32, 16] {
            let before = ids(2);
            let after = ids(3);
            let (was, is) = (assign(partitions, &before), assign(partitions, &after));
            let moved = was.iter().zip(&is).filter(|(a, b)| a != b).count();
            let gained = is.iter().filter(|o| **o == Some("manager-2")).count();
            assert!(gained >= partitions as usize / 3, "{is:?}");
            assert!(moved <= gained + 2, "{partitions}: {was:?} -> {is:?}");
        }
    }

    #[test]
    fn replicas_agree_and_leave() {
        let now = Instant::now();
        let mut a = Members::new("manager-0");
        let mut b = Members::new("manager-1");
        a.heard(Heartbeat::read(br#"{"id":"manager-1"}"#).unwrap(), now);
        b.heard(
            Heartbeat {
                id: "manager-0".into(),
                leaving: false,
            },
            now,
        );
        let (oa, ob) = (a.owned(8, now), b.owned(8, now));
        assert!(oa.is_disjoint(&ob));
        assert_eq!(oa.len() + ob.len(), 8);
        // Silence for the liveness period, or a leaving heartbeat: all to one.
        assert_eq!(a.owned(8, now + ALIVE_FOR).len(), 8);
        b.heard(
            Heartbeat {
                id: "manager-0".into(),
                leaving: true,
            },
            now,
        );
        assert_eq!(b.owned(8, now).len(), 8);
        assert_eq!(Heartbeat::read(b"not json"), None);
        assert_eq!(Heartbeat::read(br#"{"id":""}"#), None);
        assert_eq!(Heartbeat::read(&[b' '; 2000]), None);
    }
}
