//! Skills that bubble up, whole system: in one mission a worker's model
//! records a skill (`record_skill`) and its task passes the manager's
//! review, so the skill's score rises; the next mission's task that fits
//! it is offered the skill in its system prompt, fails its gate, and the
//! score falls; each report lists the skills learned and used. A mission's
//! own scope keeps its skills apart, the boss's model planner is given
//! them, and `swarm skills` lists them and removes one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

mod common;

use std::time::Duration;

use async_nats::jetstream;
use serde_json::json;
use swarm_common::gates::GateSpec;
use swarm_common::skill::{self, LearnedSkill};
use swarm_common::{SwarmStatus, subjects};
use swarm_testkit::{Cluster, Match, MockLlm, Reply, Rule};

const WAIT: Duration = Duration::from_secs(60);
const HOW_TO: &str = "Read the header row first, then total each column of the CSV.";

async fn stored(nc: &async_nats::Client, key: &str) -> Option<LearnedSkill> {
    let kv = jetstream::new(nc.clone())
        .get_key_value(subjects::SKILLS_BUCKET)
        .await
        .unwrap();
    let value = kv.get(key).await.unwrap()?;
    Some(serde_json::from_slice(&value).unwrap())
}

/// The skill at `key` once `ready` holds of it: the manager moves scores
/// beside the swarm's events, so a report may come out just before.
async fn stored_when(
    nc: &async_nats::Client,
    key: &str,
    ready: impl Fn(&LearnedSkill) -> bool,
) -> LearnedSkill {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = stored(nc, key).await;
        if let Some(s) = &s
            && ready(s)
        {
            return s.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the skill at {key} never got there: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A cluster of one of each role whose `roles` (their provider variables)
/// use `llm` as the OpenAI provider; the others stay offline.
/// The final report of swarm `id`, followed to its end.
async fn report(nc: &async_nats::Client, id: String) -> swarm_common::FinalReport {
    swarm_client::client::watch(nc, &id, WAIT, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

async fn start(llm: &MockLlm, roles: &[&str]) -> Cluster {
    let mut builder = Cluster::builder().bosses(1).managers(1).workers(1);
    for role in roles {
        builder = builder.env(*role, "openai");
    }
    for (k, v) in llm.openai_env("gpt-4o-mini") {
        if k != "SWARM_PROVIDER" {
            builder = builder.env(k, v);
        }
    }
    builder.start().await.expect("the cluster starts")
}

/// The `swarm` binary beside the role binaries.
fn swarm_bin() -> std::path::PathBuf {
    swarm_testkit::bin_dir().join(format!("swarm{}", std::env::consts::EXE_SUFFIX))
}

/// Runs `swarm args... -s url`: its exit code and stdout.
async fn swarm(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(swarm_bin())
        .args(args)
        .args(["-s", url])
        .env_remove("NATS_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("swarm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_recorded_in_one_mission_is_offered_in_the_next_and_scored_by_its_gates() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("first", Match::new().any_message_contains("sales.csv"))
            .reply(Reply::tool_call(
                "record_skill",
                json!({"name": "Summarise a CSV by column", "how_to": HOW_TO}),
            ))
            .then_always(Reply::text("totals: 42")),
    );
    llm.add(
        Rule::new("second", Match::new().any_message_contains("costs.csv"))
            .then_always(Reply::text("no totals")),
    );
    let cluster = start(&llm, &["SWARM_WORKER_PROVIDER"]).await;
    let nc = cluster.client().await;

    let first = common::submit(
        &nc,
        &common::mission(
            "sales",
            vec![common::task(
                "t1",
                "Summarise the columns of sales.csv.",
                &[],
            )],
        ),
    )
    .await;
    let r = report(&nc, first).await;
    assert_eq!(
        r.overall_status,
        SwarmStatus::Completed,
        "{r:#?}\n{}",
        llm.describe_requests()
    );
    let key = skill::key(skill::DEFAULT_SCOPE, "Summarise a CSV by column");
    let named = skill::SkillRef {
        key: key.clone(),
        name: "Summarise a CSV by column".into(),
    };
    assert_eq!(
        r.skills.learned,
        std::slice::from_ref(&named),
        "the report lists it"
    );
    assert_eq!(
        r.task_results[0].skills.learned,
        std::slice::from_ref(&named)
    );
    assert!(r.skills.used.is_empty());
    let learned = stored_when(&nc, &key, |s| s.passes == 1).await;
    assert_eq!(learned.how_to, HOW_TO);
    assert_eq!(learned.task_id, "t1");
    assert_eq!(
        (learned.score, learned.passes),
        (skill::INITIAL_SCORE + skill::PASS_GAIN, 1),
        "a skill whose task passed rises"
    );
    assert_eq!(learned.verdicts.len(), 1, "{learned:?}");
    // The control: the first mission had nothing to be offered.
    let firsts = llm.requests_for("first");
    assert!(
        !firsts[0].system().contains("Skills learned"),
        "{}",
        firsts[0].system()
    );

    let mut task = common::task("t1", "Summarise the columns of costs.csv.", &[]);
    task.gates = vec![GateSpec::Regex {
        pattern: "^total".into(),
        forbid: false,
        description: Some("starts with the totals".into()),
    }];
    let second = common::submit(&nc, &common::mission("costs", vec![task])).await;
    let r = report(&nc, second).await;
    assert_eq!(r.overall_status, SwarmStatus::Failed, "{r:#?}");
    assert_eq!(r.skills.used, [named], "the report lists the skill offered");
    let seconds = llm.requests_for("second");
    assert!(!seconds.is_empty());
    let system = seconds[0].system();
    assert!(
        system.contains("Skills learned") && system.contains(HOW_TO),
        "the fitting skill is in the next mission's prompt: {system}"
    );
    // Each version the review rejected is one verdict against it.
    let versions = r.task_results[0].revisions + 1;
    let after = stored_when(&nc, &key, |s| s.fails == versions).await;
    assert!(
        after.score < learned.score,
        "a skill whose task failed its gate falls: {} then {}",
        learned.score,
        after.score
    );
    cluster.stop(Duration::from_secs(5)).await;
}

const TALLY: &str = "Add the amounts column, then compare it with the invoice total line.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missions_scope_keeps_its_skills_apart_the_planner_gets_them_and_a_person_removes_one() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new(
            "planner",
            Match::new().system_contains("You are the planner of a Swarm"),
        )
        .then_always(Reply::text(
            json!({
                "manager_directive": "Tally the invoices.",
                "workers": [{"name": "clerk", "role": "tallies invoices",
                             "system_prompt": "You tally invoices.", "tools": []}],
                "tasks": [{"task_id": "t1", "title": "Tally april",
                           "description": "Tally the invoices of april.",
                           "assigned_to": "clerk", "dependencies": []}]
            })
            .to_string(),
        )),
    );
    llm.add(
        Rule::new(
            "learn",
            Match::new().any_message_contains("invoices of march"),
        )
        .reply(Reply::tool_call(
            "record_skill",
            json!({"name": "Tally invoices", "how_to": TALLY}),
        ))
        .then_always(Reply::text("tally: 7")),
    );
    llm.add(
        Rule::new(
            "apart",
            Match::new().any_message_contains("invoices of may"),
        )
        .then_always(Reply::text("tally: 8")),
    );
    llm.add(
        Rule::new(
            "april",
            Match::new().any_message_contains("invoices of april"),
        )
        .then_always(Reply::text("tally: 9")),
    );
    let cluster = start(&llm, &["SWARM_WORKER_PROVIDER", "SWARM_BOSS_PROVIDER"]).await;
    let nc = cluster.client().await;
    let url = cluster.local().url();
    let scoped = |text: &str, description: &str| {
        let mut m = common::mission(text, vec![common::task("t1", description, &[])]);
        m.skills_scope = Some("team-a".into());
        m
    };

    // Learned in scope team-a.
    let r = report(
        &nc,
        common::submit(&nc, &scoped("march", "Tally the invoices of march.")).await,
    )
    .await;
    assert_eq!(r.overall_status, SwarmStatus::Completed, "{r:#?}");
    let key = skill::key("team-a", "Tally invoices");
    assert_eq!(key, "team-a.tally-invoices");
    assert_eq!(r.skills.learned[0].key, key);
    stored_when(&nc, &key, |s| s.passes == 1).await;
    assert!(
        stored(&nc, &skill::key(skill::DEFAULT_SCOPE, "Tally invoices"))
            .await
            .is_none(),
        "kept in the mission's scope only"
    );

    // A mission of the deployment's scope is not offered it.
    let may = common::mission(
        "may",
        vec![common::task("t1", "Tally the invoices of may.", &[])],
    );
    let r = report(&nc, common::submit(&nc, &may).await).await;
    assert_eq!(r.overall_status, SwarmStatus::Completed, "{r:#?}");
    assert!(r.skills.is_empty(), "{:?}", r.skills);
    let mays = llm.requests_for("apart");
    assert!(!mays[0].system().contains(TALLY), "{}", mays[0].system());

    // A text mission of scope team-a: the boss's model plans it knowing the
    // skill, and its task is offered it.
    let mut april = swarm_common::mission::MissionRequest::text("Tally the invoices of april.");
    april.skills_scope = Some("team-a".into());
    let r = report(&nc, common::submit(&nc, &april).await).await;
    assert_eq!(r.overall_status, SwarmStatus::Completed, "{r:#?}");
    let plans = llm.requests_for("planner");
    assert_eq!(plans.len(), 1, "{}", llm.describe_requests());
    assert!(
        plans[0].last_user_text().contains(TALLY),
        "the planner is given the skill: {}",
        plans[0].last_user_text()
    );
    let aprils = llm.requests_for("april");
    assert!(aprils[0].system().contains(TALLY), "{}", aprils[0].system());
    assert_eq!(r.skills.used[0].key, key, "{:?}", r.skills);
    stored_when(&nc, &key, |s| s.passes == 2).await;

    // `swarm skills` lists it; a person removes it; the next mission of
    // the scope is offered nothing.
    let (code, out, err) = swarm(&url, &["skills", "--scope", "team-a", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let listed: Vec<LearnedSkill> = serde_json::from_str(&out).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].key(), listed[0].score),
        (key.clone(), skill::INITIAL_SCORE + 2 * skill::PASS_GAIN)
    );
    let (code, out, err) = swarm(&url, &["skills"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&key) && out.contains("SCORE"), "{out}");
    let (code, out, err) = swarm(&url, &["skills", "remove", &key]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("removed team-a.tally-invoices"), "{out}");
    let (code, _, err) = swarm(&url, &["skills", "remove", &key]).await;
    assert_ne!(code, 0, "a skill removed is gone");
    assert!(err.contains("no learned skill"), "{err}");
    // A key that cannot name a skill is refused as invalid, not as a fault.
    let (code, _, err) = swarm(&url, &["skills", "remove", "team-a.tally invoices"]).await;
    assert_ne!(code, 0, "an invalid key is refused");
    assert!(err.contains("<scope>.<name>"), "{err}");
    let (_, out, _) = swarm(&url, &["skills", "--scope", "team-a", "--json"]).await;
    assert_eq!(out.trim(), "[]");
    // A worker reads its listing again within FRESH_FOR.
    tokio::time::sleep(swarm_runtime::skills::FRESH_FOR).await;
    let again = scoped("again", "Tally the invoices of april again.");
    let r = report(&nc, common::submit(&nc, &again).await).await;
    assert_eq!(r.overall_status, SwarmStatus::Completed, "{r:#?}");
    assert!(r.skills.used.is_empty(), "{:?}", r.skills);
    cluster.stop(Duration::from_secs(5)).await;
}
