//! Partitioned managers (issue 28) across real processes: the replicas
//! share the A2AP stream's manager partitions, each owned by one replica
//! (as each replica's `/metrics` says); killing the owner of a partition
//! moves its swarms to the others while the other partitions' swarms go
//! on; a replica that joins takes its share, and one that leaves hands its
//! share back at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use swarm_common::{FinalReport, SwarmStatus, mission::MissionRequest, subjects};
use swarm_testkit::Cluster;

/// The partitions the A2AP stream has when setup is given no number.
const PARTITIONS: u32 = subjects::DEFAULT_PARTITIONS;

/// The partitions the manager serving `/metrics` on `port` owns, or `None`
/// if it does not answer (it is not running).
async fn owned_by(port: u16) -> Option<BTreeSet<u32>> {
    let (status, body) = common::get_metrics(port).await?;
    if !status.contains(" 200 ") {
        return None;
    }
    let owned = common::series(&body)
        .into_iter()
        .filter(|(name, value)| name.starts_with("swarm_manager_partition_owned{") && *value == 1.0)
        .filter_map(|(name, _)| {
            let at = name.find("partition=\"")? + "partition=\"".len();
            let rest = &name[at..];
            rest[..rest.find('"')?].parse().ok()
        })
        .collect();
    Some(owned)
}

/// Waits until the managers named in `managers` (id and metrics port) own
/// every partition between them, each once, in shares that differ by at
/// most one, and returns who owns what.
async fn settled(managers: &[(String, u16)]) -> BTreeMap<String, BTreeSet<u32>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut owners = BTreeMap::new();
        for (id, port) in managers {
            if let Some(owned) = owned_by(*port).await {
                owners.insert(id.clone(), owned);
            }
        }
        let all: Vec<u32> = owners.values().flatten().copied().collect();
        let distinct: BTreeSet<u32> = all.iter().copied().collect();
        let sizes: Vec<usize> = owners.values().map(BTreeSet::len).collect();
        let even = sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0) <= 1;
        if owners.len() == managers.len()
            && all.len() == PARTITIONS as usize
            && distinct == (0..PARTITIONS).collect()
            && even
        {
            return owners;
        }
        assert!(
            Instant::now() < deadline,
            "the partitions did not settle over {managers:?}: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A cluster of one boss, `managers` and `workers`, each serving its
/// `/metrics` (with `spare` ports after theirs for roles started later),
/// and a client of it.
async fn start(managers: usize, workers: usize, spare: usize) -> (Cluster, async_nats::Client) {
    let ports = 1 + managers + workers + spare;
    let cluster = Cluster::builder()
        .bosses(1)
        .managers(managers)
        .workers(workers)
        .metrics_base_port(common::free_ports(ports as u16))
        .start()
        .await
        .expect("the cluster starts");
    let nc = cluster.client().await;
    (cluster, nc)
}

/// The metrics endpoints of the cluster's managers.
fn managers(cluster: &Cluster) -> Vec<(String, u16)> {
    cluster
        .local()
        .metrics_endpoints()
        .iter()
        .filter(|(id, _)| id.starts_with("manager-"))
        .cloned()
        .collect()
}

/// A mission id whose swarm the stream puts in `partition`, and that
/// swarm's id.
fn id_in(partition: u32, tag: &str) -> (String, String) {
    (0..)
        .map(|i| format!("{tag}-{i}"))
        .map(|id| {
            let swarm = swarm_common::mission::swarm_id_for(Some(&id));
            (id, swarm)
        })
        .find(|(_, swarm)| subjects::partition(swarm, PARTITIONS) == partition)
        .unwrap()
}

/// A chain of two tasks, the first taking `ms`, under mission id `id`.
fn chain((id, _): &(String, String), ms: u64) -> MissionRequest {
    MissionRequest {
        mission_id: Some(id.to_owned()),
        ..common::mission(
            id,
            vec![
                common::task("a", &common::sleep(ms), &[]),
                common::task("b", &common::echo(&format!("{id} done")), &["a"]),
            ],
        )
    }
}

/// Each task of `report` completed once, on its first attempt.
fn done_once(report: &FinalReport) {
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(report.task_results.len(), 2, "{report:#?}");
    for outcome in &report.task_results {
        assert_eq!(outcome.attempts, 1, "{report:#?}");
    }
}

/// The partitions are one owner's each; a partition's owner is killed
/// (SIGKILL) while a swarm of its and a swarm of another replica's run:
/// both complete, each task once, and the two survivors share every
/// partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_partitions_owner_moves_its_swarms_while_the_others_run() {
    let (mut cluster, nc) = start(3, 2, 0).await;
    let before = settled(&managers(&cluster)).await;

    // A partition of the replica to be killed, and one of another's.
    let (victim, theirs) = before.iter().find(|(_, owned)| !owned.is_empty()).unwrap();
    let (other, others) = before
        .iter()
        .find(|(id, owned)| *id != victim && !owned.is_empty())
        .unwrap();
    let doomed = id_in(*theirs.iter().next().unwrap(), "doomed");
    let spared = id_in(*others.iter().next().unwrap(), "spared");
    assert_eq!(common::submit(&nc, &chain(&doomed, 2_000)).await, doomed.1);
    assert_eq!(common::submit(&nc, &chain(&spared, 2_000)).await, spared.1);
    // Both swarms are deployed and their first tasks running.
    for (_, id) in [&doomed, &spared] {
        common::eventually(
            Duration::from_secs(15),
            Duration::from_millis(50),
            &format!("{id} running"),
            || async {
                match swarm_client::client::state(&nc, id).await {
                    Ok(Some(state)) if !state.tasks.is_empty() => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }
    let index: usize = victim.trim_start_matches("manager-").parse().unwrap();
    cluster.local_mut().managers[index - 1].kill();

    done_once(&common::final_report(&cluster, &nc, &doomed.1, 60).await);
    done_once(&common::final_report(&cluster, &nc, &spared.1, 60).await);
    let survivors: Vec<(String, u16)> = managers(&cluster)
        .into_iter()
        .filter(|(id, _)| id != victim)
        .collect();
    let after = settled(&survivors).await;
    // The survivor that ran `spared` still owns its partition, or handed
    // it to the other survivor; none was lost with the victim.
    assert!(after.contains_key(other.as_str()), "{after:?}");
    // And a new swarm in the dead replica's partition runs.
    let again = id_in(*theirs.iter().next().unwrap(), "again");
    assert_eq!(common::submit(&nc, &chain(&again, 10)).await, again.1);
    done_once(&common::final_report(&cluster, &nc, &again.1, 60).await);
}

/// One replica owns everything; a second that starts takes its share (the
/// first lets those go), and a swarm there runs; when the second shuts
/// down (SIGTERM) the first has every partition again, and a swarm in the
/// partitions it got back runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_replica_takes_its_share_and_a_leaving_one_hands_it_back() {
    // A metrics port spare for the manager that joins.
    let (mut cluster, nc) = start(1, 1, 1).await;
    let alone = settled(&managers(&cluster)).await;
    assert_eq!(alone["manager-1"].len(), PARTITIONS as usize, "{alone:?}");

    cluster.local_mut().spawn_manager().unwrap();
    let shared = settled(&managers(&cluster)).await;
    assert_eq!(shared.len(), 2, "{shared:?}");
    let joined = shared["manager-2"].clone();
    assert_eq!(joined.len(), PARTITIONS as usize / 2, "{shared:?}");
    let there = id_in(*joined.iter().next().unwrap(), "joined");
    assert_eq!(common::submit(&nc, &chain(&there, 10)).await, there.1);
    done_once(&common::final_report(&cluster, &nc, &there.1, 60).await);

    cluster.local_mut().managers[1].signal_terminate();
    let first: Vec<(String, u16)> = managers(&cluster)
        .into_iter()
        .filter(|(id, _)| id == "manager-1")
        .collect();
    let back = settled(&first).await;
    assert_eq!(back["manager-1"].len(), PARTITIONS as usize, "{back:?}");
    let after = id_in(*joined.iter().next().unwrap(), "after");
    assert_eq!(common::submit(&nc, &chain(&after, 10)).await, after.1);
    done_once(&common::final_report(&cluster, &nc, &after.1, 60).await);
}
