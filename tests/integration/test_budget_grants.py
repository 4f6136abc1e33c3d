"""Approving a budget escalation on the real Postgres (issue 27, item 11): the new limit is the
reviewer's choice within the operator's ceiling and not below the spend, or by default the spend
plus the original limit; it is written to the escalation and the run's timeline in the decision's
transaction. Before, a bare approve of a spent 500-token budget went on with 200,500 tokens."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.engine import run_transitions
from models.errors import Conflict, InvalidInput
from models.review import reviews
from models.tables import Escalation, Run, RunEvent

pytestmark = pytest.mark.integration


def _escalated(make_run: Callable[..., int], reason: str, **spend: Any) -> tuple[int, int]:
    """A run (inserted, nothing sent) with `spend` over its columns, escalated for `reason`
    from `running`; (run id, escalation id)."""
    run_id = make_run([{"name": "a", "kind": "tool", "tool": "noop"}], start=False)
    with session_scope() as session:
        session.execute(sa.update(Run).where(col(Run.id) == run_id).values(**spend))
        esc = run_transitions.escalate(session, run_id, expected="running", reason=reason)
        assert esc is not None
        return run_id, esc.id or 0


def _approve(esc_id: int, **budget: float) -> None:
    chosen = {"budget": budget} if budget else {}  # a bare approve, as before
    with session_scope() as session:
        reviews.approve(session, esc_id, reviewer="rita", max_attempts=3, **chosen)


def _rows(run_id: int, esc_id: int) -> tuple[Run, Escalation, list[dict[str, Any]]]:
    with session_scope() as session:
        run, esc = session.get(Run, run_id), session.get(Escalation, esc_id)
        events = session.exec(
            select(RunEvent.detail).where(
                RunEvent.run_id == run_id, RunEvent.kind == "run.budget_granted"
            )
        ).all()
    assert run is not None and esc is not None
    return run, esc, list(events)


def test_a_bare_approve_grants_the_spend_plus_the_original_limit(
    make_run: Callable[..., int],
) -> None:
    run_id, esc_id = _escalated(make_run, "token_budget_spent", tokens_limit=500, tokens_used=512)
    _approve(esc_id)
    run, esc, events = _rows(run_id, esc_id)
    assert run.tokens_limit == 512 + 500
    granted = {"used": 512, "limit_before": 500.0, "original_limit": 500.0, "limit": 1012}
    assert esc.granted == {"tokens": {**granted, "chosen": "default"}}
    assert events == [{"escalation_id": esc_id, "by": "rita", "budgets": esc.granted}]
    # spent again: the default adds the original limit (500), not the granted one (1012)
    with session_scope() as session:
        session.execute(sa.update(Run).where(col(Run.id) == run_id).values(tokens_used=1100))
        again = run_transitions.escalate(
            session, run_id, expected="running", reason="token_budget_spent"
        )
        assert again is not None
    _approve(again.id or 0)
    assert _rows(run_id, again.id or 0)[0].tokens_limit == 1100 + 500


def test_the_reviewers_limit_is_set_within_the_ceiling_and_not_below_the_spend(
    make_run: Callable[..., int],
) -> None:
    run_id, esc_id = _escalated(make_run, "token_budget_spent", tokens_limit=500, tokens_used=512)
    for budget, error, says in (
        ({"tokens": 511}, Conflict, "budget.tokens: not below what the run spent, 512"),
        ({"tokens": 2_000_000}, InvalidInput, "budget.tokens: at most 1000000 (AGENTQ_MAX_TOKEN"),
        ({"tokens": 600.5}, InvalidInput, "budget.tokens: a whole number"),
        ({"coins": 3}, InvalidInput, "budget.coins: not a budget"),
    ):
        with pytest.raises(error, match=re.escape(says)):
            _approve(esc_id, **budget)
    run, esc, events = _rows(run_id, esc_id)
    assert (run.status, run.tokens_limit, esc.status, events) == ("waiting_review", 500, "open", [])
    _approve(esc_id, tokens=9000, replans=5)
    run, esc, _ = _rows(run_id, esc_id)
    assert (run.tokens_limit, run.replans_limit) == (9000, 5)
    assert esc.granted is not None
    assert esc.granted["tokens"]["chosen"] == esc.granted["replans"]["chosen"] == "reviewer"


def test_wall_time_and_cost_grants_move_the_deadline_and_the_cost_limit(
    make_run: Callable[..., int],
) -> None:
    run_id, esc_id = _escalated(
        make_run, "wall_time_budget_spent", wall_time_limit_s=60.0, cost_used_usd=0.3
    )
    _approve(esc_id, wall_time_s=7200, cost_usd=0.5)
    run, esc, _ = _rows(run_id, esc_id)
    assert run.wall_time_limit_s == 7200 and run.cost_limit_usd == pytest.approx(0.5)
    assert run.deadline_at == run.created_at + timedelta(seconds=7200)
    assert esc.granted is not None and set(esc.granted) == {"wall_time_s", "cost_usd"}
    cost_run, cost_esc = _escalated(
        make_run, "cost_budget_spent", cost_limit_usd=0.25, cost_used_usd=0.26
    )
    _approve(cost_esc)
    assert _rows(cost_run, cost_esc)[0].cost_limit_usd == pytest.approx(0.51)
