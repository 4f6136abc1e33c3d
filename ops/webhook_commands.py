"""`agentq webhook ...`: add, list and remove webhook subscriptions, and read the delivery log
(issue 15). The commands are `models.commands`; a secret is named, never typed or shown here
(`models.webhooks`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from models import commands, deliveries, webhooks
from models.db import session_scope
from models.formats import utc
from models.notifications import EVENTS
from models.settings import get_settings
from models.sql import PG_INT_MAX
from models.webhook_tables import DELIVERY_STATUSES
from ops.connection import connect
from ops.views import cell

webhook_app = typer.Typer(
    help=f"Webhooks told of {', '.join(EVENTS)} (signed, retried, logged).", no_args_is_help=True
)
console = Console()


@webhook_app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="Where to POST: http:// or https://.")],
    event: Annotated[
        list[str], typer.Option(help=f"An event to send, repeatable: {', '.join(EVENTS)}.")
    ],
    user: Annotated[
        str | None, typer.Option(help="Only this user's runs (default: every user's).")
    ] = None,
    secret: Annotated[
        str,
        typer.Option(
            help='The secret that signs: "default" is AGENTQ_WEBHOOK_SECRET, another name a '
            "key of AGENTQ_WEBHOOK_SECRETS."
        ),
    ] = webhooks.DEFAULT_SECRET,
) -> None:
    """Subscribe URL to the events given, of one user's runs or everyone's."""
    connect()
    row = commands.add_webhook(url=url, events=event, user_id=user, secret_ref=secret)
    who = f"user {user!r}'s runs" if user else "every user's runs"
    signed = webhooks.secret_shown(get_settings(), row.secret_ref)
    console.print(Text(f"webhook {row.id} added: {url} gets {', '.join(row.events)} of {who}"))
    console.print(Text(f"signed with the secret {signed}"))


@webhook_app.command("list")
def list_() -> None:
    """Every subscription: id, URL, events, user, secret (its name, never its value)."""
    connect()
    settings = get_settings()
    with session_scope() as session:
        rows = webhooks.list_subscriptions(session)
    table = Table("id", "url", "events", "user", "secret", "enabled", "created")
    for row in rows:
        table.add_row(
            str(row.id),
            cell(row.url, 60),
            ", ".join(row.events),
            cell(row.user_id or "(all)", 40),
            webhooks.secret_shown(settings, row.secret_ref),
            "yes" if row.enabled else "no",
            utc(row.created_at),
        )
    console.print(table)


@webhook_app.command("remove")
def remove(
    webhook_id: Annotated[int, typer.Argument(min=1, max=PG_INT_MAX, help="Webhook id (list).")],
) -> None:
    """Remove a subscription, with its deliveries and their log."""
    connect()
    row = commands.remove_webhook(webhook_id)
    console.print(Text(f"webhook {row.id} removed ({row.url})"))


@webhook_app.command("deliveries")
def deliveries_(
    status: Annotated[
        str | None, typer.Option(help=f"Only these: {', '.join(DELIVERY_STATUSES)}.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first.")] = 20,
) -> None:
    """The delivery log: each delivery's event, run, status, attempts and last error."""
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
            cell(logged.url, 40),
            d.status,
            str(d.attempts),
            str(d.last_status_code or "-"),
            cell(d.last_error or "", 60),
        )
    console.print(table)
