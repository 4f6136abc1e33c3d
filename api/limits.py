"""Limits on requests: a body over `BODY_MAX_BYTES` is refused with 413 before it is read whole,
and a query parameter that is unknown or given twice is refused with 422 (`query_as_declared`).

A declared `Content-Length` over the limit is answered at once, before the app runs or a byte of
the body is read; a body without one (`Transfer-Encoding: chunked`) is counted as it streams in,
and the read that crosses the limit raises `HTTPException(413)`, which `api.errors` answers with
the JSON refusal. (FastAPI's own `max_body_size` answers plain text when the route does not read
the body, so it is not used.)
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Final

from fastapi import FastAPI, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import AnyPrincipal
from api.errors import KIND_OF_STATUS, error_body

_PLAIN_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
BODY_MAX_BYTES: Final = 1024 * 1024
"""1 MiB. The largest legitimate body is a plan of a few hundred steps, tens of kilobytes; a
50 MB plan was once accepted, grew the API process to 840 MB while it was parsed and stored, and
made every later read of that run return 150 MB. Raise it here if real plans outgrow it."""


def too_large() -> HTTPException:
    """The 413 of a body over the limit."""
    return HTTPException(413, detail=f"request body over {BODY_MAX_BYTES} bytes is not accepted")


class BodyLimit:
    """ASGI middleware: 413 for an HTTP request whose body is over `max_bytes`."""

    def __init__(self, app: ASGIApp, max_bytes: int = BODY_MAX_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            refusal = too_large()
            await error_body(413, str(refusal.detail), KIND_OF_STATUS[413])(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise too_large()
            return message

        await self.app(scope, counted, send)


def install(app: FastAPI) -> None:
    """Refuse request bodies over `BODY_MAX_BYTES` in `app` (every route, the web UI's too)."""
    app.add_middleware(BodyLimit)


def query_as_declared(request: Request, _principal: AnyPrincipal) -> None:
    """FastAPI dependency of the `/api/v1` routes: refuse (422, a field error naming each) a
    query parameter the operation does not take, or one given more than once. FastAPI would
    silently ignore the first and take the last of `?user=a&user=b`: requests the spec does not
    allow (no parameter of the API is a list), which must not be answered as if they were
    right. It runs after authentication (`_principal`): without a token the answer is 401."""
    route = request.scope.get("route")
    declared = _query_names(route.dependant) if isinstance(route, APIRoute) else None
    counts = Counter(key for key, _ in request.query_params.multi_items())
    errors = [
        {"loc": _query_loc(key), "msg": "given more than once; give it once", "type": "repeated"}
        for key, n in sorted(counts.items())
        if n > 1
    ]
    if declared is not None:
        errors += [
            {"loc": _query_loc(key), "msg": "not a parameter of this operation", "type": "unknown"}
            for key in sorted(set(counts) - declared)
        ]
    if errors:
        raise RequestValidationError(errors)


def _query_loc(key: str) -> tuple[str, ...]:
    """Where a refused query parameter is: its name when it reads as one (a refusal never
    echoes arbitrary input, `api.errors`), else only `query`."""
    return ("query", key) if _PLAIN_NAME.fullmatch(key) else ("query",)


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters an operation takes, its dependencies' included."""
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names
