//! Generates Rust types from `proto/a2ap.proto` with prost-build, fed by
//! protox's descriptor set (no system `protoc`), for `tests/protobuf.rs`:
//! code generated from the schema decodes what Swarm writes, so the schema
//! is the one Swarm speaks.

use std::path::PathBuf;

fn main() {
    let proto_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../proto");
    let file = proto_dir.join("a2ap.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&proto_dir])
        .unwrap_or_else(|e| panic!("proto/a2ap.proto does not compile: {e:?}"));
    prost_build::Config::new()
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("prost-build: {e}"));
}
