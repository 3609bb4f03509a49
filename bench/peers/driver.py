#!/usr/bin/env python3
"""Runs the missions of `swarm-bench` on a peer: Ray, Celery or a thread pool.

The harness (`swarm-bench --peers ray,celery,threads`) starts one driver
per peer and keeps it while it measures that peer, so the peer's start-up
is not measured and its runs can alternate with Swarm's, run by run, on
the same host speed. `threads`, a thread pool in this process, needs no
packages. The shapes of Swarm's latency missions and sustained load, each
task returning its input (the `echo` of Swarm's plans):

* `one-task`: one task, submitted and its result awaited;
* `fan-out N`: N independent tasks and one that takes all their results;
* `chain N`: N tasks, each taking the result of the one before;
* `load M N`: M missions of N independent tasks each, all submitted at
  once, until every result is in (the sustained load).

Protocol, one JSON object per line. On start the driver prints
`{"ready": true, "peer": ..., "version": ..., "setup": ...}`. Each request
on stdin is a shape and its sizes, as above; the answer is
`{"ms": <milliseconds>}` from submission to the last result in this
process's hands, or `{"error": ...}` (a wrong result is an error too).
End of input stops the peer (for Celery: its worker and its Redis).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class ThreadsPeer:
    """A thread pool of this machine's CPUs in this process: no broker and
    nothing stored, each dependent task submitted once its inputs are done.
    The least a Python task runner takes for these shapes."""

    def __init__(self):
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=os.cpu_count())
        self.version = sys.version.split()[0]
        self.setup = (
            f"concurrent.futures.ThreadPoolExecutor({os.cpu_count()}) in the driver, "
            "results in its memory"
        )

    def one_task(self, _size):
        return self.pool.submit(echo, 1).result() == 1

    def fan_out(self, size):
        futures = [self.pool.submit(echo, i) for i in range(size)]
        results = [f.result() for f in futures]
        return self.pool.submit(gather, *results).result() == size

    def chain(self, size):
        x = self.pool.submit(echo, 0).result()
        for _ in range(size - 1):
            x = self.pool.submit(echo, x).result()
        return x == 0

    def load(self, missions, tasks):
        futures = [[self.pool.submit(echo, t) for t in range(tasks)] for _ in range(missions)]
        return all([f.result() for f in m] == list(range(tasks)) for m in futures)

    def stop(self):
        self.pool.shutdown()


def echo(x):
    return x


def gather(*xs):
    return len(xs)


class RayPeer:
    """A local Ray cluster of this machine's CPUs, started by `ray.init`."""

    def __init__(self):
        import ray

        self.ray = ray
        ray.init(
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )

        @ray.remote
        def echo(x):
            return x

        @ray.remote
        def gather(*xs):
            return len(xs)

        self.echo, self.gather = echo, gather
        self.version = ray.__version__
        self.setup = (
            f"ray.init(num_cpus={os.cpu_count()}), tasks of 1 CPU (Ray's default), "
            "results in Ray's in-memory object store"
        )

    def one_task(self, _size):
        return self.ray.get(self.echo.remote(1)) == 1

    def fan_out(self, size):
        refs = [self.echo.remote(i) for i in range(size)]
        return self.ray.get(self.gather.remote(*refs)) == size

    def chain(self, size):
        ref = self.echo.remote(0)
        for _ in range(size - 1):
            ref = self.echo.remote(ref)
        return self.ray.get(ref) == 0

    def load(self, missions, tasks):
        refs = [[self.echo.remote(t) for t in range(tasks)] for _ in range(missions)]
        return all(self.ray.get(m) == list(range(tasks)) for m in refs)

    def stop(self):
        self.ray.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CeleryPeer:
    """Celery with a Redis broker and result backend: a `redis-server` and a
    prefork worker of this machine's CPUs, both started here."""

    def __init__(self):
        redis = shutil.which("redis-server")
        if redis is None:
            raise RuntimeError("redis-server is not on PATH (bench/peers/setup.sh installs it)")
        self.dir = tempfile.mkdtemp(prefix="swarm-peer-redis-")
        port = free_port()
        self.redis = subprocess.Popen(
            [redis, "--port", str(port), "--bind", "127.0.0.1", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        os.environ["SWARM_PEER_REDIS_URL"] = url
        sys.path.insert(0, HERE)
        import celery
        import celery_tasks

        self.tasks = celery_tasks
        self.wait_for_redis(port)
        cpus = os.cpu_count()
        self.worker = subprocess.Popen(
            [
                sys.executable, "-m", "celery", "-A", "celery_tasks", "worker",
                "--pool", "prefork", "--concurrency", str(cpus), "--loglevel", "WARNING",
                "--without-gossip", "--without-mingle", "--without-heartbeat",
            ],
            cwd=HERE,
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
        )
        # The worker is up once it runs a task.
        deadline = time.monotonic() + 60
        while True:
            try:
                self.tasks.echo.delay(1).get(timeout=5)
                break
            except Exception:
                if time.monotonic() > deadline or self.worker.poll() is not None:
                    self.stop()
                    raise RuntimeError("the Celery worker did not start")
        self.version = celery.__version__
        self.setup = (
            f"Redis {self.redis_version(port)} as broker and result backend, with its "
            f"defaults (snapshots now and then, no append-only file), a prefork worker of "
            f"{cpus} processes"
        )

    @staticmethod
    def wait_for_redis(port):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    @staticmethod
    def redis_version(port):
        import redis

        return redis.Redis(port=port).info()["redis_version"]

    def one_task(self, _size):
        return self.tasks.echo.delay(1).get(timeout=60) == 1

    def fan_out(self, size):
        from celery import chord, group

        job = chord(group(self.tasks.echo.s(i) for i in range(size)))(self.tasks.gather.s())
        return job.get(timeout=60) == size

    def chain(self, size):
        from celery import chain

        job = chain(self.tasks.echo.s(0), *[self.tasks.echo.s() for _ in range(size - 1)])
        return job.apply_async().get(timeout=60) == 0

    def load(self, missions, tasks):
        from celery import group

        jobs = [group(self.tasks.echo.s(t) for t in range(tasks)).apply_async() for _ in range(missions)]
        return all(j.get(timeout=600) == list(range(tasks)) for j in jobs)

    def stop(self):
        for p in (getattr(self, "worker", None), self.redis):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


PEERS = {"ray": RayPeer, "celery": CeleryPeer, "threads": ThreadsPeer}
SHAPES = {"one-task": "one_task", "fan-out": "fan_out", "chain": "chain", "load": "load"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", choices=sorted(PEERS), required=True)
    args = parser.parse_args()
    try:
        peer = PEERS[args.peer]()
    except Exception as e:  # the harness shows the reason and stops
        say({"error": f"starting {args.peer}: {e}"})
        return 1
    say({"ready": True, "peer": args.peer, "version": peer.version, "setup": peer.setup})
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            try:
                if words[0] not in SHAPES:
                    raise ValueError(f"unknown shape {words[0]!r}, not one of {', '.join(SHAPES)}")
                shape = getattr(peer, SHAPES[words[0]])
                sizes = [int(w) for w in words[1:]] or [1]
                started = time.perf_counter()
                ok = shape(*sizes)
                ms = (time.perf_counter() - started) * 1000.0
                say({"ms": ms} if ok else {"error": f"{line.strip()}: a wrong result"})
            except Exception as e:
                say({"error": f"{line.strip()}: {type(e).__name__}: {e}"})
    finally:
        peer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
