#!/usr/bin/env bash
# Builds the four binaries (boss, manager, worker, swarm) with profile-guided
# optimisation into <out>/bin (default target/pgo/bin), in four steps. <out>
# is the script's own folder: its raw/ and demo/ are emptied on every run.
#
#   1. an instrumented release build of them into <out>/gen;
#   2. a training run of that build, which records where the code spends its
#      time: `swarm demo` (the sample mission: offline planning, real tools,
#      the HTML report) three times, then the benchmark harness's sustained
#      load and growth missions (many missions of independent tasks). The
#      latency missions the benchmarks time (one-task, fan-out, chain) are
#      left out on purpose, so a gain they show is not one trained on them;
#   3. the profiles merged with the toolchain's `llvm-profdata` (the rustup
#      component `llvm-tools`, added if missing);
#   4. a release build that uses them into <out>/use, copied to <out>/bin.
#
# About 30 minutes on 2 cores (two fat-LTO builds). Measure what it gives
# beside the plain release build, mission by mission:
#   cargo run --release -p swarm-bench -- one-task fan-out chain --sync default --against target/pgo/bin
# and use it: `target/pgo/bin/swarm up`, or SWARM_BIN_DIR=target/pgo/bin for
# the harness. BENCHMARKS.md has the figures.
#
# Needs what the tests need (Rust, python3 for nats-server.sh) and rustup.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
out="$(mkdir -p "${1:-target/pgo}" && cd "${1:-target/pgo}" && pwd)"
readonly out
readonly packages=(-p swarm-boss -p swarm-manager -p swarm-worker -p swarm-cli)
readonly binaries=(boss manager worker swarm)

log() { echo "pgo.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

host="$(rustc -vV | sed -n 's/^host: //p')"
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [[ ! -x "$profdata" ]]; then
    log "adding the rustup component llvm-tools (for llvm-profdata)"
    rustup component add llvm-tools >&2 || die "cannot add llvm-tools: install it with rustup"
    [[ -x "$profdata" ]] || die "llvm-tools is installed but $profdata is missing"
fi
NATS_SERVER_BIN="${NATS_SERVER_BIN:-$(deploy/nats-server.sh)}"
export NATS_SERVER_BIN

raw="$out/raw"
rm -rf "$raw" "$out/demo"
mkdir -p "$raw"

log "1/4 instrumented build into $out/gen"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$raw" CARGO_TARGET_DIR="$out/gen" \
    cargo build --release --bins --locked "${packages[@]}"

log "2/4 training run (profiles in $raw)"
cargo build --release --locked -p swarm-bench --bin swarm-bench
export LLVM_PROFILE_FILE="$raw/%m_%p.profraw"
for i in 1 2 3; do
    "$out/gen/release/swarm" demo --data-dir "$out/demo/$i" >/dev/null \
        || die "swarm demo failed in the training run (logs: $out/demo/$i)"
done
SWARM_BIN_DIR="$out/gen/release" "${CARGO_TARGET_DIR:-target}/release/swarm-bench" sustained growth \
    --sync default --missions 300 --no-build >/dev/null \
    || die "the harness failed in the training run"
unset LLVM_PROFILE_FILE

log "3/4 merging $(find "$raw" -name '*.profraw' | wc -l) profiles"
merged="$out/merged.profdata"
"$profdata" merge -o "$merged" "$raw"/*.profraw
# A role that never exited cleanly writes no profile: say so rather than
# build it without one.
functions="$("$profdata" show --all-functions "$merged")"
for crate in swarm_boss swarm_manager swarm_worker swarm_cli; do
    grep -q "$crate" <<<"$functions" || die "the training run recorded nothing of $crate"
done

log "4/4 optimised build into $out/use"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$merged" CARGO_TARGET_DIR="$out/use" \
    cargo build --release --bins --locked "${packages[@]}"
mkdir -p "$out/bin"
for b in "${binaries[@]}"; do
    cp "$out/use/release/$b" "$out/bin/$b"
done
log "done: ${binaries[*]} in $out/bin"
echo "$out/bin"
