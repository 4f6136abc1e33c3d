"""One run of K independent `sleep` steps on W worker processes: how long the run takes.

`python -m ops.bench.fan_out [--steps 8] [--seconds 1] [--workers 4] [--runs 3]`

Issue 10's target: 8 independent 1 s steps on 4 workers take at most 2.5 s (two waves of four,
plus the engine's overhead). Each run is submitted with an explicit plan whose steps all have
`"after": []`, one at a time once the engine is idle; the figure is submit to `finished_at`,
with the most steps that ran at once (from the rows' `started_at`/`finished_at`) and the
ideal, ceil(K / min(W, cap)) x seconds. The dispatch cap (AGENTQ_USER_MAX_RUNNING_STEPS) keeps
its default, 4, unless `--dispatch-cap` is given.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from sqlmodel import col, select

from models.db import session_scope
from models.tables import Step
from ops.bench.agentq_peer import plan_of, submit, wait_for_runs
from ops.bench.harness import engine, engine_env

DEFAULT_CAP = 4


def most_at_once(run_id: int) -> int:
    """The most steps of the run that were running at one instant, from their rows."""
    with session_scope() as session:
        steps = session.exec(select(Step).where(col(Step.run_id) == run_id)).all()
    edges = sorted(
        [(s.started_at, 1) for s in steps if s.started_at]
        + [(s.finished_at, -1) for s in steps if s.finished_at],
        key=lambda e: (e[0], e[1]),
    )
    now = most = 0
    for _, delta in edges:
        now += delta
        most = max(most, now)
    return most


def main() -> None:
    """Start the engine, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=8, help="independent steps per run")
    parser.add_argument("--seconds", type=float, default=1.0, help="each step's sleep, s")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--runs", type=int, default=3, help="runs, one at a time")
    parser.add_argument("--dispatch-cap", type=int, default=None, help="default: 4")
    args = parser.parse_args()
    plan = plan_of(args.steps, tool="sleep", parallel=True, args={"seconds": args.seconds})
    cap = DEFAULT_CAP if args.dispatch_cap is None else args.dispatch_cap
    width = min(args.workers, cap) if cap else args.workers
    with engine(None, args.workers, engine_env("hash", args.dispatch_cap)) as running:
        wait_for_runs([submit(plan)])  # warm-up
        took, together = [], []
        for _ in range(args.runs):
            running.settle()
            start = time.time()
            run_id = submit(plan)
            took.append(wait_for_runs([run_id], poll_s=0.01) - start)
            together.append(most_at_once(run_id))
    ideal = math.ceil(args.steps / width) * args.seconds
    print(
        f"{args.steps} independent sleep {args.seconds:g} s steps, {args.workers} workers, "
        f"dispatch cap {cap or 'off'}: run took {statistics.median(took):.2f} s (median of "
        f"{args.runs}: {', '.join(f'{t:.2f}' for t in took)}); at most {max(together)} at "
        f"once; ideal {ideal:.2f} s"
    )


if __name__ == "__main__":
    main()
