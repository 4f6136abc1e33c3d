"""agentq's errors as HTTP responses: one JSON body, `{"detail": "...", "error": "Kind"}`.

`InvalidInput`, `InvalidPlan` -> 400; `NotFound` -> 404; a guarded transition that found its row
in another state (`IllegalTransition`: a second decision, a run already ended),
`ClaimedByAnother` and a request that conflicts with the rows' state (`Conflict`,
`PlanConflict`) -> 409, with nothing changed (the transaction rolled back);
`BrokerUnavailable`, `DatabaseError`, `ConfigurationError` (the server's settings) and a wait
for a pooled database connection that timed out -> 503. `UserQuotaExceeded` (a user's submit
quota) and `TokenLimitExceeded` (a token's open streams or costly reads, `api.token_limits`)
-> 429 with `Retry-After` in whole seconds (RFC 9110, section 10.2.3).
FastAPI's own refusals (401, 403, 404 of an unknown path) get the same body, and so does a body
over `api.limits.BODY_MAX_BYTES` (413, `BodyTooLarge`). A body or parameter of the wrong shape is
a 422 whose `detail` is FastAPI's list of field errors, `{"detail": [...], "error":
"ValidationError"}`; each error keeps its `type`, `loc`, `msg` and `ctx` but never the `input`
(it can be a megabyte, or text that cannot be encoded: a lone surrogate). `loc` is FastAPI's path
to the field, so a bad key of an object is in it (`["body", "facts", "Cost Centre", "[key]"]`):
the key names the place, as a field's name does. A pattern's `msg` says in words what it allows
(`models.patterns.WORDS`). Messages are agentq's own, which name the field and what is allowed;
they never quote a request header.
"""

from __future__ import annotations

import math
from http import HTTPStatus
from typing import Any, Final

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.constants import REF_PREFIX
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from models.errors import (
    AgentqError,
    BrokerUnavailable,
    ClaimedByAnother,
    ConfigurationError,
    Conflict,
    DatabaseError,
    IllegalTransition,
    InvalidInput,
    InvalidPlan,
    NotAllowed,
    NotFound,
    PlanConflict,
    TokenLimitExceeded,
    UserQuotaExceeded,
)
from models.patterns import error_message

STATUS_OF: dict[type[AgentqError], int] = {
    InvalidInput: 400,
    InvalidPlan: 400,
    ConfigurationError: 503,
    NotAllowed: 403,
    NotFound: 404,
    IllegalTransition: 409,
    ClaimedByAnother: 409,
    BrokerUnavailable: 503,
    DatabaseError: 503,
    UserQuotaExceeded: 429,
    TokenLimitExceeded: 429,
    PlanConflict: 409,
    Conflict: 409,
}
REFUSALS = {
    400: "bad input: the message names the field and what is allowed",
    401: "no valid bearer token",
    403: "the token's role may not do this, or not for this user",
    404: "no such row (or not yours)",
    409: "the row is in another state, or the request conflicts with it (a new step taking a "
    "succeeded step's name, a forget of runs still active); nothing was changed",
    413: "the request body is too large (`BodyTooLarge`)",
}
# The submit route's quota refusal, for its `responses` (the body is `ErrorOut`'s).
QUOTA_REFUSAL: Final = {
    "description": "the user's submit quota refuses it for now (`UserQuotaExceeded`); nothing "
    "was written",
    "headers": {
        "Retry-After": {
            "description": "Seconds until trying again may pass.",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
}
# The submit route's refusal of an Idempotency-Key sent before with another body.
IDEMPOTENCY_REUSED: Final = {
    "description": "this Idempotency-Key was sent before with another request body "
    "(`IdempotencyKeyReused`); nothing was written: send a new key with a new request",
}
# The refusal of a token's limits (`api.token_limits`), for the `responses` of the routes they
# guard (the body is `ErrorOut`'s).
TOKEN_LIMIT_REFUSAL: Final = {
    "description": "the token holds as many event streams as it may, or made as many costly "
    "reads as it may this minute (`TokenLimitExceeded`, naming the setting); nothing was done",
    "headers": QUOTA_REFUSAL["headers"],
}
HTTP_METHODS: Final = ("GET", "POST", "PUT", "PATCH", "DELETE")  # what an API route may serve
# The `error` of refusals whose HTTP phrase differs between Python versions (3.13 renamed both).
KIND_OF_STATUS: Final = {413: "BodyTooLarge", 422: "ValidationError"}


def status_of(exc: AgentqError) -> int:
    """The HTTP status of an agentq error (the nearest listed base class; else 500)."""
    for cls in type(exc).__mro__:
        if cls in STATUS_OF:
            return STATUS_OF[cls]
    return 500


def error_body(status: int, detail: str, kind: str) -> JSONResponse:
    """The JSON refusal every error shares."""
    return JSONResponse(status_code=status, content={"detail": encodable(detail), "error": kind})


def encodable(text: str) -> str:
    """`text` with what UTF-8 cannot encode (lone surrogates) written as `\\udXXX` escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """FastAPI's field errors without their `input`, every text made encodable; `ctx` values
    that are not finite numbers become text (an exception, a pattern); a pattern's `msg` says
    in words what it allows (`models.patterns.WORDS`), and its `ctx` keeps the pattern."""
    return [
        {
            "type": error["type"],
            "loc": [
                part if isinstance(part, int) else encodable(str(part)) for part in error["loc"]
            ],
            "msg": encodable(error_message(error)),
            **({"ctx": _context(error["ctx"])} if error.get("ctx") else {}),
        }
        for error in exc.errors()
    ]


def _context(ctx: dict[str, Any]) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if isinstance(value, int | float) and math.isfinite(value):
            return value
        return encodable(str(value))

    return {encodable(str(key)): plain(value) for key, value in ctx.items()}


async def _agentq_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AgentqError)
    response = error_body(status_of(exc), str(exc), type(exc).__name__)
    if isinstance(exc, UserQuotaExceeded | TokenLimitExceeded):
        response.headers["Retry-After"] = str(exc.retry_after_s)
    return response


async def _pool_timeout(_request: Request, _exc: Exception) -> JSONResponse:
    return error_body(
        503, "database busy: no connection came free in time; try again", "DatabaseBusy"
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    kind = KIND_OF_STATUS.get(exc.status_code) or HTTPStatus(exc.status_code).phrase
    response = error_body(exc.status_code, str(exc.detail), kind)
    response.headers.update(exc.headers or {})
    if exc.status_code == 405:
        response.headers["Allow"] = ", ".join(allowed_methods(request))
    return response


def allowed_methods(request: Request) -> list[str]:
    """The methods some route serves at the request's path, in `HTTP_METHODS` order: a 405's
    `Allow` (RFC 9110, section 15.5.6). Starlette names only the first matching route's
    methods, and the API serves several methods of one path from separate routes (GET and POST
    `/runs`), some inside included routers: so each method is asked of every route."""
    routes = request.app.router.routes
    return [
        method
        for method in HTTP_METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes
        )
    ]


async def _invalid_request(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    content = {"detail": field_errors(exc), "error": KIND_OF_STATUS[422]}
    return JSONResponse(status_code=422, content=content)


def install_error_handlers(app: FastAPI) -> None:
    """Map every `AgentqError` and HTTP refusal to its status and the JSON body."""
    app.add_exception_handler(AgentqError, _agentq_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    # More requests than pooled connections wait for one (SQLAlchemy's pool timeout), then get
    # this: the load is too high, which is not a server bug.
    app.add_exception_handler(sqlalchemy.exc.TimeoutError, _pool_timeout)


def document_validation_errors(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` (an OpenAPI document, changed in place) with FastAPI's 422 schemas made to say what
    `_invalid_request` sends: an `error` beside `detail`, and no `input` in a field error.

    FastAPI puts the same `HTTPValidationError` and `ValidationError` in every spec; they are
    replaced, never edited, because FastAPI shares those dicts between apps.
    """
    schemas = spec.get("components", {}).get("schemas", {})
    if "HTTPValidationError" not in schemas:
        return spec
    field_error = {
        "title": "ValidationError",
        "type": "object",
        "properties": {
            key: value
            for key, value in schemas["ValidationError"]["properties"].items()
            if key != "input"
        },
        "required": ["loc", "msg", "type"],
    }
    schemas["ValidationError"] = field_error
    schemas["HTTPValidationError"] = {
        "title": "HTTPValidationError",
        "type": "object",
        "properties": {
            "detail": {
                "title": "Detail",
                "type": "array",
                "items": {"$ref": REF_PREFIX + "ValidationError"},
            },
            "error": {"title": "Error", "type": "string", "const": KIND_OF_STATUS[422]},
        },
        "required": ["detail", "error"],
    }
    return spec
