"""The request body limit: a body over `BODY_MAX_BYTES` is refused with 413 before it is read whole.

A declared `Content-Length` over the limit is answered at once, before the app runs or a byte of
the body is read; a body without one (`Transfer-Encoding: chunked`) is counted as it streams in,
and the read that crosses the limit raises `HTTPException(413)`, which `api.errors` answers with
the JSON refusal. (FastAPI's own `max_body_size` answers plain text when the route does not read
the body, so it is not used.)
"""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import KIND_OF_STATUS, error_body

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
