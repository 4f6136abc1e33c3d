"""The broker killed and started again empty on the real engine (issue 11): every message it
held is gone, and the reconciler's broker epoch (`models.engine.queue.broker_restarted`) tells that
from a long queue, so every run in flight ends within 30 s of Redis coming back, not after the
stale times (here the defaults, 60 s and 120 s) have passed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import queue, submissions
from models.engine.submissions import RunRequest
from models.plans.plans import parse_plan
from models.settings import get_settings
from models.tables import Step
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, other_engine, wait_for_run

pytestmark = pytest.mark.integration
RECOVERY_S = 30.0  # issue 11's target
RUNS = 6  # on 2 worker processes: 4 steps' messages wait in Redis when it is killed
SLEEP_S = 3.0


@pytest.fixture(scope="module")
def restart_engine() -> Iterator[LocalStack]:
    env = {
        **TEST_ENV,
        "AGENTQ_EMBEDDING_PROVIDER": "hash",
        "AGENTQ_QUEUED_STALE_S": "60",
        "AGENTQ_PHASE_STALE_S": "120",
    }
    with other_engine(env, worker_concurrency=2) as stack:
        yield stack


def _sleep_run() -> int:
    step = {"name": "slow", "kind": "tool", "tool": "sleep", "args": {"seconds": SLEEP_S}}
    plan = parse_plan({"steps": [step]}, tools=["sleep"])
    user = f"restart-{uuid.uuid4().hex[:8]}"
    submitted = submissions.submit(
        RunRequest(user_id=user, goal="sleep", plan=plan), settings=get_settings()
    )
    assert submitted.notified
    return submitted.run_id


def _statuses(run_ids: list[int]) -> list[str]:
    with session_scope() as session:
        stmt = select(Step.status).where(col(Step.run_id).in_(run_ids))
        return list(session.exec(stmt))


def test_runs_in_flight_end_soon_after_the_broker_came_back_empty(
    restart_engine: LocalStack,
) -> None:
    key = f"agentq:test-epoch-{uuid.uuid4().hex[:8]}"
    assert queue.broker_restarted(key) is True
    run_ids = [_sleep_run() for _ in range(RUNS)]
    deadline = time.monotonic() + 30
    while _statuses(run_ids).count("running") < 2:  # the rest wait in the broker
        assert time.monotonic() < deadline, f"steps not running: {_statuses(run_ids)}"
        time.sleep(0.1)
    assert _statuses(run_ids).count("queued") >= 2
    restart_engine.kill_redis()
    time.sleep(1)
    restart_engine.start_redis()
    back = time.monotonic()
    assert queue.broker_restarted(key) is True  # the key went with the rest
    for run_id in run_ids:
        left_s = max(0.0, RECOVERY_S - (time.monotonic() - back))
        assert wait_for_run(run_id, timeout_s=left_s).status == "succeeded"
