//! The `worker` binary starts, documents its flags, and fails with a clear
//! message (not a panic) when NATS cannot be reached.

use std::process::Command;

#[test]
fn help_lists_the_nats_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_worker"))
        .arg("--help")
        .output()
        .expect("runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--nats-url",
        "--nats-user",
        "--nats-password",
        "--nats-token",
        "--nats-creds",
        "--tls-ca-file",
        "--agent-id",
        "--drain-timeout",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
    assert!(
        help.contains("NATS_URL"),
        "the NATS_URL variable is documented"
    );
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_worker"))
        .args(["--nats-url", "nats://127.0.0.1:1", "--connect-timeout", "1"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to NATS at nats://127.0.0.1:1"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
