"""Agent tasks: does a run that says `succeeded` deliver what its goal asked? (issue 12)

`python -m ops.bench.agent_tasks [--provider offline|local] [--goals ID,...] [--limit N]
[--verbose] [--openai-base-url URL]`

Runs the goals of `ops.bench.agent_goals` (23: expense reports and claims with different
receipts, currencies and cost centres; lookups whose service fails and needs a replan; criteria
that cannot be met and must escalate; results that make the rest of a plan pointless) one at a
time on one embedded engine (`ops.bench.harness.engine`: Postgres, Redis, the worker and the
coordinator processes), with the bench's tools loaded (`ops.bench.agent_tools`). Each run's
outcome is checked from its rows (`ops.bench.agent_outcomes.check`), never from its own verdict,
and the table prints, per provider: goals, outcomes as expected, runs succeeded, false successes
(a run marked succeeded whose outcome check fails), replans, escalations, tokens and seconds per
goal (submit to the run's end or escalation). `--verbose` prints a line per goal as it ends.

`--provider local` is llama-cpp-python's OpenAI-compatible server on SmolLM2-135M-Instruct with
the README's "Running on a local model" settings: started here (the `llama` extra) unless
`--openai-base-url` names a running one. It is slow on a shared 2-core machine (30-60 s a model
call), so `--goals` and `--limit` pick what to run; the table says how many goals ran.
Embeddings are `hash` (no model to load in each worker). Exit code 1 when the offline provider
has a false success, the benchmark's acceptance check.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from models.formats import provider_label
from models.plans.tools import DEFAULT_TOOL_MODULES
from ops.bench import figures
from ops.bench.agent_goals import GOALS, Goal
from ops.bench.agent_outcomes import Checked, check, goal_line, table
from ops.bench.agent_runs import observe, results_by_step, submit, wait_or_cancel
from ops.bench.harness import BenchError, Engine, engine, wait_until_idle
from ops.llama_server import SMOLLM2, LlamaServer
from ops.local_model import MODEL_TIMEOUT_S, local_env

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
BENCH_TOOLS: Final = "ops.bench.agent_tools"
TIMEOUT_S: Final = {"offline": 120.0, "local": 900.0}  # per goal, then the run is cancelled
SETTLE_S: Final = {"offline": 30.0, "local": 300.0}  # its memory task, before the next goal


def engine_settings(
    provider: str, base_url: str | None, model_timeout_s: float = MODEL_TIMEOUT_S
) -> dict[str, str]:
    """The engine's environment: the bench's tools beside the product's (importable by the
    workers through PYTHONPATH), `hash` embeddings, and the local model's settings."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        "AGENTQ_TOOL_MODULES": json.dumps([*DEFAULT_TOOL_MODULES, BENCH_TOOLS]),
        "AGENTQ_EMBEDDING_PROVIDER": "hash",
        "PYTHONPATH": path,
    }
    if provider == "local":
        env |= local_env(SMOLLM2.alias, base_url or "", model_timeout_s=model_timeout_s)
    return env


def run_goal(eng: Engine, provider: str, goal: Goal, timeout_s: float) -> Checked:
    """Submit `goal`, wait for its run to end (or cancel it after `timeout_s`), let its memory
    task finish, and check the outcome from its rows."""
    run_id = submit(provider, goal)
    finished = wait_or_cancel(run_id, timeout_s)
    try:
        wait_until_idle(eng.broker, SETTLE_S[provider])
    except BenchError as exc:  # a slow memory task delays the next goal, not this figure
        print(f"  ({goal.id}: {exc})", file=sys.stderr)
    seen = observe(run_id, goal.expected.effect, timed_out=not finished)
    ok, why = check(goal.expected, seen)
    return Checked(goal.id, run_id, seen, ok, why)


class Stopped(Exception):
    """A TERM arrived (a time box): stop after the goal in flight, report what ended."""


def _stop(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping the stack signals its group too
    raise Stopped(signum)


def run_all(args: argparse.Namespace, goals: Sequence[Goal], base_url: str | None) -> list[Checked]:
    """Every goal of `goals`, one at a time, on one engine; a line per goal with `--verbose`
    (and the steps of a goal whose check failed)."""
    kinds = {g.id: g.kind for g in goals}
    checked: list[Checked] = []
    with engine(
        args.data_dir, args.workers, engine_settings(args.provider, base_url, args.model_timeout_s)
    ) as eng:
        for goal in goals:
            try:
                found = run_goal(
                    eng, args.provider, goal, args.timeout_s or TIMEOUT_S[args.provider]
                )
            except Stopped:  # a time box: report the goals that ended; this one did not
                print(f"stopped during goal {goal.id}", file=sys.stderr)
                break
            checked.append(found)
            if args.verbose:
                print(goal_line(kinds[goal.id], found), flush=True)
                if not found.ok:
                    steps = json.dumps(results_by_step(found.run_id), default=str)
                    print(f"    steps: {steps[:1500]}")
    return checked


def selected(args: argparse.Namespace) -> list[Goal]:
    """The goals `--goals` names (all by default), in the benchmark's order, at most `--limit`.
    Raises `SystemExit` naming the unknown ids."""
    wanted = [g for g in args.goals.split(",") if g] if args.goals else [g.id for g in GOALS]
    unknown = sorted(set(wanted) - {g.id for g in GOALS})
    if unknown:
        known = ", ".join(g.id for g in GOALS)
        raise SystemExit(f"unknown goals: {', '.join(unknown)}; known: {known}")
    goals = [g for g in GOALS if g.id in wanted]
    return goals[: args.limit] if args.limit else goals


def report(args: argparse.Namespace, checked: Sequence[Checked], started: float) -> None:
    """The setup, the table, and the goals whose outcome was not the expected one."""
    label = provider_label("offline" if args.provider == "offline" else "openai")
    model = "offline rules" if args.provider == "offline" else "SmolLM2-135M-Instruct Q4_1"
    print(f"\nmachine: {figures.machine()}")
    print(f"provider: {label} ({model}); {args.workers} worker processes; hash embeddings")
    took = time.monotonic() - started
    print(f"goals run one at a time: {len(checked)} of {len(GOALS)}, in {took:.0f} s\n")
    print(table(args.provider, checked))
    missed = [c.goal for c in checked if not c.ok]
    print("\nnot as expected: " + (", ".join(missed) if missed else "none"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--provider", choices=["offline", "local"], default="offline")
    p.add_argument("--openai-base-url", default=None, help="local: a running server's /v1 URL")
    p.add_argument("--goals", default="", help="comma-separated goal ids (default: all)")
    p.add_argument("--limit", type=int, default=0, help="at most this many goals (0: all)")
    p.add_argument("--timeout-s", type=float, default=0, help="per goal (0: 120 s, local 900)")
    p.add_argument(
        "--model-timeout-s", type=float, default=MODEL_TIMEOUT_S, help="local: per model call"
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--data-dir", type=Path, default=None, help="kept; default: a temp dir")
    p.add_argument("--verbose", action="store_true", help="a line per goal as it ends")
    return p.parse_args(argv)


def main() -> None:
    """Run the selected goals on the provider and print the figures; exit 1 on an offline
    false success."""
    args = parse_args()
    goals = selected(args)
    # A TERM (a time box, `timeout`) unwinds like ^C: the engine and the server stop, and the
    # goals that ended are reported.
    signal.signal(signal.SIGTERM, _stop)
    started = time.monotonic()
    if args.provider == "local" and args.openai_base_url is None:
        try:
            server = LlamaServer(SMOLLM2)
        except FileNotFoundError as exc:
            raise BenchError(f"--provider local: {exc}") from exc
        with server:
            checked = run_all(args, goals, server.url)
    else:
        checked = run_all(args, goals, args.openai_base_url)
    report(args, checked, started)
    if args.provider == "offline" and any(c.false_success for c in checked):
        sys.exit(1)


if __name__ == "__main__":
    main()
