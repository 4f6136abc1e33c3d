"""The agent-tasks benchmark's goals (issue 12): what each asks, and the outcome it must have.

Each `Goal` is submitted as a user would (its text, pinned facts, success criteria, replan
budget, should-replan check, and an explicit plan only where a planner would not write the
scenario itself). Its `Expected` outcome is checked from rows (`ops.bench.agent_outcomes`),
never from the run's own verdict. The totals below were worked out by hand from the receipts
in `data/agent_trips.json` (sum of the amounts x the rate, rounded half-up to cents once);
tests/unit/test_bench_agent_tasks.py checks them against that data.

Four kinds (`Goal.kind`):
- `expense`: expense reports and claims with receipts in EUR, GBP, CHF, JPY, USD, NOK, filed in
  EUR, USD or GBP against different cost centres; the live rate service is down for some
  currencies (a replan onto the monthly table), some rates exist nowhere (an escalation);
- `lookup`: a customer's account manager or open invoices, where the CRM times out for some
  customers (a replan onto the directory) and the directory does not know one (an escalation);
- `unmeetable`: criteria the outcome cannot meet (a total, a currency, an addressee, a count
  the receipts do not give; a plan that files in another currency than the pinned one): the
  run must escalate `goal_not_met`, not succeed;
- `pointless`: a step's result makes the rest of the plan pointless (no receipts, no open
  invoices, no account manager): the effect must never happen, and the run ends by saying why
  (it succeeds with an answer, or escalates).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

Outcome = Literal["met", "escalates", "stops"]
FILED: Final = (
    "The expense report is submitted in ${facts.currency} against cost centre ${facts.cost_centre}."
)
NOTED: Final = "The note about ${facts.customer} is drafted to its account manager."
REMINDED: Final = "A reminder of the open invoices of ${facts.customer} is sent."
REPLAN_SPENT: Final = ("replan_budget_spent",)
NOT_MET: Final = ("goal_not_met",)


@dataclass(frozen=True)
class Expected:
    """The outcome a goal must have. `effect` is the tool whose successful call is the goal's
    effect (`submit_report`, `draft_note`, `send_reminder`). `met`: the run succeeded and made
    exactly one such call, whose result holds each of `fields` (numbers to the cent);
    `escalates`: the run waits for review, its last escalation's reason one of `reasons`;
    `stops`: no such call was made, and the run succeeded or waits for review."""

    kind: Outcome
    effect: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Goal:
    """One benchmark goal. The goals of one `family` (its `kind` unless given) belong to one
    user (`bench-<family>`, `ops.bench.agent_runs.user_of`): what a run of the family teaches
    (episodes, facts, learned procedures) its next goals may use, in this pass and the next.
    `plan`: an explicit plan (`{"steps": [...]}`) or None (the planner's)."""

    id: str
    kind: str
    text: str
    facts: Mapping[str, str]
    criteria: tuple[str, ...]
    expected: Expected
    replans: int = 1
    replan_check: str = "off"
    plan: Mapping[str, Any] | None = None
    family: str = ""

    @property
    def user(self) -> str:
        """The family's user: `bench-<family or kind>`."""
        return f"bench-{self.family or self.kind}"


def _filed(total: float, currency: str, cost_centre: str) -> Expected:
    fields = {"total": total, "currency": currency, "cost_centre": cost_centre}
    return Expected("met", "submit_report", fields)


def _escalates(effect: str, reasons: tuple[str, ...]) -> Expected:
    return Expected("escalates", effect, reasons=reasons)


def _claim(
    id_: str, city: str, trip: str, pins: tuple[str, str], expected: Expected, **more: Any
) -> Goal:
    """An expense claim of `trip` filed in `pins` = (currency, cost centre)."""
    text = more.pop("text", f"File the expense claim for my {city} trip")
    facts = {"trip": trip, "currency": pins[0], "cost_centre": pins[1]}
    criteria = more.pop("criteria", (FILED,))
    return Goal(id_, more.pop("kind", "expense"), text, facts, criteria, expected, **more)


def _customer(
    id_: str, kind: str, text: str, customer: str, expected: Expected, **more: Any
) -> Goal:
    """A goal about `customer` (`text` has `{c}` where its id goes)."""
    criteria = more.pop("criteria", (REMINDED if expected.effect == "send_reminder" else NOTED,))
    return Goal(
        id_, kind, text.format(c=customer), {"customer": customer}, criteria, expected, **more
    )


NOTE: Final = "Draft a note to the account manager of customer {c}"
REMIND: Final = "Send customer {c} an invoice reminder for what it owes"
LISBON: Final = "File my Lisbon trip expense report"  # the product's own playbook and tools
MONTHLY: Final = "File my monthly expense claim"  # a recurring goal: the trip is pinned
MY_CUSTOMER: Final = "Draft a note to the account manager of my customer"  # the customer pinned


def _note(to: str, customer: str) -> Expected:
    return Expected("met", "draft_note", {"to": to, "customer": customer})


# The submitter's own plan for `unmeetable-pinned-currency`: it files the New York receipts in
# their card currency (USD) although the run pins GBP, which no planner would write.
CARD_CURRENCY_PLAN: Final[dict[str, Any]] = {
    "steps": [
        {
            "name": "receipts",
            "kind": "tool",
            "tool": "trip_receipts",
            "args": {"trip": "${facts.trip}"},
        },
        {
            "name": "convert",
            "kind": "tool",
            "tool": "convert_amounts",
            "args": {"receipts": "${steps.receipts.receipts}", "rate": 1.0, "currency": "USD"},
        },
        {
            "name": "attach",
            "kind": "tool",
            "tool": "attach_receipts",
            "args": {"receipts": "${steps.receipts.receipts}"},
        },
        {
            "name": "submit",
            "kind": "tool",
            "tool": "submit_report",
            "args": {
                "total": "${steps.convert.total}",
                "currency": "USD",
                "cost_centre": "${facts.cost_centre}",
                "attachments": "${steps.attach.attachments}",
            },
        },
    ]
}

EUR_4410: Final = ("EUR", "CC-4410")
GOALS: Final[tuple[Goal, ...]] = (
    _claim("lisbon-oct", "", "lisbon-2026-10", EUR_4410, _filed(473.43, *EUR_4410), text=LISBON),
    _claim(
        "lisbon-nov",
        "",
        "lisbon-2026-11",
        EUR_4410,
        _escalates("submit_report", REPLAN_SPENT),
        text=LISBON,
    ),
    _claim(
        "berlin", "Berlin", "berlin-2026-09", ("EUR", "CC-2001"), _filed(454.10, "EUR", "CC-2001")
    ),
    _claim(
        "london", "London", "london-2026-10", ("EUR", "CC-3107"), _filed(367.15, "EUR", "CC-3107")
    ),
    _claim(
        "zurich", "Zurich", "zurich-2026-10", ("EUR", "CC-5120"), _filed(534.75, "EUR", "CC-5120")
    ),
    _claim(
        "tokyo",
        "Tokyo",
        "tokyo-2026-10",
        ("USD", "CC-6001"),
        _filed(309.12, "USD", "CC-6001"),
        text="File the expense claim for my Tokyo trip in US dollars",
    ),
    _claim(
        "new-york",
        "New York",
        "new-york-2026-09",
        ("GBP", "CC-7300"),
        _filed(280.25, "GBP", "CC-7300"),
        text="File the expense claim for my New York trip in pounds",
    ),
    _claim(
        "madrid",
        "Madrid",
        "madrid-2026-09",
        ("EUR", "CC-8200"),
        _filed(526.29, "EUR", "CC-8200"),
        replan_check="model",
    ),
    _claim("oslo", "Oslo", "oslo-2026-10", EUR_4410, _escalates("submit_report", REPLAN_SPENT)),
    _claim(
        "paris-mixed", "Paris", "paris-2026-10", EUR_4410, _escalates("submit_report", REPLAN_SPENT)
    ),
    _customer(
        "lookup-acme", "lookup", NOTE, "ACME-1001", _note("ana.silva@example.com", "ACME-1001")
    ),
    _customer(
        "lookup-globex", "lookup", NOTE, "GLOBEX-2002", _note("li.wei@example.com", "GLOBEX-2002")
    ),
    _customer(
        "lookup-initech",
        "lookup",
        NOTE,
        "INITECH-3003",
        _note("ravi.patel@example.com", "INITECH-3003"),
        replan_check="model",
    ),
    _customer(
        "lookup-umbrella", "lookup", NOTE, "UMBRELLA-9999", _escalates("draft_note", REPLAN_SPENT)
    ),
    _customer(
        "remind-acme",
        "lookup",
        REMIND,
        "ACME-1001",
        Expected(
            "met",
            "send_reminder",
            {"to": "billing@acme.example.com", "invoices": 2, "total": 1540.50, "currency": "EUR"},
        ),
    ),
    _claim(
        "unmeetable-total",
        "London",
        "london-2026-10",
        ("EUR", "CC-3107"),
        _escalates("submit_report", NOT_MET),
        kind="unmeetable",
        criteria=(FILED, "The report's total is 400.00 ${facts.currency}."),
    ),
    _claim(
        "unmeetable-currency",
        "Berlin",
        "berlin-2026-09",
        ("EUR", "CC-2001"),
        _escalates("submit_report", NOT_MET),
        kind="unmeetable",
        criteria=("The expense report is filed in CHF.",),
    ),
    _claim(
        "unmeetable-count",
        "Berlin",
        "berlin-2026-09",
        EUR_4410,
        _escalates("submit_report", NOT_MET),
        kind="unmeetable",
        criteria=(FILED, "All 4 receipts of the trip are attached to the report."),
    ),
    _customer(
        "unmeetable-addressee",
        "unmeetable",
        NOTE,
        "ACME-1001",
        _escalates("draft_note", NOT_MET),
        criteria=("The note is drafted to 'ben.okafor@example.com'.",),
    ),
    _claim(
        "unmeetable-pinned-currency",
        "New York",
        "new-york-2026-09",
        ("GBP", "CC-7300"),
        _escalates("submit_report", NOT_MET),
        kind="unmeetable",
        plan=CARD_CURRENCY_PLAN,
    ),
    _claim(
        "pointless-no-receipts",
        "Rome",
        "rome-2026-10",
        EUR_4410,
        Expected("stops", "submit_report"),
        kind="pointless",
        replan_check="model",
    ),
    _customer(
        "pointless-nothing-owed",
        "pointless",
        REMIND,
        "GLOBEX-2002",
        Expected("stops", "send_reminder"),
        replan_check="model",
    ),
    _customer(
        "pointless-no-manager",
        "pointless",
        NOTE,
        "HOOLI-4004",
        Expected("stops", "draft_note"),
        replan_check="model",
    ),
    # Two families of a recurring goal (issue 31's learning curve): one text, one user, the
    # trip or customer pinned. The first of each needs a replan (the live rate service is down
    # for CHF and JPY; the CRM for Globex and Initech); what it teaches plans the rest at once.
    *(
        _claim(id_, "", trip, pins, _filed(total, *pins), text=MONTHLY, family="monthly")
        for id_, trip, pins, total in (
            ("monthly-zurich", "zurich-2026-10", ("EUR", "CC-5120"), 534.75),
            ("monthly-tokyo", "tokyo-2026-10", ("USD", "CC-6001"), 309.12),
            ("monthly-zurich-again", "zurich-2026-10", ("EUR", "CC-5190"), 534.75),
        )
    ),
    *(
        _customer(
            f"notes-{name}", "lookup", MY_CUSTOMER, customer, _note(to, customer), family="notes"
        )
        for name, customer, to in (
            ("globex", "GLOBEX-2002", "li.wei@example.com"),
            ("initech", "INITECH-3003", "ravi.patel@example.com"),
            ("globex-again", "GLOBEX-2002", "li.wei@example.com"),
        )
    ),
)
