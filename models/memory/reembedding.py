"""The embedding model and dimension of stored memory, checked against the configured embedder,
and re-embedding when they change.

Rows of two embedding models, or of one model at two dimensions, are never compared (DESIGN.md,
invariant 7): each fact, episode and procedure stores its model and dimension,
`check_embedding_model` refuses to start a worker with a configured model or dimension other than
the stored rows', and `check_user_memory` refuses a search of a user's memory that would silently
find nothing, until `reembed` has rewritten them (`agentq memory reembed`). Issue 11: a search
used to answer 200 with no results, and a dimension changed under the same model name was not
seen at all. Issue 31: `reembed` was one transaction that built the new index over its own
rewritten rows, which failed at any real volume, and left procedures out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session, col

from models.db import session_scope
from models.errors import ConfigurationError, ProviderError
from models.memory import retrieval
from models.memory.embeddings import Embedder
from models.memory.episodes import Episode
from models.memory.facts import Fact, drop_vector_indexes, ensure_vector_indexes
from models.memory.procedures import Procedure, embedded_text

REEMBED_BATCH_ROWS: Final = 256  # texts per embedding call, rows per transaction
SETTINGS: Final = "AGENTQ_EMBEDDING_PROVIDER/AGENTQ_EMBEDDING_MODEL/AGENTQ_EMBEDDING_DIM"
INDEXES: Final = "HNSW indexes"  # the last step `reembed` reports progress of
Space = tuple[str, int]  # an embedding model's name and its dimension
Progress = Callable[[str, int, int], None]  # (step: a table or INDEXES, done, of how many)

STALE: Final = "(t.embedding_model <> :model OR t.embedding_dim <> :dim)"
# stale_count: how many rows of a table another model or dimension than :model, :dim embedded.
STALE_COUNT: Final = f"SELECT count(*) FROM {{table}} AS t WHERE {STALE}"
# stale_batch: the next :rows such rows after id :after, in id order (a walk of the primary key).
STALE_BATCH: Final = f"""SELECT t.id, {{columns}} FROM {{table}} AS t
WHERE t.id > :after AND {STALE} ORDER BY t.id LIMIT :rows"""
# rewrite_batch: new embeddings for a batch, written to the rows still stale whose guard column
# has not changed since they were read; returns the ids written.
REWRITE_BATCH: Final = f"""UPDATE {{table}} AS t
SET embedding = CAST(v.embedding AS vector), embedding_model = :model, embedding_dim = :dim
FROM unnest(CAST(:ids AS bigint[]), CAST(:embeddings AS text[]), CAST(:guards AS bigint[]))
    AS v(id, embedding, guard)
WHERE t.id = v.id AND {STALE} AND t.{{guard}} = v.guard
RETURNING t.id"""


@dataclass(frozen=True)
class EmbeddedTable:
    """A table whose rows carry an embedding: its `name`, the `columns` its embedded text is made
    of, `text` making that text from a row of them, and `guard`, a column that changes whenever
    the text does (`id` where a row's text never changes once written)."""

    name: str
    columns: tuple[str, ...]
    text: Callable[[Any], str]
    guard: str = "id"


EMBEDDED_TABLES: Final = (
    EmbeddedTable("facts", ("text",), lambda row: str(row.text)),
    EmbeddedTable("episodes", ("summary",), lambda row: str(row.summary)),
    EmbeddedTable(
        "procedures",
        ("title", "when_to_use", "body", "version"),
        lambda row: embedded_text(row.title, row.when_to_use, row.body),
        guard="version",  # an edit writes version + 1 (`models.memory.procedures.update`)
    ),
)


def models_in_use(session: Session, *, user_id: str | None = None) -> dict[Space, int]:
    """(embedding model, dimension) -> number of stored rows (facts, with their history,
    episodes and procedures) embedded by it; with `user_id`, only that user's facts and episodes
    (what a search of their memory compares; through the `user_id` indexes)."""
    counts: dict[Space, int] = {}
    tables = (Fact, Episode) if user_id is not None else (Fact, Episode, Procedure)
    for table in tables:
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


def reembed(
    embedder: Embedder,
    *,
    url: str | None = None,
    batch_rows: int = REEMBED_BATCH_ROWS,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Re-embed every fact (history included), episode and procedure of another model or
    dimension than `embedder`'s, on the database at `url` (default: the configured one); returns
    the rows rewritten per table (`{"facts": n, "episodes": n, "procedures": n}`).

    1. The model's HNSW indexes of other dimensions are dropped and committed (their expression
       casts each of the model's rows to their dimension, so they would refuse a rewritten row).
    2. Each table is walked by id, `batch_rows` rows at a time: read in one transaction,
       embedded between transactions (DESIGN.md, invariant 11), written in another by a guarded
       UPDATE that skips a row rewritten or edited meanwhile; a walk that skipped one is run
       again. Memory holds one batch; `progress(table, done, total)` follows each.
    3. The model's HNSW indexes of its dimension are built with `CREATE INDEX CONCURRENTLY`
       (`models.memory.retrieval.ensure_vector_index`), after the rows are committed: a build
       in the transaction that rewrote them fails on their old versions.

    Stopped at any point, every row holds either its old embedding or its new one, the workers'
    start check refuses the rows left, and running it again finishes the job. Raises
    `ConfigurationError` when a writer of another model left rows behind meanwhile (as
    `check_embedding_model`), `ProviderError` for an embedder's answer of the wrong shape, what
    `embedder.embed` raises (`ProviderError`, `ConfigurationError`), and `ValueError` for a
    `batch_rows` below 1.
    """
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"batch_rows {batch_rows!r}: must be an integer >= 1")
    report = progress or (lambda step, done, total: None)
    with session_scope(url) as session:
        drop_vector_indexes(session, model=embedder.model, keep_dim=embedder.dim)
    counts = {
        table.name: _rewrite(table, embedder, url=url, batch_rows=batch_rows, report=report)
        for table in EMBEDDED_TABLES
    }
    with session_scope(url) as session:
        _refuse_others(models_in_use(session), embedder, whose="memory")
    report(INDEXES, 0, 2)
    with session_scope(url, autocommit=True) as session:
        for built, table in enumerate(("facts", "episodes"), start=1):
            retrieval.ensure_vector_index(
                session, table=table, model=embedder.model, dim=embedder.dim, concurrently=True
            )
            report(INDEXES, built, 2)
    return counts


def _rewrite(
    table: EmbeddedTable, embedder: Embedder, *, url: str | None, batch_rows: int, report: Progress
) -> int:
    """Walk `table`'s stale rows by id, a batch at a time (see `reembed`); the rows written."""
    space = {"model": embedder.model, "dim": embedder.dim}
    with session_scope(url) as session:
        total = int(session.scalar(sa.text(STALE_COUNT.format(table=table.name)), space) or 0)
    done, again = 0, True
    report(table.name, done, total)
    while again:  # once more when a row changed under the walk (its guard failed)
        again, after = False, 0
        while batch := _stale_batch(table, space, url=url, after=after, rows=batch_rows):
            vectors = _embedded(embedder, [table.text(row) for row in batch])
            written = _write(table, space, batch, vectors, url=url)
            done, after, again = done + written, batch[-1].id, again or written < len(batch)
            report(table.name, done, max(total, done))
    return done


def _stale_batch(
    table: EmbeddedTable, space: dict[str, Any], *, url: str | None, after: int, rows: int
) -> list[Any]:
    sql = STALE_BATCH.format(table=table.name, columns=", ".join(f"t.{c}" for c in table.columns))
    with session_scope(url) as session:
        return list(session.execute(sa.text(sql), {**space, "after": after, "rows": rows}))


def _embedded(embedder: Embedder, texts: Sequence[str]) -> list[str]:
    """`texts` embedded, in pgvector's text form; `ProviderError` for an answer with another
    number of vectors, or a vector of another dimension than `embedder.dim` or not finite."""
    vectors = embedder.embed(texts)
    if len(vectors) != len(texts):
        raise ProviderError(
            f"embedding model {embedder.model}: {len(vectors)} vectors for {len(texts)} texts"
        )
    for vector in vectors:
        if len(vector) != embedder.dim or not all(math.isfinite(x) for x in vector):
            raise ProviderError(
                f"embedding model {embedder.model}: a vector of {len(vector)} values, "
                f"not {embedder.dim} finite numbers"
            )
    return [retrieval.vector_text(v) for v in vectors]


def _write(
    table: EmbeddedTable,
    space: dict[str, Any],
    batch: Sequence[Any],
    vectors: Sequence[str],
    *,
    url: str | None,
) -> int:
    """One transaction: `REWRITE_BATCH` of `batch` with `vectors`; the rows written."""
    params = {
        **space,
        "ids": [row.id for row in batch],
        "embeddings": list(vectors),
        "guards": [getattr(row, table.guard) for row in batch],
    }
    sql = REWRITE_BATCH.format(table=table.name, guard=table.guard)
    with session_scope(url) as session:
        return len(session.execute(sa.text(sql), params).all())
