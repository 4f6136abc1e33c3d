"""The raw Celery peer: bare `agentq.raw_noop` tasks on the same broker and worker processes.

Results are disabled (DESIGN.md: the broker is transport only), so completion is seen through
markers: each chain (or lone task) ends in a link named `agentq.bench_done` routed to a queue no
worker consumes (Celery declares it on publish). The worker publishes the marker once the last
task has returned; this process pops the markers from Redis (BLPOP) and stops the clock at the
last. One extra publish per chain; no worker change. A chord (a group whose end runs a callback)
would need a result backend, so `--parallel K` sends K lone tasks, each with its own marker.
"""

from __future__ import annotations

import time

import redis
from celery import chain

from models.engine import queue
from ops.bench.harness import POLL_INTERVAL_S, BenchError

TIMEOUT_S = 600.0
DONE_QUEUE = "bench_done"
DONE_TASK = "agentq.bench_done"  # registered nowhere: its messages are only counted


def raw_chain(steps: int) -> chain:
    """`steps` immutable `agentq.raw_noop` links, then the completion marker."""
    app = queue.client()
    noop = app.signature(queue.TASK_RAW_NOOP, immutable=True, queue=queue.QUEUE_STEPS)
    links = [noop.clone() for _ in range(steps)]
    return chain(*links, app.signature(DONE_TASK, immutable=True, queue=DONE_QUEUE))


def wait_for_markers(broker: redis.Redis, count: int) -> float:
    """Pop `count` completion markers; the time of the last (epoch s). Raises `BenchError`."""
    deadline = time.monotonic() + TIMEOUT_S
    for seen in range(count):
        while broker.blpop([DONE_QUEUE], timeout=POLL_INTERVAL_S) is None:
            if time.monotonic() > deadline:
                raise BenchError(f"raw Celery: {seen} of {count} markers after {TIMEOUT_S:g} s")
    return time.time()


def raw_round(broker: redis.Redis, chains: int, steps: int, *, parallel: bool = False) -> float:
    """Seconds for `chains` chains of `steps` raw noop tasks (with `parallel`, `chains` x
    `steps` lone tasks), from the first send to the last marker."""
    broker.delete(DONE_QUEUE)
    signatures = (
        [raw_chain(1) for _ in range(chains * steps)]
        if parallel
        else [raw_chain(steps) for _ in range(chains)]
    )
    start = time.time()
    for signature in signatures:
        signature.apply_async()
    return wait_for_markers(broker, len(signatures)) - start
