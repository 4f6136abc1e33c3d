"""Recalling procedures by relevance, within their scope, and the record of which a plan used.

A run sees the procedures for everyone, those of its own user, and those of the tools its
catalogue or plan offers (`Visible`); never another user's. Candidates come from the two paths
facts use: cosine distance by pgvector and BM25 over the visible procedures' words, and are
re-scored as facts are (`models.memory.rerank.rescore`: similarity + 0.5 x BM25 relative to the
best candidate's), with no recency weight (a procedure's age says nothing about whether it
applies) and no conversation context (a procedure has none). Ties are broken by scope, the
narrower first (the user's own, then a tool's, then everyone's: `rank`). The scan is exact, with
no HNSW index: procedures are written by people or learned from runs, hundreds per user rather
than the millions an index pays off for. A retired procedure is never recalled, and one whose
adopted plans needed replans in a row ranks lower (`models.memory.procedure_outcomes`).

Which procedures a plan's context carried is recorded as a `procedures.recalled` event in the
transaction that writes the plan (`worker.phases.planner`): `{"purpose", "plan_version",
"procedures": [{"id", "version", "title", "scope"}]}`; `used_by_run` reads those back for the
console and CLI.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.memory import rerank, retrieval
from models.memory.procedure_outcomes import weight
from models.memory.procedures import Procedure
from models.tables import RunEvent, utcnow

RECALLED: Final = "procedures.recalled"
SCOPE_ORDER: Final = {"user": 0, "tool": 1, "everyone": 2}  # narrower first, on equal scores
PROCEDURES: Final = retrieval.Source("procedures", born="updated_at")
HIDDEN_TITLE: Final = "(a procedure of the run's user: hidden)"

_VISIBLE = (
    "(f.scope = 'everyone' OR (f.scope = 'user' AND f.user_id = :user_id)"
    " OR (f.scope = 'tool' AND f.tool = ANY(CAST(:tools AS text[]))))"
)
_DISTANCE = "f.embedding::vector({dim}) <=> CAST(:q AS vector({dim}))"
# The procedures a run may see, of the query's embedding model and dimension, not retired.
_ROWS = f"""FROM procedures AS f
    WHERE f.embedding_model = :model AND f.embedding_dim = {{dim}} AND {_VISIBLE}
      AND f.retired_at IS NULL"""
# procedure_candidates: the visible procedures best by BM25 (idf and lengths from the visible
# ones, `models.memory.rerank.term_stats`) and nearest by exact cosine distance, each scored
# for `models.memory.rerank.rescore`; one statement.
CANDIDATES: Final = f"""WITH {rerank.QUERY_WORDS},
{rerank.term_stats(f"SELECT f.tsv {_ROWS} LIMIT :idf_sample")},
by_text AS MATERIALIZED (
    SELECT f.id {_ROWS} AND f.tsv @@ (SELECT words FROM informative)
    ORDER BY {rerank.ROW_BM25} DESC, f.id LIMIT :pool
), by_vector AS MATERIALIZED (
    SELECT f.id {_ROWS} ORDER BY ({_DISTANCE}) + 0, f.id LIMIT :pool
)
SELECT f.id, f.updated_at AS born, {_DISTANCE} AS distance,
       coalesce({rerank.ROW_BM25}, 0) AS text_rank, f.tsv @@ query_terms.all_words AS text_match
FROM procedures AS f CROSS JOIN query_terms
WHERE f.id IN (SELECT id FROM by_text UNION SELECT id FROM by_vector)"""


@dataclass(frozen=True)
class Visible:
    """What a run may recall: everyone's procedures, `user_id`'s (None: no user's, as when a
    reviewer's words are in the run), and those of `tools`."""

    user_id: str | None
    tools: frozenset[str] = frozenset()

    def params(self) -> dict[str, Any]:
        """The scope's bind parameters (`:user_id` NULL matches no user-scoped row)."""
        return {"user_id": self.user_id, "tools": sorted(self.tools)}


ScoredProcedure = retrieval.Scored[Procedure]


def rank(
    found: Sequence[rerank.Candidate],
    query: retrieval.Search,
    scopes: dict[int, str],
    failures: Mapping[int, int] | None = None,
) -> list[retrieval.Scored[int]]:
    """The best `query.k` procedure ids of `found`: `models.memory.rerank.rescore`'s score
    (cosine similarity + TEXT_WEIGHT x BM25 relative to the best candidate's, relevance
    threshold included; a procedure has no thread, date or session summary, so nothing else
    counts) weighed down by its procedure's `failures` in a row (id ->
    count, `models.memory.procedure_outcomes.weight`), equal scores ordered by `SCOPE_ORDER` of
    `scopes` (id -> scope)."""
    scored = [
        replace(r, score=r.score * weight((failures or {}).get(r.item, 0)))
        for r in rerank.rescore(found, query)
    ]
    scored.sort(key=lambda r: (-r.score, SCOPE_ORDER.get(scopes.get(r.item, ""), 3), -r.item))
    return scored[: query.k]


def recall_procedures(
    session: Session,
    *,
    visible: Visible,
    query_text: str,
    query_embedding: Sequence[float],
    embedding_model: str,
    k: int = 3,
    min_similarity: float = retrieval.MIN_SIMILARITY,
    now: datetime | None = None,
) -> list[ScoredProcedure]:
    """The best `k` procedures of `visible` for a query, best first (fewer when fewer pass the
    relevance threshold). Only rows of `embedding_model` at the query's dimension are compared.
    Raises as `models.memory.retrieval.Search` does (`ConfigurationError`, `ValueError`)."""
    query = retrieval.Search(
        PROCEDURES,
        visible.user_id or "",
        embedding_model,
        query_text,
        query_embedding,
        k,
        now or utcnow(),
        min_similarity,
        None,
    )
    params = {**query.params(), **visible.params(), "idf_sample": rerank.IDF_SAMPLE}
    sql = sa.text(query.sql(CANDIDATES))
    found = [rerank.Candidate(**row._mapping) for row in session.execute(sql, params)]
    ids = {c.id for c in found}
    rows = {p.id or 0: p for p in session.exec(select(Procedure).where(col(Procedure.id).in_(ids)))}
    scopes = {i: p.scope for i, p in rows.items()}
    ranked = rank(found, query, scopes, {i: p.failures for i, p in rows.items()})
    return retrieval.with_rows(rows, ranked)


def used_entry(procedure: Procedure) -> dict[str, Any]:
    """What a `procedures.recalled` event says of one procedure: id, version, title, scope,
    origin."""
    return {
        "id": procedure.id,
        "version": procedure.version,
        "title": procedure.title,
        "scope": procedure.scope,
        "origin": procedure.origin,
    }


@dataclass(frozen=True)
class Used:
    """One procedure a plan's context carried: which plan version it informed, with its id,
    version, title, scope and origin (`person`, or `learned` from a run) as they were then (the
    procedure may since have changed); `adopted` when the plan is its template, taken by
    reference (`worker.phases.adoption`)."""

    plan_version: int
    purpose: str
    id: int
    version: int
    title: str
    scope: str
    adopted: bool = False
    origin: str = "person"  # events before issue 31 say none: every procedure was a person's


def used_by_run(session: Session, run_id: int, *, memory_readable: bool = True) -> list[Used]:
    """The procedures the run's plans used, oldest first, from its `procedures.recalled` events;
    without `memory_readable`, the titles of the run's user's own procedures are hidden."""
    stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == RECALLED)
    found: list[Used] = []
    for event in session.exec(stmt.order_by(col(RunEvent.id))):
        detail = event.detail if memory_readable else hidden_detail(event.detail)
        for p in detail.get("procedures") or []:
            found.append(
                Used(
                    int(detail.get("plan_version") or 0),
                    str(detail.get("purpose") or ""),
                    int(p.get("id") or 0),
                    int(p.get("version") or 0),
                    str(p.get("title") or ""),
                    str(p.get("scope") or ""),
                    adopted=detail.get("adopted") == p.get("id"),
                    origin=str(p.get("origin") or "person"),
                )
            )
    return found


def hidden_detail(detail: Any) -> dict[str, Any]:
    """A `procedures.recalled` event's detail for a reader who may not read the run's user's
    memory: the user-scoped procedures keep their id, version and scope, not their title."""
    found = detail if isinstance(detail, dict) else {}
    entries = found.get("procedures") if isinstance(found.get("procedures"), list) else []
    shown = [
        {**p, "title": HIDDEN_TITLE} if isinstance(p, dict) and p.get("scope") == "user" else p
        for p in entries or []
    ]
    return {**found, "procedures": shown}


def tools_of(names: Collection[str | None]) -> frozenset[str]:
    """The tool names among `names` (None and empty dropped)."""
    return frozenset(n for n in names if n)
