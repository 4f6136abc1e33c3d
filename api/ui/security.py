"""Who is signed in to the review console, and the check that every form came from it.

Signing in exchanges an API token (`agentq token create`) for a server-side session: a row of
`console_sessions` (`models.access.ui_sessions`) holding the token's id, a CSRF token and when it
was last used. The cookie (`agentq_ui`, HttpOnly, SameSite=Lax, Secure with
`AGENTQ_UI_COOKIE_SECURE`, path `/ui`) holds only the session's random id, never the token.
Every request loads the row and its token again, so signing out (the row is deleted), revoking
the token (its rows are deleted) or `AGENTQ_UI_SESSION_IDLE_S` without a request ends the
session at once: a copied cookie is worth nothing afterwards (issue 9, finding 8). A page's live
refresh (`.../version.json`) and its event stream (`.../stream`) do not count as activity.

SameSite=Lax rather than Strict: a link to an escalation pasted in chat or mail opens it signed
in; every change is a POST, which Lax keeps from other sites, and which must carry the CSRF
token anyway.

Forms carry the session's CSRF token (the synchronizer token pattern, OWASP CSRF Prevention
Cheat Sheet); every POST whose `csrf_token` field does not match is refused with 403 before the
endpoint runs, so it changes nothing. Before sign-in there is no session row (a stranger's visit
stores nothing): the sign-in form's token is an HMAC of a random value in the `agentq_ui_login`
cookie, keyed with `AGENTQ_UI_SESSION_SECRET` (the signed double-submit cookie of the same cheat
sheet).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, Final, cast

from fastapi import Request, Response

from api.auth import Principal, Role
from models.access import ui_sessions
from models.db import session_scope
from models.private_files import read_or_create_secret
from models.settings import Settings
from models.tables import ApiToken

SESSION_COOKIE: Final = "agentq_ui"
LOGIN_COOKIE: Final = "agentq_ui_login"
SECRET_FILE_NAME: Final = "ui_session_secret"
SECRET_RANDOM_BYTES: Final = 32
CSRF_FIELD: Final = "csrf_token"
LOGIN_NONCE_BYTES: Final = 32
REVIEW_ROLES: Final = frozenset({"reviewer", "admin"})
POLL_SUFFIX: Final = "/version.json"  # a live page's refresh: not a person's activity
STREAM_SUFFIX: Final = "/stream"  # a live page's event stream (`api.ui.live`): nor is this


class SignInRequired(Exception):
    """No live session: the browser is sent to the sign-in page."""


class Forbidden(Exception):
    """The signed-in token's role may not see this page."""


class CsrfRefused(Exception):
    """A form was posted without the session's CSRF token."""


@dataclass(frozen=True)
class ConsoleConfig:
    """What the console's sessions need from the settings, kept on the console app's state."""

    login_secret: bytes
    lifetime: ui_sessions.Lifetime
    cookie_secure: bool
    cookie_max_age_s: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ConsoleConfig:
        return cls(
            login_secret=session_secret(settings).encode(),
            lifetime=ui_sessions.Lifetime(
                idle_s=settings.ui_session_idle_s, max_age_s=settings.ui_session_max_age_s
            ),
            cookie_secure=settings.ui_cookie_secure,
            cookie_max_age_s=settings.ui_session_max_age_s,
        )


@dataclass(frozen=True)
class SignedIn:
    """A live console session: its row's id, its CSRF token, who it acts as, and whether it
    had flash messages queued when the request began."""

    session_id: int
    csrf_token: str
    principal: Principal
    has_flashes: bool = False


def session_secret(settings: Settings) -> str:
    """`AGENTQ_UI_SESSION_SECRET`, else the secret kept in AGENTQ_HOME (created 0600 on first
    use, so sign-in forms outlive a restart of `agentq up`)."""
    if settings.ui_session_secret is not None:
        return settings.ui_session_secret.get_secret_value()
    return read_or_create_secret(settings.home / SECRET_FILE_NAME, nbytes=SECRET_RANDOM_BYTES)


def _config(request: Request) -> ConsoleConfig:
    return cast(ConsoleConfig, request.app.state.console)


def _cookie_path(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/") or "/"


def signed_in(request: Request) -> SignedIn | None:
    """The request's live session, looked up once per request (`models.access.ui_sessions.load`)."""
    if hasattr(request.state, "signed_in"):
        return cast(SignedIn | None, request.state.signed_in)
    found: SignedIn | None = None
    request.state.signed_in = None  # so an error page after a failed lookup does not retry it
    raw = request.cookies.get(SESSION_COOKIE)
    if raw:
        touch = not request.url.path.endswith((POLL_SUFFIX, STREAM_SUFFIX))
        with session_scope() as session:
            loaded = ui_sessions.load(session, raw, lifetime=_config(request).lifetime, touch=touch)
            if loaded is not None:
                row, token = loaded
                found = SignedIn(row.id or 0, row.csrf_token, _principal(token), bool(row.flashes))
    request.state.signed_in = found
    return found


def _principal(row: ApiToken) -> Principal:
    return Principal(
        token_id=row.id or 0, name=row.name, role=cast(Role, row.role), user_id=row.user_id
    )


def current_principal(request: Request) -> Principal:
    """The principal of the request's live session. Raises `SignInRequired` with no cookie, or
    when its session was signed out, expired, or its token revoked."""
    found = signed_in(request)
    if found is None:
        raise SignInRequired()
    return found.principal


def reviewer(request: Request) -> Principal:
    """The signed-in principal if it may review; raises `Forbidden` for a submitter."""
    principal = current_principal(request)
    if principal.role not in REVIEW_ROLES:
        raise Forbidden("Only reviewers and admins can open the review inbox.")
    return principal


def sign_in(request: Request, response: Response, principal: Principal) -> None:
    """Start a new session for `principal` (a new id and CSRF token: no session fixation) and
    set its cookie on `response`; a session the browser had before is ended."""
    config = _config(request)
    old = request.cookies.get(SESSION_COOKIE)
    with session_scope() as session:
        if old:
            ui_sessions.end(session, old)
        row, raw = ui_sessions.start(session, token_id=principal.token_id, lifetime=config.lifetime)
    request.state.signed_in = SignedIn(row.id or 0, row.csrf_token, principal, has_flashes=True)
    response.set_cookie(
        SESSION_COOKIE,
        raw,
        max_age=config.cookie_max_age_s,
        path=_cookie_path(request),
        secure=config.cookie_secure,
        httponly=True,
        samesite="lax",
    )
    response.delete_cookie(LOGIN_COOKIE, path=_cookie_path(request))


def sign_out(request: Request, response: Response) -> None:
    """End the session: its row is deleted, so its cookie is no longer worth anything."""
    raw = request.cookies.get(SESSION_COOKIE)
    if raw:
        with session_scope() as session:
            ui_sessions.end(session, raw)
    request.state.signed_in = None
    forget_cookie(request, response)


def forget_cookie(request: Request, response: Response) -> None:
    """Tell the browser to drop the session cookie (its session is gone)."""
    response.delete_cookie(
        SESSION_COOKIE,
        path=_cookie_path(request),
        secure=_config(request).cookie_secure,
        httponly=True,
        samesite="lax",
    )


def csrf_token(request: Request) -> str:
    """The CSRF token for this page's forms: the session's, or before sign-in the HMAC of the
    sign-in cookie's random value (created here; `set_login_cookie` sends it)."""
    found = signed_in(request)
    if found is not None:
        return found.csrf_token
    nonce = request.cookies.get(LOGIN_COOKIE) or getattr(request.state, "login_nonce", None)
    if not nonce:
        nonce = secrets.token_urlsafe(LOGIN_NONCE_BYTES)
        request.state.login_nonce = nonce
    return _login_csrf(request, nonce)


def _login_csrf(request: Request, nonce: str) -> str:
    digest = hmac.new(_config(request).login_secret, nonce.encode(), hashlib.sha256)
    return digest.hexdigest()


def set_login_cookie(request: Request, response: Response) -> None:
    """Send the sign-in cookie `csrf_token` created for this page, if it created one."""
    nonce = getattr(request.state, "login_nonce", None)
    if nonce:
        response.set_cookie(
            LOGIN_COOKIE,
            nonce,
            path=_cookie_path(request),
            secure=_config(request).cookie_secure,
            httponly=True,
            samesite="lax",
        )


def _expected_csrf(request: Request) -> str | None:
    found = signed_in(request)
    if found is not None:
        return found.csrf_token
    nonce = request.cookies.get(LOGIN_COOKIE)
    return _login_csrf(request, nonce) if nonce else None


async def check_csrf(request: Request) -> None:
    """App-wide dependency: a POST must carry the CSRF token of its session (or, before
    sign-in, of its sign-in cookie); raises `CsrfRefused`."""
    if request.method != "POST":
        return
    form: Any = await request.form()  # cached: the endpoint's own Form fields read the same
    sent = form.get(CSRF_FIELD)
    expected = _expected_csrf(request)
    if not (isinstance(sent, str) and isinstance(expected, str)):
        raise CsrfRefused()
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfRefused()
