"""Memory administration: the embedding model in use, re-embedding, and forgetting a user.

Rows of two embedding models are never compared (DESIGN.md, invariant 7): each row stores its
model, and `check_embedding_model` refuses to start with a configured model that differs from the
one the stored rows use, until `reembed` has rewritten them. Forgetting a user deletes every
fact (history included), episode, turn and summary of that user, embeddings with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.embeddings import Embedder
from models.episodes import Episode, forget_episodes
from models.errors import ConfigurationError
from models.facts import Fact, ensure_vector_indexes, forget_facts
from models.messages import forget_messages

REEMBED_BATCH = 256


def models_in_use(session: Session) -> dict[str, int]:
    """Embedding model name -> number of stored rows (facts and episodes) that use it."""
    counts: dict[str, int] = {}
    for table in (Fact, Episode):
        column = col(table.embedding_model)
        stmt = sa.select(column, sa.func.count()).group_by(column)
        for model, n in session.execute(stmt):
            counts[model] = counts.get(model, 0) + int(n)
    return counts


def check_embedding_model(session: Session, embedder: Embedder) -> None:
    """Refuse a configured embedding model that differs from the stored rows' model.

    Raises `ConfigurationError` naming both and the command that fixes it; also makes sure the
    configured model's HNSW indexes exist.
    """
    others = {m: n for m, n in models_in_use(session).items() if m != embedder.model}
    if others:
        stored = ", ".join(f"{m} ({n} rows)" for m, n in sorted(others.items()))
        raise ConfigurationError(
            f"memory holds embeddings of {stored}, but AGENTQ_EMBEDDING_PROVIDER/"
            f"AGENTQ_EMBEDDING_MODEL give {embedder.model}: run `agentq memory reembed` first"
        )
    ensure_vector_indexes(session, model=embedder.model, dim=embedder.dim)


def reembed(session: Session, embedder: Embedder) -> dict[str, int]:
    """Re-embed every fact and episode whose model is not `embedder.model`; returns counts.

    The configured model's indexes are created first; the caller commits (one transaction, so a
    failure leaves the old embeddings in place).
    """
    ensure_vector_indexes(session, model=embedder.model, dim=embedder.dim)
    counts = {"facts": 0, "episodes": 0}
    for name, table, text_field in (("facts", Fact, "text"), ("episodes", Episode, "summary")):
        for batch in _stale(session, table, embedder.model):
            vectors = embedder.embed([getattr(row, text_field) for row in batch])
            for row, vector in zip(batch, vectors, strict=True):
                row.embedding, row.embedding_model, row.embedding_dim = (
                    vector,
                    embedder.model,
                    embedder.dim,
                )
            session.flush()
            counts[name] += len(batch)
    return counts


def _stale(session: Session, table: Any, model: str) -> Iterator[list[Any]]:
    while True:
        batch = list(
            session.exec(
                select(table).where(col(table.embedding_model) != model).limit(REEMBED_BATCH)
            )
        )
        if not batch:
            return
        yield batch


def forget_user(session: Session, *, user_id: str) -> dict[str, int]:
    """Delete all of `user_id`'s memory; returns the rows deleted per kind."""
    return {
        "facts": forget_facts(session, user_id=user_id),
        "episodes": forget_episodes(session, user_id=user_id),
        "messages": forget_messages(session, user_id=user_id),
    }
