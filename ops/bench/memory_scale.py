"""Memory at scale: COPY ingest, HNSW build and filtered recall over the real `facts` table.

`python -m ops.bench.memory_scale [--facts 1000000] [--users 1000] [--queries 200] [--data-dir D]`

Vectors: a Gaussian mixture, not uniform noise (uniform 384-d vectors are all nearly equidistant,
the worst case for a graph index and unlike text embeddings). 2,000 unit centres share a common
direction (cosine ~0.1 between centres: text embeddings are anisotropic); a user writes about 20
topics (centres), Zipf-weighted; a fact is its centre plus noise of norm 1, normalised (cosine ~0.7
to it, ~0.5 within a topic, as all-MiniLM-L6-v2 scores related sentences); rows shuffled over the
heap. Half the queries are near one of the user's facts (noise of norm 0.5), half near a fact of a
topic the user never wrote about (the hard case for a filtered graph scan). Text: topic words.
Binary COPY with every index but HNSW in place; VACUUM ANALYZE; `ensure_vector_indexes`. Exact top
10: `NEAREST_EXACT` (same filter, sorts the user's rows). Each path runs all queries twice, the
second pass timed; `recall` with `min_similarity=-1`. The data dir (new or empty) is deleted
unless `--keep`. Needs numpy (agentq[local]).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import psycopg
import sqlalchemy as sa
from numpy.typing import NDArray
from pgvector.psycopg import register_vector
from sqlmodel import Session

from models import facts
from models import recall as retrieval
from models.db import session_scope
from models.migrate import upgrade
from ops.stack import LocalStack

Vectors = NDArray[np.float32]
Ints = NDArray[np.int64]
DIM, MODEL, K = 384, "synthetic-384", 10
CENTRES, TOPICS_PER_USER, TOPIC_WORDS = 2000, 20, 6
SHARED_WEIGHT = 0.35  # the common direction's weight in a centre: cosine ~0.11 between centres
FACT_NOISE, QUERY_NOISE = 1.0, 0.5  # expected norm of the Gaussian offset, before normalising
BATCH_ROWS, SEED = 50_000, 20_260_101
MAINTENANCE_WORK_MEM = "6GB"  # pgvector NOTICEs when the graph outgrows it; 1M x 384 is ~2 GB
PARALLEL_WORKERS = 1  # max_parallel_maintenance_workers: 2 cores, the leader and one worker
FORCE_HNSW = "SET LOCAL enable_sort = off"  # the user_id plan sorts twice, the HNSW plan once
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
CATEGORIES = ("preference", "profile", "knowledge", "event")
COPY_FACTS = """COPY facts (user_id, subject, category, text, content_hash, embedding,
    embedding_model, embedding_dim) FROM STDIN (FORMAT BINARY)"""
COPY_TYPES = ["text", "text", "text", "text", "text", "vector", "text", "int4"]
SERVER = ("postgres", "pgvector", "shared_buffers", "facts table, all indexes", "HNSW index")
SERVER_SQL = """SELECT current_setting('server_version'), (SELECT extversion FROM pg_extension
    WHERE extname = 'vector'), current_setting('shared_buffers'),
    pg_size_pretty(pg_total_relation_size('facts')), pg_size_pretty(pg_relation_size(:index))"""
HNSW_INDEX = retrieval.vector_index_name("facts", MODEL, DIM)


def noisy(rng: np.random.Generator, base: Vectors, norm: float) -> Vectors:
    """Each row of `base` plus Gaussian noise of expected norm `norm`, scaled to norm 1."""
    x = base + rng.standard_normal(base.shape, dtype=np.float32) * (norm / math.sqrt(DIM))
    return np.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), dtype=np.float32)


def word(i: int) -> str:
    """The `i`-th made-up word, three syllables (unique below 70**3): 0 "bababa", 1 "bababe"."""
    return "".join(SYLLABLES[i // len(SYLLABLES) ** p % len(SYLLABLES)] for p in (2, 1, 0))


def recall_at_k(found: Sequence[int], exact: Sequence[int], k: int = K) -> float:
    """The share of the exact top `k` ids that are in `found[:k]`; 1.0 when `exact` is empty."""
    truth = set(exact[:k])
    return len(truth & set(found[:k])) / len(truth) if truth else 1.0


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100), linear between closest ranks (numpy's default method).
    Raises `ValueError` for no values or `q` outside 0..100."""
    if not values or not 0 <= q <= 100:
        raise ValueError(f"percentile {q!r} of {len(values)} values: need values, 0 <= q <= 100")
    ordered, pos = sorted(values), (len(values) - 1) * q / 100
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class Corpus(NamedTuple):
    """Unit `centres`; `users[i]` and `topics[i]` (a centre) of row `i`; `user_topics[u]`."""

    centres: Vectors
    users: Ints
    topics: Ints
    user_topics: Ints


def make_corpus(rng: np.random.Generator, n_facts: int, n_users: int) -> Corpus:
    """Centres, each user's topics, and every row's user (equal shares, shuffled) and topic."""
    shared = noisy(rng, np.zeros((1, DIM), np.float32), 1.0)
    centres = noisy(rng, np.repeat(SHARED_WEIGHT * shared, CENTRES, axis=0), 1.0)
    picks = [rng.choice(CENTRES, TOPICS_PER_USER, replace=False) for _ in range(n_users)]
    user_topics = np.stack(picks).astype(np.int64)
    users = rng.permutation(np.arange(n_facts, dtype=np.int64) % n_users)
    zipf = 1.0 / np.arange(1, TOPICS_PER_USER + 1)
    slots = rng.choice(TOPICS_PER_USER, size=n_facts, p=zipf / zipf.sum())
    return Corpus(centres, users, user_topics[users, slots], user_topics)


def fact_row(corpus: Corpus, i: int, vector: Vectors) -> tuple[Any, ...]:
    """The COPY row of fact `i`: its topic's words, and `i` to keep the content unique."""
    words = [word(int(corpus.topics[i]) * TOPIC_WORDS + j) for j in range(TOPIC_WORDS)]
    category = CATEGORIES[i % len(CATEGORIES)]
    text = f"{words[1 + i % 5]} and {words[1 + (i * 7 + 3) % 5]}, note {i}"
    digest = facts.content_hash(subject=words[0], attribute=None, category=category, text=text)
    return (f"user-{corpus.users[i]:04d}", words[0], category, text, digest, vector, MODEL, DIM)


def pick_sources(rng: np.random.Generator, corpus: Corpus, count: int) -> list[tuple[int, int]]:
    """(user, row) per query: the first half a row of the user's, the rest a row of a topic the
    user never wrote about. Users are distinct while `count` <= the number of users."""
    n_users, sources = len(corpus.user_topics), []
    for n, u in enumerate(rng.choice(n_users, count, replace=count > n_users).tolist()):
        rows = np.flatnonzero(corpus.users == u)
        if n >= count // 2:  # another user's row, of a topic that is not one of u's
            rows = np.flatnonzero(~np.isin(corpus.topics, corpus.user_topics[u]))
        sources.append((u, int(rng.choice(rows))))
    return sources


def load(dsn: str, corpus: Corpus, rng: np.random.Generator, keep: set[int]) -> dict[str, Any]:
    """COPY every row, a batch per transaction: seconds generating and copying, and the vectors
    of the rows in `keep`."""
    out: dict[str, Any] = {"gen_s": 0.0, "copy_s": 0.0, "kept": {}}
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        for start in range(0, len(corpus.users), BATCH_ROWS):
            t0, stop = time.perf_counter(), min(start + BATCH_ROWS, len(corpus.users))
            vectors = noisy(rng, corpus.centres[corpus.topics[start:stop]], FACT_NOISE)
            out["kept"].update({i: vectors[i - start] for i in keep if start <= i < stop})
            rows = [fact_row(corpus, i, vectors[i - start]) for i in range(start, stop)]
            t1 = time.perf_counter()
            with conn.cursor() as cur, cur.copy(COPY_FACTS) as copy:
                copy.set_types(COPY_TYPES)
                for row in rows:
                    copy.write_row(row)
            conn.commit()
            out["gen_s"] += t1 - t0
            out["copy_s"] += time.perf_counter() - t1
            print(f"  {stop:,} rows, {stop / out['copy_s']:,.0f} rows/s in COPY", flush=True)
    return out


def build_index() -> tuple[float, list[str]]:
    """Seconds to build the HNSW indexes (`ensure_vector_indexes`), and the server's notices."""
    notices: list[str] = []
    start = time.perf_counter()
    with session_scope() as session:
        raw: Any = session.connection().connection.driver_connection
        raw.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        session.execute(sa.text(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'"))
        session.execute(sa.text(f"SET LOCAL max_parallel_maintenance_workers = {PARALLEL_WORKERS}"))
        facts.ensure_vector_indexes(session, model=MODEL, dim=DIM)
    return time.perf_counter() - start, notices


Config = tuple[int, str, bool]  # hnsw.ef_search, hnsw.iterative_scan, force the HNSW plan
SHIPPED: Config = (retrieval.HNSW_EF_SEARCH_DEFAULT, "relaxed_order", False)  # as agentq for k 10
SWEEP = {"HNSW forced, iterative scan off": (40, "off", True)} | {
    f"HNSW forced, ef_search {ef}": (ef, "relaxed_order", True) for ef in (40, 100, 200, 400)
}
Runner = Callable[[Session, retrieval.Search], list[int]]


@contextmanager
def settings(session: Session, config: Config) -> Iterator[None]:
    # `pool` only sets ef_search here; the query's LIMIT stays `search.pool` (40 for k 10)
    with retrieval.search_settings(session, pool=config[0], iterative_scan=config[1]):
        if config[2]:
            session.execute(sa.text(FORCE_HNSW))
        yield


def ids(session: Session, search: retrieval.Search, template: str = "", config: Config = SHIPPED
        ) -> list[int]:  # fmt: skip
    """The ids one named query finds under `config`; without `template`, `retrieval.nearest`'s
    (the indexed query, then the exact one if it found fewer than the pool)."""
    with settings(session, config):
        if not template:
            return [h.id for h in retrieval.nearest(session, search)]
        return [h.id for h in retrieval.hits(session, search, template)]


def full_recall(session: Session, s: retrieval.Search) -> list[int]:
    found = facts.recall(session, user_id=s.user_id, query_text=s.query_text, k=K,
                         query_embedding=s.embedding, embedding_model=MODEL,
                         min_similarity=-1.0)  # fmt: skip
    return [r.item.id or 0 for r in found]


def measure(session: Session, label: str, run: Runner, searches: list[retrieval.Search],
            truth: list[list[int]] | None, config: Config | None = None) -> list[str]:  # fmt: skip
    """Run every search twice, time the second pass; count plans that scan the HNSW index under
    `config`: one row of the result table."""
    for _ in range(2):
        times, found = [], []
        for search in searches:
            start = time.perf_counter()
            found.append(run(session, search))
            times.append((time.perf_counter() - start) * 1000)
    recall = "n/a"
    if truth is not None:
        scores = [recall_at_k(f, t) for f, t in zip(found, truth, strict=True)]
        recall = " / ".join(f"{np.mean(part):.3f}" for part in np.array_split(scores, 2))
    plans = 0
    for search in searches if config else []:
        with settings(session, config or SHIPPED):
            sql = "EXPLAIN (FORMAT JSON) " + search.sql(retrieval.NEAREST_INDEXED)
            plans += HNSW_INDEX in str(session.execute(sa.text(sql), search.params()).scalar())
    p50, p95, short = percentile(times, 50), percentile(times, 95), sum(len(f) < K for f in found)
    plans_cell = f"{plans}/{len(searches)}" if config else "-"
    return [label, plans_cell, f"{p50:.2f}", f"{p95:.2f}", recall, str(short)]


def run_queries(searches: list[retrieval.Search]) -> list[list[str]]:
    """Exact, the paths of agentq's recall as shipped, then the forced-HNSW sweep."""
    exact, indexed = retrieval.NEAREST_EXACT, retrieval.NEAREST_INDEXED
    runs: list[tuple[str, Runner, bool, Config | None]] = [
        ("exact (user_id index, sort)", partial(ids, template=exact), True, None),
        ("vector query as shipped", partial(ids, template=indexed), True, SHIPPED),
        ("nearest(): exact refill", ids, True, None),
        ("text query as shipped", partial(ids, template=retrieval.TEXT_MATCHES), False, None),
        ("facts.recall() in full", full_recall, False, None),
    ]
    runs += [(name, partial(ids, template=indexed, config=c), True, c) for name, c in SWEEP.items()]
    with session_scope() as session:
        truth = [ids(session, s, exact) for s in searches]
        return [measure(session, label, run, searches, truth if scored else None, config)
                for label, run, scored, config in runs]  # fmt: skip


def prepare(args: argparse.Namespace, url: str) -> tuple[dict[str, str], list[retrieval.Search]]:
    """Generate, load, analyse and index; the setup figures, and one search per query."""
    rng = np.random.default_rng(SEED)
    corpus = make_corpus(rng, args.facts, args.users)
    sources = pick_sources(rng, corpus, args.queries)
    print(f"loading {args.facts:,} facts of {DIM} dimensions, {args.users:,} users", flush=True)
    dsn = url.replace("postgresql+psycopg:", "postgresql:")  # a libpq URI
    loaded = load(dsn, corpus, rng, {row for _, row in sources})
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) facts")
    vacuum_s = time.perf_counter() - start
    print(f"VACUUM ANALYZE {vacuum_s:.1f} s; building the HNSW index", flush=True)
    build_s, notices = build_index()
    now, searches = datetime.now(UTC), []
    for u, row in sources:
        vector = noisy(rng, loaded["kept"][row][None, :], QUERY_NOISE)[0].tolist()
        text = " ".join(word(int(corpus.topics[row]) * TOPIC_WORDS + j) for j in (1, 2))
        searches.append(retrieval.Search(facts.FACTS, f"user-{u:04d}", MODEL, text, vector, K, now))
    copy_s, per_user = loaded["copy_s"], args.facts // args.users
    return {
        "facts": f"{args.facts:,} x {DIM}-d, {args.users:,} users x {per_user:,}",
        "ingest, binary COPY": f"{args.facts / copy_s:,.0f} rows/s ({copy_s:.0f} s; "
        f"+{loaded['gen_s']:.0f} s generating rows)",
        "VACUUM ANALYZE": f"{vacuum_s:.1f} s",
        "HNSW build": f"{build_s:.0f} s (maintenance_work_mem {MAINTENANCE_WORK_MEM}, "
        f"max_parallel_maintenance_workers {PARALLEL_WORKERS}, m 16, ef_construction 64)",
        "server notices": "; ".join(notices) or "none",
    }, searches


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table, padded so that it also aligns in a terminal."""
    lines = [header, ["-" * len(h) for h in header], *rows]
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    return "\n".join("| " + " | ".join(map(str.ljust, r, widths)) + " |" for r in lines)


def main() -> None:
    """Start the stack, prepare, measure, print; stop the stack, delete the data dir."""
    args = parse_args()
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="agentq-scale-", dir="/var/tmp"))
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"--data-dir {root}: must be new or empty (it is deleted afterwards)")
    started, stack = time.perf_counter(), LocalStack(root)
    try:
        url, _ = stack.start_services()
        os.environ["AGENTQ_DATABASE_URL"] = url
        upgrade(url)
        setup, searches = prepare(args, url)
        rows = run_queries(searches)
        with session_scope() as session:
            values = session.execute(sa.text(SERVER_SQL), {"index": HNSW_INDEX}).one()
        ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        machine = {"machine": f"{os.cpu_count()} CPUs, {ram_gib:.1f} GiB RAM, {os.uname().release}"}
        setup = machine | dict(zip(SERVER, map(str, values), strict=True)) | setup
        setup["total runtime"] = f"{time.perf_counter() - started:.0f} s"
        header = ["query", "HNSW plans", "p50 ms", "p95 ms", "recall@10 own / other", "< 10 rows"]
        print("\n" + table(["setup", "value"], [[k, v] for k, v in setup.items()]))
        print("\n" + table(header, rows))
    finally:
        stack.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--facts", type=int, default=1_000_000, help="rows in facts")
    parser.add_argument("--users", type=int, default=1_000, help="tenants, equal shares")
    parser.add_argument("--queries", type=int, default=200, help="half own, half other topics")
    parser.add_argument("--data-dir", type=Path, default=None, help="new or empty; default: temp")
    parser.add_argument("--keep", action="store_true", help="keep the data dir afterwards")
    return parser.parse_args()


if __name__ == "__main__":
    main()
