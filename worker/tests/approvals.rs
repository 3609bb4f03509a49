//! Destructive tool calls wait for a person: approved and denied through the
//! client library (swarm-client) and the boss's desk, and expired when no one
//! answers.

#![allow(clippy::unwrap_used)] // tests report failure by panicking

use std::time::Duration;

use swarm_agent::tools::{ApprovalDecision, ApprovalRequest, Approver, ToolAnnotations};
use swarm_common::approval::ApprovalStatus;
use swarm_runtime::Infra;
use swarm_testkit::NatsServer;
use swarm_worker::approvals::NatsApprover;

fn request(id: &str) -> ApprovalRequest {
    ApprovalRequest {
        id: id.into(),
        tool: "shell".into(),
        arguments: serde_json::json!({"command": "rm -rf build"}),
        annotations: ToolAnnotations {
            read_only: false,
            destructive: true,
            idempotent: false,
        },
        swarm_id: Some("s1".into()),
        task_id: Some("t1".into()),
    }
}

/// Waits until the request is listed as pending, as a person would see it.
async fn pending(nc: &async_nats::Client, id: &str) {
    for _ in 0..100 {
        if swarm_client::client::approvals(nc, false)
            .await
            .unwrap()
            .iter()
            .any(|r| r.approval_id == id)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{id} never became pending");
}

#[tokio::test]
async fn approvals_are_decided_by_people_or_expire() {
    let server = NatsServer::start().unwrap();
    let nc = server.client().await;
    let infra = Infra::ensure(&nc, 1).await.unwrap();
    let desk = std::sync::Arc::new(swarm_boss::desk::Desk {
        infra: infra.clone(),
        approvers: vec!["client".into()],
        workers: vec!["worker".into()],
    });
    tokio::spawn(desk.serve(nc.clone()));
    let approver = NatsApprover::new(
        infra.approvals.clone(),
        infra.js.clone(),
        "worker",
        "worker-1",
        Duration::from_secs(10),
    );

    let waiting = tokio::spawn({
        let a = NatsApprover::new(
            infra.approvals.clone(),
            infra.js.clone(),
            "worker",
            "worker-1",
            Duration::from_secs(10),
        );
        async move { a.approve(request("yes1")).await }
    });
    pending(&nc, "yes1").await;
    // Only an approver's user decides: a worker cannot approve the call it
    // waits on, even through the desk.
    let forged = swarm_client::client::decide_as(&nc, "worker", "yes1", true, "mallory", None)
        .await
        .unwrap_err();
    assert!(
        forged.to_string().contains("worker may not decide"),
        "{forged}"
    );
    let decided = swarm_client::client::decide(&nc, "yes1", true, "alice", None)
        .await
        .unwrap();
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(decided.decided_by.as_deref(), Some("alice (client)"));
    assert_eq!(waiting.await.unwrap(), ApprovalDecision::Approved);
    // Decided once: a second decision is refused.
    let again = swarm_client::client::decide(&nc, "yes1", false, "bob", None)
        .await
        .unwrap_err();
    assert!(again.to_string().contains("already Approved"), "{again}");

    let waiting = tokio::spawn(async move { approver.approve(request("no1")).await });
    pending(&nc, "no1").await;
    swarm_client::client::decide(&nc, "no1", false, "alice", Some("not on prod".into()))
        .await
        .unwrap();
    match waiting.await.unwrap() {
        ApprovalDecision::Denied { reason } => assert!(
            reason.contains("alice") && reason.contains("not on prod"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }

    let impatient = NatsApprover::new(
        infra.approvals.clone(),
        infra.js.clone(),
        "worker",
        "worker-1",
        Duration::from_millis(300),
    );
    match impatient.approve(request("late1")).await {
        ApprovalDecision::Denied { reason } => assert!(reason.contains("in time"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let all = swarm_client::client::approvals(&nc, true).await.unwrap();
    let late = all.iter().find(|r| r.approval_id == "late1").unwrap();
    assert_eq!(late.status, ApprovalStatus::Expired);
    assert!(
        swarm_client::client::decide(&nc, "late1", true, "alice", None)
            .await
            .is_err()
    );
}
