"""The faults the suite injects, each driven in a thread while the workload runs.

A driver gets the `Context` (the running stack, the provider, the run ids) and records what it
did in `ctx.record` (`Record`): which attempts it killed (so the verdict allows exactly those
to run again) and when each service went down and came back (so recovery can be timed).

- `kill_workers`: every `kill_every_s`, one of the steps worker's pool processes (the first seen
  running a step no kill has hit within the next `kill_every_s`, `running_fresh`; else any) is
  stopped (SIGSTOP, so what it holds cannot change), what it holds is read from the rows (a running
  step's attempt, a run's phase: `runs.phase_worker`), then it is killed (SIGKILL). Celery's pool
  starts a new process.
- `restart_redis`: Redis is killed (SIGKILL) and started again empty (`LocalStack.kill_redis`).
- `restart_postgres`: Postgres is stopped (fast: sessions ended) and started again.
- `kill_scheduler`: the scheduler (coordinator worker with beat) is killed with SIGKILL, then
  started again beside a second scheduler with beat: two beats at once.
- `none`: the workload alone, for the duplicates and rate-limit scenarios, whose fault is in the
  environment (every message published twice) or at the provider (429 with a long retry-after).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil
import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.engine.queue import QUEUE_COORDINATOR
from models.tables import Run, Step, utcnow
from ops.fake_provider import FakeOpenAI
from ops.stack import LocalStack

# A run's status while its phase is out -> the provider purpose that phase pays for.
PHASE_PURPOSES = {
    "planning": "plan",
    "replanning": "replan",
    "synthesizing": "synthesize",
    "succeeded": "extract_facts",
    "failed": "extract_facts",
    "cancelled": "extract_facts",
}


@dataclass(frozen=True)
class Kill:
    """One killed pool process: when (`time.time()`), and what it held: step ids, and phase
    units (`chaos-<n>/<purpose>`, see `ops.chaos.workload.unit_of`)."""

    at: float
    pid: int
    steps: frozenset[int]
    phases: frozenset[str]


@dataclass
class Record:
    """What the drivers did: kills, and (down, back) times of each outage with the ids of the
    steps unfinished when it began."""

    kills: list[Kill] = field(default_factory=list)
    outages: list[tuple[float, float, frozenset[int]]] = field(default_factory=list)
    restarted_at: float | None = None  # kill_scheduler: when the two schedulers were up


@dataclass
class Context:
    stack: LocalStack
    provider: FakeOpenAI
    runs: dict[str, int]  # marker -> run id
    done: threading.Event
    env: dict[str, str]  # an engine process's (`ops.local.engine_env`)
    record: Record = field(default_factory=Record)
    kill_every_s: float = 5.0
    fault_after_s: float = 4.0
    outage_s: float = 3.0


Driver = Callable[[Context], None]
BUSY_POLL_S = 0.1  # kill_workers: how often it looks for a process running a step


def kill_workers(ctx: Context) -> None:
    """Every `kill_every_s`, kill -9 a pool process: one running a step no kill has hit, as
    soon as there is one within the next `kill_every_s` (steps are short: a kill at a random
    moment mostly finds an idle pool), else any."""
    rng = random.Random(11)
    while not ctx.done.wait(ctx.kill_every_s):
        looked_until = time.monotonic() + ctx.kill_every_s
        while True:
            main = ctx.stack.pid("worker")
            pids = sorted(p.pid for p in psutil.Process(main).children()) if main else []
            busy = running_fresh(ctx, pids) if pids else []
            if busy or time.monotonic() > looked_until or ctx.done.wait(BUSY_POLL_S):
                break
        if not pids:
            continue
        victim = rng.choice(busy or pids)
        os.kill(victim, signal.SIGSTOP)
        try:
            steps, held = holdings(f"{socket.gethostname()}:{victim}", ctx.runs)
        finally:
            os.kill(victim, signal.SIGKILL)
        ctx.record.kills.append(Kill(time.time(), victim, steps, held))


def running_fresh(ctx: Context, pids: list[int]) -> list[int]:
    """Those of `pids` running a step of the workload that no kill has hit yet: the victims
    that test recovery (an idle process's kill tests nothing), each step at most once so that
    no step's attempts are spent by the suite alone."""
    killed = {s for kill in ctx.record.kills for s in kill.steps}
    with session_scope() as session:
        rows = session.execute(
            sa.text(
                "SELECT s.id, a.worker FROM steps s JOIN step_attempts a"
                " ON a.step_id = s.id AND a.attempt = s.attempt"
                " WHERE s.status = 'running' AND s.run_id = ANY(:runs)"
            ),
            {"runs": list(ctx.runs.values())},
        ).all()
    names = {f"{socket.gethostname()}:{pid}": pid for pid in pids}
    return sorted({names[w] for step_id, w in rows if w in names and step_id not in killed})


def holdings(worker: str, runs: dict[str, int]) -> tuple[frozenset[int], frozenset[str]]:
    """What process `worker` (`host:pid`) holds now: running steps whose live attempt is its,
    and phases of `runs` it holds under a live lease."""
    markers = {run_id: marker for marker, run_id in runs.items()}
    now = utcnow()
    with session_scope() as session:
        steps = session.execute(
            sa.text(
                "SELECT s.id FROM steps s JOIN step_attempts a"
                " ON a.step_id = s.id AND a.attempt = s.attempt"
                " WHERE s.status = 'running' AND a.worker = :worker"
            ),
            {"worker": worker},
        ).scalars()
        held = session.execute(
            select(Run.id, col(Run.status)).where(
                col(Run.phase_worker) == worker,
                col(Run.phase_lease_expires_at) > now,
            )
        ).all()
        step_ids = frozenset(int(s) for s in steps)
    phases = frozenset(
        f"{markers[r.id]}/{PHASE_PURPOSES[r.status]}"
        for r in held
        if r.id in markers and r.status in PHASE_PURPOSES
    )
    return step_ids, phases


def in_flight(runs: dict[str, int]) -> frozenset[int]:
    """The steps of `runs` in flight: queued (sent, or due to be) or running."""
    with session_scope() as session:
        ids = session.execute(
            select(col(Step.id)).where(
                col(Step.run_id).in_(list(runs.values())),
                col(Step.status).in_(["queued", "running"]),
            )
        ).scalars()
        return frozenset(int(i) for i in ids)


def _outage(ctx: Context, down: Callable[[], None], up: Callable[[], None]) -> None:
    if ctx.done.wait(ctx.fault_after_s):
        return
    pending = in_flight(ctx.runs)
    began = time.time()
    down()
    time.sleep(ctx.outage_s)
    up()
    ctx.record.outages.append((began, time.time(), pending))
    _stay(ctx)


def restart_redis(ctx: Context) -> None:
    _outage(ctx, ctx.stack.kill_redis, ctx.stack.start_redis)


def restart_postgres(ctx: Context) -> None:
    _outage(ctx, ctx.stack.stop_postgres, ctx.stack.start_postgres)


def kill_scheduler(ctx: Context) -> None:
    if ctx.done.wait(ctx.fault_after_s):
        return
    main = ctx.stack.pid("scheduler")
    if main is not None:
        os.kill(main, signal.SIGKILL)
    while "scheduler" not in ctx.stack.restart_dead():  # once it has exited
        time.sleep(0.05)
    argv = ctx.stack.celery_argv(
        "scheduler.app", QUEUE_COORDINATOR, concurrency=1, hostname="scheduler-2@%h", beat=True
    )
    argv[argv.index("-s") + 1] = str(ctx.stack.data_dir / "celerybeat-schedule-2")
    ctx.stack.start_process("scheduler-2", argv, ctx.env)
    ctx.record.restarted_at = time.time()
    _stay(ctx)


def _stay(ctx: Context) -> None:
    """Wait for the scenario's end: a child started from this thread gets SIGTERM when the
    thread ends (`ops.processes.prepare_child`: PR_SET_PDEATHSIG is per thread)."""
    ctx.done.wait()


def none(ctx: Context) -> None:
    ctx.done.wait()
