"""Security headers on every response of the API and the review console.

Issue 9 found the console could be framed by a page on another port of the same host (a click
there claimed an escalation: clickjacking) and served pages with no CSP, `nosniff`,
`Referrer-Policy` or `Cache-Control`. This middleware adds, following the OWASP HTTP Headers
and Clickjacking Defense cheat sheets:

- everywhere: `X-Content-Type-Options: nosniff`, `X-Frame-Options: DENY`,
  `Referrer-Policy: same-origin`;
- console pages (`/ui`, its static files aside, and `/`): a Content-Security-Policy that allows
  only the console's own script, stylesheet, images, fetches and form targets, with
  `frame-ancestors 'none'` (CSP Level 2; `X-Frame-Options` is for browsers without it), and
  `Cache-Control: no-store`, so a signed-in page is never kept for the back button of a shared
  machine or by a proxy;
- the JSON API: `default-src 'none'; frame-ancestors 'none'` (a response is data, never a page
  to run) and `Cache-Control: no-store` on `/api/v1`, whose every answer is authenticated.

`/docs` (off unless `AGENTQ_API_DOCS`) gets no CSP: FastAPI's Swagger UI page loads its script
and CSS from a CDN and starts it with an inline script.
"""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONSOLE_PREFIX: Final = "/ui"
CONSOLE_STATIC: Final = "/ui/static/"
API_PREFIX: Final = "/api/"
DOCS_PATHS: Final = ("/docs", "/docs/oauth2-redirect")

EVERYWHERE: Final = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
# The console has no inline script or style (its one script is static/console.js; widths are
# classes): so 'self' alone, and the favicon is a data: URL.
CONSOLE_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
API_CSP: Final = "default-src 'none'; frame-ancestors 'none'"
NO_STORE: Final = "no-store"


def headers_for(path: str) -> dict[str, str]:
    """The security headers of a response to `path` (the request's path, `/ui/reviews`)."""
    headers = dict(EVERYWHERE)
    console = path == "/" or path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")
    if console:
        headers["Content-Security-Policy"] = CONSOLE_CSP
        if not path.startswith(CONSOLE_STATIC):
            headers["Cache-Control"] = NO_STORE
    elif path not in DOCS_PATHS:
        headers["Content-Security-Policy"] = API_CSP
        if path.startswith(API_PREFIX):
            headers["Cache-Control"] = NO_STORE
    return headers


class SecurityHeaders:
    """ASGI middleware: `headers_for(path)` on every HTTP response, over any the app set."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = headers_for(scope["path"])

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in extra.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


def install(app: FastAPI) -> None:
    """Add the headers to every response of `app`, its mounted console included."""
    app.add_middleware(SecurityHeaders)
