"""The HTTP API over real HTTP: uvicorn (the process `agentq up` starts) on a free 127.0.0.1
port, against the session's embedded engine, with tokens made through the model layer."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlmodel import select

from models.access import api_tokens
from models.db import session_scope
from models.tables import Escalation, Run
from ops.local import start_api
from ops.stack import LocalStack
from tests.integration.conftest import wait_for_run
from tests.support.net import free_port

MakeToken = Callable[..., str]
Client = Callable[[str | None], httpx.Client]


@pytest.fixture(scope="session")
def api_url(engine: LocalStack) -> str:
    """Base URL of the API server, a child process of the engine (stopped with it)."""
    return start_api(engine, host="127.0.0.1", port=free_port())


@pytest.fixture(scope="session")
def make_token(engine: LocalStack) -> MakeToken:
    """`make_token(role, user=None, name=None)`: a new token's raw value."""

    def make(role: str, user: str | None = None, name: str | None = None) -> str:
        with session_scope() as session:
            _, raw = api_tokens.create_token(
                session, name=name or f"{role}-{uuid.uuid4().hex[:8]}", role=role, user_id=user
            )
        return raw

    return make


@pytest.fixture(scope="session")
def tokens(make_token: MakeToken) -> dict[str, str]:
    """One token per role, a second reviewer, and two submitters (users alice-*, bob-*)."""
    suffix = uuid.uuid4().hex[:6]
    return {
        "admin": make_token("admin", name="ada"),
        "reviewer": make_token("reviewer", name="rita"),
        "reviewer2": make_token("reviewer", name="ralf"),
        "alice": make_token("submitter", user=f"alice-{suffix}", name="alice"),
        "bob": make_token("submitter", user=f"bob-{suffix}", name="bob"),
    }


@pytest.fixture(scope="session")
def client(api_url: str, tokens: dict[str, str]) -> Iterator[Client]:
    """`client("alice")`: an HTTP client sending that token (None: no token, or a raw token)."""
    opened: list[httpx.Client] = []

    def make(who: str | None) -> httpx.Client:
        token = tokens.get(who or "", who)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        http = httpx.Client(base_url=api_url, headers=headers, timeout=60, trust_env=False)
        opened.append(http)
        return http

    yield make
    for http in opened:
        http.close()


def user_of(client: Client, who: str) -> str:
    """The agentq user a submitter token acts for (from `/api/v1/me`)."""
    me = client(who).get("/api/v1/me").json()
    return str(me["user_id"])


def noop(name: str) -> dict[str, Any]:
    return {"name": name, "kind": "tool", "tool": "noop", "args": {}}


@pytest.fixture
def escalated(client: Client) -> Callable[..., tuple[int, int]]:
    """`escalated(tool="flaky")`: submit (as admin) a run whose second step fails with no replan
    budget, wait until it waits for review; returns (run id, escalation id)."""

    def make(tool: str = "always_fails", user: str = "reviewed") -> tuple[int, int]:
        failing = {"name": "x", "kind": "tool", "tool": tool, "args": {}}
        if tool == "flaky":
            failing["args"] = {"fail_times": 1}
        body = {"goal": "escalate", "user": user, "plan": {"steps": [noop("a"), failing]}}
        body["budgets"] = {"replans": 0}
        response = client("admin").post("/api/v1/runs", json=body)
        assert response.status_code == 201, response.text
        run_id = response.json()["run"]["id"]
        assert wait_for_run(run_id).status == "waiting_review"
        return run_id, open_escalation(run_id)

    return make


def open_escalation(run_id: int, timeout_s: float = 10) -> int:
    """The id of the run's undecided escalation (waits for it briefly)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            found = session.exec(
                select(Escalation).where(
                    Escalation.run_id == run_id, Escalation.status != "decided"
                )
            ).first()
        if found is not None:
            return found.id or 0
        assert time.monotonic() < deadline, f"run {run_id} has no open escalation"
        time.sleep(0.1)


def wait_for_event(run_id: int, kinds: tuple[str, ...], timeout_s: float = 60) -> None:
    """Wait until the run's timeline has an event of one of `kinds`."""
    from models.tables import RunEvent

    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            stmt = select(RunEvent).where(RunEvent.run_id == run_id)
            if any(e.kind in kinds for e in session.exec(stmt)):
                return
        assert time.monotonic() < deadline, f"run {run_id} has no event {kinds}"
        time.sleep(0.2)


def snapshot(run_id: int) -> dict[str, Any]:
    """Every row of the run that a decision could change, as plain data."""
    from models.tables import PlanVersion, RunEvent, Step

    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        rows: dict[str, Any] = {"run": run.model_dump()}
        for name, model in (
            ("escalations", Escalation),
            ("versions", PlanVersion),
            ("steps", Step),
        ):
            stmt = select(model).where(model.run_id == run_id)  # type: ignore[attr-defined]
            rows[name] = sorted((r.model_dump() for r in session.exec(stmt)), key=str)
        # memory.* events are written later by the worker; run and escalation events are ours
        events = session.exec(select(RunEvent).where(RunEvent.run_id == run_id))
        rows["events"] = sorted(
            (e.model_dump() for e in events if e.kind.startswith(("run.", "escalation."))), key=str
        )
    return rows


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each schemathesis operation test (tests/api/test_schema.py) its own node id:
    schemathesis names them `test_no_server_errors[POST /api/v1/runs]` and so on but gives them
    all the function's node id, and pytest-xdist schedules by node id, so it ran only one."""
    for item in items:
        name = item.nodeid.rpartition("::")[2]
        if name != item.name and item.name.startswith(name + "[") and item.parent is not None:
            item._id = item.parent.id.child(item.name)  # pytest 9: the node id's structured form
