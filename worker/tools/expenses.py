"""The demo's expense-report tools: "File my Lisbon trip expense report".

Four receipts were billed in USD on a corporate card (hotel 412.50, dinner 38.00, dinner 41.00,
taxi 23.10: 514.60 USD); the report is filed in the run's pinned currency (EUR) against its cost
centre. The live rate service always times out here, so the plan only succeeds after the replanner
swaps in `cached_rate`, which knows the monthly tables in `data/rates.json` (2026-09, 2026-10): the
October trip files 473.43 EUR, the November trip has no table and fails with a clear error.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from decimal import ROUND_HALF_UP, Decimal
from importlib import resources
from typing import Annotated, Any

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from models.errors import RetryableToolError, ToolError
from models.plans.playbooks import playbook
from models.plans.tools import Fallback, ToolContext, tool

LIVE_RATE_TIMEOUT_SECONDS = 0.2
CENT = Decimal("0.01")

Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="ISO 4217 code, e.g. EUR")]
Month = Annotated[str, Field(pattern=r"^\d{4}-\d{2}$", description="YYYY-MM")]


@with_config(ConfigDict(extra="allow", strict=True))
class Receipt(TypedDict):
    """One card receipt: `amount` in `currency`, `date` as YYYY-MM-DD (other keys are kept)."""

    item: str
    amount: float
    currency: str
    date: str


_LINES: tuple[tuple[str, float, int], ...] = (
    ("hotel", 412.50, 12),
    ("dinner", 38.00, 12),
    ("dinner", 41.00, 13),
    ("taxi", 23.10, 14),
)
_TRIP_MONTHS = {"lisbon-2026-10": "2026-10", "lisbon-2026-11": "2026-11"}


@tool(
    "collect_receipts",
    description="Collect the card receipts of a trip; all in one currency, all in one month.",
    returns=("receipts", "month", "currency"),
    read_only=True,
)
def collect_receipts(ctx: ToolContext, trip: str) -> dict[str, Any]:
    """`{"receipts": [Receipt, ...], "month": "YYYY-MM", "currency": "USD"}`.

    Raises `ToolError` listing the known trips when `trip` is unknown.
    """
    if trip not in _TRIP_MONTHS:
        raise ToolError(f"no receipts for trip {trip!r}; known trips: {', '.join(_TRIP_MONTHS)}")
    month = _TRIP_MONTHS[trip]
    receipts = [
        {"item": item, "amount": amount, "currency": "USD", "date": f"{month}-{day:02d}"}
        for item, amount, day in _LINES
    ]
    return {"receipts": receipts, "month": month, "currency": "USD"}


@tool(
    "live_rate",
    description="Today's exchange rate base->quote from the live rate service.",
    returns=("rate",),
    fallback=Fallback(
        "cached_rate",
        {
            "base": "${steps.receipts.currency}",
            "quote": "${facts.currency}",
            "month": "${steps.receipts.month}",
        },
    ),
    read_only=True,
)
def live_rate(ctx: ToolContext, base: Currency, quote: Currency) -> dict[str, Any]:
    """Never answers in the demo: waits 0.2 s, then raises `RetryableToolError` (a timeout)."""
    time.sleep(LIVE_RATE_TIMEOUT_SECONDS)
    raise RetryableToolError(f"rate service timed out after {LIVE_RATE_TIMEOUT_SECONDS:g} s")


@tool(
    "cached_rate",
    description="The exchange rate base->quote from the cached monthly rate table of `month`.",
    returns=("rate",),
    read_only=True,
)
def cached_rate(ctx: ToolContext, base: Currency, quote: Currency, month: Month) -> dict[str, Any]:
    """`{"rate": 0.92, "source": "cached monthly table 2026-10"}` from `data/rates.json`.

    Raises `ToolError` naming the tables (or pairs) there are when `month` (or the pair) is missing.
    """
    tables = _rate_tables()
    if month not in tables:
        raise ToolError(f"no cached rate table for {month} (tables: {', '.join(sorted(tables))})")
    pair = f"{base}/{quote}"
    if pair not in tables[month]:
        pairs = ", ".join(sorted(tables[month]))
        raise ToolError(f"no {pair} rate in the {month} table (pairs: {pairs})")
    return {"rate": tables[month][pair], "source": f"cached monthly table {month}"}


@tool(
    "convert_amounts",
    description="Convert receipts into `currency` at `rate`; the total is rounded to cents.",
    returns=("total", "currency", "lines", "rate"),
    read_only=True,
)
def convert_amounts(
    ctx: ToolContext,
    receipts: list[Receipt],
    rate: Annotated[float, Field(gt=0)],
    currency: Currency,
) -> dict[str, Any]:
    """`{"total": 473.43, "currency": "EUR", "lines": [...], "rate": 0.92}`.

    total = sum(amounts) * rate, rounded half-up to cents once (Decimal), so the total does not
    carry per-line rounding; each line is rounded the same way for display. Raises `ToolError`
    when the receipts are in more than one currency.
    """
    sources = sorted({receipt["currency"] for receipt in receipts})
    if len(sources) > 1:
        raise ToolError(f"receipts are in {', '.join(sources)}; convert one currency at a time")
    factor = Decimal(str(rate))
    lines = [_convert_line(receipt, factor, currency) for receipt in receipts]
    total = sum((Decimal(str(receipt["amount"])) for receipt in receipts), Decimal(0)) * factor
    return {"total": _cents(total), "currency": currency, "lines": lines, "rate": rate}


@tool(
    "attach_receipts",
    description="Attach the receipt images to the report; returns their attachment ids.",
    returns=("attachments",),
)
def attach_receipts(ctx: ToolContext, receipts: list[Receipt]) -> dict[str, Any]:
    """`{"attachments": ["att-1-hotel", "att-2-dinner", ...]}`: 1-based, in receipt order."""
    return {"attachments": [f"att-{n}-{r['item']}" for n, r in enumerate(receipts, start=1)]}


@tool(
    "submit_report",
    description="File the expense report; the same step always files the same report id.",
    returns=("report_id", "total", "currency", "cost_centre", "attachments"),
)
def submit_report(
    ctx: ToolContext,
    total: float,
    currency: Currency,
    cost_centre: Annotated[str, Field(pattern=r"^CC-\d{4}$", description="CC-NNNN")],
    attachments: list[str],
) -> dict[str, Any]:
    """`{"report_id": "EXP-<8 hex>", "total", "currency", "cost_centre", "attachments": <count>}`.

    The report id is the first 8 hex digits of sha256(ctx.idempotency_key), so a retried step
    files the same report instead of a second one.
    """
    digest = hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()
    return {
        "report_id": f"EXP-{digest[:8]}",
        "total": total,
        "currency": currency,
        "cost_centre": cost_centre,
        "attachments": len(attachments),
    }


EXPENSE_PLAYBOOK: list[dict[str, Any]] = [
    {
        "name": "receipts",
        "instruction": "Collect the trip's card receipts.",
        "kind": "tool",
        "tool": "collect_receipts",
        "args": {"trip": "${facts.trip}"},
        "after": [],
    },
    {
        "name": "rate",
        "instruction": "Get the exchange rate from the receipts' currency to the report currency.",
        "kind": "tool",
        "tool": "live_rate",
        "args": {"base": "${steps.receipts.currency}", "quote": "${facts.currency}"},
        "after": ["receipts"],
    },
    {
        "name": "convert",
        "instruction": "Convert the receipts into the report currency.",
        "kind": "tool",
        "tool": "convert_amounts",
        "args": {
            "receipts": "${steps.receipts.receipts}",
            "rate": "${steps.rate.rate}",
            "currency": "${facts.currency}",
        },
        "after": ["receipts", "rate"],
    },
    {
        "name": "attach",
        "instruction": "Attach the receipts to the report.",
        "kind": "tool",
        "tool": "attach_receipts",
        "args": {"receipts": "${steps.receipts.receipts}"},
        "after": ["receipts"],
    },
    {
        "name": "submit",
        "instruction": "Submit the expense report against the cost centre.",
        "kind": "tool",
        "tool": "submit_report",
        "args": {
            "total": "${steps.convert.total}",
            "currency": "${facts.currency}",
            "cost_centre": "${facts.cost_centre}",
            "attachments": "${steps.attach.attachments}",
        },
        "after": ["convert", "attach"],
    },
]
"""The offline planner's plan for goals mentioning "expense report" (facts: trip, currency,
cost_centre). Each step waits only for the steps whose results it uses, so the rate lookup and
attaching the receipts run side by side once the receipts are in."""

EXPENSE_CRITERIA = (
    "The expense report is submitted in ${facts.currency} against cost centre "
    "${facts.cost_centre}.",
)
"""What the offline planner's expense plan must achieve: the values the goal check
(`models.engine.goal_checks.rule_verdict`) looks for in what the run delivered."""

playbook(("expense report",), EXPENSE_PLAYBOOK, EXPENSE_CRITERIA)


def _convert_line(receipt: Receipt, factor: Decimal, currency: str) -> dict[str, Any]:
    return {
        "item": receipt["item"],
        "date": receipt["date"],
        "amount": _cents(Decimal(str(receipt["amount"])) * factor),
        "currency": currency,
        "source_amount": receipt["amount"],
        "source_currency": receipt["currency"],
    }


def _cents(amount: Decimal) -> float:
    """`amount` rounded half-up to cents, as a JSON number."""
    return float(amount.quantize(CENT, rounding=ROUND_HALF_UP))


@functools.cache
def _rate_tables() -> dict[str, dict[str, float]]:
    """`{"YYYY-MM": {"BASE/QUOTE": rate}}` from the packaged `data/rates.json`."""
    text = resources.files("worker.tools").joinpath("data/rates.json").read_text(encoding="utf-8")
    tables: dict[str, dict[str, float]] = json.loads(text)
    return tables
