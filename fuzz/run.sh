#!/usr/bin/env bash
# Runs every fuzz target for a bounded time: `fuzz/run.sh [seconds per target]`
# (default 60). Installs cargo-fuzz when it is missing. cargo-fuzz drives
# libFuzzer through flags of the nightly compiler; RUSTC_BOOTSTRAP lets the
# stable toolchain accept them. No sanitizer: the targets look for panics,
# unbounded memory (-rss_limit_mb) and time (-timeout), which need none.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
    echo "fuzz: $target for ${seconds}s"
    # A copy of the seed corpus, so a run adds nothing to the checkout.
    work="$(mktemp -d)"
    cp -r "corpus/$target/." "$work/" 2>/dev/null || true
    log="$work.log"
    set +e
    cargo fuzz run "$target" -s none "$work" -- \
        -max_total_time="$seconds" -rss_limit_mb=1024 -timeout=5 -print_final_stats=1 >"$log" 2>&1
    status=$?
    set -e
    grep -E '^(Done|stat::number_of_executed_units|==|SUMMARY|thread)' "$log" || true
    if [ "$status" -ne 0 ]; then
        tail -40 "$log" >&2
    fi
    rm -f "$log"
    rm -rf "$work"
    if [ "$status" -ne 0 ]; then
        echo "fuzz: $target found a crash (artifacts in fuzz/artifacts/$target)" >&2
        exit "$status"
    fi
done
