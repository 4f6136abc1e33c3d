"""Recalling procedures by relevance, within their scope, and the record of which a plan used.

A run sees the procedures for everyone, those of its own user, and those of the tools its
catalogue or plan offers (`Visible`); never another user's. Candidates come from the two paths
facts use (`models.memory.retrieval`): cosine distance by pgvector and full-text match, fused by
reciprocal rank (`models.memory.retrieval.fuse`), with no recency weight: a procedure's age says
nothing about whether it applies. Ties are broken by scope, the narrower first (the user's own, then
a tool's, then everyone's: `rank`). The scan is exact, with no HNSW index: procedures are written
by people, hundreds rather than the millions an index pays off for.

Which procedures a plan's context carried is recorded as a `procedures.recalled` event in the
transaction that writes the plan (`worker.phases.planner`): `{"purpose", "plan_version",
"procedures": [{"id", "version", "title", "scope"}]}`; `used_by_run` reads those back for the
console and CLI.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.memory import retrieval
from models.memory.procedures import Procedure
from models.tables import RunEvent, utcnow

RECALLED: Final = "procedures.recalled"
SCOPE_ORDER: Final = {"user": 0, "tool": 1, "everyone": 2}  # narrower first, on equal scores
PROCEDURES: Final = retrieval.Source("procedures", born="updated_at")
HIDDEN_TITLE: Final = "(a procedure of the run's user: hidden)"

_VISIBLE = (
    "(scope = 'everyone' OR (scope = 'user' AND user_id = :user_id)"
    " OR (scope = 'tool' AND tool = ANY(CAST(:tools AS text[]))))"
)
_DISTANCE = "embedding::vector({dim}) <=> CAST(:q AS vector({dim}))"
_CANDIDATES = f"""
    SELECT id, updated_at AS born, {_DISTANCE} AS distance,
           ts_rank_cd(tsv, {retrieval.ANY_WORD}) AS text_rank,
           tsv @@ websearch_to_tsquery('english', :query_text) AS text_match
    FROM procedures
    WHERE embedding_model = :model AND embedding_dim = {{dim}} AND {_VISIBLE}"""
# procedures_nearest: the procedures a run may see, by exact cosine distance.
NEAREST: Final = f"{_CANDIDATES}\n    ORDER BY ({_DISTANCE}) + 0, id LIMIT :pool"
# procedures_text: the procedures a run may see that match the query's words, best first.
TEXT_MATCHES: Final = f"""{_CANDIDATES}
      AND tsv @@ {retrieval.ANY_WORD}
    ORDER BY text_rank DESC, id LIMIT :pool"""


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
    by_vector: Sequence[retrieval.Hit],
    by_text: Sequence[retrieval.Hit],
    query: retrieval.Search,
    scopes: dict[int, str],
) -> list[retrieval.Scored[int]]:
    """The best `query.k` procedure ids: `models.memory.retrieval.fuse` of both lists (its relevance
    threshold included), equal scores ordered by `SCOPE_ORDER` of `scopes` (id -> scope)."""
    fused = retrieval.fuse(by_vector, by_text, replace(query, k=retrieval.MAX_K))
    fused.sort(key=lambda r: (-r.score, SCOPE_ORDER.get(scopes.get(r.item, ""), 3), -r.item))
    return fused[: query.k]


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
    params = {**query.params(), **visible.params()}
    by_vector = _hits(session, query.sql(NEAREST), params)
    by_text = _hits(session, query.sql(TEXT_MATCHES), params)
    ids = {h.id for h in [*by_vector, *by_text]}
    rows = {p.id or 0: p for p in session.exec(select(Procedure).where(col(Procedure.id).in_(ids)))}
    ranked = rank(by_vector, by_text, query, {i: p.scope for i, p in rows.items()})
    return retrieval.with_rows(rows, ranked)


def _hits(session: Session, sql: str, params: dict[str, Any]) -> list[retrieval.Hit]:
    return [retrieval.Hit(**row._mapping) for row in session.execute(sa.text(sql), params)]


def used_entry(procedure: Procedure) -> dict[str, Any]:
    """What a `procedures.recalled` event says of one procedure: id, version, title, scope."""
    return {
        "id": procedure.id,
        "version": procedure.version,
        "title": procedure.title,
        "scope": procedure.scope,
    }


@dataclass(frozen=True)
class Used:
    """One procedure a plan's context carried: which plan version it informed, with its id,
    version, title and scope as they were then (the procedure may since have changed);
    `adopted` when the plan is its template, taken by reference (`worker.phases.adoption`)."""

    plan_version: int
    purpose: str
    id: int
    version: int
    title: str
    scope: str
    adopted: bool = False


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
