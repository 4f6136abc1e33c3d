"""Bearer-token authentication of API requests, and the role checks of the routes.

A request carries `Authorization: Bearer <token>`; `authenticate` hashes the token and finds its
row by the hash (`models.access.api_tokens.lookup`), so no stored secret is ever compared byte by
byte in Python. Tokens are never accepted in query strings or cookies: those reach access logs and
browser history. Nothing here logs a header. Roles: admin can do everything; reviewer reads every
run and works the review queue, but reads no user's memory; submitter submits, reads and cancels
its own user's runs and reads, deletes and forgets that user's memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from models.access import api_tokens
from models.db import session_scope

Role = Literal["submitter", "reviewer", "admin"]

_bearer = HTTPBearer(auto_error=False, description="An agentq API token: `agentq token create`.")


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the token's id, name and role, and for a submitter its user.

    `user_id` is the agentq user a submitter token acts for; None for reviewer and admin tokens.
    """

    token_id: int
    name: str
    role: Role
    user_id: str | None

    def can_read_user(self, user_id: str) -> bool:
        """Whether this principal may see the runs of `user_id`."""
        return self.role != "submitter" or self.user_id == user_id

    def can_read_memory(self, user_id: str) -> bool:
        """Whether this principal may read (and forget) `user_id`'s memory: facts, episodes, and
        the recalled memory that run events quote. An admin, or a submitter token of that user;
        never a reviewer, who reads every run but nobody's memory. One rule for `/memory/*`,
        the API's run detail and the console (issue 9)."""
        return self.role == "admin" or (self.role == "submitter" and self.user_id == user_id)

    def acting_for(self, user: str | None) -> str:
        """The agentq user a request acts for: `user`, or a submitter token's own user when it
        is left out. Raises 403 when a submitter names another user, or when a token that acts
        for no user (reviewer, admin) names none: which is allowed depends on the token, not
        on the request's shape, so the spec can only describe it (issue 9, finding 10)."""
        if self.role == "submitter":
            if user is not None and user != self.user_id:
                raise HTTPException(
                    status.HTTP_403_FORBIDDEN,
                    f"user: a submitter token acts only for its own user {self.user_id!r}",
                )
            return self.user_id or ""
        if user is None:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"user: {self.role} tokens act for no user of their own; name one with `user`",
            )
        return user


def authenticate(raw_token: str) -> Principal | None:
    """The principal of a live (not revoked) token, or None; opens and commits its own DB session.

    Raises `models.errors.DatabaseError` when the database refuses.
    """
    with session_scope() as session:
        row = api_tokens.lookup(session, raw_token)
        if row is None:
            return None
        role: Role = row.role  # type: ignore[assignment]  # the column's CHECK holds the Literal
        return Principal(token_id=row.id or 0, name=row.name, role=role, user_id=row.user_id)


def _refused(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=detail, headers={"WWW-Authenticate": "Bearer"}
    )


def current_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """FastAPI dependency: the request's principal; 401 without a valid bearer token."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise _refused("missing bearer token: send `Authorization: Bearer <token>`")
    principal = authenticate(credentials.credentials)
    if principal is None:
        raise _refused("invalid or revoked token")
    request.state.principal = principal
    return principal


def require(*roles: Role) -> object:
    """FastAPI dependency factory: the principal, if its role is one of `roles` (admin always
    passes); 403 naming the roles allowed otherwise."""
    allowed = {*roles, "admin"}

    def dependency(principal: Annotated[Principal, Depends(current_principal)]) -> Principal:
        if principal.role not in allowed:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                detail=f"role {principal.role!r} may not do this; allowed: "
                + ", ".join(sorted(allowed)),
            )
        return principal

    return Depends(dependency)


# The principal of a request whose role is one of these (admin always is one of them):
AnyPrincipal = Annotated[Principal, Depends(current_principal)]  # any valid token
Reviewer = Annotated[Principal, require("reviewer")]  # reviewer or admin
Submitter = Annotated[Principal, require("submitter")]  # submitter or admin
Admin = Annotated[Principal, require()]  # admin only
