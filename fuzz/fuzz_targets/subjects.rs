//! Any subject: parsed only when every id in it is a token, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use swarm_common::subjects::{self, Subject, is_token};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Some(subject) = Subject::parse(text) {
            assert!(is_token(subject.swarm_id()));
        }
        let _ = subjects::assignment_ack(text);
    }
});
