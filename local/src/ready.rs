//! When a local cluster is ready for missions: the boss service answers a
//! ping, and the JetStream consumers the managers and the workers pull
//! from exist. A role process that runs is not enough: it takes a moment
//! to connect, create its consumer or register its service, and a mission
//! submitted before then would wait for it or find no boss.

use std::time::Duration;

use swarm_common::subjects;

use crate::config::DEFAULT_POOL;

/// The NATS service name the boss replicas register: the cluster is ready
/// once `$SRV.PING.boss` gets a reply.
pub const BOSS_SERVICE: &str = "boss";

/// Which roles a cluster runs: readiness waits only for those.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected {
    /// At least one boss.
    pub boss: bool,
    /// At least one manager.
    pub managers: bool,
    /// At least one worker (of pool [`DEFAULT_POOL`]).
    pub workers: bool,
}

/// What the cluster still lacks to be ready, or `None` if it is ready.
pub(crate) async fn missing(client: &async_nats::Client, expected: &Expected) -> Option<String> {
    const ASK: Duration = Duration::from_secs(2);
    if expected.boss {
        let ping = format!("$SRV.PING.{BOSS_SERVICE}");
        match tokio::time::timeout(ASK, client.request(ping.clone(), "".into())).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Some(format!("a reply to {ping} ({e})")),
            Err(_) => return Some(format!("a reply to {ping} (timed out)")),
        }
    }
    let mut consumers = Vec::new();
    if expected.managers {
        // A manager creates every partition's consumer before it pulls;
        // the first is there once any manager has started.
        consumers.push((subjects::A2AP_STREAM, subjects::manager_consumer(0)));
    }
    if expected.workers {
        consumers.push((
            subjects::WORK_STREAM,
            subjects::worker_consumer(DEFAULT_POOL),
        ));
    }
    let js = async_nats::jetstream::new(client.clone());
    for (name, consumer) in consumers {
        let stream = match tokio::time::timeout(ASK, js.get_stream(name)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Some(format!("stream {name} ({e})")),
            Err(_) => return Some(format!("stream {name} (timed out)")),
        };
        match tokio::time::timeout(ASK, stream.consumer_info(&consumer)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Some(format!("consumer {consumer} ({e})")),
            Err(_) => return Some(format!("consumer {consumer} (timed out)")),
        }
    }
    None
}
