//! Any bytes on `boss.missions`, with any of the content types the intake
//! reads: parsed to a mission or refused with a typed error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use swarm_common::{Limits, codec, mission::parse_mission};

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    for content_type in [
        None,
        Some(codec::JSON),
        Some(codec::MSGPACK),
        Some(codec::PROTOBUF),
        Some("text/plain"),
    ] {
        if let Ok((request, _)) = parse_mission(content_type, None, data, &limits) {
            // An accepted mission is one the boss can go on with.
            assert!(!request.mission.trim().is_empty());
        }
    }
});
