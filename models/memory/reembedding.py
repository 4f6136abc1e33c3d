"""The embedding model and dimension of stored memory, checked against the configured embedder,
and re-embedding when they change.

Rows of two embedding models, or of one model at two dimensions, are never compared (DESIGN.md,
invariant 7): each fact and episode stores its model and dimension, `check_embedding_model`
refuses to start a worker with a configured model or dimension other than the stored rows', and
`check_user_memory` refuses a search of a user's memory that would silently find nothing, until
`reembed` has rewritten them (`agentq memory reembed`). Issue 11: a search used to answer 200
with no results, and a dimension changed under the same model name was not seen at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.errors import ConfigurationError
from models.memory.embeddings import Embedder
from models.memory.episodes import Episode
from models.memory.facts import Fact, drop_vector_indexes, ensure_vector_indexes

REEMBED_BATCH = 256
SETTINGS: Final = "AGENTQ_EMBEDDING_PROVIDER/AGENTQ_EMBEDDING_MODEL/AGENTQ_EMBEDDING_DIM"
Space = tuple[str, int]  # an embedding model's name and its dimension


def models_in_use(session: Session, *, user_id: str | None = None) -> dict[Space, int]:
    """(embedding model, dimension) -> number of stored rows (facts, with their history, and
    episodes) embedded by it; only `user_id`'s rows when given (through the `user_id` indexes)."""
    counts: dict[Space, int] = {}
    for table in (Fact, Episode):
        model, dim = col(table.embedding_model), col(table.embedding_dim)
        stmt = sa.select(model, dim, sa.func.count()).group_by(model, dim)
        if user_id is not None:
            stmt = stmt.where(col(table.user_id) == user_id)
        for name, size, n in session.execute(stmt):
            counts[(name, size)] = counts.get((name, size), 0) + int(n)
    return counts


def check_embedding_model(session: Session, embedder: Embedder) -> None:
    """At start-up: refuse a configured embedding model or dimension that differs from the
    stored rows' (any user's), and make sure the configured model's HNSW indexes of its
    dimension exist (dropping its indexes of other dimensions, which no row uses any more).

    Raises `ConfigurationError` naming the stored and configured models and dimensions, the
    settings (`AGENTQ_EMBEDDING_DIM` alone when only the dimension changed) and
    `agentq memory reembed`.
    """
    _refuse_others(models_in_use(session), embedder, whose="memory")
    ensure_vector_indexes(session, model=embedder.model, dim=embedder.dim)


def check_user_memory(session: Session, embedder: Embedder, *, user_id: str) -> None:
    """Before searching `user_id`'s memory: raise `ConfigurationError` (as
    `check_embedding_model` does) when any of their stored rows was embedded by another model
    or dimension than `embedder`'s, whose vectors the search would never compare. Builds
    nothing, so a request may call it."""
    counts = models_in_use(session, user_id=user_id)
    _refuse_others(counts, embedder, whose=f"the memory of user {user_id!r}")


def _refuse_others(counts: dict[Space, int], embedder: Embedder, *, whose: str) -> None:
    configured = (embedder.model, embedder.dim)
    others = {space: n for space, n in counts.items() if space != configured}
    if not others:
        return
    stored = ", ".join(
        f"{m} of {d} dimensions ({n} row{'' if n == 1 else 's'})"
        for (m, d), n in sorted(others.items())
    )
    dim_only = all(m == embedder.model for m, _ in others)
    settings = "AGENTQ_EMBEDDING_DIM gives" if dim_only else f"{SETTINGS} give"
    raise ConfigurationError(
        f"{whose} holds embeddings of {stored}, but {settings} {embedder.model} of "
        f"{embedder.dim} dimensions: stop agentq's workers and run `agentq memory reembed` "
        "with these settings first, or set them back"
    )


def reembed(session: Session, embedder: Embedder) -> dict[str, int]:
    """Re-embed every fact and episode not of `embedder`'s model and dimension; returns the
    counts (`{"facts": n, "episodes": n}`).

    The model's indexes of other dimensions are dropped first (they would refuse the rewritten
    rows), its indexes of `embedder.dim` built last. The caller commits (one transaction, so a
    failure leaves the old embeddings and indexes in place). Raises what `embedder.embed`
    raises (`ProviderError`, `ConfigurationError`).
    """
    drop_vector_indexes(session, model=embedder.model, keep_dim=embedder.dim)
    counts = {"facts": 0, "episodes": 0}
    for name, table, text_field in (("facts", Fact, "text"), ("episodes", Episode, "summary")):
        for batch in _stale(session, table, embedder):
            vectors = embedder.embed([getattr(row, text_field) for row in batch])
            for row, vector in zip(batch, vectors, strict=True):
                row.embedding, row.embedding_model, row.embedding_dim = (
                    vector,
                    embedder.model,
                    embedder.dim,
                )
            session.flush()
            counts[name] += len(batch)
    ensure_vector_indexes(session, model=embedder.model, dim=embedder.dim)
    return counts


def _stale(session: Session, table: Any, embedder: Embedder) -> Iterator[list[Any]]:
    other = sa.or_(
        col(table.embedding_model) != embedder.model, col(table.embedding_dim) != embedder.dim
    )
    while True:
        batch = list(session.exec(select(table).where(other).limit(REEMBED_BATCH)))
        if not batch:
            return
        yield batch
