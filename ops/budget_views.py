"""How the CLI shows a run's spent budget to a reviewer: in the queue (`tokens 512/500`) and in
`agentq review show` (spent, limit, original limit, what approve sets by default, the ceiling);
`models.engine.budget_grants` decides the figures."""

from __future__ import annotations

from sqlmodel import Session

from models.engine import budget_grants, stack_limits
from models.engine.budget_grants import Standing
from models.front import queries
from models.settings import get_settings
from models.tables import Escalation, utcnow


def queue_budgets(session: Session, rows: list[Escalation]) -> dict[int, Standing]:
    """The spent budget of each undecided budget escalation of `rows`, by escalation id."""
    limits = stack_limits.effective(session, get_settings())
    runs = queries.runs_by_id(session, {e.run_id for e in rows})
    found = {
        e.id or 0: budget_grants.spent(session, e, runs[e.run_id], settings=limits, now=utcnow())
        for e in rows
        if e.status != "decided" and e.run_id in runs
    }
    return {esc_id: standing for esc_id, standing in found.items() if standing is not None}


def spent_text(budget: Standing) -> str:
    """` (tokens 512/500)`: spent of its limit, for the queue's `reason` column."""
    return f" ({budget.name} {_n(budget.used)}/{_n(budget.limit)})"


def budget_text(budget: Standing) -> str:
    """`tokens: 512 spent of 500 (original 500); approve sets 1012 (spent + original) unless
    --tokens N (at most 1000000, AGENTQ_MAX_TOKEN_BUDGET)`."""
    option = {"cost_usd": "--cost-usd", "wall_time_s": "--wall-time"}.get(budget.name)
    return (
        f"{budget.name}: {_n(budget.used)} spent of {_n(budget.limit)} (original "
        f"{_n(budget.original)}); approve sets {_n(budget.default)} (spent + original, at most "
        f"the ceiling) unless {option or '--' + budget.name} N (at most {_n(budget.ceiling)}, "
        f"{budget.setting})"
    )


def _n(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:.6g}"
