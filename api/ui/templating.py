"""Rendering the console's pages: one Jinja2 environment, autoescaped, with the CLI's formats.

Goals, errors and model output are untrusted text: autoescaping is on for every template, and no
template marks a value `safe`. Durations and numbers use the same helpers as the CLI
(`ops.views`), so a run reads the same in the terminal and the browser.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from api.auth import Principal
from api.ui.security import CSRF_FIELD, csrf_token
from ops.views import age, compact, provider_label, short, span

TEMPLATES_DIR: Final = Path(__file__).parent / "templates"
DETAIL_MAX_CHARS: Final = 160  # a timeline entry's detail, before "show all"

# The colour family of each status word (see static/console.css: .status-ok, ...).
STATUS_TONE: Final = {
    "succeeded": "ok",
    "decided": "ok",
    "failed": "bad",
    "cancelled": "muted",
    "pending": "muted",
    "queued": "wait",
    "claimed": "wait",
    "running": "busy",
    "planning": "busy",
    "replanning": "busy",
    "synthesizing": "busy",
    "waiting_review": "review",
    "open": "review",
}


def duration(seconds: float | None) -> str:
    """`span` of a number of seconds (`42s`, `3m`, `2h`), `-` for None."""
    return "-" if seconds is None else span(max(seconds, 0.0))


def clock(moment: datetime | None) -> str:
    """`moment` in UTC as `2026-05-01 12:00:03`; `-` for None."""
    return "-" if moment is None else f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def pretty(value: Any) -> str:
    """Indented JSON of `value` (for `<pre>` blocks); text as it is."""
    return value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        duration=duration,
        clock=clock,
        compact=compact,
        pretty=pretty,
        short=lambda value, limit=DETAIL_MAX_CHARS: short(value, limit),
        tone=lambda status: STATUS_TONE.get(status, "muted"),
        provider=provider_label,
        ago=age,
    )
    return env


templates = Jinja2Templates(env=_environment())


def base_path(request: Request) -> str:
    """Where the console is mounted (`/ui`), for links and redirects."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def render(
    request: Request,
    name: str,
    *,
    principal: Principal | None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    """Render template `name` with the page frame's context: links, who is signed in, the CSRF
    token for forms, and the flash messages queued by the last action (shown once)."""
    flashes = request.session.pop("flash", []) if principal is not None else []
    frame = {
        "base": base_path(request),
        "principal": principal,
        "csrf_field": CSRF_FIELD,
        "csrf_token": csrf_token(request),
        "flashes": flashes,
        "nav": "",
        "poll_url": None,
        "poll_version": None,
        "title": "agentq",
    }
    return templates.TemplateResponse(request, name, {**frame, **context}, status_code=status_code)


def flash(request: Request, message: str, tone: str = "ok") -> None:
    """Queue `message` for the next page this session renders."""
    queued = request.session.get("flash", [])
    request.session["flash"] = [*queued, {"message": message, "tone": tone}]
