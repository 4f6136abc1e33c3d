"""`agentq webhook ...`: add, list, rotate and remove webhook subscriptions, and read the
delivery log (issue 15). The commands are `models.front.commands`; a subscription's secret is
printed once, when it is made or rotated, and never again; URLs are shown without userinfo or query
string (`models.operations.destinations.shown`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from models.db import session_scope
from models.engine.notifications import EVENTS
from models.formats import utc
from models.front import commands
from models.operations import deliveries, destinations, webhooks
from models.operations.webhook_tables import DELIVERY_STATUSES
from models.settings import get_settings
from models.sql import PG_INT_MAX
from models.tables import utcnow
from ops.connection import connect
from ops.views import cell

webhook_app = typer.Typer(
    help=f"Webhooks told of {', '.join(EVENTS)} (signed, retried, logged).", no_args_is_help=True
)
console = Console()
WebhookId = Annotated[int, typer.Argument(min=1, max=PG_INT_MAX, help="Webhook id (list).")]


@webhook_app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="Where to POST: http:// or https://.")],
    event: Annotated[
        list[str], typer.Option(help=f"An event to send, repeatable: {', '.join(EVENTS)}.")
    ],
    user: Annotated[
        str | None, typer.Option(help="Only this user's runs (default: every user's).")
    ] = None,
) -> None:
    """Subscribe URL to the events given, of one user's runs or everyone's; prints the
    subscription's signing secret, once."""
    connect()
    row = commands.add_webhook(url=url, events=event, user_id=user)
    who = f"user {user!r}'s runs" if user else "every user's runs"
    shown = destinations.shown(url)
    console.print(Text(f"webhook {row.id} added: {shown} gets {', '.join(row.events)} of {who}"))
    _print_secret(row.secret or "")


def _print_secret(secret: str) -> None:
    console.print(Text(f"signing secret: {secret}"), soft_wrap=True)
    console.print(Text("give it to the receiver now: it is not shown again"))


@webhook_app.command("list")
def list_() -> None:
    """Every subscription: id, URL (no userinfo or query), events, user, secret (never
    whole), circuit breaker."""
    connect()
    with session_scope() as session:
        rows = webhooks.listed(session, settings=get_settings(), now=utcnow())
    table = Table("id", "url", "events", "user", "secret", "circuit", "enabled", "created")
    for row in rows:
        table.add_row(
            str(row.id),
            cell(row.shown_url, 60),
            ", ".join(row.events),
            cell(row.user_id or "(all)", 40),
            row.secret,
            row.circuit,
            "yes" if row.enabled else "no",
            utc(row.created_at),
        )
    console.print(table)


@webhook_app.command("rotate")
def rotate(webhook_id: WebhookId) -> None:
    """Give a subscription a new signing secret (printed once); an older subscription stops
    using the shared AGENTQ_WEBHOOK_SECRET(S)."""
    connect()
    row = commands.rotate_webhook(webhook_id)
    console.print(Text(f"webhook {row.id} ({destinations.shown(row.url)}) has a new secret"))
    _print_secret(row.secret or "")


@webhook_app.command("remove")
def remove(webhook_id: WebhookId) -> None:
    """Remove a subscription, with its deliveries and their log."""
    connect()
    row = commands.remove_webhook(webhook_id)
    console.print(Text(f"webhook {row.id} removed ({destinations.shown(row.url)})"))


@webhook_app.command("deliveries")
def deliveries_(
    status: Annotated[
        str | None, typer.Option(help=f"Only these: {', '.join(DELIVERY_STATUSES)}.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first.")] = 20,
) -> None:
    """The delivery log: each delivery's event, run, status, attempts, the receiver's last
    HTTP status and the last error."""
    if status is not None and status not in DELIVERY_STATUSES:
        raise typer.BadParameter(f"{status!r}; use one of {', '.join(DELIVERY_STATUSES)}")
    connect()
    with session_scope() as session:
        rows = deliveries.recent(session, limit=limit, status=status)
    table = Table("id", "event", "run", "url", "status", "attempts", "last", "last error")
    for logged in rows:
        d = logged.delivery
        table.add_row(
            str(d.id),
            d.event,
            str(d.run_id or ""),
            cell(logged.shown_url, 40),
            d.status,
            str(d.attempts),
            str(d.last_status_code or "-"),
            cell(d.last_error or "", 60),
        )
    console.print(table)
