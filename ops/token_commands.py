"""`agentq token ...`: create, list and revoke the bearer tokens of the HTTP API.

A token is shown once, when it is created; only its sha256 hash is stored
(`models.access.api_tokens`).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from api.responses import TokenOut
from models.access import api_tokens
from models.db import session_scope
from models.display import visible
from models.formats import utc
from models.front import commands
from models.sql import PG_INT_MAX
from ops.connection import connect
from ops.json_output import JsonFlag, print_json
from ops.views import cell

token_app = typer.Typer(
    help="Bearer tokens of the HTTP API (roles: submitter, reviewer, admin).", no_args_is_help=True
)
console = Console()


def _role(value: str) -> str:
    if value not in api_tokens.ROLES:
        raise typer.BadParameter(
            f"{value!r} is not a role; use one of {', '.join(api_tokens.ROLES)}"
        )
    return value


@token_app.command("create")
def create(
    name: Annotated[str, typer.Option(help="Who or what uses it; reviewers' decisions carry it.")],
    role: Annotated[str, typer.Option(callback=_role, help="submitter, reviewer or admin.")],
    user: Annotated[
        str | None,
        typer.Option(help="The agentq user a submitter token acts for (submitters only)."),
    ] = None,
) -> None:
    """Create a token and print it once: it cannot be shown again."""
    connect()
    token_id, raw = commands.create_token(name=name, role=role, user_id=user)
    console.print(Text(created_line(token_id, name=name, role=role, user=user)))
    # print, not console.print: no wrapping or markup may touch the token
    print(raw)
    console.print(
        Text(
            "Store it now: it will not be shown again (only its hash is kept). "
            "Send it as `Authorization: Bearer <token>`.",
            style="yellow",
        )
    )


def created_line(token_id: int, *, name: str, role: str, user: str | None) -> str:
    """What `create` says before the token: its id, name, role and (submitter) user."""
    acts_for = f", acting for user {user!r}" if user is not None else ""
    return f"token {token_id} created: name {name!r}, role {role}{acts_for}. The token:"


@token_app.command("list")
def list_(as_json: Annotated[bool, JsonFlag] = False) -> None:
    """Every token: id, name, role, user, created, last used, revoked. Never the token."""
    connect()
    with session_scope() as session:
        rows = api_tokens.list_tokens(session)
    if as_json:
        print_json([TokenOut.model_validate(t) for t in rows])
        return
    table = Table("id", "name", "role", "user", "created", "last used", "revoked")
    for t in rows:
        table.add_row(
            str(t.id),
            cell(t.name, 40),
            t.role,
            cell(t.user_id or "", 40),
            utc(t.created_at),
            utc(t.last_used_at) if t.last_used_at else "-",
            utc(t.revoked_at) if t.revoked_at else "",
        )
    console.print(table)


@token_app.command("revoke")
def revoke(
    token_id: Annotated[int, typer.Argument(min=1, max=PG_INT_MAX, help="Token id (see list).")],
) -> None:
    """Revoke a token: every request with it is refused from now on, its console sessions end
    and the escalations it holds claimed go back to the open queue."""
    connect()
    done = commands.revoke_token(token_id)
    console.print(Text(revoked_line(done)))


def revoked_line(done: api_tokens.Revocation) -> str:
    """What `revoke` says: the token, and the sessions and claims that ended with it."""
    claims = ", ".join(str(i) for i in done.claims_released)
    released = f"; claims released: escalation {claims}" if claims else ""
    return (
        f"token {done.token.id} ({visible(done.token.name)}) revoked; console sessions ended: "
        f"{done.sessions_ended}{released}"
    )
