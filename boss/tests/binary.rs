//! The `boss` binary documents its flags and fails clearly, not with a
//! panic, when NATS cannot be reached.

use std::path::Path;

#[test]
fn help_lists_the_nats_flags() {
    swarm_testkit::binary::assert_help_lists_nats_flags(Path::new(env!("CARGO_BIN_EXE_boss")));
}

#[test]
fn an_unreachable_server_is_a_clear_error() {
    swarm_testkit::binary::assert_unreachable_server_is_clear(Path::new(env!(
        "CARGO_BIN_EXE_boss"
    )));
}
