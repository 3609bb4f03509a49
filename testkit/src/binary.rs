//! Checks every role binary must pass: it documents the NATS flags, and an
//! unreachable server is a clear error, not a panic.

use std::path::Path;
use std::process::Command;

/// `<binary> --help` succeeds and lists the connection flags and `NATS_URL`.
pub fn assert_help_lists_nats_flags(binary: &Path) {
    let out = Command::new(binary)
        .arg("--help")
        .output()
        .expect("the binary runs");
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
        "--health-port",
    ] {
        assert!(
            help.contains(flag),
            "{flag} missing from {} --help",
            binary.display()
        );
    }
    assert!(
        help.contains("NATS_URL"),
        "the NATS_URL variable is documented"
    );
}

/// `<binary>` pointed at a port where nothing listens exits non-zero with
/// "cannot connect to NATS at ..." and no panic.
pub fn assert_unreachable_server_is_clear(binary: &Path) {
    let out = Command::new(binary)
        .args(["--nats-url", "nats://127.0.0.1:1", "--connect-timeout", "1"])
        .output()
        .expect("the binary runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot connect to NATS at nats://127.0.0.1:1"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
