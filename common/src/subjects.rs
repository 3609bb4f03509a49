//! The subject map: every NATS subject, stream, bucket and consumer name
//! Swarm uses, in one place.
//!
//! Request/reply subjects (`boss.missions`) are disjoint from stream subjects:
//! a request on a subject a stream captures would be answered by the
//! stream's publish ack instead of the service.

/// Missions in: a request/reply service served by the boss replicas.
pub const MISSIONS: &str = "boss.missions";
/// The queue group the boss replicas share on [`MISSIONS`].
pub const MISSIONS_QUEUE: &str = "boss";

/// The handshake, `swarm.hello.<role>` (`boss`, `manager`, `worker`): a
/// request/reply subject every replica of the role answers with the protocol
/// versions and codecs it speaks, its role and its id. No stream captures it.
pub fn hello(role: &str) -> String {
    format!("swarm.hello.{role}")
}

/// The A2A NATS binding's requests (docs/a2a-nats.md), served by the
/// gateway replicas; no stream captures it.
pub const A2A_RPC: &str = "a2a.rpc";

/// Every role's handshake subject.
pub const HELLO_FILTER: &str = "swarm.hello.*";

/// Requests to the boss's desk of approvals and questions:
/// `swarm.desk.<user>.<action>`, served by the boss replicas in the
/// [`MISSIONS_QUEUE`] group.
pub const DESK_FILTER: &str = "swarm.desk.*.*";

/// The desk subject `user` sends `action` to (see
/// [`crate::approval::DeskRequest`]).
pub fn desk(user: &str, action: &str) -> String {
    format!("swarm.desk.{user}.{action}")
}

/// The stream that records accepted missions (subjects `swarm.missions.<swarm>`).
pub const MISSIONS_STREAM: &str = "MISSIONS";
/// Subjects of [`MISSIONS_STREAM`].
pub const MISSIONS_STREAM_SUBJECTS: &str = "swarm.missions.*";
/// The stream of every A2AP message of the swarms (`a2ap.<swarm>.…`): all
/// but the assignments, which have a stream of their own ([`WORK_STREAM`]).
pub const A2AP_STREAM: &str = "A2AP";
/// Subjects of [`A2AP_STREAM`]: the swarm messages have three or four
/// tokens, so they never overlap [`WORK_STREAM_SUBJECTS`] (five).
pub const A2AP_STREAM_SUBJECTS: [&str; 2] = ["a2ap.*.*", "a2ap.*.*.*"];
/// The stream of `TaskAssignment`s (`a2ap.work.<pool>.<swarm>.<task>`). It
/// is apart so that the right to read it can be given by pool: an
/// assignment carries the token its result must echo, which only the
/// pool's workers and the manager may see.
pub const WORK_STREAM: &str = "WORK";
/// Subjects of [`WORK_STREAM`].
pub const WORK_STREAM_SUBJECTS: &str = "a2ap.work.*.*.*";
/// The stream of dead letters: inputs that can never be processed, with the reason.
pub const DEADLETTER_STREAM: &str = "DEADLETTER";
/// Subjects of [`DEADLETTER_STREAM`].
pub const DEADLETTER_STREAM_SUBJECTS: &str = "swarm.deadletter.>";

/// KV bucket of `SwarmState`, one key per swarm id.
pub const SWARMS_BUCKET: &str = "swarms";
/// KV bucket of the step journal: `<swarm>.<task>.a<attempt>.r<revision>.s<step>`.
pub const JOURNAL_BUCKET: &str = "journal";
/// KV bucket of approval requests, one key per approval id.
pub const APPROVALS_BUCKET: &str = "approvals";
/// KV bucket of questions tasks ask people: `<swarm>.<task>`.
pub const INPUTS_BUCKET: &str = "inputs";
/// KV bucket of agent memory: `<namespace>.<key>`, the namespace a swarm id or `shared`.
pub const MEMORY_BUCKET: &str = "memory";
/// KV bucket of mission records, one key per swarm id.
pub const MISSIONS_BUCKET: &str = "missions";
/// Object store of rendered reports.
pub const REPORTS_BUCKET: &str = "reports";
/// KV bucket of agent cards, `<role>.<agent id>`, each kept while its
/// replica refreshes it ([`crate::card`]).
pub const AGENTS_BUCKET: &str = "agents";
/// KV bucket of the A2A gateway's push notification configs, one key per
/// swarm id (the A2A task id).
pub const PUSH_BUCKET: &str = "a2a-push";
/// KV bucket of the model limits the workers share, one key per provider
/// endpoint and model (16 hex digits of the SHA-256 of both).
pub const MODEL_LIMITS_BUCKET: &str = "model-limits";

/// KV bucket of the skills agents learned, `<scope>.<slug of the name>`
/// ([`crate::skill`]).
pub const SKILLS_BUCKET: &str = "skills";

/// Durable consumer the boss replicas share to plan accepted missions.
pub const PLANNER_CONSUMER: &str = "boss-planner";
/// Durable consumer the boss replicas share to render final reports.
pub const REPORTS_CONSUMER: &str = "boss-reports";
/// Durable consumer the A2A gateway replicas share to push task updates
/// to webhooks.
pub const PUSH_CONSUMER: &str = "gateway-push";
/// What the manager replicas are known by in metrics and traces; each
/// partition's durable consumer is [`manager_consumer`].
pub const MANAGER_CONSUMER: &str = "manager";
/// Priority group of every [`manager_consumer`]: the server pins each
/// partition's consumer to one replica at a time (its owner).
pub const MANAGER_GROUP: &str = "managers";

/// Manager partitions when `swarm setup` is given no number.
pub const DEFAULT_PARTITIONS: u32 = 8;
/// The most manager partitions: each is a durable consumer named in the
/// production permissions (`manager-p0` to `manager-p15`).
pub const MAX_PARTITIONS: u32 = 16;

/// The durable consumer of manager partition `partition`.
pub fn manager_consumer(partition: u32) -> String {
    format!("manager-p{partition}")
}

/// Core NATS subject of the manager replicas' heartbeats: each says it is
/// alive (or leaving), so that all agree which partitions each one owns.
pub const MANAGER_HEARTBEAT: &str = "swarm.managers.heartbeat";

/// What the A2AP stream's partition transform applies to: every swarm
/// message (the assignments are in the WORK stream).
pub const PARTITION_SOURCE: &str = "a2ap.*.>";

/// The subject transform of the A2AP stream over `partitions`: every
/// `a2ap.<swarm>.<kind>[.<task>]` is stored as
/// `a2ap.<swarm>.<partition>.<kind>[.<task>]`, the partition computed by the
/// server as [`partition`] computes it.
pub fn partition_transform(partitions: u32) -> (String, String) {
    (
        PARTITION_SOURCE.into(),
        format!(
            "a2ap.{{{{wildcard(1)}}}}.{{{{partition({},1)}}}}.>",
            partitions.clamp(1, MAX_PARTITIONS)
        ),
    )
}

/// The number of partitions a stream's transform destination names (see
/// [`partition_transform`]), or `None` if it is not such a transform.
pub fn partitions_of(destination: &str) -> Option<u32> {
    let inner = destination
        .strip_prefix("a2ap.{{wildcard(1)}}.{{partition(")?
        .strip_suffix(",1)}}.>")?;
    let n: u32 = inner.trim().parse().ok()?;
    (1..=MAX_PARTITIONS).contains(&n).then_some(n)
}

/// Where the A2AP stream stores a message published on `subject`, over
/// `partitions` (`None`: a stream without the transform stores it as sent).
/// Direct reads by subject and exact comparisons need it; wildcard filters
/// such as [`swarm_events`] match both forms.
pub fn stored(subject: &str, partitions: Option<u32>) -> String {
    let Some(n) = partitions else {
        return subject.to_owned();
    };
    let mut tokens = subject.splitn(3, '.');
    match (tokens.next(), tokens.next(), tokens.next()) {
        (Some("a2ap"), Some(swarm), Some(rest)) if swarm != "work" => {
            format!("a2ap.{swarm}.{}.{rest}", partition(swarm, n))
        }
        _ => subject.to_owned(),
    }
}

/// The subject a message stored on `subject` was published on: the reverse
/// of [`stored`] (a subject with no partition token is returned as it is).
/// Dead letters record this form, so that what they name can be sent again.
pub fn published(subject: &str) -> String {
    let tokens: Vec<&str> = subject.split('.').collect();
    if has_partition_token(&tokens) {
        let mut tokens = tokens;
        tokens.remove(2);
        tokens.join(".")
    } else {
        subject.to_owned()
    }
}

/// Whether `tokens` are those of a swarm message as stored, with its
/// partition after the swarm id ([`stored`]); no kind is a number, so the
/// two forms cannot be confused.
fn has_partition_token(tokens: &[&str]) -> bool {
    tokens.len() >= 4
        && tokens[0] == "a2ap"
        && tokens[1] != "work"
        && !tokens[2].is_empty()
        && tokens[2].bytes().all(|b| b.is_ascii_digit())
}

/// Subjects the manager consumes in one partition, as stored: deployments,
/// results, errors, control, asks and replans.
pub fn manager_filters(partition: u32) -> Vec<String> {
    [
        "deploy", "result.*", "error", "control", "ask.*", "replan.*",
    ]
    .iter()
    .map(|kind| format!("a2ap.*.{partition}.{kind}"))
    .collect()
}

/// Subjects the gateway's push notifications read: what a watcher of a
/// swarm is shown (deployments, progress, results, errors, reports).
pub fn push_filters() -> Vec<String> {
    vec![
        "a2ap.*.*.deploy".into(),
        "a2ap.*.*.progress.*".into(),
        "a2ap.*.*.result.*".into(),
        "a2ap.*.*.error".into(),
        STORED_REPORT_FILTER.into(),
    ]
}

/// Where an accepted mission is recorded.
pub fn mission_record(swarm_id: &str) -> String {
    format!("swarm.missions.{swarm_id}")
}

/// Where a dead letter from `source` (a role or subject kind) is recorded.
pub fn deadletter(source: &str) -> String {
    format!("swarm.deadletter.{source}")
}

/// `SwarmDeployment` for one swarm.
pub fn deploy(swarm_id: &str) -> String {
    format!("a2ap.{swarm_id}.deploy")
}

/// `TaskAssignment`s of one pool for one task.
pub fn work(pool: &str, swarm_id: &str, task_id: &str) -> String {
    format!("a2ap.work.{pool}.{swarm_id}.{task_id}")
}

/// Every assignment of one pool.
pub fn work_filter(pool: &str) -> String {
    format!("a2ap.work.{pool}.>")
}

/// The durable consumer a pool's replicas share.
pub fn worker_consumer(pool: &str) -> String {
    format!("worker-{pool}")
}

/// `ProgressUpdate`s of one task.
pub fn progress(swarm_id: &str, task_id: &str) -> String {
    format!("a2ap.{swarm_id}.progress.{task_id}")
}

/// `ResultSubmission`s of one task.
pub fn result(swarm_id: &str, task_id: &str) -> String {
    format!("a2ap.{swarm_id}.result.{task_id}")
}

/// The manager's `Replan`s after one task failed ([`crate::replan`]).
pub fn replan(swarm_id: &str, task_id: &str) -> String {
    format!("a2ap.{swarm_id}.replan.{task_id}")
}

/// `CollaborationRequest`s of one asking task ([`crate::collaborate`]).
pub fn ask(swarm_id: &str, task_id: &str) -> String {
    format!("a2ap.{swarm_id}.ask.{task_id}")
}

/// The `FinalReport` of one swarm.
pub fn report(swarm_id: &str) -> String {
    format!("a2ap.{swarm_id}.report")
}

/// Every `FinalReport`, as published (a core NATS subscription's filter).
pub const REPORT_FILTER: &str = "a2ap.*.report";
/// Every `FinalReport`, as the A2AP stream stores it (a consumer's filter).
pub const STORED_REPORT_FILTER: &str = "a2ap.*.*.report";

/// `Error`s of one swarm.
pub fn error(swarm_id: &str) -> String {
    format!("a2ap.{swarm_id}.error")
}

/// Control commands of one swarm.
pub fn control(swarm_id: &str) -> String {
    format!("a2ap.{swarm_id}.control")
}

/// Everything of one swarm except its work queue entries (for watchers).
pub fn swarm_events(swarm_id: &str) -> String {
    format!("a2ap.{swarm_id}.>")
}

/// The manager partition of a swarm among `partitions`: FNV-1a (32 bits)
/// of the swarm id, modulo the count. It is the hash nats-server's
/// `{{partition(n,…)}}` subject transform applies to a token, so a stream
/// that maps `a2ap.<swarm>.…` onto partitions stores each swarm where this
/// says (shown against the server in `tests/tests/partitions.rs`). Zero
/// partitions count as one.
pub fn partition(swarm_id: &str, partitions: u32) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in swarm_id.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash % partitions.max(1)
}

/// A parsed A2AP subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject<'a> {
    /// `a2ap.<swarm>.deploy`
    Deploy {
        /// The swarm.
        swarm_id: &'a str,
    },
    /// `a2ap.work.<pool>.<swarm>.<task>`
    Work {
        /// The pool.
        pool: &'a str,
        /// The swarm.
        swarm_id: &'a str,
        /// The task.
        task_id: &'a str,
    },
    /// `a2ap.<swarm>.progress.<task>`
    Progress {
        /// The swarm.
        swarm_id: &'a str,
        /// The task.
        task_id: &'a str,
    },
    /// `a2ap.<swarm>.result.<task>`
    Result {
        /// The swarm.
        swarm_id: &'a str,
        /// The task.
        task_id: &'a str,
    },
    /// `a2ap.<swarm>.ask.<task>`
    Ask {
        /// The swarm.
        swarm_id: &'a str,
        /// The asking task.
        task_id: &'a str,
    },
    /// `a2ap.<swarm>.replan.<task>`
    Replan {
        /// The swarm.
        swarm_id: &'a str,
        /// The task that failed.
        task_id: &'a str,
    },
    /// `a2ap.<swarm>.report`
    Report {
        /// The swarm.
        swarm_id: &'a str,
    },
    /// `a2ap.<swarm>.error`
    Error {
        /// The swarm.
        swarm_id: &'a str,
    },
    /// `a2ap.<swarm>.control`
    Control {
        /// The swarm.
        swarm_id: &'a str,
    },
}

impl<'a> Subject<'a> {
    /// Parses an A2AP subject; `None` for anything else, and for a subject
    /// whose swarm, task or pool is not a token ([`is_token`]): ids taken
    /// from subjects become KV keys and file names, so this is the one
    /// place they are checked (`/` is legal in a subject, not in an id).
    pub fn parse(subject: &'a str) -> Option<Subject<'a>> {
        let parsed = Self::parse_shape(subject)?;
        let ids_ok = match parsed {
            Subject::Work {
                pool,
                swarm_id,
                task_id,
            } => is_token(pool) && is_token(swarm_id) && is_token(task_id),
            Subject::Progress { swarm_id, task_id }
            | Subject::Result { swarm_id, task_id }
            | Subject::Ask { swarm_id, task_id }
            | Subject::Replan { swarm_id, task_id } => is_token(swarm_id) && is_token(task_id),
            other => is_token(other.swarm_id()),
        };
        ids_ok.then_some(parsed)
    }

    fn parse_shape(subject: &'a str) -> Option<Subject<'a>> {
        let mut parts: Vec<&str> = subject.split('.').collect();
        if has_partition_token(&parts) {
            parts.remove(2);
        }
        match parts.as_slice() {
            ["a2ap", "work", pool, swarm_id, task_id] => Some(Subject::Work {
                pool,
                swarm_id,
                task_id,
            }),
            ["a2ap", swarm_id, "deploy"] => Some(Subject::Deploy { swarm_id }),
            ["a2ap", swarm_id, "progress", task_id] => {
                Some(Subject::Progress { swarm_id, task_id })
            }
            ["a2ap", swarm_id, "result", task_id] => Some(Subject::Result { swarm_id, task_id }),
            ["a2ap", swarm_id, "ask", task_id] => Some(Subject::Ask { swarm_id, task_id }),
            ["a2ap", swarm_id, "replan", task_id] => Some(Subject::Replan { swarm_id, task_id }),
            ["a2ap", swarm_id, "report"] => Some(Subject::Report { swarm_id }),
            ["a2ap", swarm_id, "error"] => Some(Subject::Error { swarm_id }),
            ["a2ap", swarm_id, "control"] => Some(Subject::Control { swarm_id }),
            _ => None,
        }
    }

    /// The swarm the subject belongs to.
    pub fn swarm_id(&self) -> &'a str {
        match self {
            Subject::Deploy { swarm_id }
            | Subject::Work { swarm_id, .. }
            | Subject::Progress { swarm_id, .. }
            | Subject::Result { swarm_id, .. }
            | Subject::Ask { swarm_id, .. }
            | Subject::Replan { swarm_id, .. }
            | Subject::Report { swarm_id }
            | Subject::Error { swarm_id }
            | Subject::Control { swarm_id } => swarm_id,
        }
    }
}

/// Whether `s` can be one subject token (and a KV key part): 1 to 128 ASCII
/// letters, digits, `-` or `_`. Task ids, pool names and swarm ids must be.
pub fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The parts of a JetStream ack subject that name a worker pool's
/// assignment in the A2AP stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssignmentAck<'a> {
    /// The pool's durable consumer (`worker-<pool>`).
    pub consumer: &'a str,
    /// Where the assignment is stored in the stream.
    pub stream_seq: u64,
}

/// Reads `subject` as the ack subject of an assignment: a JetStream ack
/// subject (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer
/// seq>.<time>.<pending>`, or the longer form with a domain and an account
/// hash in front and a token after) of a worker pool's consumer on the WORK
/// stream, with no wildcard or empty token. Anything else is `None`, so a
/// result cannot make the manager publish to a subject of its choosing.
pub fn assignment_ack(subject: &str) -> Option<AssignmentAck<'_>> {
    let rest = subject.strip_prefix("$JS.ACK.")?;
    let clean = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'*' && b != b'>')
    };
    // Read on every result the manager gets: no allocation.
    let mut tokens = [""; 12];
    let mut n = 0;
    for t in rest.split('.') {
        if n == tokens.len() || !clean(t) {
            return None;
        }
        tokens[n] = t;
        n += 1;
    }
    // The short form has seven tokens; the long one puts the domain and
    // the account hash first and may end with more.
    let known = match n {
        7 => &tokens[..7],
        9.. => &tokens[2..9],
        _ => return None,
    };
    // Digits only: `parse` alone would take a leading `+`.
    let number = |t: &str| {
        if t.bytes().all(|b| b.is_ascii_digit()) {
            t.parse::<u64>().ok()
        } else {
            None
        }
    };
    let (stream, consumer) = (known[0], known[1]);
    let pool = consumer.strip_prefix("worker-")?;
    if stream != WORK_STREAM || !is_token(pool) || !known[2..].iter().all(|t| number(t).is_some()) {
        return None;
    }
    Some(AssignmentAck {
        consumer,
        stream_seq: number(known[3])?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn assignment_acks_are_read_in_both_forms_and_nothing_else_passes() {
        let short = "$JS.ACK.WORK.worker-general.1.812.77.1764583200000000000.0";
        assert_eq!(
            assignment_ack(short),
            Some(AssignmentAck {
                consumer: "worker-general",
                stream_seq: 812
            })
        );
        let long = "$JS.ACK._.ACCHASH1.WORK.worker-code.2.9.4.1764583200000000000.3.r4nd0m";
        assert_eq!(
            assignment_ack(long),
            Some(AssignmentAck {
                consumer: "worker-code",
                stream_seq: 9
            })
        );
        for bad in [
            "",
            "$JS.ACK.WORK.manager.1.812.77.1764583200000000000.0",
            "$JS.ACK.MISSIONS.worker-general.1.812.77.1764583200000000000.0",
            "$JS.ACK.A2AP.worker-general.1.812.77.1764583200000000000.0",
            "$JS.ACK.WORK.worker-general.1.*.77.1764583200000000000.0",
            "$JS.ACK.WORK.worker-general.>",
            "$JS.ACK.WORK.worker-general.1.812.77.17645832000.0.extra",
            "$JS.ACK.WORK.worker-general.1.8x2.77.1764583200000000000.0",
            "$JS.ACK.WORK.worker-.1.812.77.1764583200000000000.0",
            "$JS.API.STREAM.DELETE.A2AP",
            "a2ap.s.result.t",
            "$JS.ACK.WORK.worker-general.1..77.1764583200000000000.0",
            "$JS.ACK.WORK.worker-general.1.812.77.1764583200000000000.0 x",
        ] {
            assert_eq!(assignment_ack(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn builders_parse_back() {
        assert_eq!(
            Subject::parse(&work("code", "s1", "t-1")),
            Some(Subject::Work {
                pool: "code",
                swarm_id: "s1",
                task_id: "t-1"
            })
        );
        assert_eq!(
            Subject::parse(&result("s1", "t")),
            Some(Subject::Result {
                swarm_id: "s1",
                task_id: "t"
            })
        );
        assert_eq!(
            Subject::parse(&report("s")),
            Some(Subject::Report { swarm_id: "s" })
        );
        assert_eq!(
            Subject::parse(&ask("s1", "t")),
            Some(Subject::Ask {
                swarm_id: "s1",
                task_id: "t"
            })
        );
        assert_eq!(Subject::parse("a2ap.s.unknown"), None);
        // Ids that would be paths, or that no id can be, are refused here.
        assert_eq!(Subject::parse("a2ap./tmp/evil.report"), None);
        assert_eq!(Subject::parse("a2ap.s.result.../x"), None);
        assert_eq!(Subject::parse("a2ap.work.general.s.t/u"), None);
        assert_eq!(Subject::parse("a2ap.*.report"), None);
        assert_eq!(Subject::parse(MISSIONS), None);
    }

    #[test]
    fn stored_subjects_carry_the_partition_and_parse_back() {
        let n = Some(8);
        let p = partition("s1", 8);
        assert_eq!(
            stored(&result("s1", "t"), n),
            format!("a2ap.s1.{p}.result.t")
        );
        assert_eq!(stored(&deploy("s1"), n), format!("a2ap.s1.{p}.deploy"));
        assert_eq!(stored(&deploy("s1"), None), deploy("s1"));
        assert_eq!(stored(&work("g", "s1", "t"), n), work("g", "s1", "t"));
        for s in [
            result("s1", "t"),
            deploy("s1"),
            report("s1"),
            ask("s1", "t"),
        ] {
            assert_eq!(Subject::parse(&stored(&s, n)), Subject::parse(&s), "{s}");
        }
        assert_eq!(published(&stored(&result("s1", "t"), n)), result("s1", "t"));
        assert_eq!(published(&work("g", "s1", "t")), work("g", "s1", "t"));
        assert_eq!(published("a2ap.s1.report"), "a2ap.s1.report");
        assert_eq!(Subject::parse("a2ap.s1.3"), None);
        assert_eq!(Subject::parse("a2ap.s1.3.unknown"), None);
        assert_eq!(Subject::parse("a2ap.s1.3x.report"), None);
        let (source, destination) = partition_transform(8);
        assert_eq!(source, "a2ap.*.>");
        assert_eq!(destination, "a2ap.{{wildcard(1)}}.{{partition(8,1)}}.>");
        assert_eq!(partitions_of(&destination), Some(8));
        assert_eq!(
            partitions_of(&partition_transform(99).1),
            Some(MAX_PARTITIONS)
        );
        assert_eq!(partitions_of("a2ap.{{wildcard(1)}}.>"), None);
        assert_eq!(
            manager_filters(3)[1],
            "a2ap.*.3.result.*",
            "a partition's consumer reads results as stored"
        );
    }

    #[test]
    fn partitions_follow_fnv1a() {
        // FNV-1a 32 of the empty string is its offset basis, of "a" 0xe40c292c.
        assert_eq!(partition("", u32::MAX), 0x811c_9dc5);
        assert_eq!(partition("a", u32::MAX), 0xe40c_292c);
        assert_eq!(partition("anything", 1), 0);
        assert_eq!(partition("anything", 0), 0);
        let spread: std::collections::HashSet<u32> = (0..200)
            .map(|i| partition(&format!("swarm-{i}"), 8))
            .collect();
        assert_eq!(
            spread.len(),
            8,
            "200 swarms reach every one of 8 partitions"
        );
    }

    proptest! {
        #[test]
        fn any_token_round_trips(swarm in "[A-Za-z0-9_-]{1,40}", task in "[A-Za-z0-9_-]{1,40}") {
            prop_assume!(swarm != "work");
            let s = progress(&swarm, &task);
            prop_assert_eq!(Subject::parse(&s), Some(Subject::Progress { swarm_id: &swarm, task_id: &task }));
            prop_assert!(is_token(&swarm));
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,60}") {
            let _ = Subject::parse(&s);
            let _ = assignment_ack(&s);
        }
    }
}
