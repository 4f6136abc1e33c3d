"""The agent-tasks benchmark's own tools and playbooks (issue 12), loaded by its engine only.

The benchmark's engine lists this module in `AGENTQ_TOOL_MODULES` beside the product's, as the
test engines list `tests.support.tools`; no served stack offers these tools. They read the
bench's data under `ops/bench/data/` and reach no network:

- expense claims (`trip_receipts`, `fx_live_rate` with its fallback `fx_table_rate`; then the
  product's `convert_amounts`, `attach_receipts` and `submit_report`): trips with receipts in
  EUR, GBP, CHF, JPY, USD, NOK, one with two currencies and one with none. The live rate
  service times out for the bases in `live_down_for`; the monthly tables know some pairs only;
- customer lookups (`crm_account` with its fallback `directory_account`, `draft_note`): the
  CRM times out for some customers, the directory does not know every customer, one customer
  has no account manager;
- invoice reminders (`open_invoices`, `send_reminder`): one customer owes nothing.

The offline planner finds the playbooks by keyword: "expense claim", "account manager",
"invoice reminder" (the product's "expense report" playbook stays the product's).
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from models.errors import RetryableToolError, ToolError
from models.plans.playbooks import playbook
from models.plans.tools import Fallback, ToolContext, tool
from worker.tools.expenses import EXPENSE_CRITERIA, Currency, Month

DATA_DIR = Path(__file__).parent / "data"
TRIPS_FILE = DATA_DIR / "agent_trips.json"
CUSTOMERS_FILE = DATA_DIR / "agent_customers.json"
SERVICE_TIMEOUT_S = 0.1  # how long a service that is down keeps a caller waiting

Customer = Annotated[str, Field(pattern=r"^[A-Z]+-\d{4}$", description="e.g. ACME-1001")]
Email = Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$", description="an e-mail address")]


@functools.cache
def trips_data() -> dict[str, Any]:
    """`{"trips": {trip: {"month", "currency", "receipts": [[item, amount, day(, currency)]]}},
    "live_rates": {"BASE/QUOTE": rate}, "live_down_for": [BASE], "rate_tables": {month:
    {"BASE/QUOTE": rate}}}` from `data/agent_trips.json`."""
    data: dict[str, Any] = json.loads(TRIPS_FILE.read_text(encoding="utf-8"))
    return data


@functools.cache
def customers_data() -> dict[str, dict[str, Any]]:
    """`{customer: {"name", "manager_email" (or null), "crm": "up"|"down", "directory": bool,
    "billing_email", "currency", "open_invoices": [[invoice, amount]]}}`."""
    data: dict[str, dict[str, Any]] = json.loads(CUSTOMERS_FILE.read_text(encoding="utf-8"))
    return data


def trip_receipts_of(trip: str) -> dict[str, Any]:
    """The receipts of `trip` as `trip_receipts` returns them; raises `ToolError` naming the
    known trips for an unknown one."""
    trips = trips_data()["trips"]
    if trip not in trips:
        raise ToolError(f"no card statement for trip {trip!r}; known trips: {', '.join(trips)}")
    found = trips[trip]
    receipts = [
        {
            "item": line[0],
            "amount": line[1],
            "currency": line[3] if len(line) > 3 else found["currency"],
            "date": f"{found['month']}-{line[2]:02d}",
        }
        for line in found["receipts"]
    ]
    return {"receipts": receipts, "month": found["month"], "currency": found["currency"]}


@tool(
    "trip_receipts",
    description="The card receipts of a trip (`trip` such as zurich-2026-10); the statement's "
    "currency and month.",
    returns=("receipts", "month", "currency"),
    read_only=True,
)
def trip_receipts(ctx: ToolContext, trip: str) -> dict[str, Any]:
    """`{"receipts": [{"item", "amount", "currency", "date"}], "month": "YYYY-MM", "currency"}`;
    the receipts may be none (`[]`). Raises `ToolError` for an unknown trip."""
    return trip_receipts_of(trip)


@tool(
    "fx_live_rate",
    description="Today's exchange rate base->quote from the live rate service.",
    returns=("rate",),
    fallback=Fallback(
        "fx_table_rate",
        {
            "base": "${steps.receipts.currency}",
            "quote": "${facts.currency}",
            "month": "${steps.receipts.month}",
        },
    ),
    read_only=True,
)
def fx_live_rate(ctx: ToolContext, base: Currency, quote: Currency) -> dict[str, Any]:
    """`{"rate", "source": "live"}`; 1.0 when `base` is `quote`. Raises `RetryableToolError`
    (a timeout, after `SERVICE_TIMEOUT_S`) for a base in `live_down_for`, `ToolError` for a
    pair the service does not quote."""
    if base == quote:
        return {"rate": 1.0, "source": "same currency"}
    data = trips_data()
    if base in data["live_down_for"]:
        time.sleep(SERVICE_TIMEOUT_S)
        raise RetryableToolError(f"live rate service timed out for {base} after 0.1 s")
    pair = f"{base}/{quote}"
    if pair not in data["live_rates"]:
        raise ToolError(f"the live rate service does not quote {pair}")
    return {"rate": data["live_rates"][pair], "source": "live"}


@tool(
    "fx_table_rate",
    description="The exchange rate base->quote from the monthly rate table of `month`.",
    returns=("rate",),
    read_only=True,
)
def fx_table_rate(
    ctx: ToolContext, base: Currency, quote: Currency, month: Month
) -> dict[str, Any]:
    """`{"rate", "source": "table YYYY-MM"}`; 1.0 when `base` is `quote`. Raises `ToolError`
    naming what the tables hold when the month or the pair is missing."""
    if base == quote:
        return {"rate": 1.0, "source": "same currency"}
    tables = trips_data()["rate_tables"]
    pair = f"{base}/{quote}"
    if pair not in tables.get(month, {}):
        held = "; ".join(f"{m}: {', '.join(sorted(t))}" for m, t in sorted(tables.items()))
        raise ToolError(f"no {pair} rate in the {month} table (tables: {held})")
    return {"rate": tables[month][pair], "source": f"table {month}"}


def _customer(customer: str, *, where: str) -> dict[str, Any]:
    found = customers_data().get(customer)
    if found is None or (where == "directory" and not found["directory"]):
        raise ToolError(f"customer {customer!r} is not in the {where}")
    return found


def _account(customer: str, found: dict[str, Any], source: str) -> dict[str, Any]:
    return {
        "customer": customer,
        "name": found["name"],
        "manager_email": found["manager_email"],
        "source": source,
    }


@tool(
    "crm_account",
    description="A customer's account (name, account manager's e-mail) from the CRM service.",
    returns=("customer", "name", "manager_email"),
    fallback=Fallback("directory_account", {"customer": "${facts.customer}"}),
    read_only=True,
)
def crm_account(ctx: ToolContext, customer: Customer) -> dict[str, Any]:
    """`{"customer", "name", "manager_email" (null when the account has none), "source": "crm"}`.
    Raises `RetryableToolError` (a timeout) for a customer whose CRM shard is down, `ToolError`
    for an unknown customer."""
    found = _customer(customer, where="CRM")
    if found["crm"] == "down":
        time.sleep(SERVICE_TIMEOUT_S)
        raise RetryableToolError(f"CRM service timed out looking up {customer} after 0.1 s")
    return _account(customer, found, "crm")


@tool(
    "directory_account",
    description="A customer's account from the nightly company directory (slower, older).",
    returns=("customer", "name", "manager_email"),
    read_only=True,
)
def directory_account(ctx: ToolContext, customer: Customer) -> dict[str, Any]:
    """As `crm_account`, `"source": "directory"`; raises `ToolError` for a customer the
    directory does not list."""
    return _account(customer, _customer(customer, where="directory"), "directory")


def _receipt_id(prefix: str, ctx: ToolContext) -> str:
    """`<prefix>-<8 hex>` of the step's idempotency key: a retried step makes the same one."""
    return f"{prefix}-{hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:8]}"


@tool(
    "draft_note",
    description="Draft a note to `to` about a customer's account; returns the note id.",
    returns=("note_id", "to", "customer"),
)
def draft_note(ctx: ToolContext, to: Email, customer: Customer) -> dict[str, Any]:
    """`{"note_id": "NOTE-<8 hex>", "to", "customer"}` (the same id on every attempt)."""
    return {"note_id": _receipt_id("NOTE", ctx), "to": to, "customer": customer}


@tool(
    "open_invoices",
    description="A customer's unpaid invoices, their total and the billing contact.",
    returns=("invoices", "total", "currency", "billing_email"),
    read_only=True,
)
def open_invoices(ctx: ToolContext, customer: Customer) -> dict[str, Any]:
    """`{"invoices": [{"invoice", "amount"}], "total", "currency", "billing_email"}`; the
    invoices may be none (`[]`, total 0). Raises `ToolError` for an unknown customer."""
    found = _customer(customer, where="ledger")
    invoices = [{"invoice": number, "amount": amount} for number, amount in found["open_invoices"]]
    total = round(sum(amount for _, amount in found["open_invoices"]), 2)
    return {
        "invoices": invoices,
        "total": total,
        "currency": found["currency"],
        "billing_email": found["billing_email"],
    }


@tool(
    "send_reminder",
    description="E-mail a payment reminder listing `invoices` to `to`; returns its id.",
    returns=("reminder_id", "to", "invoices", "total"),
)
def send_reminder(
    ctx: ToolContext,
    to: Email,
    customer: Customer,
    invoices: Annotated[list[dict[str, Any]], Field(min_length=1)],
    total: Annotated[float, Field(gt=0)],
    currency: Currency,
) -> dict[str, Any]:
    """`{"reminder_id": "REM-<8 hex>", "to", "customer", "invoices": <count>, "total",
    "currency"}`: a reminder needs at least one invoice and a positive total."""
    return {
        "reminder_id": _receipt_id("REM", ctx),
        "to": to,
        "customer": customer,
        "invoices": len(invoices),
        "total": total,
        "currency": currency,
    }


def _tool_step(name: str, tool_name: str, args: dict[str, Any], after: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "instruction": f"Call {tool_name}.",
        "kind": "tool",
        "tool": tool_name,
        "args": args,
        "after": after,
    }


CLAIM_PLAYBOOK: list[dict[str, Any]] = [
    _tool_step("receipts", "trip_receipts", {"trip": "${facts.trip}"}, []),
    _tool_step(
        "rate",
        "fx_live_rate",
        {"base": "${steps.receipts.currency}", "quote": "${facts.currency}"},
        ["receipts"],
    ),
    _tool_step(
        "convert",
        "convert_amounts",
        {
            "receipts": "${steps.receipts.receipts}",
            "rate": "${steps.rate.rate}",
            "currency": "${facts.currency}",
        },
        ["receipts", "rate"],
    ),
    _tool_step(
        "attach", "attach_receipts", {"receipts": "${steps.receipts.receipts}"}, ["receipts"]
    ),
    _tool_step(
        "submit",
        "submit_report",
        {
            "total": "${steps.convert.total}",
            "currency": "${facts.currency}",
            "cost_centre": "${facts.cost_centre}",
            "attachments": "${steps.attach.attachments}",
        },
        ["convert", "attach"],
    ),
]
"""Goals naming an "expense claim" (facts: trip, currency, cost_centre): the product's expense
plan (`worker.tools.expenses.EXPENSE_PLAYBOOK`) on the bench's trips and rate services."""

NOTE_PLAYBOOK: list[dict[str, Any]] = [
    _tool_step("account", "crm_account", {"customer": "${facts.customer}"}, []),
    _tool_step(
        "note",
        "draft_note",
        {"to": "${steps.account.manager_email}", "customer": "${facts.customer}"},
        ["account"],
    ),
]
"""Goals naming an "account manager" (fact: customer): look the account up, draft the note."""

REMINDER_PLAYBOOK: list[dict[str, Any]] = [
    _tool_step("invoices", "open_invoices", {"customer": "${facts.customer}"}, []),
    _tool_step(
        "remind",
        "send_reminder",
        {
            "to": "${steps.invoices.billing_email}",
            "customer": "${facts.customer}",
            "invoices": "${steps.invoices.invoices}",
            "total": "${steps.invoices.total}",
            "currency": "${steps.invoices.currency}",
        },
        ["invoices"],
    ),
]
"""Goals naming an "invoice reminder" (fact: customer): find the open invoices, remind."""

playbook(("expense claim",), CLAIM_PLAYBOOK, EXPENSE_CRITERIA)
playbook(("account manager",), NOTE_PLAYBOOK)
playbook(("invoice reminder",), REMINDER_PLAYBOOK)
