"""agentq's errors as HTTP responses: one JSON body, `{"detail": "...", "error": "Kind"}`.

`InvalidInput`, `InvalidPlan` -> 400; `NotFound` -> 404; a guarded transition that found its row
in another state (`IllegalTransition`: a second decision, a run already ended) and
`ClaimedByAnother` -> 409, with nothing changed (the transaction rolled back);
`BrokerUnavailable`, `DatabaseError`, `ConfigurationError` (the server's settings) and a wait
for a pooled database connection that timed out -> 503.
FastAPI's own refusals (401, 403, 404 of an unknown path) get the same body. Messages are
agentq's own, which name the field and what is allowed; they never quote a request header.
"""

from __future__ import annotations

from http import HTTPStatus

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from models.errors import (
    AgentqError,
    BrokerUnavailable,
    ClaimedByAnother,
    ConfigurationError,
    DatabaseError,
    IllegalTransition,
    InvalidInput,
    InvalidPlan,
    NotFound,
)

STATUS_OF: dict[type[AgentqError], int] = {
    InvalidInput: 400,
    InvalidPlan: 400,
    ConfigurationError: 503,
    NotFound: 404,
    IllegalTransition: 409,
    ClaimedByAnother: 409,
    BrokerUnavailable: 503,
    DatabaseError: 503,
}
REFUSALS = {
    400: "bad input: the message names the field and what is allowed",
    401: "no valid bearer token",
    403: "the token's role may not do this",
    404: "no such row (or not yours)",
    409: "the row is in another state; nothing was changed",
}


def status_of(exc: AgentqError) -> int:
    """The HTTP status of an agentq error (the nearest listed base class; else 500)."""
    for cls in type(exc).__mro__:
        if cls in STATUS_OF:
            return STATUS_OF[cls]
    return 500


def error_body(status: int, detail: str, kind: str) -> JSONResponse:
    """The JSON refusal every error shares."""
    return JSONResponse(status_code=status, content={"detail": detail, "error": kind})


async def _agentq_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AgentqError)
    return error_body(status_of(exc), str(exc), type(exc).__name__)


async def _pool_timeout(_request: Request, _exc: Exception) -> JSONResponse:
    return error_body(
        503, "database busy: no connection came free in time; try again", "DatabaseBusy"
    )


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    response = error_body(exc.status_code, str(exc.detail), HTTPStatus(exc.status_code).phrase)
    response.headers.update(exc.headers or {})
    return response


def install_error_handlers(app: FastAPI) -> None:
    """Map every `AgentqError` and HTTP refusal to its status and the JSON body."""
    app.add_exception_handler(AgentqError, _agentq_error)
    app.add_exception_handler(HTTPException, _http_error)
    # More requests than pooled connections wait for one (SQLAlchemy's pool timeout), then get
    # this: the load is too high, which is not a server bug.
    app.add_exception_handler(sqlalchemy.exc.TimeoutError, _pool_timeout)
