#!/usr/bin/env python3
"""Per-hop breakdown of chain missions from the JSON logs of a kept bench cluster.

Run the chain scenario with JSON info logs and keep the cluster's files:

    SWARM_LOG_FORMAT=json RUST_LOG=info,async_nats=warn SWARM_BENCH_KEEP=1 \
        cargo run --release -p swarm-bench -- chain --sync default

then pass the printed directory: `python3 bench/scripts/hops.py <dir>/data/logs`.

For every task of every chain it pairs the manager's "task assigned", the
worker's "task started" and "task finished", and the manager's next "task
assigned", and prints the median of each segment:
  delivery  assignment decided -> a worker starts it (publish, store, pull delivery)
  worker    started -> finished (progress, tool, result stored, progress)
  manager   finished -> next task assigned (result delivered, state CAS, decision)
"""
import json
import statistics
import sys
from datetime import datetime
from pathlib import Path


def when(ts: str) -> float:
    # 2026-11-29T11:45:39.123456Z: keep microseconds, drop the zone.
    return datetime.strptime(ts.rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def events(log_dir: Path):
    for path in sorted(log_dir.glob("*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            fields = rec.get("fields", {})
            msg = fields.get("message")
            swarm = fields.get("swarm_id") or rec.get("span", {}).get("swarm_id")
            task = fields.get("task_id")
            if msg in ("task assigned", "task started", "task finished") and swarm and task:
                yield msg, swarm, task, when(rec["timestamp"])


def main() -> None:
    log_dir = Path(sys.argv[1])
    seen = {}
    for msg, swarm, task, t in events(log_dir):
        # The first occurrence counts (a redelivery would log again).
        seen.setdefault((msg, swarm, task), t)
    delivery, worker, manager = [], [], []
    swarms = {s for (_, s, _) in seen}
    for s in swarms:
        k = 0
        while ("task assigned", s, f"t{k + 1}") in seen:
            a = seen.get(("task assigned", s, f"t{k}"))
            st = seen.get(("task started", s, f"t{k}"))
            f = seen.get(("task finished", s, f"t{k}"))
            nxt = seen[("task assigned", s, f"t{k + 1}")]
            if a and st and f:
                delivery.append((st - a) * 1000)
                worker.append((f - st) * 1000)
                manager.append((nxt - f) * 1000)
            k += 1
    if not delivery:
        sys.exit("no chain hops found (were the logs JSON at info level?)")
    print(f"hops: {len(delivery)}")
    for name, xs in (("delivery", delivery), ("worker", worker), ("manager", manager)):
        xs.sort()
        p90 = xs[max(0, -(-len(xs) * 9 // 10) - 1)]
        print(f"{name:9} p50 {statistics.median(xs):7.3f} ms   p90 {p90:7.3f} ms   mean {statistics.fmean(xs):7.3f} ms")
    total = [d + w + m for d, w, m in zip(delivery, worker, manager)]
    print(f"{'hop':9} p50 {statistics.median(total):7.3f} ms")


if __name__ == "__main__":
    main()
