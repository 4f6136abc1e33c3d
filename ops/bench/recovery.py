"""How long a killed worker's step takes to be committed again, at the default settings.

`python -m ops.bench.recovery [--kills 10] [--sleep 2] [--workers 2] [--backlog 0]`

Starts an embedded engine with its default lease, heartbeat and reconciler (hash embeddings),
then `--kills` times: submits a run of one `sleep` step, waits until a worker runs it, kills
that pool process with SIGKILL, and times the kill to the step's second attempt committed
(`step_attempts.finished_at`). Prints each time and the p50 and p90, with the settings. Issue 11's
target is p90 <= 15 s; the step's own `--sleep` is part of every figure.

With `--backlog N` (issue 27), the dispatch cap is off (AGENTQ_USER_MAX_RUNNING_STEPS=0) and
before each kill one user keeps N runs of 5 `sleep` steps waiting (topped up when fewer than
N steps wait); the step killed is one of theirs, running while the rest wait in the broker.
A fair queue takes it back before that younger work; a FIFO puts it behind all of it.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

from sqlmodel import col, select

from models.db import session_scope
from models.settings import get_settings
from models.tables import Step, StepAttempt
from ops.bench.fairness import plan_of, submit
from ops.bench.harness import BenchError, engine

TIMEOUT_S = 120.0


def attempts_of(step_run: int) -> list[StepAttempt]:
    """The attempts of the one step of run `step_run`, in order."""
    with session_scope() as session:
        step_ids = select(Step.id).where(Step.run_id == step_run)
        stmt = select(StepAttempt).where(col(StepAttempt.step_id).in_(step_ids))
        return list(session.exec(stmt.order_by(col(StepAttempt.attempt))))


def one_kill(sleep_s: float) -> float:
    """Seconds from killing the worker running a fresh step to that step committed again."""
    run_id = submit("recovery", plan_of("sleep", 1, seconds=sleep_s), get_settings())
    deadline = time.monotonic() + TIMEOUT_S
    while not (attempts := attempts_of(run_id)):
        if time.monotonic() > deadline:
            raise BenchError(f"run {run_id}: its step never started")
        time.sleep(0.02)
    os.kill(int(attempts[0].worker.rsplit(":", 1)[1]), signal.SIGKILL)
    killed = time.time()
    while True:
        done = [a for a in attempts_of(run_id) if a.outcome == "succeeded" and a.finished_at]
        if done:
            return float(done[0].finished_at.timestamp() - killed)  # type: ignore[union-attr]
        if time.monotonic() > deadline:
            raise BenchError(f"run {run_id}: its step was not committed again")
        time.sleep(0.05)


def waiting_steps(run_ids: list[int]) -> int:
    """How many steps of `run_ids` have not started."""
    stmt = select(Step.id).where(
        col(Step.run_id).in_(run_ids), col(Step.status).in_(["pending", "ready", "queued"])
    )
    with session_scope() as session:
        return len(session.exec(stmt).all())


def kill_in_backlog(sleep_s: float, runs: int, backlog: list[int]) -> float:
    """Seconds from killing the worker running one of a backlog's steps (fresh, attempt 1) to
    that step committed again; `backlog` (run ids) is topped up to `runs` runs of 5 steps."""
    settings = get_settings().model_copy(  # one user's backlog, over the submit quotas
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    if waiting_steps(backlog) < runs:
        backlog += [
            submit("backlog", plan_of("sleep", 5, seconds=sleep_s), settings) for _ in range(runs)
        ]
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        with session_scope() as session:
            stmt = select(Step).where(
                col(Step.run_id).in_(backlog), Step.status == "running", Step.attempt == 1
            )
            running = session.exec(stmt.order_by(col(Step.started_at).desc())).first()
        if running is not None:
            break
        if time.monotonic() > deadline:
            raise BenchError("no backlog step started")
        time.sleep(0.05)
    (attempt,) = [a for a in attempts_of_step(running.id or 0) if a.attempt == 1]
    os.kill(int(attempt.worker.rsplit(":", 1)[1]), signal.SIGKILL)
    killed = time.time()
    while True:
        done = [a for a in attempts_of_step(running.id or 0) if a.outcome == "succeeded"]
        if done and done[0].finished_at:
            return float(done[0].finished_at.timestamp() - killed)
        if time.monotonic() > deadline + TIMEOUT_S:
            raise BenchError(f"step {running.id}: not committed again")
        time.sleep(0.05)


def attempts_of_step(step_id: int) -> list[StepAttempt]:
    """The attempts of step `step_id`, in order."""
    with session_scope() as session:
        stmt = select(StepAttempt).where(StepAttempt.step_id == step_id)
        return list(session.exec(stmt.order_by(col(StepAttempt.attempt))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="workers killed, one at a time")
    parser.add_argument("--sleep", type=float, default=2.0, help="each step's sleep, s")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--backlog", type=int, default=0, help="runs x 5 steps kept waiting")
    args = parser.parse_args()
    env = {"AGENTQ_EMBEDDING_PROVIDER": "hash"}
    if args.backlog:
        env["AGENTQ_USER_MAX_RUNNING_STEPS"] = "0"
    with engine(None, args.workers, env):
        s = get_settings()
        times: list[float] = []
        backlog: list[int] = []
        for _ in range(args.kills):
            if args.backlog:
                times.append(kill_in_backlog(args.sleep, args.backlog, backlog))
            else:
                times.append(one_kill(args.sleep))
            print(f"kill {len(times)}: {times[-1]:.1f} s", flush=True)
            time.sleep(1.0)  # the pool replaces the killed process
    times.sort()
    p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
    print(
        f"AGENTQ_LEASE_S={s.lease_s:g}, AGENTQ_HEARTBEAT_S={s.heartbeat_s:g}, "
        f"AGENTQ_RECONCILE_INTERVAL_S={s.reconcile_interval_s:g}; {args.workers} workers, "
        f"sleep {args.sleep:g} s steps, backlog {args.backlog} runs x 5 steps"
    )
    print("kill -> committed again, s: " + ", ".join(f"{t:.1f}" for t in times))
    print(f"p50 {statistics.median(times):.1f} s, p90 {p90:.1f} s ({len(times)} kills)")


if __name__ == "__main__":
    main()
