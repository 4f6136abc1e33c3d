"""Signing in with an API token, and out (each a server-side session row: `api.ui.security`)."""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.auth import authenticate
from api.ui.security import REVIEW_ROLES, SignInRequired, current_principal, sign_in, sign_out
from api.ui.templating import base_path, flash, render

router = APIRouter()
SEE_OTHER: Final = 303


def _home(request: Request, role: str) -> str:
    return f"{base_path(request)}/reviews" if role in REVIEW_ROLES else f"{base_path(request)}/runs"


def _safe_next(request: Request, target: str) -> str | None:
    """`target` if it is a page of this console (never another site: no open redirect)."""
    base = base_path(request) + "/"
    ok = target.startswith(base) and not target.startswith("//") and "\\" not in target
    return target if ok else None


@router.get("/", include_in_schema=False)
def home(request: Request) -> Response:
    """The inbox for reviewers, the runs for submitters, the sign-in page for strangers."""
    try:
        principal = current_principal(request)
    except SignInRequired:
        return RedirectResponse(f"{base_path(request)}/login", SEE_OTHER)
    return RedirectResponse(_home(request, principal.role), SEE_OTHER)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "") -> HTMLResponse:
    """The sign-in form: paste an API token."""
    return render(request, "login.html", principal=None, title="Sign in", next=next, error=None)


@router.post("/login")
def login(
    request: Request, token: Annotated[str, Form()] = "", next: Annotated[str, Form()] = ""
) -> Response:
    """Exchange a live API token for a session; a wrong or revoked token re-shows the form."""
    principal = authenticate(token.strip()) if token.strip() else None
    if principal is None:
        error = "That token is not valid, or it has been revoked."
        return render(
            request,
            "login.html",
            principal=None,
            status_code=401,
            title="Sign in",
            next=next,
            error=error,
        )
    target = _safe_next(request, next) or _home(request, principal.role)
    response = RedirectResponse(target, SEE_OTHER)
    sign_in(request, response, principal)
    flash(request, f"Signed in as {principal.name} ({principal.role}).")
    return response


@router.post("/logout")
def logout(request: Request) -> Response:
    """End the session: its row is deleted, so a copy of its cookie signs no one in."""
    response = RedirectResponse(f"{base_path(request)}/login", SEE_OTHER)
    sign_out(request, response)
    return response
