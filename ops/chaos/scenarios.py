"""The fault suite's scenarios, and running one on a fresh embedded engine.

`run(scenario, runs=..., workers=...)` starts the fake provider and an engine on a temp dir
(`ops.bench.harness.engine`: embedded Postgres and Redis, the steps worker, the scheduler with
beat) at default settings unless the scenario says otherwise, submits the workload
(`ops.chaos.workload`), drives the fault (`ops.chaos.faults`) until every run has ended and
remembered (or `timeout_s` passes), and judges it (`ops.chaos.verdict`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlmodel import col, select

from models.db import session_scope
from models.memory.memory_admin import memory_ended
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Run
from ops.bench.harness import engine
from ops.chaos import duplicates, faults
from ops.chaos.verdict import Verdict, judge
from ops.chaos.workload import engine_env, plan_for, submit_runs, unit_of
from ops.fake_provider import FakeOpenAI, rate_limited
from ops.local import engine_env as process_env

POLL_S = 0.2
MODEL_LATENCY_S = 1.0  # each model call's time at the fake provider: the workload lasts
REFUSED = ("event='execute_step.skipped'", "event='phase.skipped'")  # worker log lines
RETRY_AFTER_S = 45.0  # the rate-limit scenario's retry-after, over its visibility timeout
# The rate-limit scenario's ladder, shrunk so a retry-after can outlast the visibility timeout
# in a minute: 2 x 2 < 8 < 10 < 12 (+ lease 10) < visibility 30 s.
SHORT_VISIBILITY = {
    "AGENTQ_MODEL_REQUEST_TIMEOUT_S": "2",
    "AGENTQ_MODEL_MAX_ATTEMPTS": "2",
    "AGENTQ_STEP_TIME_LIMIT_S": "8",
    "AGENTQ_SOFT_TIME_LIMIT_S": "10",
    "AGENTQ_HARD_TIME_LIMIT_S": "12",
    "AGENTQ_VISIBILITY_TIMEOUT_S": "30",
}


@dataclass(frozen=True)
class Scenario:
    """A fault and what it needs: its driver, settings, every message published twice, and
    one 429 (retry-after `RETRY_AFTER_S`) for each run's first model step."""

    name: str
    driver: faults.Driver
    what: str
    env: dict[str, str] = field(default_factory=dict)
    twice: bool = False
    rate_limited: bool = False


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("kill-workers", faults.kill_workers, "kill -9 a worker pool process every 5 s"),
        Scenario("redis-restart", faults.restart_redis, "Redis killed, restarted empty"),
        Scenario("postgres-restart", faults.restart_postgres, "Postgres stopped, started again"),
        Scenario("duplicates", faults.none, "every task message published twice", twice=True),
        Scenario("scheduler-killed", faults.kill_scheduler, "scheduler kill -9, then two beats"),
        Scenario(
            "rate-limited",
            faults.none,
            f"429, retry-after {RETRY_AFTER_S:g} s > visibility timeout 30 s",
            env=SHORT_VISIBILITY,
            rate_limited=True,
        ),
    )
}


def run(
    scenario: Scenario,
    *,
    runs: int,
    workers: int,
    timeout_s: float,
    latency_s: float = MODEL_LATENCY_S,
    fault_after_s: float = 4.0,
    kill_every_s: float = 5.0,
    keep: bool = False,
) -> tuple[Verdict, float]:
    """Run `scenario` on `runs` runs with `workers` worker processes, each model call taking
    `latency_s`, the fault `fault_after_s` after the first submit (kills: every
    `kill_every_s`); its verdict and the seconds
    from the first submit to the last run remembered. `keep`: leave the data dir (its logs)."""
    root = Path(tempfile.mkdtemp(prefix=f"agentq-chaos-{scenario.name}-"))
    effects = root / "effects.log"
    try:
        with FakeOpenAI(plans=plan_for(effects)) as provider:
            provider.latency_s = latency_s
            env = engine_env(provider, scenario.env)
            if scenario.twice:
                env["PYTHONPATH"] = os.pathsep.join([str(duplicates.TWICE_DIR), env["PYTHONPATH"]])
            with engine(root, workers, env) as eng, _publishing_twice(scenario.twice):
                settings = get_settings()
                if scenario.rate_limited:
                    for n in range(runs):
                        provider.script(
                            rate_limited(f"{RETRY_AFTER_S:g}"), when=f"chaos-{n}/step-1"
                        )
                began = time.time()
                ids = submit_runs(runs, settings)
                ctx = faults.Context(
                    stack=eng.stack,
                    provider=provider,
                    runs=ids,
                    done=threading.Event(),
                    env=process_env(eng.database_url, os.environ["AGENTQ_BROKER_URL"], env),
                    fault_after_s=fault_after_s,
                    kill_every_s=kill_every_s,
                )
                driver = threading.Thread(target=scenario.driver, args=(ctx,), daemon=True)
                driver.start()
                _wait_until_remembered(list(ids.values()), timeout_s)
                took = time.time() - began
                ctx.done.set()
                driver.join(60)
                verdict = judge(ids, provider, effects, ctx.record)
                verdict.refused = refusals(eng.stack.log_path("worker"))
                if scenario.rate_limited:
                    verdict.paid_twice += early_calls(provider, RETRY_AFTER_S)
            return verdict, took
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _publishing_twice(on: bool) -> Iterator[None]:
    """This process publishes every task message twice for the block, when `on`."""
    if not on:
        yield
        return
    restore = duplicates.publish_twice()
    try:
        yield
    finally:
        restore()


def _wait_until_remembered(run_ids: list[int], timeout_s: float) -> None:
    """Until every run has ended and its memory task too (`memory_ended`), or `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    waiting = set(run_ids)
    while waiting and time.monotonic() < deadline:
        try:
            with session_scope() as session:
                ended = session.execute(
                    select(col(Run.id)).where(
                        col(Run.id).in_(waiting),
                        col(Run.status).in_(list(RUN_TERMINAL)),
                    )
                ).scalars()
                waiting -= {r for r in ended if memory_ended(session, r) is not None}
        except Exception:
            pass
        time.sleep(POLL_S)


def early_calls(provider: FakeOpenAI, retry_after_s: float) -> list[str]:
    """Each unit asked again before its 429's retry-after had passed (1 s of slack)."""
    first_429: dict[str, float] = {}
    early = []
    for request in provider.received():
        unit = unit_of(request)
        if unit is None:
            continue
        if request.reply == "rate_limited":
            first_429.setdefault(unit, request.at)
        elif unit in first_429 and request.at - first_429[unit] < retry_after_s - 1.0:
            early.append(f"{unit}: asked again {request.at - first_429[unit]:.1f} s after a 429")
    return early


def refusals(worker_log: Path) -> int:
    """How many deliveries the worker's claims turned away (`REFUSED` lines in its log)."""
    text = worker_log.read_text(errors="replace")
    return sum(text.count(line) for line in REFUSED)
