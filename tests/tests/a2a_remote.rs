//! Remote A2A agents as workers: a persona whose `a2a_url` names an agent
//! served by the Python `a2a-sdk` (`tests/python/a2a_agent.py`) has its
//! tasks done there, with the worker's credential, through the task's
//! gates; a worker killed while the remote agent works does not send the
//! task again; the agent's question reaches the swarm's person and the
//! answer goes back; an agent the workers do not allow is refused with
//! the reason.
//!
//! The SDK's server needs `a2a-sdk[http-server]` and `uvicorn` in
//! `.python` (as `.ci/run` installs them); without them the tests say so
//! and pass, unless `CI` is set, when they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use common::repo;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use swarm_common::gates::GateSpec;
use swarm_common::{SwarmStatus, TaskDefinition, WorkerDeploymentPlan};
use swarm_testkit::{Cluster, free_port};

/// The worker's credential for the remote agent, as the agent wants it.
const TOKEN: &str = "remote-painter-token-0123456789";

/// The remote agent, killed on drop.
struct RemoteAgent {
    child: std::process::Child,
    url: String,
    log: PathBuf,
}

impl Drop for RemoteAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RemoteAgent {
    /// Starts the agent, taking `seconds` over each task, and waits for its card.
    async fn start(path: &std::ffi::OsStr, dir: &Path, seconds: f64) -> RemoteAgent {
        let port = free_port().unwrap();
        let log = dir.join("remote-tasks.log");
        std::fs::write(&log, "").unwrap();
        let child = Command::new("python3")
            .env("PYTHONPATH", path)
            .arg(repo().join("tests/python/a2a_agent.py"))
            .args([
                &port.to_string(),
                log.to_str().unwrap(),
                TOKEN,
                &seconds.to_string(),
            ])
            .stdout(std::fs::File::create(dir.join("remote-agent.out")).unwrap())
            .stderr(std::fs::File::create(dir.join("remote-agent.err")).unwrap())
            .spawn()
            .expect("python3 runs");
        let agent = RemoteAgent {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        let card = format!("{}/.well-known/agent-card.json", agent.url);
        for _ in 0..100 {
            if reqwest::get(&card).await.is_ok_and(|r| r.status() == 200) {
                return agent;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the remote agent did not start: {}",
            std::fs::read_to_string(dir.join("remote-agent.err")).unwrap_or_default()
        );
    }

    /// The tasks it was sent: (context id, message id).
    fn sent(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(c, m)| (c.to_owned(), m.to_owned()))
            .collect()
    }
}

/// A plan of one persona, `painter`, done by the agent at `url`.
fn remote_mission(url: &str, tasks: Vec<TaskDefinition>) -> swarm_common::mission::MissionRequest {
    let mut mission = common::mission("paint", tasks);
    let plan = mission.plan.as_mut().unwrap();
    plan.workers = vec![WorkerDeploymentPlan {
        name: "painter".into(),
        role: "paints, elsewhere".into(),
        system_prompt: String::new(),
        tools: Vec::new(),
        collaborators: Vec::new(),
        pool: "general".into(),
        a2a_url: Some(url.to_owned()),
        a2a_credential: Some("painter".into()),
        skill: None,
    }];
    for t in &mut plan.tasks {
        t.assigned_to = "painter".into();
    }
    mission
}

async fn cluster(agent: &RemoteAgent) -> Cluster {
    Cluster::builder()
        .managers(1)
        .workers(1)
        .env("SWARM_A2A_ALLOW", &agent.url)
        .env("SWARM_A2A_CREDENTIAL_PAINTER", TOKEN)
        // A killed worker's assignment comes back soon.
        .env("SWARM_WORKER_ACK_WAIT", "3")
        .start()
        .await
        .expect("the cluster starts")
}

/// `.python` as the PYTHONPATH, if the a2a-sdk server can run (common::python_path).
fn python_path() -> Option<std::ffi::OsString> {
    common::python_path(
        "the a2a-sdk server",
        "a2a.server.routes, starlette, uvicorn",
        "pip install --target .python 'a2a-sdk[http-server]==1.3.0' uvicorn",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agent_does_a_personas_tasks_once_even_when_the_worker_dies() {
    let Some(path) = python_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let agent = RemoteAgent::start(&path, dir.path(), 2.0).await;
    let mut cluster = cluster(&agent).await;
    let nc = cluster.client().await;

    // To its end, through the task's gate, with the worker's credential.
    let mut paint = common::task("paint", "Paint the shed red", &[]);
    paint.title = "Paint the shed".into();
    paint.gates = vec![GateSpec::Regex {
        pattern: "remote painter did: Paint the shed".into(),
        forbid: false,
        description: None,
    }];
    let id = common::submit(&nc, &remote_mission(&agent.url, vec![paint])).await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    let outcome = common::outcome(&report, "paint");
    assert_eq!(outcome.result, "the remote painter did: Paint the shed");
    assert_eq!(agent.sent().len(), 1);

    // The worker dies while the agent works: the redelivered task follows
    // the same remote task.
    let mut barn = common::task("barn", "Paint the barn", &[]);
    barn.title = "Paint the barn".into();
    let id = common::submit(&nc, &remote_mission(&agent.url, vec![barn])).await;
    common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(50),
        "the agent is sent the barn",
        || async {
            match agent.sent().len() {
                2 => Ok(()),
                n => Err(format!("{n} tasks sent")),
            }
        },
    )
    .await;
    cluster.local_mut().workers[0].kill();
    cluster.local_mut().workers[0].restart().unwrap();
    let report = common::final_report(&cluster, &nc, &id, 90).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(
        common::outcome(&report, "barn").result,
        "the remote painter did: Paint the barn"
    );
    let sent = agent.sent();
    assert_eq!(
        sent.len(),
        2,
        "the barn was sent to the remote agent once: {sent:?}"
    );
    assert!(
        sent[1].0.contains(&id),
        "the context names the swarm: {sent:?}"
    );

    // Again, and this time the worker died before the journal heard the
    // remote task's id (its entry is gone): the redelivery finds the task
    // by its context on the agent, and still sends nothing twice.
    let mut fence = common::task("fence", "Paint the fence", &[]);
    fence.title = "Paint the fence".into();
    let id = common::submit(&nc, &remote_mission(&agent.url, vec![fence])).await;
    common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(50),
        "the agent is sent the fence",
        || async {
            match agent.sent().len() {
                3 => Ok(()),
                n => Err(format!("{n} tasks sent")),
            }
        },
    )
    .await;
    let journal = async_nats::jetstream::new(nc.clone())
        .get_key_value(swarm_common::subjects::JOURNAL_BUCKET)
        .await
        .unwrap();
    let key = format!("{id}.fence.a1.r0.i0.s1");
    common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(5),
        "the send is journaled",
        || async {
            match journal.get(&key).await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // Killed only once the journal holds the send (the worker writes it when
    // the agent answers, which may come after the agent counts the request).
    cluster.local_mut().workers[0].kill();
    journal.purge(&key).await.unwrap();
    cluster.local_mut().workers[0].restart().unwrap();
    let report = common::final_report(&cluster, &nc, &id, 90).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(
        common::outcome(&report, "fence").result,
        "the remote painter did: Paint the fence"
    );
    assert_eq!(
        agent.sent().len(),
        3,
        "the fence was sent once: {:?}",
        agent.sent()
    );
    assert!(
        cluster.local().workers[0]
            .log_tail(200)
            .contains("found the remote task an earlier delivery sent"),
        "{}",
        cluster.log_tails()
    );
    common::assert_all_running(&mut cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agents_question_goes_to_the_person_and_refusals_say_why() {
    let Some(path) = python_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let agent = RemoteAgent::start(&path, dir.path(), 0.2).await;
    let mut cluster = cluster(&agent).await;
    let nc = cluster.client().await;

    let ask = common::task("shed", "Paint the shed; ask a person which colour", &[]);
    let id = common::submit(&nc, &remote_mission(&agent.url, vec![ask])).await;
    let question = common::eventually(
        Duration::from_secs(30),
        Duration::from_millis(100),
        "the remote agent's question is asked",
        || async {
            swarm_client::client::question(&nc, &id, "shed")
                .await
                .map_err(|e| format!("{e:#}"))?
                .ok_or_else(|| "no question yet".to_owned())
        },
    )
    .await;
    assert_eq!(question.question, "Which colour should the shed be?");
    swarm_client::client::answer(&nc, &id, "shed", "green", "tester")
        .await
        .unwrap();
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Completed, "{report:#?}");
    assert_eq!(
        common::outcome(&report, "shed").result,
        "painted the shed green"
    );
    assert_eq!(
        agent.sent().len(),
        1,
        "the answer went to the same remote task"
    );

    // An agent the workers do not allow, and one without the credential,
    // fail with the reason; the remote agent is sent nothing.
    let mut refused = remote_mission(
        "http://127.0.0.1:9/elsewhere",
        vec![common::task("t", "x", &[])],
    );
    refused.max_execution_seconds = Some(30);
    let id = common::submit(&nc, &refused).await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Failed);
    let why = serde_json::to_string(&report).unwrap();
    assert!(why.contains("--a2a-allow"), "{why}");
    let mut anonymous = remote_mission(&agent.url, vec![common::task("t", "x", &[])]);
    anonymous.plan.as_mut().unwrap().workers[0].a2a_credential = Some("nobody".into());
    let id = common::submit(&nc, &anonymous).await;
    let report = common::final_report(&cluster, &nc, &id, 60).await;
    assert_eq!(report.overall_status, SwarmStatus::Failed);
    let why = serde_json::to_string(&report).unwrap();
    assert!(why.contains("SWARM_A2A_CREDENTIAL_NOBODY"), "{why}");
    assert_eq!(agent.sent().len(), 1);
    common::assert_all_running(&mut cluster);
}
