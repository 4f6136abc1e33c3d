"""The first stage of retrieval over the memory tables (`facts`, `episodes`, `procedures`).

Named queries, all scoped to one tenant and one embedding model (DESIGN.md, invariant 7):
nearest rows by cosine distance through the model's partial HNSW expression index (pgvector
README, "Indexing vectors with different dimensions"; iterative scans, pgvector 0.8), and
full-text matches by `ts_rank_cd`. Facts and episodes are re-scored from there by
`models.memory.rerank`; procedures' two lists are fused by reciprocal rank fusion with k = 60
(Cormack, Clarke and Buettcher, SIGIR 2009, `fuse`), then weighted by recency.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlmodel import Session

from models.errors import ConfigurationError

T = TypeVar("T")

# Any word of the query (its lexemes joined with OR), for ranking by words shared; `text_match`
# stays the stricter every-word match of websearch_to_tsquery.
ANY_WORD = "replace(plainto_tsquery('english', :query_text)::text, ' & ', ' | ')::tsquery"

RRF_K = 60  # Cormack et al., SIGIR 2009
MIN_SIMILARITY = 0.2  # cosine; see `fuse`
RECENCY_HALF_LIFE_DAYS = 30.0
RECENCY_WEIGHT = 0.2  # share of the score that recency can take away; see `recency_weight`
CANDIDATES_PER_K, MIN_CANDIDATES = 4, 20  # each path returns max(4 k, 20) candidates
MAX_K = 250  # keeps the pool within 1..1000, the allowed range of hnsw.ef_search
HNSW_EF_SEARCH_DEFAULT = 40  # pgvector's default
HNSW_MAX_SCAN_TUPLES = 20_000  # pgvector's default: visits per iterative scan before it stops
HNSW_MAX_DIM = 2000  # pgvector README: HNSW indexes `vector` of up to 2,000 dimensions
VECTOR_MAX_DIM = 16_000  # pgvector README: a `vector` holds up to 16,000 dimensions
MODEL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")
SECONDS_PER_DAY = 86_400.0

_DISTANCE = "embedding::vector({dim}) <=> CAST(:q AS vector({dim}))"
_CANDIDATES = f"""
    SELECT id, {{born}} AS born, {_DISTANCE} AS distance,
           ts_rank_cd(tsv, {ANY_WORD}) AS text_rank,
           tsv @@ websearch_to_tsquery('english', :query_text) AS text_match
    FROM {{table}}
    WHERE embedding_model = :model AND user_id = :user_id AND embedding_dim = {{dim}}
      AND {{visible}}"""
# nearest_indexed: a tenant's rows of one model by cosine distance, ordered by exactly the
# expression of the model's HNSW index; the outer sort makes a relaxed-order scan exact (pgvector
# README: "`+ 0` is needed for Postgres 17+").
NEAREST_INDEXED = f"""WITH relaxed AS MATERIALIZED ({_CANDIDATES}
    ORDER BY {_DISTANCE} LIMIT :pool
) SELECT * FROM relaxed ORDER BY distance + 0, id"""
# nearest_exact: the same rows by exact distance, never through HNSW (`+ 0` hides the operator
# from the planner): the refill when an index scan returns fewer rows than asked.
NEAREST_EXACT = f"{_CANDIDATES}\n    ORDER BY ({_DISTANCE}) + 0, id LIMIT :pool"
# text_matches: a tenant's rows of one model matching the query's words, best ts_rank_cd first.
TEXT_MATCHES = f"""{_CANDIDATES}
      AND tsv @@ {ANY_WORD}
    ORDER BY text_rank DESC, id LIMIT :pool"""
# vector_index: one model's HNSW cosine index on one memory table (pgvector README, "Indexing
# vectors with different dimensions"); name, model and dim are validated before they get here.
VECTOR_INDEX = (
    "CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw "
    "((embedding::vector({dim})) vector_cosine_ops) WHERE embedding_model = '{model}'"
)
# index_lock: one builder per index name at a time (two concurrent IF NOT EXISTS both create).
INDEX_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(:name, 0))"
# vector_indexes: the names of the HNSW indexes on one memory table (`VECTOR_INDEX` builds them).
VECTOR_INDEXES = """SELECT c.relname FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
WHERE i.indrelid = CAST(:table AS regclass) AND a.amname = 'hnsw'"""
# drop_index: drop one of those, by a name `vector_index_name` made (checked before it gets here).
DROP_INDEX = "DROP INDEX IF EXISTS {name}"
# vector_index_concurrently: `VECTOR_INDEX` built without blocking writes, outside a transaction.
VECTOR_INDEX_CONCURRENTLY = VECTOR_INDEX.replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY", 1)
# drop_index_concurrently: `DROP_INDEX` outside a transaction (of an index a failed build left).
DROP_INDEX_CONCURRENTLY = DROP_INDEX.replace("DROP INDEX", "DROP INDEX CONCURRENTLY", 1)
# index_valid: whether the index :name on one memory table is valid (no row: there is none).
INDEX_VALID = """SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = CAST(:table AS regclass) AND c.relname = :name"""
# search_settings: this transaction's iterative-scan settings (a savepoint undoes them afterwards).
SEARCH_SETTINGS = f"""
SELECT set_config('hnsw.iterative_scan', :iterative_scan, true),
       set_config('hnsw.ef_search', :ef_search, true),
       set_config('hnsw.max_scan_tuples', '{HNSW_MAX_SCAN_TUPLES}', true),
       set_config('plan_cache_mode', 'force_custom_plan', true)
"""


@dataclass(frozen=True)
class Source:
    """One memory table as the queries see it: `born` is the recency column, `visible` the SQL
    predicate of rows a default recall may return (`:now` is bound), `threads` whether its rows
    may have conversation neighbours."""

    table: str
    born: str
    visible: str = "TRUE"
    threads: bool = False  # rows carry `thread` and `position` (see `models.memory.rerank`)


@dataclass(frozen=True)
class Search:
    """One recall: the best `k` rows of `source` for one tenant, one embedding model, a query
    text and its embedding, at `now` (timezone-aware).

    Raises `ConfigurationError` for an unsafe model name or a dimension outside 1..16,000, and
    `ValueError` for a non-finite embedding, `k` outside 1..MAX_K or a naive `now`.
    """

    source: Source
    user_id: str
    model: str
    query_text: str
    embedding: Sequence[float]
    k: int
    now: datetime
    min_similarity: float = MIN_SIMILARITY
    half_life_days: float | None = RECENCY_HALF_LIFE_DAYS
    include_history: bool = False

    def __post_init__(self) -> None:
        check_model(self.model)
        check_embedding(self.embedding)
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= MAX_K:
            raise ValueError(f"k {self.k!r}: must be an integer in 1..{MAX_K}")
        if self.now.tzinfo is None:
            raise ValueError("now: must be timezone-aware")

    @property
    def pool(self) -> int:
        """Candidates each path returns: enough for an item ranked low in both lists to surface."""
        return max(self.k * CANDIDATES_PER_K, MIN_CANDIDATES)

    def sql(self, template: str) -> str:
        """`template` (one of the named queries) for this search's table and dimension."""
        visible = "TRUE" if self.include_history else self.source.visible
        table, born, dim = self.source.table, self.source.born, len(self.embedding)
        return template.format(table=table, born=born, dim=dim, visible=visible)

    def params(self) -> dict[str, Any]:
        """The bind parameters of the named queries."""
        q = vector_text(self.embedding)
        keys = ("user_id", "model", "query_text", "pool", "now")
        return {"q": q, **{key: getattr(self, key) for key in keys}}


@dataclass(frozen=True)
class Hit:
    """One candidate row: cosine `distance` in [0, 2], `text_rank` from ts_rank_cd (0 when the
    words do not match), `born` its timestamp (UTC)."""

    id: int
    born: datetime
    distance: float
    text_rank: float
    text_match: bool


@dataclass(frozen=True)
class Scored(Generic[T]):
    """A recalled `item` (a row, or its id before the rows are loaded) and its score's parts:
    cosine `similarity` in [-1, 1], `text_rank` (BM25 for facts, episodes and procedures,
    `models.memory.rerank`; 0 without a shared word), `relevance` before
    recency (the re-scored relevance, or the RRF score of `fuse`), `recency` its weight in
    [1 - RECENCY_WEIGHT, 1], `score = relevance * recency`."""

    item: T
    similarity: float
    text_rank: float
    text_match: bool
    relevance: float
    recency: float
    score: float


def with_rows(rows: dict[int, T], ranked: Sequence[Scored[int]]) -> list[Scored[T]]:
    """`ranked` with each id replaced by its row from `rows` (ids missing there are skipped)."""
    return [Scored(rows[r.item], *astuple(r)[1:]) for r in ranked if r.item in rows]


def check_model(model: str) -> str:
    """`model` if it is a safe embedding-model name (`MODEL_PATTERN`), else `ConfigurationError`."""
    if not MODEL_PATTERN.match(model):
        raise ConfigurationError(f"embedding_model {model!r}: must match {MODEL_PATTERN.pattern}")
    return model


def check_table(table: str) -> str:
    """`table` if it is a memory table (`facts`, `episodes`), else `ConfigurationError`."""
    if table not in ("facts", "episodes"):
        raise ConfigurationError(f"table {table!r}: must be facts or episodes")
    return table


def check_dim(dim: int, *, limit: int = HNSW_MAX_DIM) -> int:
    """`dim` if it is an int in 1..`limit`, else `ConfigurationError`."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= limit:
        raise ConfigurationError(f"embedding dim {dim!r}: must be an integer in 1..{limit}")
    return dim


def check_embedding(embedding: Sequence[float]) -> int:
    """The dimension of `embedding`; `ValueError` if it is empty, too long or not finite."""
    check_dim(len(embedding), limit=VECTOR_MAX_DIM)
    if not all(math.isfinite(x) for x in embedding):
        raise ValueError("embedding: every value must be a finite number")
    return len(embedding)


def vector_text(embedding: Sequence[float]) -> str:
    """`embedding` in pgvector's text form, `[0.1,-0.2]`, to bind as text and cast to `vector`."""
    return "[" + ",".join(repr(float(x)) for x in embedding) + "]"


def vector_index_name(table: str, model: str, dim: int) -> str:
    """`<table>_embedding_<slug>_<dim>_<hash8>`: under 63 characters (NAMEDATALEN), and the hash
    keeps models that slug alike ("a-b", "a_b") apart."""
    start, end = _name_around_dim(table, model)
    return f"{start}{dim}{end}"


def _name_around_dim(table: str, model: str) -> tuple[str, str]:
    slug = re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_")[:24]
    return f"{table}_embedding_{slug}_", f"_{hashlib.sha256(model.encode()).hexdigest()[:8]}"


def drop_other_dims(session: Session, *, table: str, model: str, dim: int) -> list[str]:
    """Drop `model`'s HNSW indexes on `table` of any dimension but `dim`; returns their names.

    An index's predicate names its model only, and its expression casts each of the model's rows
    to its dimension, so an index of another dimension refuses every row of `dim` (a bare
    "expected 384 dimensions, not 256"). Call it when no row of `model` at another dimension is
    left, or before rewriting them (`models.memory.reembedding.reembed`). Takes an ACCESS EXCLUSIVE
    lock on `table` until the caller commits, only when there is one to drop. Raises
    `ConfigurationError` for another table or an unsafe model name.
    """
    start, end = _name_around_dim(check_table(table), check_model(model))
    found = session.scalars(sa.text(VECTOR_INDEXES), {"table": table})
    stale = [
        name
        for name in found
        if name.startswith(start)
        and name.endswith(end)
        and name[len(start) : -len(end)].isdigit()
        and name != vector_index_name(table, model, dim)
    ]
    for name in stale:
        session.execute(sa.text(DROP_INDEX.format(name=name)))
    return stale


def ensure_vector_index(
    session: Session, *, table: str, model: str, dim: int, concurrently: bool = False
) -> None:
    """Create `model`'s HNSW index on `table` (`facts` or `episodes`) unless a valid one exists
    (then nothing is run that needs the table's owner); one left invalid by a failed concurrent
    build is dropped and built again.

    Raises `ConfigurationError` for another table, an unsafe model name, or a dim outside
    1..2000. The build holds a SHARE lock on the table (writes wait) until the caller commits.
    With `concurrently`, for a session whose statements commit by themselves
    (`models.db.session_scope(autocommit=True)`), it is `CREATE INDEX CONCURRENTLY`: writes go
    on, it waits for the transactions open when it starts, and it indexes only the row versions
    its snapshots see (PostgreSQL docs, CREATE INDEX, "Building Indexes Concurrently"), where a
    plain build also indexes the old versions of rows rewritten by its own or a recent
    transaction, and fails on one of another dimension ("expected 256 dimensions, not 384";
    issue 31: `models.memory.reembedding.reembed`).
    """
    name = vector_index_name(check_table(table), check_model(model), check_dim(dim))
    if not concurrently:  # a transaction-level lock: none in autocommit
        session.execute(sa.text(INDEX_LOCK), {"name": name})
    valid = session.scalar(sa.text(INDEX_VALID), {"table": table, "name": name})
    if valid:
        return  # no DDL, which needs the table's owner: a remote role (models.access.remote_access)
    drop, create = (
        (DROP_INDEX_CONCURRENTLY, VECTOR_INDEX_CONCURRENTLY)
        if concurrently
        else (DROP_INDEX, VECTOR_INDEX)
    )
    if valid is not None:
        session.execute(sa.text(drop.format(name=name)))
    session.execute(sa.text(create.format(name=name, table=table, dim=dim, model=model)))


@contextmanager
def search_settings(
    session: Session, *, pool: int, iterative_scan: str = "relaxed_order"
) -> Iterator[None]:
    """Inside: iterative HNSW scans (`relaxed_order`), `hnsw.ef_search` >= `pool` (without an
    iterative scan HNSW returns at most ef_search rows), `hnsw.max_scan_tuples` = 20,000, and
    custom plans (a generic plan cannot prove `embedding_model = $1` implies a partial index's
    predicate). Set with SET LOCAL inside a savepoint that is rolled back on exit, which undoes
    them (PostgreSQL docs, SET), so the caller's transaction keeps its own settings."""
    ef_search = str(max(HNSW_EF_SEARCH_DEFAULT, pool))
    savepoint = session.begin_nested()
    try:
        params = {"iterative_scan": iterative_scan, "ef_search": ef_search}
        session.execute(sa.text(SEARCH_SETTINGS), params)
        yield
    finally:
        savepoint.rollback()


def hits(session: Session, query: Search, template: str) -> list[Hit]:
    """Run one named query for `query`; its rows as `Hit`s."""
    rows = session.execute(sa.text(query.sql(template)), query.params())
    return [Hit(**row._mapping) for row in rows]


def nearest(session: Session, query: Search) -> list[Hit]:
    """Up to `query.pool` nearest rows: the indexed query, refilled by the exact one when it
    returned fewer (an iterative scan stops after `hnsw.max_scan_tuples`), so a tenant with n
    matching rows always gets min(n, pool). For a tenant with fewer rows than the pool this costs
    a second, small query over the tenant's rows."""
    found = hits(session, query, NEAREST_INDEXED)
    return found if len(found) >= query.pool else hits(session, query, NEAREST_EXACT)


def tied_ranks(found: Sequence[Hit], keys: Sequence[float]) -> dict[int, int]:
    """Row id -> 1-based competition rank ("1224") in `found`, sorted by `keys` ascending: equal
    keys share the best rank, so RRF scores exact ties alike and other signals decide."""
    ranks: list[int] = []
    for i, key in enumerate(keys):
        ranks.append(ranks[-1] if i and key == keys[i - 1] else i + 1)
    return dict(zip([h.id for h in found], ranks, strict=True))


def rrf(ranks: Sequence[int | None], *, k: int = RRF_K) -> float:
    """Reciprocal rank fusion: the sum of 1 / (k + rank) over the lists that hold the item."""
    return sum(1.0 / (k + r) for r in ranks if r is not None)


def recency_weight(age_s: float, *, half_life_days: float | None) -> float:
    """1 - RECENCY_WEIGHT * (1 - 0.5 ** (age / half-life)): 1 for a row born now, falling to
    1 - RECENCY_WEIGHT = 0.8 for old rows (exponential decay as in Park et al., "Generative Agents",
    UIST 2023). Bounded on purpose: whether a fact still holds is decided by supersession and
    expiry, so age only breaks near-ties. `half_life_days=None` turns it off (weight 1)."""
    if half_life_days is None:
        return 1.0
    decay = math.pow(0.5, max(age_s, 0.0) / (half_life_days * SECONDS_PER_DAY))
    return 1.0 - RECENCY_WEIGHT * (1.0 - decay)


def fuse(by_vector: Sequence[Hit], by_text: Sequence[Hit], query: Search) -> list[Scored[int]]:
    """The best `query.k` of both lists by `rrf(vector rank, text rank) * recency_weight`.

    `by_vector` is sorted by distance, `by_text` by text rank (best first). A candidate whose
    similarity is below `min_similarity` and whose words do not match is dropped: the vector
    list always returns someone, however far. The default 0.2 is for all-MiniLM-L6-v2: on the
    LoCoMo dev set it keeps 96% of question-evidence turn pairs and drops 42% of the others.
    It is per model: for `HashEmbedder` it would drop 81% of evidence pairs (use about 0).
    """
    vector_ranks = tied_ranks(by_vector, [h.distance for h in by_vector])
    text_ranks = tied_ranks(by_text, [-h.text_rank for h in by_text])
    results = []
    for hit in {h.id: h for h in [*by_text, *by_vector]}.values():
        similarity = 1.0 - hit.distance
        if similarity < query.min_similarity and not hit.text_match:
            continue
        fused = rrf([vector_ranks.get(hit.id), text_ranks.get(hit.id)])
        age_s = (query.now - hit.born).total_seconds()
        recency = recency_weight(age_s, half_life_days=query.half_life_days)
        parts = (similarity, hit.text_rank, hit.text_match, fused, recency, fused * recency)
        results.append(Scored(hit.id, *parts))
    results.sort(key=lambda r: (-r.score, -r.similarity, -r.item))
    return results[: query.k]
