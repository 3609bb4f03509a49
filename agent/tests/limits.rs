//! Shared model limits through the HTTP providers, against the test kit's
//! scripted server: callers that each have their own limiter over one
//! store (as workers over one JetStream bucket) stop sending while any of
//! them was told to retry later, hold a concurrency cap together, and
//! share it fairly between swarms. Each holds against a control run without
//! the limits, where the same load breaks it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests report failure by panicking

use std::sync::Arc;
use std::time::{Duration, Instant};

use swarm_agent::provider::limit::{
    CallLimiter, CallScope, Limits, MemoryStore, SharedLimiter, scoped,
};
use swarm_agent::provider::{ChatMessage, CompletionRequest, ProviderConfig};
use swarm_agent::{OpenAiProvider, Provider};
use swarm_testkit::{Match, MockLlm, Reply, Rule};

fn config(llm: &MockLlm) -> ProviderConfig {
    ProviderConfig {
        base_url: Some(llm.openai_base_url()),
        api_key: Some("sk-test".into()),
        timeout: Duration::from_secs(10),
        max_retries: 4,
        retry_min_delay: Duration::from_millis(10),
        ..ProviderConfig::openai("gpt-4o-mini")
    }
}

fn ask(text: &str) -> CompletionRequest {
    CompletionRequest {
        messages: vec![ChatMessage::user(text)],
        tools: vec![],
        max_tokens: None,
    }
}

/// `n` providers, each with its own limiter over `store` (or none).
fn callers(
    llm: &MockLlm,
    n: usize,
    shared: Option<(&Arc<MemoryStore>, Limits)>,
) -> Vec<Arc<dyn Provider>> {
    (0..n)
        .map(|_| {
            let p = OpenAiProvider::new(&config(llm)).unwrap();
            match shared {
                Some((store, limits)) => {
                    let l: Arc<dyn CallLimiter> = Arc::new(SharedLimiter::new(
                        store.clone(),
                        limits,
                        Duration::from_secs(30),
                    ));
                    Arc::new(p.with_limiter(l)) as Arc<dyn Provider>
                }
                None => Arc::new(p) as Arc<dyn Provider>,
            }
        })
        .collect()
}

/// Three callers, each sending `calls` requests one after another; the
/// server refuses the first with `429` and `Retry-After: 2`. Returns how
/// many requests arrived between 100 ms and 1.9 s after that refusal.
async fn requests_in_the_refusal_window(shared: bool) -> usize {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("chat", Match::new())
            .reply(Reply::rate_limited(2))
            .then_always(
                Reply::text("ok")
                    .usage(5, 1)
                    .after(Duration::from_millis(50)),
            ),
    );
    let store = Arc::new(MemoryStore::default());
    let providers = callers(&llm, 3, shared.then_some((&store, Limits::default())));
    let mut runs = Vec::new();
    for (i, p) in providers.into_iter().enumerate() {
        runs.push(tokio::spawn(async move {
            // The first caller starts first, so it meets the 429.
            tokio::time::sleep(Duration::from_millis(30 * i as u64)).await;
            for k in 0..8 {
                p.complete(ask(&format!("caller {i} call {k}")))
                    .await
                    .unwrap();
            }
        }));
    }
    for r in runs {
        r.await.unwrap();
    }
    let refused_at = llm
        .answered()
        .iter()
        .find(|(status, _)| *status == 429)
        .map(|(_, at)| *at)
        .expect("the server refused one request");
    let window = refused_at + Duration::from_millis(100)..refused_at + Duration::from_millis(1900);
    llm.requests()
        .iter()
        .filter(|r| window.contains(&r.at))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_seen_by_one_caller_pauses_every_caller() {
    let with = requests_in_the_refusal_window(true).await;
    assert_eq!(
        with, 0,
        "requests were sent while the provider had said to wait"
    );
    let without = requests_in_the_refusal_window(false).await;
    assert!(
        without > 0,
        "without the shared limits the others keep sending; the control run saw none"
    );
}

/// Twenty calls at once across three callers, each answered after 100 ms;
/// the most the server had in flight at once.
async fn peak_under_fan_out(limits: Option<Limits>) -> u64 {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("chat", Match::new()).then_always(
            Reply::text("ok")
                .usage(5, 1)
                .after(Duration::from_millis(100)),
        ),
    );
    let store = Arc::new(MemoryStore::default());
    let providers = callers(&llm, 3, limits.map(|l| (&store, l)));
    let mut runs = Vec::new();
    for k in 0..20 {
        let p = providers[k % 3].clone();
        runs.push(tokio::spawn(async move {
            p.complete(ask(&format!("call {k}"))).await.unwrap();
        }));
    }
    for r in runs {
        r.await.unwrap();
    }
    assert_eq!(llm.requests().len(), 20, "each call was sent once");
    llm.peak_in_flight()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_cap_of_two_holds_under_a_fan_out_of_twenty() {
    let cap = Limits {
        max_concurrent: Some(2),
        ..Limits::default()
    };
    assert_eq!(peak_under_fan_out(Some(cap)).await, 2);
    assert!(
        peak_under_fan_out(None).await > 2,
        "the control run never exceeded the cap"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_swarms_share_a_cap_fairly() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("chat", Match::new()).then_always(
            Reply::text("ok")
                .usage(5, 1)
                .after(Duration::from_millis(100)),
        ),
    );
    let store = Arc::new(MemoryStore::default());
    let cap = Limits {
        max_concurrent: Some(2),
        ..Limits::default()
    };
    let providers = callers(&llm, 2, Some((&store, cap)));
    let started = Instant::now();
    let mut runs = Vec::new();
    // A large swarm queues 16 calls; a small one comes 50 ms later with 4.
    for (swarm, n, delay) in [("big", 16, 0), ("small", 4, 50)] {
        for k in 0..n {
            let p = providers[k % 2].clone();
            runs.push(tokio::spawn(scoped(
                CallScope::new(swarm, None),
                async move {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    p.complete(ask(&format!("{swarm} {k}"))).await.unwrap();
                    (swarm, started.elapsed())
                },
            )));
        }
    }
    let mut last = std::collections::HashMap::new();
    for r in runs {
        let (swarm, at) = r.await.unwrap();
        let e = last.entry(swarm).or_insert(at);
        *e = (*e).max(at);
    }
    let order: Vec<bool> = llm
        .requests()
        .iter()
        .map(|r| r.last_user_text().starts_with("small"))
        .collect();
    let first = order.iter().position(|s| *s).unwrap();
    let last_small = order.iter().rposition(|s| *s).unwrap();
    let span = &order[first..=last_small];
    let small = span.iter().filter(|s| **s).count();
    assert_eq!(small, 4);
    // One slot each while both wait: the small swarm's calls alternate
    // with the big one's instead of queueing behind all sixteen.
    assert!(
        span.len() <= 9,
        "the small swarm's 4 calls were spread over {} requests: {order:?}",
        span.len()
    );
    assert!(
        last["small"] < last["big"],
        "the small swarm finished last: {last:?}"
    );
    assert_eq!(llm.peak_in_flight(), 2);
}

/// A call dropped while it holds a slot (its task cancelled) gives the slot
/// back at once, not when its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_frees_its_slot_at_once() {
    let llm = MockLlm::start().await;
    llm.add(
        Rule::new("slow", Match::new().last_user_contains("slow"))
            .then_always(Reply::text("late").after(Duration::from_secs(20))),
    );
    llm.add(Rule::new("fast", Match::new()).then_always(Reply::text("ok").usage(5, 1)));
    let store = Arc::new(MemoryStore::default());
    let cap = Limits {
        max_concurrent: Some(1),
        ..Limits::default()
    };
    let providers = callers(&llm, 2, Some((&store, cap)));
    let slow = providers[0].clone();
    let held = tokio::spawn(async move { slow.complete(ask("slow")).await });
    let deadline = Instant::now() + Duration::from_secs(5);
    while llm.requests().is_empty() {
        assert!(Instant::now() < deadline, "the slow call was sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.abort();
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), providers[1].complete(ask("fast")))
        .await
        .expect("the slot came back before its 30 s lease")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
}
