"""The Celery app of the peer benchmark (`driver.py --peer celery`): Redis as
broker and result backend at `SWARM_PEER_REDIS_URL`, and two tasks, `echo`
(returns its input, as Swarm's `echo` tool) and `gather` (the fan-in)."""
import os

from celery import Celery

URL = os.environ["SWARM_PEER_REDIS_URL"]
app = Celery("swarm_peer", broker=URL, backend=URL)
app.conf.worker_hijack_root_logger = False


@app.task
def echo(x):
    return x


@app.task
def gather(xs):
    return len(xs)
