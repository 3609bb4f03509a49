//! The `swarm` binary documents its commands and fails clearly without a cluster.

use std::process::Command;

#[test]
fn help_lists_the_commands() {
    let out = Command::new(env!("CARGO_BIN_EXE_swarm"))
        .arg("--help")
        .output()
        .expect("runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "mission", "watch", "list", "status", "cancel", "report", "up", "demo",
    ] {
        assert!(help.contains(cmd), "{cmd} missing from --help");
    }
    assert!(help.contains("Exit codes"), "{help}");
    assert!(
        help.contains("7  the wait (--timeout) ended before the final report"),
        "{help}"
    );
}

#[test]
fn a_mission_without_a_cluster_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_swarm"))
        .args([
            "--nats-url",
            "nats://127.0.0.1:1",
            "--connect-timeout",
            "1",
            "mission",
            "count words",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect to NATS"), "{err}");
}
