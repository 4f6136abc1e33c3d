"""`/healthz` (the process answers) and `/readyz` (the database and the broker answer too).

Both are open to anyone, like the OpenAPI spec: a load balancer or an orchestrator probes them
without a token, and they say nothing about any run. `/readyz` answers within
`READY_TIMEOUT_S` even when a service accepts connections but never answers (a paused Redis or
Postgres: without a deadline the probe hung for minutes). Each check runs in its own daemon
thread, at most one per check at a time: a probe that finds the previous one still waiting waits
on it rather than starting another, so a hung service holds one thread, not one per probe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Final, Literal

import sqlalchemy as sa
import structlog
from fastapi import APIRouter, Response, status
from kombu.connection import Connection
from pydantic import BaseModel

from models.db import get_engine
from models.engine.queue import broker_url


class HealthOut(BaseModel):
    """`ok`, or what is not reachable."""

    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = {}


router = APIRouter(tags=["health"])
log = structlog.get_logger("agentq.api")
BROKER_TIMEOUT_S: Final = 2.0  # kombu's connect and socket timeouts
READY_TIMEOUT_S: Final = 3.0  # how long /readyz waits for every check together


def _first_line(exc: Exception) -> str:
    """What the unauthenticated probe says of a failure: the exception's kind only (its text
    may name hosts, sockets and paths); the whole message goes to the log."""
    log.warning("readyz.check_failed", error=f"{type(exc).__name__}: {exc}")
    return f"not reachable ({type(exc).__name__}); see the API's log"


def database_problem() -> str | None:
    """Why the database does not answer `SELECT 1`, or None when it does."""
    try:
        with get_engine().connect() as connection:
            connection.execute(sa.text("SELECT 1"))
    except Exception as exc:  # any failure means "not ready"; a probe must not raise
        return _first_line(exc)
    return None


def broker_problem() -> str | None:
    """Why the broker cannot be connected to, or None when it can."""
    timeouts = {"socket_timeout": BROKER_TIMEOUT_S, "socket_connect_timeout": BROKER_TIMEOUT_S}
    try:
        connection = Connection(  # type: ignore[no-untyped-call]
            broker_url(), connect_timeout=BROKER_TIMEOUT_S, transport_options=timeouts
        )
        with connection:
            connection.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)  # type: ignore[no-untyped-call]
    except Exception as exc:  # as above: report, never raise
        return _first_line(exc)
    return None


class Probe:
    """One check (a function returning a problem or None, never raising) run in a daemon thread,
    at most one run at a time."""

    def __init__(self, name: str, check: Callable[[], str | None]) -> None:
        self.name = name
        self.check = check
        self._running: Future[str | None] | None = None
        self._lock = threading.Lock()

    def start(self) -> Future[str | None]:
        """The running check's future: the one still running, or a new one."""
        with self._lock:
            if self._running is None or self._running.done():
                self._running = Future()
                thread = threading.Thread(
                    target=self._run, args=(self._running,), name=f"readyz-{self.name}", daemon=True
                )
                thread.start()
            return self._running

    def _run(self, future: Future[str | None]) -> None:
        future.set_result(self.check())


PROBES: Final = (Probe("database", database_problem), Probe("broker", broker_problem))


def ready_checks(timeout_s: float = READY_TIMEOUT_S) -> dict[str, str]:
    """Each check's problem or "ok", within `timeout_s` seconds in all (the checks run at once);
    one that has not answered by then is reported as such."""
    deadline = time.monotonic() + timeout_s
    running = {probe.name: probe.start() for probe in PROBES}
    checks = {}
    for name, future in running.items():
        try:
            checks[name] = future.result(max(0.0, deadline - time.monotonic())) or "ok"
        except TimeoutError:
            checks[name] = f"no answer within {timeout_s:g} s"
    return checks


@router.get("/healthz", response_model=HealthOut, summary="The process is alive")
def healthz() -> HealthOut:
    """Always `ok` while the process serves requests."""
    return HealthOut(status="ok")


@router.get(
    "/readyz",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "The database or the broker is down."}},
    summary="The database and the broker are reachable",
)
def readyz(response: Response) -> HealthOut:
    """`ok` when the database answers and the broker accepts a connection; 503 naming what
    does not otherwise, within `READY_TIMEOUT_S` seconds."""
    checks = ready_checks()
    if all(v == "ok" for v in checks.values()):
        return HealthOut(status="ok", checks=checks)
    response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return HealthOut(status="unavailable", checks=checks)
