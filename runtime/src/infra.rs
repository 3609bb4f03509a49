//! The streams, buckets and object store Swarm keeps its state in, created
//! idempotently by every binary at start.
//!
//! After creating each one, the configuration the server returns is checked:
//! an older server drops fields it does not know without an error.

use std::time::Duration;

use async_nats::Client;
use async_nats::jetstream::{
    self, Context, kv,
    object_store::{self, ObjectStore},
    stream::{self, Stream},
};
use swarm_common::subjects;

use crate::RuntimeError;

/// Handles on everything durable.
#[derive(Clone)]
pub struct Infra {
    /// The JetStream context.
    pub js: Context,
    /// `SwarmState` by swarm id.
    pub swarms: kv::Store,
    /// `MissionRecord` by swarm id.
    pub missions: kv::Store,
    /// Rendered reports.
    pub reports: ObjectStore,
    /// The step journal of agent loops.
    pub journal: kv::Store,
    /// Approval requests of destructive tool calls.
    pub approvals: kv::Store,
    /// What agents remember, per swarm and shared.
    pub memory: kv::Store,
    /// Questions tasks ask people, and their answers.
    pub inputs: kv::Store,
}

fn setup_err(what: &str, e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::Setup {
        what: what.to_string(),
        reason: e.to_string(),
    }
}

/// Stream configurations, with `replicas` copies each.
pub fn stream_configs(replicas: usize) -> Vec<stream::Config> {
    let day = Duration::from_secs(24 * 3600);
    vec![
        stream::Config {
            name: subjects::MISSIONS_STREAM.into(),
            description: Some("Accepted missions, recorded before the boss replies".into()),
            subjects: vec![subjects::MISSIONS_STREAM_SUBJECTS.into()],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            // A mission id retried within a day is recognised by the stream itself.
            duplicate_window: day,
            max_age: 30 * day,
            ..Default::default()
        },
        stream::Config {
            name: subjects::A2AP_STREAM.into(),
            description: Some("Every A2AP message: deployments, work, progress, results, reports, errors, control".into()),
            subjects: vec![subjects::A2AP_STREAM_SUBJECTS.into()],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            duplicate_window: Duration::from_secs(3600),
            max_age: 7 * day,
            allow_direct: true,
            ..Default::default()
        },
        stream::Config {
            name: subjects::DEADLETTER_STREAM.into(),
            description: Some("Inputs that can never be processed, with the reason".into()),
            subjects: vec![subjects::DEADLETTER_STREAM_SUBJECTS.into()],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            max_age: 30 * day,
            ..Default::default()
        },
    ]
}

async fn ensure_stream(js: &Context, cfg: stream::Config) -> Result<(), RuntimeError> {
    let info = js
        .create_or_update_stream(cfg.clone())
        .await
        .map_err(|e| setup_err(&format!("stream {}", cfg.name), e))?;
    let got = &info.config;
    let mismatch = |detail: String| RuntimeError::ConfigMismatch {
        what: format!("stream {}", cfg.name),
        detail,
    };
    if got.subjects != cfg.subjects {
        return Err(mismatch(format!(
            "subjects {:?}, wanted {:?}",
            got.subjects, cfg.subjects
        )));
    }
    if got.duplicate_window != cfg.duplicate_window && cfg.duplicate_window != Duration::ZERO {
        return Err(mismatch(format!(
            "duplicate_window {:?}, wanted {:?}",
            got.duplicate_window, cfg.duplicate_window
        )));
    }
    if got.allow_direct != cfg.allow_direct {
        return Err(mismatch("allow_direct was dropped".into()));
    }
    Ok(())
}

async fn ensure_kv(js: &Context, cfg: kv::Config) -> Result<kv::Store, RuntimeError> {
    let what = format!("bucket {}", cfg.bucket);
    if let Ok(store) = js.get_key_value(&cfg.bucket).await {
        return Ok(store);
    }
    match js.create_key_value(cfg.clone()).await {
        Ok(store) => Ok(store),
        // Another process may have created it between our get and create.
        Err(create_err) => js
            .get_key_value(&cfg.bucket)
            .await
            .map_err(|_| setup_err(&what, create_err)),
    }
}

impl Infra {
    /// Connects the JetStream context and creates (or updates) every stream
    /// and bucket, each with `replicas` copies.
    pub async fn ensure(client: &Client, replicas: usize) -> Result<Infra, RuntimeError> {
        // A cluster that is still forming (or electing leaders) answers
        // setup requests with timeouts for a while: retry those.
        crate::retry::retry(
            || Infra::ensure_once(client, replicas),
            |e| matches!(e, RuntimeError::Setup { .. } | RuntimeError::NoJetStream(_)),
        )
        .await
    }

    async fn ensure_once(client: &Client, replicas: usize) -> Result<Infra, RuntimeError> {
        let js = jetstream::new(client.clone());
        js.query_account()
            .await
            .map_err(|e| RuntimeError::NoJetStream(e.to_string()))?;
        for cfg in stream_configs(replicas) {
            ensure_stream(&js, cfg).await?;
        }
        let day = Duration::from_secs(24 * 3600);
        let bucket = |name: &str, description: &str, max_age: Duration| kv::Config {
            bucket: name.into(),
            description: description.into(),
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: replicas,
            max_age,
            ..Default::default()
        };
        let swarms = ensure_kv(
            &js,
            bucket(
                subjects::SWARMS_BUCKET,
                "SwarmState by swarm id",
                Duration::ZERO,
            ),
        )
        .await?;
        let missions = ensure_kv(
            &js,
            bucket(
                subjects::MISSIONS_BUCKET,
                "MissionRecord by swarm id",
                Duration::ZERO,
            ),
        )
        .await?;
        // A journal only matters while its task may be redelivered.
        let journal = ensure_kv(
            &js,
            bucket(
                subjects::JOURNAL_BUCKET,
                "Agent-loop steps by swarm, task, attempt, revision and step",
                7 * day,
            ),
        )
        .await?;
        let approvals = ensure_kv(
            &js,
            bucket(
                subjects::APPROVALS_BUCKET,
                "Approval requests of destructive tool calls by approval id",
                30 * day,
            ),
        )
        .await?;
        let memory = ensure_kv(
            &js,
            bucket(
                subjects::MEMORY_BUCKET,
                "Agent memory: <swarm or shared>.<key>",
                Duration::ZERO,
            ),
        )
        .await?;
        let inputs = ensure_kv(
            &js,
            bucket(
                subjects::INPUTS_BUCKET,
                "Questions tasks ask people, by <swarm>.<task>",
                30 * day,
            ),
        )
        .await?;
        let reports = match js.get_object_store(subjects::REPORTS_BUCKET).await {
            Ok(store) => store,
            Err(_) => {
                let cfg = object_store::Config {
                    bucket: subjects::REPORTS_BUCKET.into(),
                    description: Some("Rendered HTML reports by swarm id".into()),
                    storage: stream::StorageType::File,
                    num_replicas: replicas,
                    ..Default::default()
                };
                match js.create_object_store(cfg).await {
                    Ok(store) => store,
                    Err(e) => js
                        .get_object_store(subjects::REPORTS_BUCKET)
                        .await
                        .map_err(|_| setup_err("object store reports", e))?,
                }
            }
        };
        Ok(Infra {
            js,
            swarms,
            missions,
            reports,
            journal,
            approvals,
            memory,
            inputs,
        })
    }

    /// The A2AP stream.
    pub async fn a2ap(&self) -> Result<Stream, RuntimeError> {
        self.js
            .get_stream(subjects::A2AP_STREAM)
            .await
            .map_err(|e| setup_err("stream A2AP", e))
    }

    /// The missions stream.
    pub async fn missions_stream(&self) -> Result<Stream, RuntimeError> {
        self.js
            .get_stream(subjects::MISSIONS_STREAM)
            .await
            .map_err(|e| setup_err("stream MISSIONS", e))
    }
}
