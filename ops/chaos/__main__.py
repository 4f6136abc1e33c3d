"""`python -m ops.chaos [--scenario NAME ...] [--runs 100] [--workers 4] [--timeout 600]`

Runs each scenario (default: all, `ops.chaos.scenarios.SCENARIOS`) on a fresh embedded engine
and prints one line per scenario: the checks (runs lost, steps committed twice, effects run
again beyond the killed attempts, model calls paid twice) and the recovery figures. Exits 1 if
any check failed. Run it from a checkout (the effect tool is in tests/support/tools.py).
"""

from __future__ import annotations

import argparse
import platform
import sys

from ops.chaos.scenarios import SCENARIOS, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\\n\\n")[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--runs", type=int, default=100, help="runs of 5 steps per scenario")
    parser.add_argument("--workers", type=int, default=4, help="worker pool processes")
    parser.add_argument("--timeout", type=float, default=600.0, help="per scenario, s")
    parser.add_argument("--keep", action="store_true", help="keep each engine's data dir")
    args = parser.parse_args()
    print(f"{platform.node()}: {args.runs} runs x 5 steps, {args.workers} workers, defaults")
    failed = False
    for name in args.scenario or list(SCENARIOS):
        scenario = SCENARIOS[name]
        verdict, took = run(
            scenario, runs=args.runs, workers=args.workers, timeout_s=args.timeout, keep=args.keep
        )
        mark = "ok  " if verdict.passed else "FAIL"
        print(f"{mark} {name} ({scenario.what}), {took:.0f} s: {verdict.summary()}", flush=True)
        for problem in (
            verdict.lost_runs
            + [str(s) for s in verdict.committed_twice]
            + verdict.effects_again
            + verdict.paid_twice
        )[:10]:
            print(f"     {problem}")
        failed |= not verdict.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
