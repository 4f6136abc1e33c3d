"""Rendering the console's pages: one Jinja2 environment, autoescaped, with the CLI's formats.

Goals, errors and model output are untrusted text: autoescaping is on for every template, and no
template marks a value `safe`. Every value a template shows also passes `models.display.visible`
(the environment's `finalize`, so no template can forget it): bidirectional overrides and other
invisible characters are shown as markers such as `⟨U+202E⟩`, as the CLI shows them (issue 9).
A form field a person sends back keeps its text exact: the plan editor's JSON gets JSON escapes
(`| json_visible`), and what a reviewer typed is echoed as typed (`| as_typed`). Durations and
numbers use the same helpers as the CLI (`models.formats`), so a run reads the same in the terminal
and the browser.
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
from markupsafe import Markup

from api.auth import Principal
from api.ui.security import CSRF_FIELD, csrf_token, set_login_cookie, signed_in
from models.access import ui_sessions
from models.db import session_scope
from models.display import visible, visible_json
from models.formats import age, compact, provider_label, short, span

TEMPLATES_DIR: Final = Path(__file__).parent / "templates"
DETAIL_MAX_CHARS: Final = 160  # a timeline entry's detail, before "show all"

# The colour family of each status word (see static/console.css: .status-ok, ...).
STATUS_TONE: Final = {
    "succeeded": "ok",
    "decided": "ok",
    "failed": "bad",
    "cancelled": "muted",
    "pending": "muted",
    "ready": "wait",
    "queued": "wait",
    "claimed": "wait",
    "running": "busy",
    "planning": "busy",
    "replanning": "busy",
    "synthesizing": "busy",
    "waiting_review": "review",
    "waiting_approval": "review",
    "waiting_child": "busy",
    "open": "review",
    "delivered": "ok",  # webhook deliveries (api.ui.webhooks)
    "delivering": "busy",
    "met": "ok",  # goal checks (models.engine.goal_reports)
    "not_met": "bad",
    "accepted": "review",
    "unchecked": "wait",
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


def percent_class(percent: float) -> str:
    """The class that sets a bar's width to `percent` (0-100, rounded to a whole number):
    `pct-42` (static/console.css). Widths are classes, not `style` attributes, because the
    console's Content-Security-Policy allows no inline style."""
    return f"pct-{min(max(round(percent), 0), 100)}"


class AsTyped(str):
    """Text `finalize` leaves as it is: a form field's value sent back to the person who typed
    it, or JSON whose marked characters are escaped already."""


def shown(value: Any) -> Any:
    """Jinja's `finalize`: a string as `visible` shows it (markup stays markup: the markers hold
    no HTML), any other value as it is."""
    if isinstance(value, AsTyped) or not isinstance(value, str):
        return value
    if isinstance(value, Markup):
        return Markup(visible(str(value)))
    return visible(value)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shown,
    )
    env.filters.update(
        visible=visible,
        json_visible=lambda text: AsTyped(visible_json(str(text))),
        as_typed=lambda text: AsTyped(str(text)),
        percent_class=percent_class,
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
    flashes = _take_flashes(request) if principal is not None else []
    frame = {
        "base": base_path(request),
        "principal": principal,
        "csrf_field": CSRF_FIELD,
        "csrf_token": csrf_token(request),
        "flashes": flashes,
        "nav": "",
        "poll_url": None,
        "poll_version": None,
        "stream_url": None,
        "title": "agentq",
    }
    response = templates.TemplateResponse(
        request, name, {**frame, **context}, status_code=status_code
    )
    set_login_cookie(request, response)
    return response


def _take_flashes(request: Request) -> list[dict[str, Any]]:
    found = signed_in(request)
    if found is None or not found.has_flashes:  # none queued: no write
        return []
    with session_scope() as session:
        return ui_sessions.pop_flashes(session, found.session_id)


def flash(request: Request, message: str, tone: str = "ok") -> None:
    """Queue `message` for the next page this session renders (none before sign-in)."""
    found = signed_in(request)
    if found is not None:
        with session_scope() as session:
            ui_sessions.add_flash(session, found.session_id, message, tone)
