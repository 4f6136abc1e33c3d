"""`models.engine.leases.step_of`: a claim's row as a `Step`, built without `__init__` (issue 29),
is the object `Step(**columns)` made: the same fields, detached, its attributes settable."""

from __future__ import annotations

from collections import namedtuple
from datetime import UTC, datetime

import sqlalchemy as sa

from models import sql
from models.engine.leases import step_of
from models.tables import Step

COLUMNS = {
    "id": 7,
    "run_id": 3,
    "plan_version": 2,
    "position": 1,
    "name": "fetch",
    "instruction": "fetch the page",
    "kind": "tool",
    "tool": "http_get",
    "args": {"url": "https://example.com"},
    "tools": [],
    "expect": None,
    "output": {"type": "object"},
    "status": "running",
    "attempt": 2,
    "max_attempts": 3,
    "queued_at": datetime(2026, 12, 5, 12, 0, tzinfo=UTC),
    "started_at": datetime(2026, 12, 5, 12, 0, 1, tzinfo=UTC),
    "lease_expires_at": datetime(2026, 12, 5, 12, 0, 11, tzinfo=UTC),
    "finished_at": None,
    "result": None,
    "error": None,
    "deferrals": 1,
    "tokens_used": 0,
    "cost_used_usd": 0.0,
    "wake_via": None,
}


def claim_row(**run: object) -> object:
    """A row as CLAIM_STEP returns it: the step's columns, then the run's (`run_*`)."""
    missing = set(Step.model_fields) - set(COLUMNS)
    assert not missing, f"COLUMNS lacks {missing}: add them"
    names = [*COLUMNS, *run]
    return namedtuple("Row", names)(*COLUMNS.values(), *run.values())


def test_a_claimed_step_is_the_step_its_columns_make() -> None:
    row = claim_row(run_user_id="ann", run_facts={}, run_tries=1)
    step, made = step_of(row), Step(**COLUMNS)
    assert step.model_dump() == made.model_dump() == COLUMNS
    assert sa.inspect(step).transient and sa.inspect(made).transient
    step.status = "succeeded"  # through the ORM's instrumentation, as on any Step
    assert step.status == "succeeded" and step.model_dump()["status"] == "succeeded"


def test_a_row_lacking_a_column_gets_the_models_default() -> None:
    """`models.sql.built` falls back to `model(**found)` when a column is missing, so an
    attribute is never left unset on a detached instance (reading it would raise)."""
    partial = {key: value for key, value in COLUMNS.items() if key != "deferrals"}
    step = sql.built(Step, {**partial, "not_a_column": 1})
    assert step.deferrals == Step(**partial).deferrals
    assert "not_a_column" not in step.__dict__
    whole = sql.built(Step, {**COLUMNS, "run_user_id": "ann"})
    assert "run_user_id" not in whole.__dict__ and whole.model_dump() == COLUMNS
