//! The streams, buckets and object store Swarm keeps its state in.
//!
//! Two ways in. [`Infra::ensure`] is the setup: it creates every stream and
//! bucket or brings an existing one to this version's configuration; `swarm
//! setup` runs it once per deployment as the `admin` user. [`Infra::open`]
//! is what a role does at start: it binds to what exists and changes
//! nothing, so in production no role needs the right to create, update or
//! delete a stream. Only what is missing is created, which succeeds on a
//! development server (one user, every right) and is refused in
//! production, where the role then waits for the setup.
//!
//! After creating each one, the configuration the server returns is checked:
//! an older server drops fields it does not know without an error.
//!
//! Nothing grows without bound: every stream and bucket has an age and a
//! size bound ([`Retention`], from the environment of `swarm setup`).

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
    /// The A2A gateway's push notification configs.
    pub pushes: kv::Store,
    /// The running replicas' agent cards.
    pub agents: kv::Store,
    /// The model limits the workers share.
    pub model_limits: kv::Store,
    /// The skills agents learned ([`swarm_common::skill`]).
    pub skills: kv::Store,
}

fn setup_err(what: &str, e: impl Into<crate::Cause>) -> RuntimeError {
    RuntimeError::setup(what, e)
}

const DAY: Duration = Duration::from_secs(24 * 3600);
const GIB: i64 = 1 << 30;

/// How long and how much Swarm keeps, and over how many manager partitions
/// the A2AP stream spreads the swarms. Every role applies these when it
/// starts, so give every role the same values.
///
/// | what | variable | default |
/// |---|---|---|
/// | swarm state, mission records, the A2AP stream's messages, reports | `SWARM_RETENTION_DAYS` | 30 days |
/// | the step journal | `SWARM_JOURNAL_DAYS` | 7 days |
/// | approval requests and questions, A2A push notification configs | `SWARM_REQUESTS_DAYS` | 30 days |
/// | agent cards (refreshed while their replicas run) | none | 30 seconds |
/// | the model limits of an endpoint no worker called | none | 1 day |
/// | agent memory (shared notes outlive missions) and learned skills | `SWARM_MEMORY_DAYS` | 90 days |
/// | dead letters, the missions stream | `SWARM_RETENTION_DAYS` | 30 days |
/// | bytes of the A2AP stream (the oldest messages go first) | `SWARM_A2AP_MAX_GB` | the server's store limit |
/// | bytes of each other stream or bucket (new missions are refused past it; the oldest dead letters go first) | `SWARM_BUCKET_MAX_GB` | the server's store limit |
/// | manager partitions, 1 to 16 (set by `swarm setup`; the other roles read the stream's) | `SWARM_MANAGER_PARTITIONS` | 8 |
///
/// Byte bounds are off unless set: the server reserves a bounded stream's
/// bytes in its store up front, so a default large enough for production
/// would not fit a small machine.
///
/// Keep the retention longer than the longest mission may run (the boss's
/// `max_execution_minutes`, 60 by default): a swarm's state expires that
/// long after its last change. `swarm gc <swarm>` removes a finished
/// swarm's data at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    /// State, records, A2AP messages, reports, dead letters, missions.
    pub finished: Duration,
    /// The step journal.
    pub journal: Duration,
    /// Approval requests, questions and push notification configs.
    pub requests: Duration,
    /// Agent memory.
    pub memory: Duration,
    /// Bytes of the A2AP stream; 0: the server's store limit.
    pub a2ap_bytes: i64,
    /// Bytes of each other stream, bucket and the object store; 0: the
    /// server's store limit.
    pub bucket_bytes: i64,
    /// Manager partitions of the A2AP stream (docs/decisions.md,
    /// "Partitioned managers").
    pub partitions: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            finished: 30 * DAY,
            journal: 7 * DAY,
            requests: 30 * DAY,
            memory: 90 * DAY,
            a2ap_bytes: 0,
            bucket_bytes: 0,
            partitions: subjects::DEFAULT_PARTITIONS,
        }
    }
}

impl Retention {
    /// The defaults, overridden by the variables in the table above (a
    /// value that is not a positive number keeps the default).
    pub fn from_env() -> Retention {
        Retention::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Retention {
        let d = Retention::default();
        let number = |name: &str| {
            get(name)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v > 0.0)
        };
        let days = |name: &str, default: Duration| {
            number(name).map_or(default, |v| Duration::from_secs_f64(v * DAY.as_secs_f64()))
        };
        let gib =
            |name: &str, default: i64| number(name).map_or(default, |v| (v * GIB as f64) as i64);
        Retention {
            finished: days("SWARM_RETENTION_DAYS", d.finished),
            journal: days("SWARM_JOURNAL_DAYS", d.journal),
            requests: days("SWARM_REQUESTS_DAYS", d.requests),
            memory: days("SWARM_MEMORY_DAYS", d.memory),
            a2ap_bytes: gib("SWARM_A2AP_MAX_GB", d.a2ap_bytes),
            bucket_bytes: gib("SWARM_BUCKET_MAX_GB", d.bucket_bytes),
            partitions: number("SWARM_MANAGER_PARTITIONS").map_or(d.partitions, |v| {
                (v as u32).clamp(1, subjects::MAX_PARTITIONS)
            }),
        }
    }
}

/// Stream configurations, with `replicas` copies each and the default
/// [`Retention`].
pub fn stream_configs(replicas: usize) -> Vec<stream::Config> {
    stream_configs_with(replicas, &Retention::default())
}

/// Stream configurations, with `replicas` copies each, kept as `keep` says.
pub fn stream_configs_with(replicas: usize, keep: &Retention) -> Vec<stream::Config> {
    let day = DAY;
    vec![
        stream::Config {
            name: subjects::MISSIONS_STREAM.into(),
            description: Some("Accepted missions, recorded before the boss replies".into()),
            subjects: vec![subjects::MISSIONS_STREAM_SUBJECTS.into()],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            // A mission id retried within a day is recognised by the stream itself.
            duplicate_window: day,
            max_age: keep.finished.max(day),
            max_bytes: keep.bucket_bytes,
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        },
        stream::Config {
            name: subjects::A2AP_STREAM.into(),
            description: Some("The swarms' A2AP messages: deployments, progress, results, reports, errors, control".into()),
            subjects: subjects::A2AP_STREAM_SUBJECTS.map(Into::into).to_vec(),
            storage: stream::StorageType::File,
            num_replicas: replicas,
            duplicate_window: Duration::from_secs(3600),
            max_age: keep.finished,
            // The oldest messages go first: refusing new ones would stop
            // every running swarm.
            max_bytes: keep.a2ap_bytes,
            discard: stream::DiscardPolicy::Old,
            allow_direct: true,
            // Each swarm's messages are stored under its manager partition,
            // which one manager replica consumes at a time.
            subject_transform: Some({
                let (source, destination) = subjects::partition_transform(keep.partitions);
                stream::SubjectTransform {
                    source,
                    destination,
                }
            }),
            ..Default::default()
        },
        // After A2AP: a setup that narrows an older A2AP (`a2ap.>`) must do
        // so before WORK takes the assignments' subjects.
        stream::Config {
            name: subjects::WORK_STREAM.into(),
            description: Some("Task assignments, one subject per pool".into()),
            subjects: vec![subjects::WORK_STREAM_SUBJECTS.into()],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            duplicate_window: Duration::from_secs(3600),
            max_age: keep.finished,
            max_bytes: keep.a2ap_bytes,
            discard: stream::DiscardPolicy::Old,
            ..Default::default()
        },
        stream::Config {
            name: subjects::DEADLETTER_STREAM.into(),
            description: Some("Inputs that can never be processed, with the reason".into()),
            subjects: vec![subjects::DEADLETTER_STREAM_SUBJECTS.into()],
            storage: stream::StorageType::File,
            num_replicas: replicas,
            max_age: keep.finished,
            max_bytes: keep.bucket_bytes,
            discard: stream::DiscardPolicy::Old,
            ..Default::default()
        },
    ]
}

/// The manager partitions a stream's configuration spreads swarms over, or
/// `None` if it has no partition transform.
pub fn partitions(config: &stream::Config) -> Option<u32> {
    config
        .subject_transform
        .as_ref()
        .filter(|t| t.source == subjects::PARTITION_SOURCE)
        .and_then(|t| subjects::partitions_of(&t.destination))
}

/// Whether the server answered that the stream does not exist (and not,
/// say, that the request timed out).
fn stream_not_found(e: &jetstream::context::GetStreamError) -> bool {
    matches!(
        e.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(je)
            if je.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

/// What a start does to the streams and buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Create what is missing, update what differs (`swarm setup`).
    Setup,
    /// Bind to what exists, create only what is missing, update nothing (a
    /// role's start).
    Open,
}

/// The advice a role gives when the infrastructure is missing or older
/// than it: only the setup identity may change it.
const RUN_SETUP: &str = "run `swarm setup` as the admin user";

async fn ensure_stream(js: &Context, cfg: stream::Config, mode: Mode) -> Result<(), RuntimeError> {
    let what = format!("stream {}", cfg.name);
    let info = match mode {
        Mode::Setup => js
            .create_or_update_stream(cfg.clone())
            .await
            .map_err(|e| setup_err(&what, e))?,
        Mode::Open => match js.get_stream(&cfg.name).await {
            Ok(mut stream) => stream
                .info()
                .await
                .map_err(|e| setup_err(&what, e))?
                .clone(),
            Err(e) if stream_not_found(&e) => {
                js.create_stream(cfg.clone()).await.map_err(|create| {
                    setup_err(&format!("{what} (missing; {RUN_SETUP})"), create)
                })?;
                js.get_stream(&cfg.name)
                    .await
                    .map_err(|e| setup_err(&what, e))?
                    .info()
                    .await
                    .map_err(|e| setup_err(&what, e))?
                    .clone()
            }
            Err(e) => return Err(setup_err(&what, e)),
        },
    };
    let got = &info.config;
    let mismatch = |detail: String| RuntimeError::ConfigMismatch {
        what: format!("stream {}", cfg.name),
        detail: match mode {
            Mode::Setup => detail,
            Mode::Open => format!("{detail}: the stream is older than this Swarm; {RUN_SETUP}"),
        },
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
    // A role binds to whatever partitions setup chose; it needs only that
    // there are some.
    if cfg.subject_transform.is_some() && partitions(got).is_none() {
        return Err(mismatch(format!(
            "subject_transform {:?}, wanted the manager partitions'",
            got.subject_transform
        )));
    }
    Ok(())
}

async fn ensure_kv(js: &Context, cfg: kv::Config, mode: Mode) -> Result<kv::Store, RuntimeError> {
    ensure_bucket(js, cfg, false, mode).await
}

/// [`ensure_kv`] for a bucket written in atomic batches (the `swarms`
/// bucket: [`crate::states`]): setup allows them, a role refuses a bucket
/// that does not.
async fn ensure_kv_batched(
    js: &Context,
    cfg: kv::Config,
    mode: Mode,
) -> Result<kv::Store, RuntimeError> {
    ensure_bucket(js, cfg, true, mode).await
}

async fn ensure_bucket(
    js: &Context,
    cfg: kv::Config,
    batched: bool,
    mode: Mode,
) -> Result<kv::Store, RuntimeError> {
    let what = format!("bucket {}", cfg.bucket);
    let stream = format!("KV_{}", cfg.bucket);
    let store = match js.get_key_value(&cfg.bucket).await {
        Ok(store) => store,
        Err(_) => match js.create_key_value(cfg.clone()).await {
            Ok(store) => store,
            // Another process may have created it between our get and create.
            Err(create_err) => js
                .get_key_value(&cfg.bucket)
                .await
                .map_err(|_| setup_err(&format!("{what} (missing; {RUN_SETUP})"), create_err))?,
        },
    };
    if mode == Mode::Open && !batched {
        return Ok(store);
    }
    let mut current = js
        .get_stream(&stream)
        .await
        .map_err(|e| setup_err(&what, e))?;
    let info = current.info().await.map_err(|e| setup_err(&what, e))?;
    let batches_missing = batched && !info.config.allow_atomic_publish;
    if mode == Mode::Open {
        if batches_missing {
            // Made just now (by this process or another one starting with
            // it), or older than this Swarm: allowed here if this user may,
            // else setup must.
            let mut updated = info.config.clone();
            updated.allow_atomic_publish = true;
            js.update_stream(updated)
                .await
                .map_err(|e| RuntimeError::ConfigMismatch {
                    what,
                    detail: format!(
                        "it does not take atomic batches ({e}; nats-server 2.12 or later needed); {RUN_SETUP}"
                    ),
                })?;
        }
        return Ok(store);
    }
    // Bring the bucket's bounds to this configuration.
    if info.config.max_age != cfg.max_age
        || info.config.max_bytes != cfg.max_bytes
        || batches_missing
    {
        let mut updated = info.config.clone();
        updated.max_age = cfg.max_age;
        updated.max_bytes = cfg.max_bytes;
        updated.allow_atomic_publish |= batched;
        js.update_stream(updated)
            .await
            .map_err(|e| setup_err(&what, e))?;
    }
    Ok(store)
}

impl Infra {
    /// The setup: connects the JetStream context and creates (or updates)
    /// every stream and bucket, each with `replicas` copies, kept as the
    /// environment's [`Retention`] says. Needs the right to create and
    /// update streams (the `admin` user in production).
    pub async fn ensure(client: &Client, replicas: usize) -> Result<Infra, RuntimeError> {
        Infra::ensure_with(client, replicas, &Retention::from_env()).await
    }

    /// A role's start: binds to every stream and bucket, creating only
    /// those that are missing (with `replicas` copies and the environment's
    /// [`Retention`]) and changing none. Where the role may not create
    /// them, it retries for a while, then fails saying to run `swarm
    /// setup`.
    pub async fn open(client: &Client, replicas: usize) -> Result<Infra, RuntimeError> {
        let keep = Retention::from_env();
        crate::retry::retry(
            || Box::pin(Infra::ensure_once(client, replicas, &keep, Mode::Open)),
            |e| matches!(e, RuntimeError::Setup { .. } | RuntimeError::NoJetStream(_)),
        )
        .await
    }

    /// [`ensure`](Self::ensure) with a given retention.
    pub async fn ensure_with(
        client: &Client,
        replicas: usize,
        keep: &Retention,
    ) -> Result<Infra, RuntimeError> {
        // A cluster that is still forming (or electing leaders) answers
        // setup requests with timeouts for a while: retry those.
        crate::retry::retry(
            // Boxed: the setup's future is large, and a test thread's stack small.
            || Box::pin(Infra::ensure_once(client, replicas, keep, Mode::Setup)),
            |e| matches!(e, RuntimeError::Setup { .. } | RuntimeError::NoJetStream(_)),
        )
        .await
    }

    async fn ensure_once(
        client: &Client,
        replicas: usize,
        keep: &Retention,
        mode: Mode,
    ) -> Result<Infra, RuntimeError> {
        let js = jetstream::new(client.clone());
        js.query_account()
            .await
            .map_err(|e| RuntimeError::NoJetStream(e.into()))?;
        for cfg in stream_configs_with(replicas, keep) {
            ensure_stream(&js, cfg, mode).await?;
        }
        let bucket = |name: &str, description: &str, max_age: Duration| kv::Config {
            bucket: name.into(),
            description: description.into(),
            history: 1,
            storage: stream::StorageType::File,
            num_replicas: replicas,
            max_age,
            max_bytes: keep.bucket_bytes,
            ..Default::default()
        };
        let swarms = ensure_kv_batched(
            &js,
            bucket(
                subjects::SWARMS_BUCKET,
                "SwarmState by swarm id",
                keep.finished,
            ),
            mode,
        )
        .await?;
        let missions = ensure_kv(
            &js,
            bucket(
                subjects::MISSIONS_BUCKET,
                "MissionRecord by swarm id",
                keep.finished,
            ),
            mode,
        )
        .await?;
        // A journal only matters while its task may be redelivered.
        let journal = ensure_kv(
            &js,
            bucket(
                subjects::JOURNAL_BUCKET,
                "Agent-loop steps by swarm, task, attempt, revision and step",
                keep.journal,
            ),
            mode,
        )
        .await?;
        let approvals = ensure_kv(
            &js,
            bucket(
                subjects::APPROVALS_BUCKET,
                "Approval requests of destructive tool calls by approval id",
                keep.requests,
            ),
            mode,
        )
        .await?;
        let memory = ensure_kv(
            &js,
            bucket(
                subjects::MEMORY_BUCKET,
                "Agent memory: <swarm or shared>.<key>",
                keep.memory,
            ),
            mode,
        )
        .await?;
        let inputs = ensure_kv(
            &js,
            bucket(
                subjects::INPUTS_BUCKET,
                "Questions tasks ask people, by <swarm>.<task>",
                keep.requests,
            ),
            mode,
        )
        .await?;
        let pushes = ensure_kv(
            &js,
            bucket(
                subjects::PUSH_BUCKET,
                "A2A push notification configs by swarm id",
                keep.requests,
            ),
            mode,
        )
        .await?;
        // A card lives as long as its replica refreshes it.
        let agents = ensure_kv(
            &js,
            bucket(
                subjects::AGENTS_BUCKET,
                "Agent cards of the running replicas, by <role>.<agent id>",
                swarm_common::card::CARD_TTL,
            ),
            mode,
        )
        .await?;
        // The limits of an endpoint unused for a day are forgotten (the
        // provider's headers teach them again); a value is a few KiB.
        let model_limits = ensure_kv(
            &js,
            kv::Config {
                max_value_size: 256 * 1024,
                ..bucket(
                    subjects::MODEL_LIMITS_BUCKET,
                    "Model limits the workers share, by endpoint and model",
                    DAY,
                )
            },
            mode,
        )
        .await?;
        // Skills live as long as memory; a scope holds at most MAX_SKILLS
        // of a few KiB each.
        let skills = ensure_kv(
            &js,
            kv::Config {
                max_value_size: 8 * 1024,
                ..bucket(
                    subjects::SKILLS_BUCKET,
                    "Skills agents learned, by <scope>.<name>",
                    keep.memory,
                )
            },
            mode,
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
                    max_age: keep.finished,
                    max_bytes: keep.bucket_bytes,
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
            pushes,
            agents,
            model_limits,
            skills,
        })
    }

    /// The A2AP stream.
    pub async fn a2ap(&self) -> Result<Stream, RuntimeError> {
        self.js
            .get_stream(subjects::A2AP_STREAM)
            .await
            .map_err(|e| setup_err("stream A2AP", e))
    }

    /// The stream of assignments.
    pub async fn work(&self) -> Result<Stream, RuntimeError> {
        self.js
            .get_stream(subjects::WORK_STREAM)
            .await
            .map_err(|e| setup_err("stream WORK", e))
    }

    /// The missions stream.
    pub async fn missions_stream(&self) -> Result<Stream, RuntimeError> {
        self.js
            .get_stream(subjects::MISSIONS_STREAM)
            .await
            .map_err(|e| setup_err("stream MISSIONS", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_comes_from_the_environment_with_defaults() {
        let d = Retention::default();
        assert_eq!(Retention::from_lookup(|_| None), d);
        let r = Retention::from_lookup(|name| match name {
            "SWARM_RETENTION_DAYS" => Some("2".into()),
            "SWARM_JOURNAL_DAYS" => Some("0.5".into()),
            "SWARM_A2AP_MAX_GB" => Some("1".into()),
            "SWARM_BUCKET_MAX_GB" => Some("nonsense".into()),
            "SWARM_REQUESTS_DAYS" => Some("-3".into()),
            "SWARM_MANAGER_PARTITIONS" => Some("99".into()),
            _ => None,
        });
        assert_eq!(d.partitions, subjects::DEFAULT_PARTITIONS);
        assert_eq!(r.partitions, subjects::MAX_PARTITIONS, "clamped");
        assert_eq!(r.finished, 2 * DAY);
        assert_eq!(r.journal, DAY / 2);
        assert_eq!(r.a2ap_bytes, GIB);
        assert_eq!(r.bucket_bytes, d.bucket_bytes);
        assert_eq!(d.bucket_bytes, 0, "no reservation unless asked for");
        assert_eq!(r.requests, d.requests);
    }

    #[test]
    fn the_a2ap_stream_says_how_many_partitions_it_has() {
        let keep = Retention {
            partitions: 3,
            ..Retention::default()
        };
        let configs = stream_configs_with(1, &keep);
        let a2ap = configs
            .iter()
            .find(|c| c.name == subjects::A2AP_STREAM)
            .unwrap();
        assert_eq!(partitions(a2ap), Some(3));
        for other in configs.iter().filter(|c| c.name != subjects::A2AP_STREAM) {
            assert_eq!(partitions(other), None, "{}", other.name);
        }
    }

    #[test]
    fn every_stream_is_bounded_in_age_and_in_bytes_when_asked() {
        for cfg in stream_configs(1) {
            assert!(cfg.max_age > Duration::ZERO, "{}", cfg.name);
            assert_eq!(cfg.max_bytes, 0, "{}", cfg.name);
        }
        let keep = Retention {
            a2ap_bytes: GIB,
            bucket_bytes: GIB / 2,
            ..Retention::default()
        };
        for cfg in stream_configs_with(1, &keep) {
            assert!(cfg.max_bytes > 0, "{}", cfg.name);
        }
    }
}
