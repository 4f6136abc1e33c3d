"""The docs' SQL, run as written against the real database after a run that succeeded and one
waiting for review: every ```sql block of README.md and docs/ runs, and the five queries of the
"Watching from SQL" page (docs/how-to/sql.md, found by its plan query wherever it is) show those
runs where they should (so the page cannot rot as the schema moves)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from models.db import session_scope
from tests.integration.conftest import wait_for_run
from tests.support import doc_pages

pytestmark = pytest.mark.integration


def _page_queries() -> list[str]:
    """The SQL blocks of the page that watches runs from SQL (the one whose plan query reads
    `run_current_steps`), in order."""
    page = doc_pages.block_matching(r"FROM run_current_steps", language="sql").page
    return [b.body for b in doc_pages.blocks(page) if b.language == "sql"]


def _every_query() -> list[tuple[str, str]]:
    """`(page:line, query)` of every SQL block of every page."""
    return [
        (f"{doc_pages.relative(b.page)}:{b.line}", b.body)
        for page in doc_pages.pages()
        for b in doc_pages.blocks(page)
        if b.language == "sql"
    ]


def _rows(query: str, run_id: int) -> list[dict[str, Any]]:
    """The query's rows, `:run_id` bound as psql's `\\set run_id` would substitute it."""
    params = {"run_id": run_id} if ":run_id" in query else {}
    with session_scope() as session:
        return [dict(r) for r in session.execute(sa.text(query), params).mappings()]


def test_every_query_of_the_page_runs_and_shows_the_runs(make_run: Callable[..., int]) -> None:
    user = f"sql-{uuid.uuid4().hex[:8]}"
    steps = [{"name": "first", "kind": "tool", "tool": "noop"}]
    done = make_run([*steps, {"name": "second", "kind": "tool", "tool": "noop"}], user=user)
    failing = {"name": "x", "kind": "tool", "tool": "always_fails"}
    stuck = make_run([*steps, failing], user=user, replans=0)  # no replans: escalates
    wait_for_run(done, ("succeeded",))
    wait_for_run(stuck, ("waiting_review",))
    queries = _page_queries()
    assert len(queries) == 6, "the page promises six queries"
    progress, plan, timeline, review_queue, spend, run_spend = queries

    assert stuck in {r["run_id"] for r in _rows(progress, done)}
    assert done not in {r["run_id"] for r in _rows(progress, done)}  # finished: not active
    assert [r["name"] for r in _rows(plan, done)] == ["first", "second"]
    assert all(r["status"] == "succeeded" for r in _rows(plan, done))
    kinds = [r["kind"] for r in _rows(timeline, done)]
    assert "run.succeeded" in kinds and len(kinds) <= 30, kinds
    assert stuck in {r["run_id"] for r in _rows(review_queue, done)}
    mine = [r for r in _rows(spend, done) if r["user_id"] == user]
    assert len(mine) == 1 and mine[0]["runs"] == 2 and mine[0]["succeeded"] == 1
    (one,) = _rows(run_spend, done)
    assert one["run_id"] == done and one["status"] == "succeeded" and one["tokens_limit"] > 0


def test_every_sql_block_of_the_docs_runs(make_run: Callable[..., int]) -> None:
    done = make_run([{"name": "only", "kind": "tool", "tool": "noop"}])
    wait_for_run(done, ("succeeded",))
    found = _every_query()
    assert len(found) >= 5
    for where, query in found:
        try:
            _rows(query, done)
        except sa.exc.DBAPIError as exc:
            raise AssertionError(f"{where}: the query fails: {exc.orig}") from exc
