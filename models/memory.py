"""Memory administration: the embedding model in use, re-embedding, and forgetting a user.

Rows of two embedding models are never compared (DESIGN.md, invariant 7): each row stores its
model, and `check_embedding_model` refuses to start with a configured model that differs from the
one the stored rows use, until `reembed` has rewritten them. Forgetting a user deletes every
fact (history included), episode, turn and summary of that user, embeddings with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.embedders import make_embedder
from models.embeddings import Embedder
from models.episodes import Episode, ScoredEpisode, forget_episodes, recall_episodes
from models.errors import ConfigurationError
from models.facts import Fact, ScoredFact, ensure_vector_indexes, forget_facts, recall
from models.messages import forget_messages
from models.settings import get_settings
from models.tables import Run, RunEvent

REEMBED_BATCH = 256


HASH_MIN_SIMILARITY = 0.0  # hashed words: low cosines are normal, rely on the fused rank
MODEL_MIN_SIMILARITY = 0.2  # all-MiniLM-L6-v2 on LoCoMo dev: keeps 96% of evidence pairs


@lru_cache(maxsize=1)
def embedder() -> Embedder:
    """The configured embedder (`AGENTQ_EMBEDDING_PROVIDER`), built once per process."""
    s = get_settings()
    return make_embedder(
        s.embedding_provider,
        model=s.embedding_model,
        dim=s.embedding_dim,
        base_url=s.openai_base_url,
        api_key=s.openai_api_key,
        request_timeout_s=s.model_request_timeout_s,
        max_retries=s.model_max_attempts - 1,
    )


def min_similarity() -> float:
    """The recall threshold: `AGENTQ_RECALL_MIN_SIMILARITY`, else the provider's default."""
    s = get_settings()
    if s.recall_min_similarity is not None:
        return s.recall_min_similarity
    return HASH_MIN_SIMILARITY if s.embedding_provider == "hash" else MODEL_MIN_SIMILARITY


@dataclass(frozen=True)
class Recalled:
    """What memory offers one call, most relevant first."""

    facts: list[ScoredFact] = field(default_factory=list)
    episodes: list[ScoredEpisode] = field(default_factory=list)


def recall_for(session: Session, *, user_id: str, query: str) -> Recalled:
    """The user's facts and past episodes relevant to `query` (hybrid search, one embedding)."""
    s, model = get_settings(), embedder()
    if s.recall_facts_k == 0 and s.recall_episodes_k == 0:
        return Recalled()
    vector = model.embed([query])[0]
    common: dict[str, Any] = {
        "user_id": user_id,
        "query_text": query,
        "query_embedding": vector,
        "embedding_model": model.model,
        "min_similarity": min_similarity(),
    }
    return Recalled(
        facts=recall(session, k=s.recall_facts_k, **common) if s.recall_facts_k else [],
        episodes=recall_episodes(session, k=s.recall_episodes_k, **common)
        if s.recall_episodes_k
        else [],
    )


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
            f"AGENTQ_EMBEDDING_MODEL give {embedder.model}: stop agentq and run "
            "`agentq memory reembed` with the new setting first"
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
    """Delete all of `user_id`'s memory; returns the rows deleted per kind.

    Also deleted: the `memory.recalled` events of the user's runs, which quote recalled facts.
    The runs themselves (goals, pinned facts, steps) stay: they are the record of work done.
    """
    counts = {
        "facts": forget_facts(session, user_id=user_id),
        "episodes": forget_episodes(session, user_id=user_id),
        **forget_messages(session, user_id=user_id),
    }
    recalled = session.execute(
        sa.delete(RunEvent).where(
            col(RunEvent.kind) == "memory.recalled",
            col(RunEvent.run_id).in_(sa.select(col(Run.id)).where(col(Run.user_id) == user_id)),
        )
    )
    counts["recall events"] = int(getattr(recalled, "rowcount", 0))
    return counts
