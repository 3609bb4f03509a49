#!/usr/bin/env python3
"""Alternating A/B comparison of two sets of role binaries on one scenario.

The host of a shared VM changes speed from one minute to the next (the same
binaries ran the chain of 50 in 29 ms and in 40 ms on one morning), so two
builds are compared by running them in turns, in ABBA order, each turn a
fresh `swarm-bench` cluster from its own binaries (`SWARM_BIN_DIR`), and
reading the ratio of each pair's p50s:

    cargo build --release --workspace --bins
    cp target/release/{boss,manager,worker,swarm} /tmp/a/      # the baseline
    # ... change, rebuild, copy to /tmp/b/ ...
    python3 bench/scripts/ab.py --pairs 10 --runs 40 chain /tmp/a /tmp/b

`--a-args` and `--b-args` add harness options to one side only, so one
build can be compared with itself under two methods (e.g.
`--a-args="--pacing back-to-back"`); `--a-env` and `--b-env` set
environment variables of one side's processes, nats-server included (e.g.
`--b-env GOGC=400`). For two builds, `swarm-bench --against DIR` (mission
by mission on two clusters side by side) reads far smaller differences.

It prints each turn's p50 as it comes, then the median of each side, the
median of the per-pair ratios (B / A) and in how many pairs B was faster.
The harness itself is `target/release/swarm-bench` (built by the command
above); `NATS_SERVER_BIN` or `deploy/nats-server.sh` provides the server.
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys

ROWS = {
    "chain": "chain of 50",
    "one-task": "one-task mission",
    "fan-out": "fan-out 200 + fan-in",
}


def p50(scenario, runs, bin_dir, bench, env, extra, side_env):
    """Runs one turn and returns its p50 in ms, read off the latency table."""
    out = subprocess.run(
        [bench, scenario, "--sync", "default", "--runs", str(runs), "--no-build"] + extra,
        env=dict(env, SWARM_BIN_DIR=bin_dir, **side_env),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    row = re.compile(r"^\| %s +\| \d+ +\| ([0-9.]+) ms" % re.escape(ROWS[scenario]))
    for line in out.splitlines():
        m = row.match(line)
        if m:
            return float(m.group(1))
    sys.exit("no %r row in the harness's output:\n%s" % (ROWS[scenario], out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", choices=sorted(ROWS))
    ap.add_argument("a", help="baseline binaries (boss, manager, worker, swarm)")
    ap.add_argument("b", help="candidate binaries")
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--runs", type=int, default=40, help="runs per turn (the one-task mission runs 7x)")
    ap.add_argument("--bench", default="target/release/swarm-bench")
    ap.add_argument("--a-args", default="", help="extra harness options for side A")
    ap.add_argument("--b-args", default="", help="extra harness options for side B")
    ap.add_argument("--a-env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment of side A's harness and everything it starts (nats-server too)")
    ap.add_argument("--b-env", action="append", default=[], metavar="KEY=VALUE",
                    help="the same for side B")
    args = ap.parse_args()
    env = dict(os.environ)
    if "NATS_SERVER_BIN" not in env:
        env["NATS_SERVER_BIN"] = subprocess.run(
            ["bash", "deploy/nats-server.sh"], capture_output=True, text=True, check=True
        ).stdout.strip()
    side = {"A": (args.a, shlex.split(args.a_args)), "B": (args.b, shlex.split(args.b_args))}
    side_env = {
        "A": dict(kv.split("=", 1) for kv in args.a_env),
        "B": dict(kv.split("=", 1) for kv in args.b_env),
    }
    sides = {"A": [], "B": []}
    ratios = []
    for i in range(args.pairs):
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        got = {}
        for k in order:
            d, extra = side[k]
            got[k] = p50(args.scenario, args.runs, d, args.bench, env, extra, side_env[k])
            sides[k].append(got[k])
            print("pair %d  %s %-24s %8.2f ms" % (i + 1, k, d + " " + " ".join(extra), got[k]), flush=True)
        ratios.append(got["B"] / got["A"])
    med_a, med_b = statistics.median(sides["A"]), statistics.median(sides["B"])
    print(
        "%s p50, median of %d turns: A %.2f ms, B %.2f ms; B / A per pair: median %.3f, B faster in %d of %d"
        % (args.scenario, args.pairs, med_a, med_b, statistics.median(ratios),
           sum(r < 1 for r in ratios), len(ratios))
    )


if __name__ == "__main__":
    main()
