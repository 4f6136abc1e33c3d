"""The review console: server-rendered pages for runs and the review queue, mounted at `/ui`.

`install(app)` mounts it on the API app as a sub-application with its own sessions (server-side
rows, `api.ui.security`), CSRF check and HTML error pages, so the JSON API's bearer-token
requests never meet a cookie. The API app's middleware (`api.headers`) gives its pages their
Content-Security-Policy, `X-Frame-Options: DENY` and `Cache-Control: no-store`.
Pages: `/ui/login`, `/ui/runs`, `/ui/runs/{id}`, `/ui/reviews` (the inbox), `/ui/reviews/{id}`,
`/ui/webhooks` (the webhook delivery log, `api.ui.webhooks`), `/ui/schedules` (goals on a
schedule, `api.ui.schedules`); the live streams
`/ui/runs/{id}/events/stream` and `/ui/reviews/stream` (`api.ui.live`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from api.errors import status_of
from api.ui import live, reviews, runs, schedules, signin, webhooks
from api.ui.security import (
    SESSION_COOKIE,
    ConsoleConfig,
    CsrfRefused,
    Forbidden,
    SignInRequired,
    check_csrf,
    forget_cookie,
)
from api.ui.templating import base_path, render
from models.errors import AgentqError, NotFound, TokenLimitExceeded
from models.settings import Settings, get_settings

UI_PREFIX: Final = "/ui"
STATIC_DIR: Final = Path(__file__).parent / "static"


def create_ui(settings: Settings | None = None) -> FastAPI:
    """The console as an app of its own, to be mounted at `UI_PREFIX` (its cookies' path is
    where it is mounted)."""
    settings = settings or get_settings()
    ui = FastAPI(
        title="agentq review console",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        dependencies=[Depends(check_csrf)],
    )
    ui.state.console = ConsoleConfig.from_settings(settings)
    ui.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    # `live` before `reviews`: /reviews/stream is no escalation id
    for module in (signin, live, runs, reviews, webhooks, schedules):
        ui.include_router(module.router)
    ui.add_exception_handler(SignInRequired, _sign_in_first)
    ui.add_exception_handler(Forbidden, _refused)
    ui.add_exception_handler(CsrfRefused, _refused)
    ui.add_exception_handler(NotFound, _not_found)
    ui.add_exception_handler(AgentqError, _failed)
    ui.add_exception_handler(HTTPException, _http_error)
    ui.add_exception_handler(RequestValidationError, _not_found)  # /ui/runs/abc
    return ui


def install(app: FastAPI) -> None:
    """Mount the console on `app` at `/ui`; `/` sends browsers there unless the API uses it."""
    app.mount(UI_PREFIX, create_ui(), name="ui")
    if not any(getattr(route, "path", None) == "/" for route in app.routes):
        app.add_api_route(
            "/",
            lambda: RedirectResponse(f"{UI_PREFIX}/", status_code=307),
            include_in_schema=False,
        )


async def _sign_in_first(request: Request, exc: Exception) -> Response:
    target = f"{base_path(request)}/login?next={quote(request.url.path)}"
    response = RedirectResponse(target, status_code=303)
    if request.cookies.get(SESSION_COOKIE):  # its session ended: the browser may drop it
        forget_cookie(request, response)
    return response


async def _refused(request: Request, exc: Exception) -> Response:
    message = (
        "This form has expired or did not come from this site; nothing was changed. "
        "Go back, reload the page and try again."
        if isinstance(exc, CsrfRefused)
        else str(exc)
    )
    return render(
        request, "error.html", principal=None, status_code=403, title="Refused", message=message
    )


async def _not_found(request: Request, exc: Exception) -> Response:
    message = str(exc) if isinstance(exc, NotFound) else "There is no such page here."
    return render(
        request, "error.html", principal=None, status_code=404, title="Not found", message=message
    )


async def _failed(request: Request, exc: Exception) -> Response:
    """Any other agentq error (the database is down, a setting is wrong) with the API's status."""
    assert isinstance(exc, AgentqError)
    response = render(
        request,
        "error.html",
        principal=None,
        status_code=status_of(exc),
        title="Something went wrong",
        message=str(exc),
    )
    if isinstance(exc, TokenLimitExceeded):  # a stream over its token's cap
        response.headers["Retry-After"] = str(exc.retry_after_s)
    return response


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (an unknown page, a wrong method, a bad path value) as pages."""
    assert isinstance(exc, HTTPException)
    return render(
        request,
        "error.html",
        principal=None,
        status_code=exc.status_code,
        title=str(exc.detail),
        message="There is no such page here.",
    )
