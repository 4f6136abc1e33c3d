"""`/healthz` (the process answers) and `/readyz` (the database and the broker answer too).

Both are open to anyone, like the OpenAPI spec: a load balancer or an orchestrator probes them
without a token, and they say nothing about any run.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from fastapi import APIRouter, Response, status
from kombu.connection import Connection

from api.responses import HealthOut
from models.db import get_engine
from models.queue import broker_url

router = APIRouter(tags=["health"])
BROKER_TIMEOUT_S: Final = 2.0


def database_problem() -> str | None:
    """Why the database does not answer `SELECT 1`, or None when it does."""
    try:
        with get_engine().connect() as connection:
            connection.execute(sa.text("SELECT 1"))
    except Exception as exc:  # any failure means "not ready"; a probe must not raise
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def broker_problem() -> str | None:
    """Why the broker cannot be connected to, or None when it can."""
    try:
        connection = Connection(broker_url(), connect_timeout=BROKER_TIMEOUT_S)  # type: ignore[no-untyped-call]
        with connection:
            connection.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_S)  # type: ignore[no-untyped-call]
    except Exception as exc:  # as above: report, never raise
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


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
    does not otherwise."""
    checks = {"database": database_problem() or "ok", "broker": broker_problem() or "ok"}
    if all(v == "ok" for v in checks.values()):
        return HealthOut(status="ok", checks=checks)
    response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    return HealthOut(status="unavailable", checks=checks)
