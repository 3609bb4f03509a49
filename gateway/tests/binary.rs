//! The `gateway` binary documents its flags, fails clearly when NATS cannot
//! be reached, and refuses to serve anyone on a public address without
//! tokens. (Having an integration test also makes `cargo test --workspace`
//! build the binary the whole-system A2A tests start.)

use std::path::Path;
use std::process::Command;

fn gateway() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_gateway"))
}

#[test]
fn help_lists_the_nats_flags() {
    swarm_testkit::binary::assert_help_lists_nats_flags(gateway());
    let out = Command::new(gateway()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--public-url",
        "--tokens-file",
        "--allow-anonymous",
    ] {
        assert!(help.contains(flag), "{flag} missing from gateway --help");
    }
    assert!(help.contains("SWARM_GATEWAY_LISTEN"));
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    swarm_testkit::binary::assert_unreachable_server_is_clear(gateway());
}

fn run(args: &[&str]) -> (bool, String) {
    let out = Command::new(gateway())
        .args(args)
        .args(["--nats-url", "nats://127.0.0.1:1", "--connect-timeout", "1"])
        .env_remove("SWARM_GATEWAY_TOKENS")
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_public_address_without_tokens_is_refused_before_anything_else() {
    let (ok, err) = run(&["--listen", "0.0.0.0:0"]);
    assert!(!ok);
    assert!(err.contains("would serve anyone on 0.0.0.0:0"), "{err}");
    assert!(err.contains("--allow-anonymous"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // With the flag it goes on, as far as the unreachable server.
    let (ok, err) = run(&["--listen", "0.0.0.0:0", "--allow-anonymous"]);
    assert!(!ok);
    assert!(err.contains("cannot connect to NATS"), "{err}");
}

#[test]
fn a_short_token_is_refused() {
    let (ok, err) = run(&["--listen", "0.0.0.0:0", "--tokens", "ops:short"]);
    assert!(!ok);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("ops"), "the refusal names the caller: {err}");
}
