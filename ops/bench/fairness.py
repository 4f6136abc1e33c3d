"""Fairness between users: user B's one-step run latency, idle and behind user A's backlog.

`python -m ops.bench.fairness [--workers 2] [--samples 12] [--data-dir DIR]`
`python -m ops.bench.fairness --busy [--step-s 15] [--samples 8]`: issue 27's scenario (below).

Issue 9, finding 3: four runs of one user took another user's one-step run from 0.7 s to 88 s.
Each engine below (`ops.local.start_engine`: embedded Postgres and Redis, the `steps` worker with
`--workers` processes, the coordinator with beat) runs with AGENTQ_USER_MAX_RUNNING_STEPS at its
default (4: the dispatch cap on) and then at 0 (off), in the same invocation:

1. idle: B submits `--samples` one-step (`noop`) runs, one at a time;
2. for each backlog shape, A submits 200 `sleep` 0.1 s steps at once, then B submits a one-step
   run every `--interval` s while any of A's steps has not started, at most `--samples`:
   - `20 runs x 10 steps`: within A's default quotas (20 active runs, 60 submits a minute);
   - `200 runs x 1 step`: A's AGENTQ_USER_MAX_ACTIVE_RUNS and AGENTQ_USER_SUBMITS_PER_MINUTE are
     off (they are the stack's, so off for B too, whose few submits never meet them): the
     deepest backlog one user could put in the broker (and what a plan graph, issue 10,
     allows within one run).

With `--busy`, issue 27's scenario instead: 1 worker process, A submits 4 runs of 3 x `sleep
--step-s`, and while any of A's steps waits B submits a one-step run and a run with no plan (the
worker plans it), waits for both, and again (at most `--samples` pairs); printed: p50 and p99
of each kind of B's run, idle and behind A. Fair means within about one of A's steps.

B's latency is its run's `finished_at - created_at` (submit to succeeded, synthesis included).
Reported: p50 and p95 per configuration, their ratio to the same engine's idle figures, and
the median of each part of B's run (`PHASES`: which queue it waited in).
Embeddings are `hash` (AGENTQ_EMBEDDING_PROVIDER): each run's synthesis remembers it, and
loading the local model in each worker process would measure that, not the scheduling.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import redis
from sqlmodel import col, select

from models.db import session_scope
from models.engine import queue, submissions
from models.engine.submissions import RunRequest
from models.plans.plans import PlanSpec, parse_plan
from models.settings import Settings, get_settings
from models.tables import Run, RunEvent, Step
from ops.bench.harness import UNLIMITED_SUBMITS, BenchError, settings_here, wait_until_idle
from ops.local import start_engine

USER_A, USER_B = "bench-a", "bench-b"
SHAPES = ((20, 10), (200, 1))  # A's runs x steps per run: 200 steps each
SLEEP_S = 0.1
POLL_S = 0.05
TIMEOUT_S = 600.0
CAPS = (("on (4)", "4"), ("off", "0"))


# Where B's time goes, between consecutive events of its run (README: which queue waits).
PHASES = (
    ("run.submitted", "step.queued", "to dispatch"),  # held in Postgres until the user has a slot
    ("step.queued", "step.running", "steps queue"),  # behind other users' tasks in the broker
    ("step.running", "run.synthesizing", "step+coord"),  # the step, then the coordinator again
    ("run.synthesizing", "run.succeeded", "synthesis"),  # the steps queue again, and synthesis
)


@dataclass(frozen=True)
class Figures:
    """B's latencies (s) in one configuration, and the median of each of its `PHASES`."""

    cap: str
    backlog: str
    latencies: list[float]
    phases: tuple[float, ...] = ()

    def pct(self, q: float) -> float:
        """The `q` quantile (0..1) of the latencies, by linear interpolation."""
        ordered = sorted(self.latencies)
        if len(ordered) == 1:
            return ordered[0]
        return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1]


def plan_of(tool: str, steps: int, **args: float) -> PlanSpec:
    """A plan of `steps` steps of `tool` with `args`."""
    data = [{"name": f"s{i}", "kind": "tool", "tool": tool, "args": args} for i in range(steps)]
    return parse_plan({"steps": data}, tools=[tool])


def submit(user: str, plan: PlanSpec, settings: Settings) -> int:
    """Submit a run (`models.engine.submissions.submit`: its first steps are dispatched in the
    submit transaction); its id. Raises `BenchError` if its first messages could not be sent."""
    request = RunRequest(user_id=user, goal="fairness", plan=plan)
    submitted = submissions.submit(request, settings=settings)
    if not submitted.notified:
        raise BenchError(f"run {submitted.run_id}: the broker did not take its first messages")
    return submitted.run_id


def phases(run_ids: list[int]) -> tuple[float, ...]:
    """The median seconds of each of `PHASES` over the runs `run_ids`."""
    with session_scope() as session:
        stmt = select(RunEvent).where(col(RunEvent.run_id).in_(run_ids))
        events = session.exec(stmt.order_by(col(RunEvent.id))).all()
    first: dict[tuple[int, str], datetime] = {}
    for event in events:
        first.setdefault((event.run_id, event.kind), event.at)
    return tuple(
        statistics.median((first[(r, end)] - first[(r, start)]).total_seconds() for r in run_ids)
        for start, end, _ in PHASES
    )


def latencies(run_ids: list[int]) -> list[float]:
    """Wait until every run succeeded; each one's `finished_at - created_at`, s."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        with session_scope() as session:
            runs = session.exec(select(Run).where(col(Run.id).in_(run_ids))).all()
        if any(r.status in ("failed", "cancelled", "waiting_review") for r in runs):
            raise BenchError(f"a run did not succeed: {[(r.id, r.status) for r in runs]}")
        if all(r.finished_at for r in runs):
            return [(r.finished_at - r.created_at).total_seconds() for r in runs if r.finished_at]
        time.sleep(POLL_S)
    raise BenchError(f"runs not done after {TIMEOUT_S:g} s")


def a_waiting(run_ids: list[int]) -> int:
    """How many of A's steps have not started."""
    stmt = select(Step.id).where(
        col(Step.run_id).in_(run_ids), col(Step.status).in_(["pending", "ready", "queued"])
    )
    with session_scope() as session:
        return len(session.exec(stmt).all())


def idle(samples: int) -> list[int]:
    """B's one-step runs on an idle engine, one at a time; their ids."""
    plan, settings = plan_of("noop", 1), get_settings()
    b_runs = []
    for _ in range(samples):
        b_runs.append(submit(USER_B, plan, settings))
        latencies(b_runs[-1:])
    return b_runs


def behind_backlog(runs: int, steps: int, samples: int, interval_s: float) -> list[int]:
    """A submits `runs` x `steps` sleep steps; B submits one-step runs every `interval_s` while
    any of A's steps waits, at most `samples`; B's run ids, once all have ended."""
    loose = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    a_settings = loose if runs > get_settings().user_max_active_runs else get_settings()
    a_plan = plan_of("sleep", steps, seconds=SLEEP_S)
    a_runs = [submit(USER_A, a_plan, a_settings) for _ in range(runs)]
    b_runs: list[int] = []
    while len(b_runs) < samples and a_waiting(a_runs):
        b_runs.append(submit(USER_B, plan_of("noop", 1), get_settings()))
        time.sleep(interval_s)
    latencies(b_runs)
    latencies(a_runs)
    return b_runs


def figures_of(cap: str, backlog: str, b_runs: list[int]) -> Figures:
    """The figures of B's runs `b_runs` (all ended)."""
    return Figures(cap, backlog, latencies(b_runs), phases(b_runs))


def measure_engine(
    root: Path, workers: int, cap: tuple[str, str], samples: int, interval_s: float
) -> list[Figures]:
    """One engine with the cap `cap`: idle, then each backlog shape."""
    env = {"AGENTQ_USER_MAX_RUNNING_STEPS": cap[1], "AGENTQ_EMBEDDING_PROVIDER": "hash"}
    env |= UNLIMITED_SUBMITS  # the quotas are the stack's: off, for A's 200 runs (B's are few)
    with settings_here(env):  # this process's submits dispatch under the engine's cap
        return _measure(root, workers, env, cap[0], samples, interval_s)


def _measure(
    root: Path, workers: int, env: dict[str, str], cap: str, samples: int, interval_s: float
) -> list[Figures]:
    stack = start_engine(root, worker_concurrency=workers, extra_env=env)
    get_settings.cache_clear()  # this process now talks to this engine (its URLs are new)
    queue._client.clear()  # the Celery client keeps the broker URL it was made with
    try:
        with redis.Redis.from_url(queue.broker_url()) as broker:
            latencies([submit(USER_B, plan_of("noop", 1), get_settings())])  # warm-up
            wait_until_idle(broker)
            found = [figures_of(cap, "idle", idle(samples))]
            for runs, steps in SHAPES:
                wait_until_idle(broker)
                backlog = f"{runs} runs x {steps} steps"
                seen = behind_backlog(runs, steps, samples, interval_s)
                found.append(figures_of(cap, backlog, seen))
                print(f"cap {cap}, {backlog}: {len(seen)} samples", flush=True)
    finally:
        stack.stop()
    return found


def report(figures: list[Figures], workers: int) -> None:
    """The table, each ratio against its own engine's idle figures."""
    print(f"\n{os.cpu_count()} CPUs, Python {platform.python_version()}, {workers} workers")
    phase_names = tuple(f"{name} p50" for _, _, name in PHASES)
    head = (
        "cap",
        "A's backlog",
        "n",
        "B p50 s",
        "B p95 s",
        "p50 x idle",
        "p95 x idle",
        *phase_names,
    )
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for f in figures:
        base = next(g for g in figures if g.cap == f.cap and g.backlog == "idle")
        p50, p95 = f.pct(0.5), f.pct(0.95)
        cells = (f.cap, f.backlog, str(len(f.latencies)), f"{p50:.2f}", f"{p95:.2f}")
        ratios = (f"{p50 / base.pct(0.5):.1f}", f"{p95 / base.pct(0.95):.1f}")
        spent = tuple(f"{p:.2f}" for p in f.phases)
        print("| " + " | ".join((*cells, *ratios, *spent)) + " |")


def busy_user(root: Path, step_s: float, samples: int) -> list[Figures]:
    """Issue 27's scenario on 1 worker process, cap at its default: A submits 4 runs of 3 x
    `sleep step_s`; while any of A's steps waits, B submits a one-step (`noop`) run and a run
    with no plan (planned by the worker), waits for both to end, and again, at most `samples`
    pairs. Figures for B's two kinds of run, idle (before A) and behind A."""
    env = {"AGENTQ_EMBEDDING_PROVIDER": "hash"}
    with settings_here(env):
        stack = start_engine(root, worker_concurrency=1, extra_env=env)
        get_settings.cache_clear()
        queue._client.clear()
        try:
            return _busy(step_s, samples)
        finally:
            stack.stop()


def _pair(settings: Settings) -> tuple[int, int]:
    """B's one-step run and B's run with no plan, submitted together, once both ended."""
    one = submit(USER_B, plan_of("noop", 1), settings)
    request = RunRequest(user_id=USER_B, goal="answer one question", plan=None)
    planned = submissions.submit(request, settings=settings).run_id
    latencies([one, planned])
    return one, planned


def _busy(step_s: float, samples: int) -> list[Figures]:
    settings = get_settings()
    _pair(settings)  # warm-up
    idle_pairs = [_pair(settings) for _ in range(3)]
    a_runs = [submit(USER_A, plan_of("sleep", 3, seconds=step_s), settings) for _ in range(4)]
    pairs: list[tuple[int, int]] = []
    while len(pairs) < samples and a_waiting(a_runs):
        pairs.append(_pair(settings))
        print(f"B pair {len(pairs)}: {latencies(list(pairs[-1]))}", flush=True)
    latencies(a_runs)
    return [
        Figures("1 worker", "idle, 1-step run", latencies([p[0] for p in idle_pairs])),
        Figures("1 worker", "idle, no plan", latencies([p[1] for p in idle_pairs])),
        Figures("1 worker", f"A 4 x 3 x {step_s:g} s, 1-step", latencies([p[0] for p in pairs])),
        Figures("1 worker", f"A 4 x 3 x {step_s:g} s, no plan", latencies([p[1] for p in pairs])),
    ]


def report_busy(figures: list[Figures]) -> None:
    """B's p50 and p99 in the busy-user scenario."""
    print(f"\n{os.cpu_count()} CPUs, Python {platform.python_version()}, 1 worker process")
    print("| B's run | n | p50 s | p99 s | max s |\n|---|---|---|---|---|")
    for f in figures:
        p50, p99 = f.pct(0.5), f.pct(0.99)
        print(
            f"| {f.backlog} | {len(f.latencies)} | {p50:.2f} | {p99:.2f} | {max(f.latencies):.2f} |"
        )


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workers", type=int, default=2, help="steps worker processes")
    parser.add_argument("--samples", type=int, default=12, help="B runs per configuration")
    parser.add_argument("--interval", type=float, default=0.5, help="s between B's submits")
    parser.add_argument("--data-dir", type=Path, default=None, help="kept; default: temp dirs")
    parser.add_argument(
        "--busy", action="store_true", help="issue 27's scenario instead (1 worker, B's p50/p99)"
    )
    parser.add_argument("--step-s", type=float, default=15.0, help="A's steps with --busy, s")
    return parser.parse_args()


def main() -> None:
    """Both engines, one after the other; print the figures."""
    args = parse_args()
    if args.busy:
        root = args.data_dir or Path(tempfile.mkdtemp(prefix="aq-"))
        root.mkdir(parents=True, exist_ok=True)
        report_busy(busy_user(root, args.step_s, args.samples))
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
        return
    figures: list[Figures] = []
    for cap in CAPS:
        root = (args.data_dir / cap[1]) if args.data_dir else Path(tempfile.mkdtemp(prefix="aq-"))
        root.mkdir(parents=True, exist_ok=True)
        try:
            figures += measure_engine(root, args.workers, cap, args.samples, args.interval)
        finally:
            if args.data_dir is None:
                shutil.rmtree(root, ignore_errors=True)
    report(figures, args.workers)


if __name__ == "__main__":
    main()
