"""Submit quotas over real HTTP: 429 with `Retry-After` on the rate limit and on the active-run
limit, nothing written, and concurrent submits of one user counted one at a time.

These need small limits, so this module makes the stack's AGENTQ_USER_MAX_ACTIVE_RUNS 3 and
AGENTQ_USER_SUBMITS_PER_MINUTE 5 (`models.engine.stack_limits`), while the session API's own
environment keeps TEST_ENV's (off): the stack's apply.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from httpx import Client as Http
from sqlmodel import col

from models.db import session_scope
from models.engine import stack_limits
from models.settings import get_settings
from models.states import RUN_ACTIVE
from models.tables import Run, RunEvent
from tests.api.conftest import MakeToken, noop

pytestmark = pytest.mark.integration
MAX_ACTIVE, PER_MINUTE = 3, 5
FAILS = {"name": "x", "kind": "tool", "tool": "always_fails", "args": {}}


@pytest.fixture(scope="module")
def quota_url(api_url: str) -> Iterator[str]:
    """The session's API, whose own environment turns the quotas off (TEST_ENV), with the
    stack's quotas made small for this module as the stack's owner writes them
    (`models.engine.stack_limits.publish`), then as they were: the API enforces the stack's."""
    strict = get_settings().model_copy(
        update={"user_max_active_runs": MAX_ACTIVE, "user_submits_per_minute": PER_MINUTE}
    )
    with session_scope() as session:
        stack_limits.publish(session, strict, by="tests/api/test_quotas.py")
    yield api_url
    with session_scope() as session:
        stack_limits.publish(session, get_settings(), by="agentq up (tests)")


@pytest.fixture
def submitter(quota_url: str, make_token: MakeToken) -> Iterator[tuple[str, Callable[[], Http]]]:
    """A new user, and `http()`: a new HTTP client with a submitter token acting for it. At the
    end its runs still active are cancelled: no escalation is left for tests/api/test_reviews
    to claim."""
    user = f"quota-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {make_token('submitter', user=user)}"}
    opened: list[Http] = []

    def http() -> Http:
        opened.append(Http(base_url=quota_url, headers=headers, timeout=60, trust_env=False))
        return opened[-1]

    yield user, http
    with session_scope() as session:
        active = session.scalars(
            sa.select(col(Run.id)).where(col(Run.user_id) == user, col(Run.status).in_(RUN_ACTIVE))
        ).all()
    for run_id in active:
        opened[0].post(f"/api/v1/runs/{run_id}/cancel")
    for client in opened:
        client.close()


def _body(*steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "goal": "quota",
        "plan": {"steps": list(steps or [noop("a")])},
        "budgets": {"replans": 0},
    }


def _rows(user: str) -> tuple[int, int]:
    """The user's runs, and the events of its runs."""
    ids = sa.select(col(Run.id)).where(col(Run.user_id) == user)
    with session_scope() as session:
        runs = session.scalar(sa.select(sa.func.count()).where(col(Run.id).in_(ids)))
        events = session.scalar(sa.select(sa.func.count()).where(col(RunEvent.run_id).in_(ids)))
    return int(runs or 0), int(events or 0)


def test_the_rate_limit_answers_429_with_retry_after(
    submitter: tuple[str, Callable[[], Http]],
) -> None:
    user, new_client = submitter
    http = new_client()
    for _ in range(PER_MINUTE):  # each cancelled at once: the active-run limit never applies
        created = http.post("/api/v1/runs", json=_body())
        assert created.status_code == 201, created.text
        http.post(f"/api/v1/runs/{created.json()['run']['id']}/cancel")  # 409 once it ended
    before = _rows(user)
    refused = http.post("/api/v1/runs", json=_body())
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "UserQuotaExceeded"
    assert refused.json()["detail"].startswith("AGENTQ_USER_SUBMITS_PER_MINUTE:")
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert _rows(user)[0] == before[0]  # no run written (the cancelled runs' events go on)


def test_the_active_run_limit_answers_429_with_retry_after(
    submitter: tuple[str, Callable[[], Http]],
) -> None:
    user, new_client = submitter
    http = new_client()
    for _ in range(MAX_ACTIVE):  # each waits for a reviewer: active until someone decides
        created = http.post("/api/v1/runs", json=_body(FAILS))
        assert created.status_code == 201, created.text
    before = _rows(user)
    refused = http.post("/api/v1/runs", json=_body())
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "UserQuotaExceeded"
    assert refused.json()["detail"].startswith(
        f"AGENTQ_USER_MAX_ACTIVE_RUNS: user {user!r} has {MAX_ACTIVE} runs not yet ended"
    )
    assert refused.headers["Retry-After"] == "30"
    assert _rows(user)[0] == before[0]  # no run written (the others' events go on)


def test_concurrent_submits_of_one_user_are_counted_one_at_a_time(
    submitter: tuple[str, Callable[[], Http]],
) -> None:
    user, new_client = submitter
    statuses: list[int] = []
    start = threading.Barrier(PER_MINUTE)

    def post(http: Http) -> None:
        start.wait()
        statuses.append(http.post("/api/v1/runs", json=_body(FAILS)).status_code)

    clients = [new_client() for _ in range(PER_MINUTE)]
    threads = [threading.Thread(target=post, args=(http,)) for http in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [201] * MAX_ACTIVE + [429] * (PER_MINUTE - MAX_ACTIVE)
    assert _rows(user)[0] == MAX_ACTIVE


def test_the_spec_documents_the_429(quota_url: str) -> None:
    spec = httpx.get(f"{quota_url}/openapi.json", trust_env=False).json()
    refusal = spec["paths"]["/api/v1/runs"]["post"]["responses"]["429"]
    assert "Retry-After" in refusal["headers"]
    assert refusal["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
