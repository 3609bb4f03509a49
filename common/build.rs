//! Compiles `proto/a2ap.proto` into a protobuf descriptor set that the
//! `application/protobuf` codec embeds (`swarm_common::proto`), with protox,
//! a protobuf compiler in Rust: building Swarm needs no system `protoc`.

use std::path::PathBuf;

fn main() {
    let proto_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proto");
    let file = proto_dir.join("a2ap.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&proto_dir])
        .unwrap_or_else(|e| panic!("proto/a2ap.proto does not compile: {e:?}"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bytes = prost::Message::encode_to_vec(&descriptors);
    std::fs::write(out.join("a2ap.bin"), bytes).expect("writing the descriptor set");
}
