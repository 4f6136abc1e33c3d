"""Memory at scale: COPY ingest, HNSW build and filtered recall over the real `facts` table.

`python -m ops.bench.memory_scale [--facts 1000000] [--users 1000] [--queries 200] [--data-dir D]`

Vectors: a Gaussian mixture, not uniform noise (uniform 384-d vectors are all nearly equidistant,
the worst case for a graph index and unlike text embeddings). 2,000 unit centres share a common
direction (cosine ~0.1 between centres: text embeddings are anisotropic); a user writes about 20
topics, Zipf-weighted; a fact is its centre plus noise of norm 1, normalised (cosine ~0.7 to it,
~0.5 within a topic, as all-MiniLM-L6-v2 scores related sentences). Half the queries are near a
fact of the user's (noise of norm 0.5), half near a fact of a topic the user lacks (the hard case
for a filtered graph scan). Exact top 10: `NEAREST_EXACT`. Each path runs all queries twice, the
second pass timed. The data dir (new or empty) is deleted unless `--keep`. Needs numpy.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
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

from models.db import session_scope
from models.memory import facts, retrieval
from models.migrate import upgrade
from models.settings import use_settings
from ops import processes
from ops.stack import LocalStack

Vectors = NDArray[np.float32]
Ints = NDArray[np.int64]
DIM, MODEL, K = 384, "synthetic-384", 10
CENTRES, TOPICS_PER_USER, TOPIC_WORDS = 2000, 20, 6
SHARED_WEIGHT = 0.35  # the common direction's weight in a centre: cosine ~0.11 between centres
FACT_NOISE, QUERY_NOISE = 1.0, 0.5  # expected norm of the Gaussian offset, before normalising
BATCH_ROWS, SEED = 50_000, 20_260_101
BUILD_SETTINGS = {"maintenance_work_mem": "6GB", "max_parallel_maintenance_workers": "1"}  # 2 CPUs
FORCED = ("SET LOCAL enable_sort = off",)  # the user_id plan sorts twice, the HNSW plan once
# agentq: 20,000 tuples (pgvector's default); a scan also stops at work_mem x scan_mem_multiplier
MORE = ("SET LOCAL hnsw.max_scan_tuples = 100000", "SET LOCAL hnsw.scan_mem_multiplier = 16")
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
CATEGORIES = ("preference", "profile", "knowledge", "event")
COPY_FACTS = """COPY facts (user_id, subject, category, text, content_hash, embedding,
    embedding_model, embedding_dim) FROM STDIN (FORMAT BINARY)"""
COPY_TYPES = ["text", "text", "text", "text", "text", "vector", "text", "int4"]
SERVER = ("postgres", "pgvector", "shared_buffers", "facts table, all indexes", "HNSW index")
SERVER_SQL = """SELECT current_setting('server_version'), (SELECT extversion FROM pg_extension
    WHERE extname = 'vector'), current_setting('shared_buffers'), pg_size_pretty(
    pg_total_relation_size('facts')), pg_size_pretty(pg_relation_size(:index))"""
HNSW_INDEX = retrieval.vector_index_name("facts", MODEL, DIM)
SCANS = "SELECT pg_stat_get_xact_numscans(CAST(:index AS regclass))"  # in this transaction


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


def percentile(values: Sequence[float], q: int) -> float:
    """The `q`-th percentile (1..99), linear between closest ranks, as numpy's default method.
    Raises `statistics.StatisticsError` for fewer than 2 values, `IndexError` for another `q`."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


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
    """(user, row) per query: first a row of the user's, then rows of topics the user lacks."""
    n_users, sources = len(corpus.user_topics), []
    for n, u in enumerate(rng.choice(n_users, count, replace=count > n_users).tolist()):
        rows = np.flatnonzero(corpus.users == u)
        if n >= (count + 1) // 2:  # a row of a topic that is not one of u's (np.array_split)
            rows = np.flatnonzero(~np.isin(corpus.topics, corpus.user_topics[u]))
        sources.append((u, int(rng.choice(rows))))
    return sources


def load(
    dsn: str, corpus: Corpus, rng: np.random.Generator, keep: set[int]
) -> tuple[float, dict[int, Vectors]]:
    """COPY every row, a batch a transaction (rows made before the clock starts); the seconds in
    COPY and commit, and the vectors of the rows in `keep`."""
    copy_s, kept = 0.0, {}
    with psycopg.connect(dsn) as conn:
        register_vector(conn)
        for start in range(0, len(corpus.users), BATCH_ROWS):
            stop = min(start + BATCH_ROWS, len(corpus.users))
            vectors = noisy(rng, corpus.centres[corpus.topics[start:stop]], FACT_NOISE)
            kept.update({i: vectors[i - start].copy() for i in keep if start <= i < stop})
            rows = [fact_row(corpus, i, vectors[i - start]) for i in range(start, stop)]
            clock = time.perf_counter()
            with conn.cursor() as cur, cur.copy(COPY_FACTS) as copy:
                copy.set_types(COPY_TYPES)
                for row in rows:
                    copy.write_row(row)
            conn.commit()
            copy_s += time.perf_counter() - clock
            print(f"  {stop:,} rows, {stop / copy_s:,.0f} rows/s in COPY", flush=True)
    return copy_s, kept


def build_index(dsn: str) -> tuple[float, float, list[str]]:
    """Seconds to VACUUM ANALYZE and to build the HNSW indexes, and the server's notices."""
    notices: list[str] = []
    start = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) facts")
    vacuum_s, start = time.perf_counter() - start, time.perf_counter()
    print(f"VACUUM ANALYZE {vacuum_s:.1f} s; building the HNSW index", flush=True)
    with session_scope() as session:
        raw: Any = session.connection().connection.driver_connection
        raw.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        for name, value in BUILD_SETTINGS.items():
            session.execute(sa.text(f"SET LOCAL {name} = '{value}'"))
        facts.ensure_vector_indexes(session, model=MODEL, dim=DIM)
    return vacuum_s, time.perf_counter() - start, notices


# hnsw.ef_search (the query's LIMIT stays the pool: 40 for k 10), hnsw.iterative_scan, SET LOCALs
Config = tuple[int, str, tuple[str, ...]]
SHIPPED: Config = (retrieval.HNSW_EF_SEARCH_DEFAULT, "relaxed_order", ())  # as agentq for k 10
SWEEP: dict[str, Config] = {
    "HNSW forced, iterative scan off": (40, "off", FORCED),
    **{f"HNSW forced, ef_search {ef}": (ef, "relaxed_order", FORCED) for ef in (40, 100, 400)},
    "HNSW forced, ef 40, 100k tuples, 16 x work_mem": (40, "relaxed_order", (*FORCED, *MORE)),
}
Runner = Callable[[Session, retrieval.Search], list[int]]


def ids(
    session: Session, s: retrieval.Search, template: str = "", config: Config = SHIPPED
) -> list[int]:
    """The ids a named query finds under `config`; no `template`: `retrieval.nearest`'s (indexed,
    then exact if it found fewer than the pool); "recall": `facts.recall`'s, as shipped."""
    if template == "recall":
        found = facts.recall(
            session,
            user_id=s.user_id,
            query_text=s.query_text,
            k=K,
            query_embedding=s.embedding,
            embedding_model=MODEL,
            min_similarity=-1.0,
        )
        return [r.item.id or 0 for r in found]
    with retrieval.search_settings(session, pool=config[0], iterative_scan=config[1]):
        for statement in config[2]:
            session.execute(sa.text(statement))
        hits = retrieval.hits(session, s, template) if template else retrieval.nearest(session, s)
    return [h.id for h in hits]


def measure(
    session: Session,
    label: str,
    run: Runner,
    searches: list[retrieval.Search],
    truth: list[list[int]] | None,
) -> list[str]:
    """Run all searches twice; the second pass's latency, HNSW index scans, recall@10 against
    `truth` (own / other queries) and answers short of 10: a row of the result table."""
    for _ in range(2):
        times, found = [], []
        scans = session.scalar(sa.text(SCANS), {"index": HNSW_INDEX})
        for search in searches:
            start = time.perf_counter()
            found.append(run(session, search))
            times.append((time.perf_counter() - start) * 1000)
    scans = session.scalar(sa.text(SCANS), {"index": HNSW_INDEX}) - scans
    recall = "n/a"
    if truth is not None:
        scores = [recall_at_k(f, t) for f, t in zip(found, truth, strict=True)]
        recall = " / ".join(f"{np.mean(part):.3f}" for part in np.array_split(scores, 2))
    p50, p95, short = percentile(times, 50), percentile(times, 95), sum(len(f) < K for f in found)
    print(f"  {label}: p50 {p50:.2f} ms, {scans} HNSW scans", flush=True)
    return [label, str(scans), f"{p50:.2f}", f"{p95:.2f}", recall, str(short)]


def run_queries(searches: list[retrieval.Search]) -> list[list[str]]:
    """Exact, the paths of agentq's recall as shipped, then the forced-HNSW sweep."""
    exact, indexed = retrieval.NEAREST_EXACT, retrieval.NEAREST_INDEXED
    runs: list[tuple[str, Runner, bool]] = [
        ("exact (user_id index, sort)", partial(ids, template=exact), True),
        ("vector query as shipped", partial(ids, template=indexed), True),
        ("nearest(): exact refill", ids, True),
        ("text query as shipped", partial(ids, template=retrieval.TEXT_MATCHES), False),
        ("facts.recall() in full", partial(ids, template="recall"), False),
    ]
    runs += [(name, partial(ids, template=indexed, config=c), True) for name, c in SWEEP.items()]
    with session_scope() as session:
        truth = [ids(session, s, exact) for s in searches]
        return [
            measure(session, label, run, searches, truth if scored else None)
            for label, run, scored in runs
        ]


def prepare(args: argparse.Namespace, url: str) -> tuple[dict[str, str], list[retrieval.Search]]:
    """Generate, load, analyse and index; the setup figures, and one search per query."""
    rng = np.random.default_rng(SEED)
    corpus = make_corpus(rng, args.facts, args.users)
    sources = pick_sources(rng, corpus, args.queries)
    print(f"loading {args.facts:,} facts of {DIM} dimensions, {args.users:,} users", flush=True)
    dsn = url.replace("postgresql+psycopg:", "postgresql:")  # a libpq URI
    copy_s, kept = load(dsn, corpus, rng, {row for _, row in sources})
    vacuum_s, build_s, notices = build_index(dsn)
    with session_scope() as session:
        server = session.execute(sa.text(SERVER_SQL), {"index": HNSW_INDEX}).one()
    ram_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    now, searches = datetime.now(UTC), []
    for u, row in sources:
        vector = noisy(rng, kept[row][None, :], QUERY_NOISE)[0].tolist()
        text = " ".join(word(int(corpus.topics[row]) * TOPIC_WORDS + j) for j in (1, 2))
        searches.append(retrieval.Search(facts.FACTS, f"user-{u:04d}", MODEL, text, vector, K, now))
    return {
        "machine": f"{os.cpu_count()} CPUs, {ram_gib:.1f} GiB RAM, Linux {os.uname().release}",
        **dict(zip(SERVER, map(str, server), strict=True)),
        "facts": f"{args.facts:,} x {DIM}-d, {args.users:,} users x {args.facts // args.users:,}",
        "ingest, binary COPY": f"{args.facts / copy_s:,.0f} rows/s ({copy_s:.0f} s)",
        "VACUUM ANALYZE": f"{vacuum_s:.1f} s",
        "HNSW build (m 16, ef_construction 64)": f"{build_s:.0f} s, {BUILD_SETTINGS}",
        "server notices": "; ".join(notices) or "none",
    }, searches


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table, padded so that it also aligns in a terminal."""
    lines = [header, ["-" * len(h) for h in header], *rows]
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    return "\n".join("| " + " | ".join(map(str.ljust, r, widths)) + " |" for r in lines)


def main() -> None:
    """Start the stack, prepare, measure, print; stop the stack, delete the data dir."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    for flag, default in (("--facts", 1_000_000), ("--users", 1_000), ("--queries", 200)):
        parser.add_argument(flag, type=int, default=default, help=f"default {default:,}")
    parser.add_argument("--data-dir", type=Path, default=None, help="new or empty; default: temp")
    parser.add_argument("--keep", action="store_true", help="keep the data dir afterwards")
    args = parser.parse_args()
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="agentq-scale-", dir="/var/tmp"))
    if root.exists() and any(root.iterdir()):
        raise SystemExit(f"--data-dir {root}: must be new or empty (it is deleted afterwards)")
    started, stack = time.perf_counter(), LocalStack(root)
    processes.exit_on_sigterm()  # a TERM stops the stack too
    try:
        url, _ = stack.start_services()
        use_settings(database_url=url)
        upgrade(url)
        setup, searches = prepare(args, url)
        rows = run_queries(searches)
        setup["total runtime"] = f"{time.perf_counter() - started:.0f} s"
        header = ["query", "HNSW scans", "p50 ms", "p95 ms", "recall@10 own / other", "< 10 rows"]
        print("\n" + table(["setup", "value"], [[k, v] for k, v in setup.items()]))
        print("\n" + table(header, rows))
    finally:
        stack.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
