"""Engine throughput: agentq `noop` steps per second against raw Celery tasks per second.

`python -m ops.bench.engine_throughput --plans 20 --steps 5 [--workers 2] [--data-dir DIR]`

One embedded engine (`ops.local.start_engine`: Postgres, Redis, the `steps` worker with
`--workers` processes, the coordinator with beat) serves every round. After an untimed warm-up,
rounds alternate agentq, raw, agentq, raw (each once the broker is idle); medians are reported.

- agentq: N runs, each submitted with an explicit plan of S `noop` tool steps, then
  `agentq.coordinate` is sent. A load test of one user: its submits are not limited
  (AGENTQ_USER_MAX_ACTIVE_RUNS and AGENTQ_USER_SUBMITS_PER_MINUTE are 0 for this process's
  submits); the dispatch cap, AGENTQ_USER_MAX_RUNNING_STEPS, keeps its default (4) in the
  engine, so the figure is one user's throughput as deployed. Timed from the first submit to
  the newest `runs.finished_at` of the N runs, found by polling Postgres every 0.2 s. Every run
  also costs S + 1 coordinator tasks and a final synthesize task (an offline-provider model
  call); they count as overhead, not as steps.
- raw Celery: N chains of S immutable `agentq.raw_noop` signatures on the `steps` queue. Results
  are disabled, so each chain ends in a link named `agentq.bench_done` routed to a queue no worker
  consumes (Celery declares it on publish): the worker publishes it once the S-th task has
  returned; this process pops the markers from Redis (BLPOP) and stops the clock at the N-th.
  One extra publish per chain; no worker change. Timed from the first `apply_async` to the last
  marker.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import sqlalchemy as sa
from celery import chain
from sqlmodel import col

from models import queue
from models.db import session_scope
from models.plans import PlanSpec, parse_plan
from models.runs import submit_run
from models.settings import get_settings
from models.tables import Run
from ops.local import start_engine

POLL_INTERVAL_S = 0.2
TIMEOUT_S = 600.0
IDLE_TIMEOUT_S = 30.0
UNACKED_KEY = "unacked"  # kombu's Redis hash of delivered, not yet acknowledged messages
ROUNDS = 2
WARMUP_STEPS = 2
DONE_QUEUE = "bench_done"
DONE_TASK = "agentq.bench_done"  # registered nowhere: its messages are only counted
BENCH_USER = "bench"
BAD_RUN_STATUSES = frozenset({"failed", "cancelled", "waiting_review"})


class BenchError(RuntimeError):
    """The benchmark could not finish a round (a run failed, or the timeout passed)."""


@dataclass(frozen=True)
class Result:
    """The median seconds of each side over the rounds, for `plans` x `steps` units of work."""

    workers: int
    plans: int
    steps: int
    agentq_s: float
    raw_s: float


def noop_plan(steps: int) -> PlanSpec:
    """A plan of `steps` `noop` tool steps named s0, s1, …"""
    data = {"steps": [{"name": f"s{i}", "kind": "tool", "tool": "noop"} for i in range(steps)]}
    return parse_plan(data, tools=["noop"])


def submit(plan: PlanSpec) -> int:
    """Submit one run with `plan` (no submit quotas), commit, send `agentq.coordinate`; the
    run id."""
    unlimited = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    with session_scope() as session:
        run = submit_run(
            session, settings=unlimited, user_id=BENCH_USER, goal="benchmark", plan=plan
        )
        run_id = run.id or 0
    queue.send(queue.TASK_COORDINATE, run_id)
    return run_id


def run_states(run_ids: list[int]) -> tuple[dict[str, int], float]:
    """Counts of `run_ids` by status, and their newest `finished_at` (epoch seconds, 0 if none)."""
    stmt = (
        sa.select(col(Run.status), sa.func.count(), sa.func.max(col(Run.finished_at)))
        .where(col(Run.id).in_(run_ids))
        .group_by(col(Run.status))
    )
    with session_scope() as session:
        rows = session.execute(stmt).all()
    newest = max((r[2].timestamp() for r in rows if r[2] is not None), default=0.0)
    return {r[0]: int(r[1]) for r in rows}, newest


def wait_for_runs(run_ids: list[int]) -> float:
    """Poll until every run succeeded; its newest `finished_at` (epoch s). Raises `BenchError`."""
    deadline = time.monotonic() + TIMEOUT_S
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts, newest = run_states(run_ids)
        if BAD_RUN_STATUSES & counts.keys():
            raise BenchError(f"agentq runs did not succeed: {counts} (runs {run_ids[0]}..)")
        if counts.get("succeeded") == len(run_ids):
            return newest
        time.sleep(POLL_INTERVAL_S)
    raise BenchError(f"agentq runs not done after {TIMEOUT_S:g} s: {counts}")


def agentq_round(plans: int, steps: int) -> float:
    """Seconds for `plans` runs of `steps` noop steps, first submit to last success."""
    plan = noop_plan(steps)
    start = time.time()
    run_ids = [submit(plan) for _ in range(plans)]
    return wait_for_runs(run_ids) - start


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
                raise BenchError(f"raw chains: {seen} of {count} done after {TIMEOUT_S:g} s")
    return time.time()


def raw_round(broker: redis.Redis, chains: int, steps: int) -> float:
    """Seconds for `chains` chains of `steps` raw noop tasks, first send to last marker."""
    broker.delete(DONE_QUEUE)
    signatures = [raw_chain(steps) for _ in range(chains)]
    start = time.time()
    for signature in signatures:
        signature.apply_async()
    return wait_for_markers(broker, chains) - start


def wait_until_idle(broker: redis.Redis) -> None:
    """Wait until no message is queued or unacknowledged (the last link acks just after it
    publishes its marker), so a round's tail never overlaps the next and the logs end complete."""
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    queues = (queue.QUEUE_STEPS, queue.QUEUE_COORDINATOR)
    while any(broker.llen(q) for q in queues) or broker.hlen(UNACKED_KEY):
        if time.monotonic() > deadline:
            raise BenchError(f"the broker was still busy after {IDLE_TIMEOUT_S:g} s")
        time.sleep(POLL_INTERVAL_S / 10)


def measure(broker: redis.Redis, workers: int, plans: int, steps: int) -> Result:
    """Warm up, then alternate agentq and raw rounds; the median seconds of each."""
    agentq_round(1, WARMUP_STEPS)
    raw_round(broker, 1, WARMUP_STEPS)
    seconds: dict[str, list[float]] = {"agentq": [], "raw": []}
    for i in range(ROUNDS):
        wait_until_idle(broker)
        seconds["agentq"].append(agentq_round(plans, steps))
        wait_until_idle(broker)
        seconds["raw"].append(raw_round(broker, plans, steps))
        print(f"round {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seconds.items()))
    wait_until_idle(broker)
    agentq_s, raw_s = (statistics.median(seconds[k]) for k in ("agentq", "raw"))
    return Result(workers, plans, steps, agentq_s, raw_s)


def report(r: Result) -> None:
    """Print the table and the one-line summary."""
    total = r.plans * r.steps
    agentq_rate, raw_rate = total / r.agentq_s, total / r.raw_s
    rows: list[tuple[str, str]] = [
        ("machine", f"{os.cpu_count()} CPUs, Python {platform.python_version()}"),
        ("workers (steps queue)", f"{r.workers} (+1 coordinator process with beat)"),
        ("plans x steps per plan", f"{r.plans} x {r.steps} = {total} steps (raw: chains x tasks)"),
        ("agentq seconds (median)", f"{r.agentq_s:.2f}"),
        ("agentq steps/s", f"{agentq_rate:.1f}"),
        ("raw Celery seconds (median)", f"{r.raw_s:.2f}"),
        ("raw Celery tasks/s", f"{raw_rate:.1f}"),
        ("ratio agentq / raw", f"{agentq_rate / raw_rate:.3f}"),
        ("agentq overhead per run", f"{r.steps + 1} coordinate tasks + 1 synthesize (offline)"),
    ]
    width = max(len(k) for k, _ in rows)
    print(f"\nmedian of {ROUNDS} rounds each, alternating agentq and raw Celery")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    print("\nsummary: " + summary(r, agentq_rate, raw_rate))


def summary(r: Result, agentq_rate: float, raw_rate: float) -> str:
    """One line for a README."""
    return (
        f"{r.plans} runs x {r.steps} noop steps, {r.workers} worker processes, "
        f"{os.cpu_count()} CPUs: agentq {agentq_rate:.1f} steps/s vs raw Celery chains "
        f"{raw_rate:.1f} tasks/s ({agentq_rate / raw_rate:.2f}x); each agentq step also costs a "
        f"coordinator task and Postgres writes, and each run one offline synthesize call."
    )


def with_engine(data_dir: Path | None, workers: int, body: Callable[[redis.Redis], None]) -> None:
    """Run `body(broker)` against an engine on `data_dir` (default: a temp dir, removed after)."""
    root = data_dir or Path(tempfile.mkdtemp(prefix="agentq-bench-"))
    try:
        stack = start_engine(root, worker_concurrency=workers)
        try:
            with redis.Redis.from_url(queue.broker_url()) as broker:
                body(broker)
        finally:
            stack.stop()
    finally:
        if data_dir is None:
            shutil.rmtree(root, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--plans", type=int, default=20, help="runs (and raw chains) per round")
    parser.add_argument("--steps", type=int, default=5, help="noop steps per plan (max 50)")
    parser.add_argument("--workers", type=int, default=2, help="steps worker processes")
    parser.add_argument("--data-dir", type=Path, default=None, help="kept; default: a temp dir")
    return parser.parse_args()


def main() -> None:
    """Start the engine, measure, print, stop."""
    args = parse_args()
    with_engine(
        args.data_dir,
        args.workers,
        lambda broker: report(measure(broker, args.workers, args.plans, args.steps)),
    )


if __name__ == "__main__":
    main()
