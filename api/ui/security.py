"""Who is signed in to the review console, and the check that every form came from it.

Signing in exchanges an API token (`agentq token create`) for a session: the session cookie is
signed (Starlette's `SessionMiddleware`, itsdangerous), HttpOnly and SameSite=Lax, and holds only
the token's id and a CSRF token, never the raw token. Each request loads the token row again, so
a revoked token signs its sessions out at once.

Forms carry the session's CSRF token (the synchronizer token pattern, OWASP CSRF Prevention
Cheat Sheet); every POST whose `csrf_token` field does not match is refused with 403 before the
endpoint runs, so it changes nothing.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from typing import Any, Final, cast

from fastapi import Request

from api.auth import Principal, Role
from models.db import session_scope
from models.settings import Settings
from models.tables import ApiToken

SECRET_FILE_NAME: Final = "ui_session_secret"
SECRET_RANDOM_BYTES: Final = 32
CSRF_FIELD: Final = "csrf_token"
CSRF_RANDOM_BYTES: Final = 32
REVIEW_ROLES: Final = frozenset({"reviewer", "admin"})


class SignInRequired(Exception):
    """No live session: the browser is sent to the sign-in page."""


class Forbidden(Exception):
    """The signed-in token's role may not see this page."""


class CsrfRefused(Exception):
    """A form was posted without the session's CSRF token."""


def session_secret(settings: Settings) -> str:
    """`AGENTQ_UI_SESSION_SECRET`, else the secret kept in AGENTQ_HOME (created 0600 on first
    use, so sessions outlive a restart of `agentq up`)."""
    if settings.ui_session_secret is not None:
        return settings.ui_session_secret.get_secret_value()
    path = settings.home / SECRET_FILE_NAME
    if not path.exists():
        _write_secret(path)
    return path.read_text(encoding="ascii").strip()


def _write_secret(path: Path) -> None:
    """Write a new secret to `path` whole or not at all: a private temporary file, then a hard
    link (which fails when another process linked its own first; theirs is then used)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secrets.token_urlsafe(SECRET_RANDOM_BYTES))
    try:
        os.link(draft, path)
    except FileExistsError:
        pass
    finally:
        draft.unlink()


def sign_in(request: Request, principal: Principal) -> None:
    """Start a fresh session for `principal` (a new CSRF token too: no session fixation)."""
    request.session.clear()
    request.session["token_id"] = principal.token_id
    request.session[CSRF_FIELD] = secrets.token_urlsafe(CSRF_RANDOM_BYTES)


def sign_out(request: Request) -> None:
    """Forget the session."""
    request.session.clear()


def current_principal(request: Request) -> Principal:
    """The principal of the session's token, read from its row on every request.

    Raises `SignInRequired` with no session, or when the token was revoked (the session is
    cleared).
    """
    token_id = request.session.get("token_id")
    if not isinstance(token_id, int):
        raise SignInRequired()
    with session_scope() as session:
        row = session.get(ApiToken, token_id)
        live = row is not None and row.revoked_at is None
        principal = _principal(row) if row is not None and live else None
    if principal is None:
        request.session.clear()
        raise SignInRequired()
    return principal


def _principal(row: ApiToken) -> Principal:
    return Principal(
        token_id=row.id or 0, name=row.name, role=cast(Role, row.role), user_id=row.user_id
    )


def reviewer(request: Request) -> Principal:
    """The signed-in principal if it may review; raises `Forbidden` for a submitter."""
    principal = current_principal(request)
    if principal.role not in REVIEW_ROLES:
        raise Forbidden("Only reviewers and admins can open the review inbox.")
    return principal


def csrf_token(request: Request) -> str:
    """The session's CSRF token, created on first use (the sign-in form needs one too)."""
    token = request.session.get(CSRF_FIELD)
    if not isinstance(token, str):
        token = secrets.token_urlsafe(CSRF_RANDOM_BYTES)
        request.session[CSRF_FIELD] = token
    return token


async def check_csrf(request: Request) -> None:
    """App-wide dependency: a POST must carry the session's CSRF token; raises `CsrfRefused`."""
    if request.method != "POST":
        return
    form: Any = await request.form()  # cached: the endpoint's own Form fields read the same
    sent = form.get(CSRF_FIELD)
    expected = request.session.get(CSRF_FIELD)
    if not (isinstance(sent, str) and isinstance(expected, str)):
        raise CsrfRefused()
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        raise CsrfRefused()
