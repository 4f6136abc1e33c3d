"""Agent tasks: does a run that says `succeeded` deliver what its goal asked? (issue 12)

`python -m ops.bench.agent_tasks [--provider offline|smollm2|gemma3[,...]] [--passes N]
[--goals ID,...] [--limit N] [--verbose] [--openai-base-url URL]`

Runs the goals of `ops.bench.agent_goals` (29: expense reports and claims with different
receipts, currencies and cost centres; lookups whose service fails and needs a replan; criteria
that cannot be met and must escalate; results that make the rest of a plan pointless; two
families of a recurring goal whose first run needs a replan) one at a
time on one embedded engine (`ops.bench.harness.engine`: Postgres, Redis, the worker and the
coordinator processes), with the bench's tools loaded (`ops.bench.agent_tools`). Each run's
outcome is checked from its rows (`ops.bench.agent_outcomes.check`), never from its own verdict,
and the table prints a row per pass: goals, outcomes as expected, runs succeeded, false successes
(a run marked succeeded whose outcome check fails), replans, escalations, model calls, tokens and
seconds per goal (submit to the run's end or escalation). `--verbose` prints a line per goal as it
ends.

A learning curve (issue 31): `--passes N` runs the goals N times on the one engine; the goals of a
family belong to one user (`Goal.user`), who keeps its memory (episodes, facts, learned
procedures) from goal to goal and pass to pass. `--provider` may name one provider per pass
(`offline,smollm2`: a first pass on the offline rules, then SmolLM2 with what they taught; the
last one named serves the passes after it). The output ends with
`learning: replans R1 -> RN, tokens/goal T1 -> TN, expected E1 -> EN, false successes F`.

`--provider smollm2` (or `local`) and `--provider gemma3` are llama-cpp-python's OpenAI-compatible
server on SmolLM2-135M-Instruct (the `llama` extra) or Gemma 3 270M (`llama` and `gemma`) with the
README's "Running on a local model" settings: started here for the passes of that model, unless
`--openai-base-url` names a running one (then every local pass uses it). It is slow on a shared
2-core machine (5-60 s a model call), so `--goals` and `--limit` pick what to run; the table says
how many goals ran.
Embeddings are `hash` (no model to load in each worker). Exit code 1 when the offline provider
has a false success, the benchmark's acceptance check.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from itertools import groupby
from pathlib import Path
from typing import Final

from models.formats import provider_label
from models.plans.tools import DEFAULT_TOOL_MODULES
from ops.bench import figures
from ops.bench.agent_goals import GOALS, Goal
from ops.bench.agent_outcomes import Checked, check, goal_line, learning_line, table
from ops.bench.agent_runs import observe, results_by_step, submit, wait_or_cancel
from ops.bench.harness import BenchError, Engine, engine, wait_until_idle
from ops.llama_server import LOCAL_MODELS, SMOLLM2, LlamaServer
from ops.local_model import MODEL_TIMEOUT_S, local_env

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
BENCH_TOOLS: Final = "ops.bench.agent_tools"
ALIASES: Final = {"local": SMOLLM2.alias}  # `--provider local` is SmolLM2, as before
TIMEOUT_S: Final = {"offline": 120.0, "local": 900.0}  # per goal, then the run is cancelled
SETTLE_S: Final = {"offline": 30.0, "local": 300.0}  # its memory task, before the next goal


def served(provider: str) -> str:
    """`offline`, or `local` for a model the bench serves (`ops.llama_server.LOCAL_MODELS`)."""
    return "offline" if provider == "offline" else "local"


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
    if provider != "offline":
        env |= local_env(provider, base_url or "", model_timeout_s=model_timeout_s)
    return env


def run_goal(eng: Engine, provider: str, goal: Goal, timeout_s: float) -> Checked:
    """Submit `goal`, wait for its run to end (or cancel it after `timeout_s`), let its memory
    task finish, and check the outcome from its rows."""
    run_id = submit(goal)
    finished = wait_or_cancel(run_id, timeout_s)
    try:
        wait_until_idle(eng.broker, SETTLE_S[served(provider)])
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


def run_all(args: argparse.Namespace, goals: Sequence[Goal]) -> list[tuple[str, list[Checked]]]:
    """Every goal of `goals`, one at a time, `args.passes` times, each pass on its provider
    (`providers`); (provider, checked goals) per pass, a line per goal with `--verbose` (and the
    steps of a goal whose check failed). Passes of one provider in a row share an engine; the
    next provider's engine starts on the same data directory (its workers read the provider at
    start), so every user's memory carries over. A local model's server runs for its passes
    (`--openai-base-url`: the one running)."""
    kinds = {g.id: g.kind for g in goals}
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="agentq-bench-"))
    passes: list[tuple[str, list[Checked]]] = []
    try:
        for provider, count in groupby(providers(args)):
            with ExitStack() as stack:
                base_url = args.openai_base_url
                if provider != "offline" and base_url is None:
                    try:
                        base_url = stack.enter_context(LlamaServer(LOCAL_MODELS[provider])).url
                    except FileNotFoundError as exc:
                        raise BenchError(f"--provider {provider}: {exc}") from exc
                settings = engine_settings(provider, base_url, args.model_timeout_s)
                eng = stack.enter_context(engine(data_dir, args.workers, settings))
                for _ in count:
                    checked: list[Checked] = []
                    passes.append((provider, checked))
                    for goal in goals:
                        try:
                            timeout_s = args.timeout_s or TIMEOUT_S[served(provider)]
                            found = run_goal(eng, provider, goal, timeout_s)
                        except Stopped:  # a time box: report the goals that ended
                            print(f"stopped in goal {goal.id}, pass {len(passes)}", file=sys.stderr)
                            return passes
                        checked.append(found)
                        if args.verbose:
                            print(
                                f"[{len(passes)}] " + goal_line(kinds[goal.id], found), flush=True
                            )
                            if not found.ok:
                                steps = json.dumps(results_by_step(found.run_id), default=str)
                                print(f"    steps: {steps[:1500]}")
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    return passes


def providers(args: argparse.Namespace) -> list[str]:
    """The provider of each pass: `--provider`'s names in turn, the last for the passes after.
    Raises `SystemExit` for an unknown name."""
    names = [ALIASES.get(p, p) for p in args.provider.split(",") if p]
    unknown = sorted(set(names) - {"offline", *LOCAL_MODELS})
    if unknown or not names:
        known = ", ".join(["offline", *LOCAL_MODELS, *ALIASES])
        raise SystemExit(f"--provider: {', '.join(unknown) or 'none'}; use {known}")
    return [names[min(i, len(names) - 1)] for i in range(max(args.passes, len(names)))]


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


def report(
    args: argparse.Namespace, passes: Sequence[tuple[str, Sequence[Checked]]], started: float
) -> None:
    """The setup, the table (a row per pass), the goals whose outcome was not the expected one,
    and the learning line."""
    print(f"\nmachine: {figures.machine()}")
    for provider in dict.fromkeys(p for p, _ in passes):
        label = provider_label("offline" if provider == "offline" else "openai")
        model = "offline rules" if provider == "offline" else LOCAL_MODELS[provider].name
        print(f"provider: {label} ({model})")
    print(f"{args.workers} worker processes; hash embeddings")
    took = time.monotonic() - started
    ran = sum(len(c) for _, c in passes)
    print(
        f"goals run one at a time: {ran} in {len(passes)} pass(es) of {len(GOALS)}, {took:.0f} s\n"
    )
    print(table(passes))
    for pass_no, (_, checked) in enumerate(passes, start=1):
        missed = [c.goal for c in checked if not c.ok]
        print(f"pass {pass_no} not as expected: " + (", ".join(missed) if missed else "none"))
    if passes and all(c for _, c in passes):
        print(learning_line([c for _, c in passes]))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "--provider",
        default="offline",
        help="offline, smollm2 (local) or gemma3, or one per pass: offline,smollm2",
    )
    p.add_argument("--passes", type=int, default=1, help="times the goals run (memory kept)")
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
    passes = run_all(args, goals)
    report(args, passes, started)
    if any(c.false_success for p, checked in passes if p == "offline" for c in checked):
        sys.exit(1)


if __name__ == "__main__":
    main()
