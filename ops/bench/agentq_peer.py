"""The agentq side of the engine benchmark: runs with explicit plans, submitted as users do.

Each run is submitted with an explicit plan by `models.engine.submissions.submit`, the path of
`agentq run submit --plan` and the HTTP API: its first steps are queued in the submit transaction
and sent after the commit, with no coordinator task. A load test of one user: its submits are not
limited (AGENTQ_USER_MAX_ACTIVE_RUNS and AGENTQ_USER_SUBMITS_PER_MINUTE are 0 for this process's
submits); the dispatch cap, AGENTQ_USER_MAX_RUNNING_STEPS, is the engine's (default 4), so the
figure is one user's throughput as deployed. A worker that ends a step runs the next one in-process
(`worker.execution.steps.finish`) or hands it to the queue, and a run ends with its synthesis (an
offline-provider model call) and a memory task: they count as overhead, not as steps.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.engine import submissions
from models.engine.submissions import RunRequest
from models.errors import InvalidPlan
from models.plans.plans import MAX_PLAN_STEPS, PlanSpec, parse_plan
from models.settings import get_settings
from models.tables import Run, Step
from ops.bench.harness import POLL_INTERVAL_S, BenchError

TIMEOUT_S = 600.0
LATENCY_POLL_S = 0.01  # one run at a time: poll often, so the next submit waits little
BENCH_USER = "bench"
BAD_RUN_STATUSES = frozenset({"failed", "cancelled", "waiting_review"})


def plan_of(
    steps: int, *, tool: str = "noop", parallel: bool = False, args: dict[str, Any] | None = None
) -> PlanSpec:
    """A plan of `steps` steps of `tool` with `args`, named s0, s1, ...; with `parallel`, each
    step has `"after": []` (it waits for none: all may run at once, DESIGN.md invariant 12).
    Raises `BenchError` if agentq refuses the plan (too many steps, or `after` unsupported)."""
    if not 1 <= steps <= MAX_PLAN_STEPS:
        raise BenchError(f"agentq plans have 1 to {MAX_PLAN_STEPS} steps, not {steps}")
    data: list[dict[str, Any]] = [
        {"name": f"s{i}", "kind": "tool", "tool": tool, "args": dict(args or {})}
        for i in range(steps)
    ]
    if parallel:
        data = [{**step, "after": []} for step in data]
    try:
        return parse_plan({"steps": data}, tools=[tool])
    except InvalidPlan as exc:
        hint = " (independent steps need plans with `after`, issue 10)" if parallel else ""
        raise BenchError(f"agentq refused the benchmark plan{hint}: {exc}") from exc


def submit(plan: PlanSpec, user: str = BENCH_USER) -> int:
    """Submit one run with `plan` for `user` (`models.engine.submissions.submit`, this process's
    submit quotas off; a stack's own limits still apply: `models.engine.stack_limits`); the run
    id. Raises `BenchError` if its first messages could not be sent."""
    unlimited = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    request = RunRequest(user_id=user, goal="benchmark", plan=plan)
    submitted = submissions.submit(request, settings=unlimited)
    if not submitted.notified:
        raise BenchError(f"run {submitted.run_id}: the broker did not take its first messages")
    return submitted.run_id


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


def wait_for_runs(run_ids: list[int], poll_s: float = POLL_INTERVAL_S) -> float:
    """Poll every `poll_s` until every run succeeded; the newest `finished_at` (epoch s).
    Raises `BenchError` if one ends otherwise or `TIMEOUT_S` passes."""
    deadline = time.monotonic() + TIMEOUT_S
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts, newest = run_states(run_ids)
        if BAD_RUN_STATUSES & counts.keys():
            raise BenchError(f"agentq runs did not succeed: {counts} (runs {run_ids[0]}..)")
        if counts.get("succeeded") == len(run_ids):
            return newest
        time.sleep(poll_s)
    raise BenchError(f"agentq runs not done after {TIMEOUT_S:g} s: {counts}")


def agentq_round(plans: int, plan: PlanSpec, users: int = 1) -> float:
    """Seconds for `plans` runs of `plan`, from the first submit to the newest
    `runs.finished_at`, found by polling Postgres every `POLL_INTERVAL_S`. With several `users`
    (`bench-0`, `bench-1`, ...) the runs go to each in turn."""
    start = time.time()
    names = [BENCH_USER] if users == 1 else [f"{BENCH_USER}-{i}" for i in range(users)]
    run_ids = [submit(plan, names[i % users]) for i in range(plans)]
    return wait_for_runs(run_ids) - start


def one_at_a_time(runs: int, plan: PlanSpec) -> list[int]:
    """Submit `runs` runs of `plan`, each after the one before has succeeded; their ids."""
    run_ids = []
    for _ in range(runs):
        run_ids.append(submit(plan))
        wait_for_runs(run_ids[-1:], poll_s=LATENCY_POLL_S)
    return run_ids


def dispatch_latencies(run_ids: list[int]) -> dict[str, list[float]]:
    """`steps.started_at - steps.queued_at` (seconds) of the steps of `run_ids`, as `{"all":
    [...], "first": [...] (each run's first step), "later": [...]}`. `queued_at` is when the
    step became `queued` (its message is sent after that commit); `started_at` when a worker
    claimed it. And `"submitted"`: each run's first step's `started_at - runs.created_at`, the
    whole wait from the submit (its first decision and dispatch included) to the first start."""
    stmt = select(Step.position, Step.queued_at, Step.started_at, Run.created_at).where(
        col(Step.run_id).in_(run_ids), col(Step.run_id) == col(Run.id)
    )
    with session_scope() as session:
        rows = session.exec(stmt).all()
    found: dict[str, list[float]] = {"all": [], "first": [], "later": [], "submitted": []}
    for position, queued, started, created in rows:
        if isinstance(queued, datetime) and isinstance(started, datetime):
            seconds = (started - queued).total_seconds()
            found["all"].append(seconds)
            found["first" if position == 0 else "later"].append(seconds)
            if position == 0:
                found["submitted"].append((started - created).total_seconds())
    return found
