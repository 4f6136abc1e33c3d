"""Model-call budgets: reserve before a call, settle after it, each in one guarded UPDATE.

DESIGN.md invariant 4: budgets are enforced, not observed. Before a call the run reserves the
most the call can spend (its prompt estimate plus `max_output_tokens`, and that many tokens at the
model's price) with `UPDATE runs SET used = used + :n WHERE used + :n <= limit`, so two calls
of one run can never both take the last unit; after the call the reservation is replaced by the
usage the provider reported, released when the provider refused or failed, or kept whole when the
call was cut off with its request out (`worker.model_calls.calls.cut_off`: the provider may bill
it). Spend can pass a limit only by what a provider reports beyond our estimate of one call's
prompt.

A reservation held by a worker that dies before settling stays charged: the budget errs on the
side of spending less, never more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.engine import token_calibrations
from models.errors import BudgetExhausted, CostBudgetSpent, NotFound, TokenBudgetSpent
from models.settings import ModelPrice
from models.tables import Run

MTOK = 1_000_000
# reserve: charge :tokens and :cost to run :run_id if both fit, the rule of `fits` in SQL.
RESERVE: Final = """
UPDATE runs SET tokens_used = tokens_used + :tokens, cost_used_usd = cost_used_usd + :cost
WHERE id = :run_id AND tokens_used + :tokens <= tokens_limit
    AND cost_used_usd + :cost <= cost_limit_usd
RETURNING id"""
# settle: replace what a call held with what it spent; :provider (NULL: unchanged) answered.
SETTLE: Final = """
UPDATE runs SET tokens_used = tokens_used - :held_tokens + :tokens,
    cost_used_usd = greatest(cost_used_usd - :held_cost + :cost, 0.0),
    provider = coalesce(:provider, provider)
WHERE id = :run_id"""
# charge_step: add a call's spend to the step it was made for.
CHARGE_STEP: Final = """
UPDATE steps SET tokens_used = tokens_used + :tokens, cost_used_usd = cost_used_usd + :cost
WHERE id = :step_id"""


def fits(used: Any, charge: Any, limit: Any) -> Any:
    """The budget rule, `used + charge <= limit`, for numbers; `RESERVE` is the same rule in
    SQL, the guard of its UPDATE (tests/integration/test_budgets.py holds the two together)."""
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
    found = sql.one(session, RESERVE, {"run_id": run_id, "tokens": tokens, "cost": cost})
    if found is None:
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
    calibration: token_calibrations.Sample | None = None,
) -> None:
    """Replace `reservation` with the call's actual spend (0 and 0 release it).

    The spend is also added to step `step_id` when the call was made for a step; `provider`
    labels the run with the provider that answered (the workers', not the submitter's setting);
    `calibration`, the server's count of the prompt beside ours, is folded into its model's
    ratio in the same statement (`models.engine.token_calibrations.calibrating`).
    """
    params = {"run_id": reservation.run_id, "provider": provider, "tokens": tokens, "cost": cost}
    params |= {"held_tokens": reservation.tokens, "held_cost": reservation.cost_usd}
    if calibration is None:
        sql.execute(session, SETTLE, params)
    else:
        statement = token_calibrations.calibrating(SETTLE)
        ratio = sql.scalar(session, statement, params | calibration.params())
        if ratio is not None:
            token_calibrations.remember(calibration.model, float(ratio))
    if step_id is not None and (tokens or cost):
        sql.execute(session, CHARGE_STEP, {"step_id": step_id, "tokens": tokens, "cost": cost})
