"""The README's "Watching from SQL" queries, run as written against the real database after a
run that succeeded and one waiting for review: each one runs, and shows those runs where it
should (so the section cannot rot as the schema moves)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from models.db import session_scope
from tests.integration.conftest import wait_for_run

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parents[2] / "README.md"
SQL_BLOCK = re.compile(r"```sql\n(.*?)```", re.S)


def _section_queries() -> list[str]:
    """The SQL blocks of the README's "## Watching from SQL" section, in order."""
    text = README.read_text()
    start = text.index("\n## Watching from SQL\n")
    end = text.index("\n## ", start + 1)
    return SQL_BLOCK.findall(text[start:end])


def _rows(query: str, run_id: int) -> list[dict[str, Any]]:
    """The query's rows, `:run_id` bound as psql's `\\set run_id` would substitute it."""
    params = {"run_id": run_id} if ":run_id" in query else {}
    with session_scope() as session:
        return [dict(r) for r in session.execute(sa.text(query), params).mappings()]


def test_every_query_of_the_section_runs_and_shows_the_runs(make_run: Callable[..., int]) -> None:
    user = f"sql-{uuid.uuid4().hex[:8]}"
    steps = [{"name": "first", "kind": "tool", "tool": "noop"}]
    done = make_run([*steps, {"name": "second", "kind": "tool", "tool": "noop"}], user=user)
    failing = {"name": "x", "kind": "tool", "tool": "always_fails"}
    stuck = make_run([*steps, failing], user=user, replans=0)  # no replans: escalates
    wait_for_run(done, ("succeeded",))
    wait_for_run(stuck, ("waiting_review",))
    queries = _section_queries()
    assert len(queries) == 5, "the section promises five queries"
    progress, plan, timeline, review_queue, spend = queries

    assert stuck in {r["run_id"] for r in _rows(progress, done)}
    assert done not in {r["run_id"] for r in _rows(progress, done)}  # finished: not active
    assert [r["name"] for r in _rows(plan, done)] == ["first", "second"]
    assert all(r["status"] == "succeeded" for r in _rows(plan, done))
    kinds = [r["kind"] for r in _rows(timeline, done)]
    assert "run.succeeded" in kinds and len(kinds) <= 30, kinds
    assert stuck in {r["run_id"] for r in _rows(review_queue, done)}
    mine = [r for r in _rows(spend, done) if r["user_id"] == user]
    assert len(mine) == 1 and mine[0]["runs"] == 2 and mine[0]["succeeded"] == 1
