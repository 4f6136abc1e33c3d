"""Model-call budgets: reserve before a call, settle after it, each in one guarded UPDATE.

DESIGN.md invariant 4: budgets are enforced, not observed. Before a call the run reserves the
most the call can spend (its prompt estimate plus `max_output_tokens`, and that many tokens at the
model's price) with `UPDATE runs SET used = used + :n WHERE used + :n <= limit`, so two calls
of one run can never both take the last unit; after the call the reservation is replaced by the
usage the provider reported (or released when no answer came). Spend can pass a limit only by
what a provider reports beyond our estimate of one call's prompt.

A reservation held by a worker that dies before settling stays charged: the budget errs on the
side of spending less, never more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col

from models.errors import BudgetExhausted, CostBudgetSpent, NotFound, TokenBudgetSpent
from models.settings import ModelPrice
from models.tables import Run, Step

MTOK = 1_000_000


def fits(used: Any, charge: Any, limit: Any) -> Any:
    """The budget rule, `used + charge <= limit`: a bool for numbers, and the very same
    expression as the guard of `reserve`'s UPDATE for columns (so tests of the rule test it)."""
    return used + charge <= limit


def cost_usd(price: ModelPrice, *, prompt_tokens: int, completion_tokens: int) -> float:
    """USD of a call with this usage at `price` (USD per million prompt and answer tokens)."""
    return (prompt_tokens * price.input + completion_tokens * price.output) / MTOK


@dataclass(frozen=True)
class Reservation:
    """What a call holds of its run's budgets until it settles."""

    run_id: int
    tokens: int
    cost_usd: float


def reserve(session: Session, run_id: int, *, tokens: int, cost: float) -> Reservation:
    """Charge `tokens` and `cost` USD to run `run_id` if both fit under its limits.

    Raises `TokenBudgetSpent` or `CostBudgetSpent` (saying what is used, asked and allowed) and
    changes nothing when one does not fit; `NotFound` for an unknown run.
    """
    stmt = (
        sa.update(Run)
        .where(
            col(Run.id) == run_id,
            fits(col(Run.tokens_used), tokens, col(Run.tokens_limit)),
            fits(col(Run.cost_used_usd), cost, col(Run.cost_limit_usd)),
        )
        .values(tokens_used=Run.tokens_used + tokens, cost_used_usd=Run.cost_used_usd + cost)
        .returning(col(Run.id))
    )
    if session.scalar(stmt) is None:
        raise _refusal(session, run_id, tokens=tokens, cost=cost)
    return Reservation(run_id, tokens, cost)


def _refusal(session: Session, run_id: int, *, tokens: int, cost: float) -> BudgetExhausted:
    run = session.get(Run, run_id, populate_existing=True)
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    used, limit = run.tokens_used, run.tokens_limit
    spent, allowed = run.cost_used_usd, run.cost_limit_usd
    if not fits(used, tokens, limit):
        return TokenBudgetSpent(
            f"run {run_id}: token budget spent: {used} used of {limit}, this call may need {tokens}"
        )
    return CostBudgetSpent(
        f"run {run_id}: cost budget spent: USD {spent:.6f} used of {allowed:.6f}, this call may "
        f"need {cost:.6f}"
    )


def settle(
    session: Session,
    reservation: Reservation,
    *,
    tokens: int,
    cost: float,
    provider: str | None = None,
    step_id: int | None = None,
) -> None:
    """Replace `reservation` with the call's actual spend (0 and 0 release it).

    The spend is also added to step `step_id` when the call was made for a step; `provider`
    labels the run with the provider that answered (the workers', not the submitter's setting).
    """
    values: dict[str, object] = {
        "tokens_used": Run.tokens_used - reservation.tokens + tokens,
        "cost_used_usd": sa.func.greatest(Run.cost_used_usd - reservation.cost_usd + cost, 0.0),
    }
    if provider is not None:
        values["provider"] = provider
    session.execute(sa.update(Run).where(col(Run.id) == reservation.run_id).values(**values))
    if step_id is not None and (tokens or cost):
        session.execute(
            sa.update(Step)
            .where(col(Step.id) == step_id)
            .values(tokens_used=Step.tokens_used + tokens, cost_used_usd=Step.cost_used_usd + cost)
        )
