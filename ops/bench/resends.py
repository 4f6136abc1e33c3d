"""Messages sent per step behind a backlog that outlasts `AGENTQ_QUEUED_STALE_S` (issue 11, item 5).

`python -m ops.bench.resends [--runs 200] [--sleep 0.1] [--workers 2] [--stale 2]`

Starts an embedded engine whose reconciler runs every second with a short queued-stale time
(`--stale`), the dispatch cap off, so one user's `--runs` one-step runs of `sleep` all enter the
broker at once and the queue takes many stale periods to drain (200 x 0.1 s on 2 workers: about
10 s, five times `--stale`). When every run has succeeded it prints the steps, the re-sends the
reconciler made (its `reconcile` log lines' `steps_resent`), the deliveries a claim refused
(`execute_step.skipped`: duplicates), and the messages per step: (steps + re-sends) / steps.
Before the reconciler knew the broker's queue depth, every queued step older than the stale time
was sent again each period (1,657 re-sends for 1,000 steps); now only steps older than every
message still waiting are.
"""

from __future__ import annotations

import argparse
import re
import time

from models.settings import get_settings
from ops.bench.agentq_peer import wait_for_runs
from ops.bench.fairness import plan_of, submit
from ops.bench.harness import engine

RESENT = re.compile(r"steps_resent=(\d+)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="one-step runs of one user")
    parser.add_argument("--sleep", type=float, default=0.1, help="each step's sleep, s")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--stale", type=float, default=2.0, help="AGENTQ_QUEUED_STALE_S")
    args = parser.parse_args()
    env = {
        "AGENTQ_EMBEDDING_PROVIDER": "hash",
        "AGENTQ_USER_MAX_RUNNING_STEPS": "0",
        "AGENTQ_USER_MAX_ACTIVE_RUNS": "0",
        "AGENTQ_USER_SUBMITS_PER_MINUTE": "0",
        "AGENTQ_RECONCILE_INTERVAL_S": "1",
        "AGENTQ_QUEUED_STALE_S": str(args.stale),
    }
    with engine(None, args.workers, env) as running:
        plan = plan_of("sleep", 1, seconds=args.sleep)
        started = time.monotonic()
        run_ids = [submit("backlog", plan, get_settings()) for _ in range(args.runs)]
        wait_for_runs(run_ids)
        took = time.monotonic() - started
        time.sleep(2)  # the last reconcile lines
        scheduler = running.stack.log_path("scheduler").read_text(errors="replace")
        worker = running.stack.log_path("worker").read_text(errors="replace")
    resent = sum(int(n) for n in RESENT.findall(scheduler))
    skipped = worker.count("execute_step.skipped")
    print(
        f"{args.runs} one-step runs of sleep {args.sleep:g} s behind one another, "
        f"{args.workers} workers, AGENTQ_QUEUED_STALE_S={args.stale:g}: drained in {took:.1f} s"
    )
    print(
        f"re-sent by the reconciler: {resent}; duplicate deliveries refused: {skipped}; "
        f"messages per step: {(args.runs + resent) / args.runs:.2f}"
    )


if __name__ == "__main__":
    main()
