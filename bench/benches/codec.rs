//! How long the A2AP codec takes for the messages on a task's hot path (an
//! assignment, a result), against a baseline measured in the same process:
//! the payload alone, without its envelope.
//!
//! Run with `cargo bench -p swarm-bench --bench codec`. Prints nanoseconds per
//! operation and each as a multiple of the baseline; asserts nothing.

use std::collections::BTreeMap;
use std::hint::black_box;

use swarm_bench::stats::per_call_us;

use chrono::Utc;
use serde::de::DeserializeOwned;
use swarm_common::{
    Codec, ContextRef, Envelope, MissionBudget, Payload, ResultSubmission, StepRecord,
    TaskAssignment, TaskStatus, WorkerDeploymentPlan,
};

fn assignment() -> TaskAssignment {
    TaskAssignment {
        skills_scope: None,
        tasks: Vec::new(),
        child: None,
        token: String::new(),
        collaborators: Vec::new(),
        task_id: "t17".into(),
        title: "Echo step 17".into(),
        description: "call echo with the text of step 17".into(),
        persona: WorkerDeploymentPlan {
            name: "echoer".into(),
            role: "Repeats what it is given".into(),
            system_prompt: "You repeat the text you are given, word for word.".into(),
            tools: vec!["echo".into()],
            collaborators: vec![],
            pool: "general".into(),
            a2a_url: None,
            a2a_credential: None,
            skill: None,
        },
        attempt: 1,
        revision: 0,
        feedback: vec![],
        context: vec![ContextRef {
            task_id: "t16".into(),
            title: "Echo step 16".into(),
            result_seq: 1234,
            result: Some("step 16".into()),
        }],
        max_steps: 8,
        max_attempts: 3,
        max_result_bytes: 65536,
        priority: 0,
        deadline: Utc::now(),
        gates: vec![],
        budget: MissionBudget::default(),
        spent_tokens: 0,
        spent_cost_usd: 0.0,
    }
}

fn submission() -> ResultSubmission {
    ResultSubmission {
        skills: Default::default(),
        artifacts: Vec::new(),
        token: String::new(),
        task_id: "t17".into(),
        status: TaskStatus::Completed,
        result: "step 17".into(),
        attempt: 1,
        revision: 0,
        provider: "offline".into(),
        worker_id: "worker-1".into(),
        started_at: Utc::now(),
        completed_at: Utc::now(),
        steps: vec![StepRecord {
            step: 1,
            tool: Some("echo".into()),
            arguments: Some(r#"{"text":"step 17"}"#.into()),
            observation: "step 17".into(),
            is_error: false,
        }],
        metrics: BTreeMap::from([
            ("steps".to_string(), 2.0),
            ("deliveries".to_string(), 1.0),
            ("journal_recorded".to_string(), 0.0),
        ]),
        error: None,
        gate_verdicts: vec![],
    }
}

/// Prints the figures of one message type in one codec.
fn measure<T: Payload + DeserializeOwned>(name: &str, codec: Codec, body: T) {
    let n = 20_000;
    let env = Envelope::new(
        "worker-1",
        "manager",
        "0b6e3c1a-9f2d-4c8e-a1b7-5d4f3e2a1c0b",
        "t17",
        body,
    );
    let bytes = env.encode(codec).expect("encodes");
    let body_bytes = codec.encode(&env.body).expect("encodes");
    let base_decode = 1000.0
        * per_call_us(n, || {
            black_box(codec.decode::<T>(black_box(&body_bytes)).expect("decodes"));
        });
    let decode = 1000.0
        * per_call_us(n, || {
            black_box(Envelope::<T>::decode(codec, black_box(&bytes)).expect("decodes"));
        });
    let base_encode = 1000.0
        * per_call_us(n, || {
            black_box(codec.encode(black_box(&env.body)).expect("encodes"));
        });
    let encode = 1000.0
        * per_call_us(n, || {
            black_box(env.encode(codec).expect("encodes"));
        });
    println!(
        "| {name} | {codec:?} | {} B | {base_decode:.0} ns | {decode:.0} ns ({:.2}x) | {base_encode:.0} ns | {encode:.0} ns ({:.2}x) |",
        bytes.len(),
        decode / base_decode,
        encode / base_encode,
    );
}

/// What making an envelope costs (a fresh message id and the time), against
/// cloning the same payload alone.
fn envelope_cost() {
    let n = 20_000;
    let body = submission();
    let base = 1000.0
        * per_call_us(n, || {
            black_box(black_box(&body).clone());
        });
    let made = 1000.0
        * per_call_us(n, || {
            black_box(Envelope::new(
                "worker-1",
                "manager",
                "s",
                "t17",
                black_box(&body).clone(),
            ));
        });
    println!();
    println!("| make an envelope | payload clone alone | multiple |");
    println!("|---|---|---|");
    println!("| {made:.0} ns | {base:.0} ns | {:.2}x |", made / base);
}

fn main() {
    println!(
        "| message | codec | size | decode, payload alone | decode, envelope | encode, payload alone | encode, envelope |"
    );
    println!("|---|---|---|---|---|---|---|");
    for codec in [Codec::MsgPack, Codec::Json] {
        measure("TaskAssignment", codec, assignment());
        measure("ResultSubmission", codec, submission());
    }
    envelope_cost();
}
