//! Any bytes as each A2AP message, in every codec, and as a stored swarm
//! state: decoded or refused with a typed error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use swarm_common::{
    Codec, Control, DeadLetter, Envelope, ErrorMessage, FinalReport, ProgressUpdate,
    ResultSubmission, SwarmDeployment, SwarmState, TaskAssignment,
};

fuzz_target!(|data: &[u8]| {
    for codec in [Codec::MsgPack, Codec::Json, Codec::Protobuf] {
        let _ = Envelope::<SwarmDeployment>::decode(codec, data);
        let _ = Envelope::<TaskAssignment>::decode(codec, data);
        let _ = Envelope::<ProgressUpdate>::decode(codec, data);
        let _ = Envelope::<ResultSubmission>::decode(codec, data);
        let _ = Envelope::<FinalReport>::decode(codec, data);
        let _ = Envelope::<ErrorMessage>::decode(codec, data);
        let _ = Envelope::<Control>::decode(codec, data);
        let _ = codec.decode::<SwarmState>(data);
        let _ = codec.decode::<DeadLetter>(data);
    }
});
