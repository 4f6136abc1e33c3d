"""The API's access log: one line per request with its method, its path without the query
string, its status and how long it took.

Uvicorn's own access log writes the query string, so a token sent as `?token=...` (refused, see
`api.auth`) would be written to the log whole. It is off: `ops.stack.LocalStack.uvicorn_argv`
passes `--no-access-log`, and `configure` disables the `uvicorn.access` logger too, for a
deployment that runs uvicorn without that flag. A line reads
`event='request' duration_ms=1.2 method='GET' path='/api/v1/runs' status=200` (structlog's
key=value, whose quoting also escapes a newline or control character sent in the path).
"""

from __future__ import annotations

import logging
import time

import structlog
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from models.operations.logs import configure_logging, formatter, use_formatter
from models.settings import get_settings

LOGGER_NAME = "agentq.api"
log = structlog.get_logger(LOGGER_NAME)


class AccessLog:
    """ASGI middleware: log each HTTP request once it has been answered (or has failed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # unless a response starts: an exception the server answers with a 500

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            duration_ms = round((time.perf_counter() - started) * 1000, 1)
            # `path` is the path alone: the query string is in scope["query_string"], never read
            log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                duration_ms=duration_ms,
            )


def install(app: FastAPI) -> None:
    """Log every request of `app` (add it last, so it sees the answers of other middleware)."""
    app.add_middleware(AccessLog)


def configure() -> None:
    """Make the API process write these lines (INFO, to stderr beside uvicorn's own, unless the
    root logger has handlers already) and silence uvicorn's access log, which has query
    strings."""
    configure_logging()
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(formatter(get_settings().log_format))
        logger.addHandler(handler)
        logger.propagate = False
    logging.getLogger("uvicorn.access").disabled = True
    if get_settings().log_format == "json":  # uvicorn's own lines too
        for name in ("uvicorn", "uvicorn.error"):
            use_formatter(logging.getLogger(name), formatter("json"))
