"""The second stage of fact and episode recall: every candidate re-scored by meaning, words and
the turns around it.

`hybrid` finds, in one SQL statement (`CANDIDATES_IN_THREADS`), the tenant's nearest rows by
cosine (through the model's HNSW index, as `models.memory.retrieval.nearest`), its best rows by
BM25, the conversation neighbours of both, and every one's scores, and ranks them in Python
(`rescore`):

    base      = cosine similarity + TEXT_WEIGHT * BM25 / (the best BM25 among the candidates)
                + DATE_WEIGHT (a question asking when, a row holding a resolved date)
    relevance = base + CONTEXT_WEIGHT * (the best base of the row's relevant neighbours, >= 0)
                + SUMMARY_WEIGHT * (the base of its session's summary, if relevant and > 0)
    score     = relevance * recency weight (`models.memory.retrieval.recency_weight`)

- BM25 (Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009;
  k1 = 1.2, b = 0.75, idf = ln(1 + (n - df + 0.5) / (df + 0.5)) as in Lucene) over the rows'
  `tsv` (Postgres' English stemming and stop words), with n, df and the mean length taken from
  up to IDF_SAMPLE rows of the tenant and model: a word every turn carries (the speaker's name)
  weighs little, a rare one much. Postgres' own `ts_rank_cd` has no idf. Only the words in at
  most half of those rows select candidates by text (above half, Robertson and Sparck Jones'
  idf is negative), though all of them score. Divided by the best candidate's, so TEXT_WEIGHT
  means the same for a tenant of 100 rows or of a million.
- Context: facts written from a conversation carry `thread` and `position`; a reply ("Yes, last
  week!") means what the turn before it asked, so a row gains from its neighbours (the rows at
  positions -1, 0 and +1 of its thread: the turns around it, and a fact extracted from a turn,
  stored at the turn's position, with that turn), and a neighbour of a relevant row may be
  recalled though it shares no word with the question. Rows without a thread (episodes, facts
  of runs) have no neighbours.
- Dates: a question asking when, how long ago or what year (`asks_when`) is answered by a row
  saying when something happened; a row holding a date resolved at write time
  (`models.memory.time_expressions.RESOLVED_DATE`: "yesterday (7 May 2023)") gains DATE_WEIGHT.
- Session summaries (`models.memory.session_summaries`, category SUMMARY_CATEGORY, in the session's
  thread): a summary is fetched with every candidate of its thread and lifts each of them by
  SUMMARY_WEIGHT of its base score when it is relevant (a question about the session's topics
  finds the turn that answers it though they share no word); it keeps such a turn among the
  results, is no position neighbour, and is never returned itself (the evidence is the turns).
- A turn and the facts extracted from it (`models.memory.conversation_turns`, same thread and
  position) are one result (`group_turns`): they are returned next to each other, at the place
  of the best of them, and count once towards `k`.
- A row is relevant when its similarity reaches `min_similarity` or all the query's words match
  (`websearch_to_tsquery`); a row neither relevant nor next to a relevant row is dropped.

The weights are round values from the LoCoMo development set (`ops/bench/locomo_recall.py`,
README "Memory benchmarks"): recall@10 held within 0.76-0.78 for TEXT_WEIGHT 0.3-0.7 and
CONTEXT_WEIGHT 0.3-0.5, and within 0.766-0.768 for DATE_WEIGHT 0.05-0.2 (temporal questions
0.834-0.845, against 0.823 without it), and 0.773-0.783 for SUMMARY_WEIGHT 0.1-0.3 (0.768
without summaries), so they are not fitted to it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session

from models.memory.retrieval import Scored, Search, recency_weight, search_settings
from models.memory.session_summaries import SUMMARY_CATEGORY
from models.memory.time_expressions import RESOLVED_DATE

K1, B = 1.2, 0.75  # Robertson and Zaragoza 2009, section 3.4
TEXT_WEIGHT = 0.5  # of the best candidate's BM25, against cosine similarity in [-1, 1]
CONTEXT_WEIGHT = 0.3  # share of the best relevant neighbour's base score a row gains
DATE_WEIGHT = 0.1  # added to a dated row's base score for a question asking when
SUMMARY_WEIGHT = 0.2  # share of its session summary's base score a turn gains
# A question asking when, how long or what year ("When did ...", "How long ago was ...").
TEMPORAL_QUESTION = re.compile(
    r"\b(when|since when|how long|what (year|month|date|day|time)|which (year|month|day))\b",
    re.IGNORECASE,
)
IDF_SAMPLE = 5_000  # rows of the tenant read for n, df and the mean length

# The query's words, once: each lexeme (with a tsquery matching it alone; a lexeme holding a
# quote or a backslash is left out) and all of them (`models.memory.retrieval`'s every-word match).
QUERY_WORDS = """query_terms AS MATERIALIZED (
    SELECT websearch_to_tsquery('english', :query_text) AS all_words
), query_words AS MATERIALIZED (
    SELECT DISTINCT lexeme, ('''' || lexeme || '''')::tsquery AS alone
    FROM unnest(tsvector_to_array(to_tsvector('english', :query_text))) AS lexeme
    WHERE strpos(lexeme, '''') = 0 AND strpos(lexeme, chr(92)) = 0
)"""
_STATS = """corpus AS MATERIALIZED (
    SELECT count(*)::float8 AS n, greatest(avg(length(tsv)), 1)::float8 AS mean_length
    FROM term_sample
), terms AS MATERIALIZED (
    SELECT w.lexeme, count(s.tsv) AS df,
           ln(1 + (corpus.n - count(s.tsv) + 0.5) / (count(s.tsv) + 0.5)) AS idf
    FROM query_words AS w CROSS JOIN corpus LEFT JOIN term_sample AS s ON s.tsv @@ w.alone
    GROUP BY w.lexeme, corpus.n
), informative AS MATERIALIZED (
    SELECT string_agg('''' || terms.lexeme || '''', ' | ')::tsquery AS words
    FROM terms, corpus WHERE terms.df <= corpus.n / 2
)"""


def term_stats(sample: str) -> str:
    """The CTEs `term_sample`, `corpus`, `terms` and `informative`: the corpus statistics for
    the query's words (after `QUERY_WORDS`), from `sample`, a query of at most IDF_SAMPLE rows'
    `tsv`. The words in at most half of those rows select candidates (above half, Robertson and
    Sparck Jones' idf is negative: no evidence of relevance); all of them score."""
    return f"""term_sample AS MATERIALIZED (
    {sample}
), {_STATS}"""


# The tenant's statistics, from a sample of its rows (an index-only scan of `{table}_terms`,
# migration 0025).
_TERM_STATS = term_stats(
    "SELECT tsv FROM {table}\n"
    "    WHERE user_id = :user_id AND embedding_model = :model LIMIT :idf_sample"
)
# One query word's share of row `f`'s BM25 (`u` the row's lexeme, `terms` the word's idf):
# summed over `unnest(f.tsv) AS u JOIN terms ON terms.lexeme = u.lexeme`, with `corpus`.
TERM_BM25 = f"""terms.idf * {K1 + 1} * coalesce(array_length(u.positions, 1), 1)
        / (coalesce(array_length(u.positions, 1), 1)
           + {K1} * (1 - {B} + {B} * length(f.tsv) / corpus.mean_length))"""
# Row `f`'s BM25 for the query's words (after `QUERY_WORDS` and `term_stats`).
ROW_BM25 = f"""(SELECT sum({TERM_BM25}) FROM corpus, unnest(f.tsv) AS u
              JOIN terms ON terms.lexeme = u.lexeme)"""
_DISTANCE = "f.embedding::vector({dim}) <=> CAST(:q AS vector({dim}))"
_TENANT = """f.embedding_model = :model AND f.user_id = :user_id AND f.embedding_dim = {dim}
  AND {visible}"""
# The tenant's best rows by BM25 among those holding an informative word; its nearest rows by
# cosine, through the model's HNSW index (`models.memory.retrieval`), refilled by an exact scan when
# the index returns fewer (as `models.memory.retrieval.nearest`); and `:ids`.
_PICKED = f"""by_text AS MATERIALIZED (
    SELECT f.id FROM {{table}} AS f CROSS JOIN informative
    WHERE {_TENANT} AND f.tsv @@ informative.words
    ORDER BY {ROW_BM25} DESC, f.id
    LIMIT :pool
), by_vector AS MATERIALIZED (
    SELECT f.id FROM {{table}} AS f WHERE {_TENANT}
    ORDER BY {_DISTANCE} LIMIT :pool
), by_exact_vector AS MATERIALIZED (
    SELECT f.id FROM {{table}} AS f
    WHERE {_TENANT} AND (SELECT count(*) FROM by_vector) < :pool
    ORDER BY ({_DISTANCE}) + 0, f.id LIMIT :pool
), picked AS MATERIALIZED (
    SELECT id FROM by_text UNION SELECT id FROM by_vector UNION SELECT id FROM by_exact_vector
    UNION SELECT unnest(CAST(:ids AS bigint[]))
)"""
# The picked rows and the rows at their thread positions -1, 0 and +1 (through `facts_thread`).
_AROUND = f""", around AS MATERIALIZED (
    SELECT id FROM picked
    UNION
    SELECT n.id FROM picked JOIN {{table}} AS p ON p.id = picked.id
    CROSS JOIN LATERAL (
        SELECT id FROM {{table}}
        WHERE user_id = :user_id AND thread = p.thread
          AND position BETWEEN p.position - 1 AND p.position + 1
    ) AS n
    WHERE p.user_id = :user_id AND p.thread IS NOT NULL
    UNION
    SELECT s.id FROM picked JOIN {{table}} AS p ON p.id = picked.id
    JOIN {{table}} AS s ON s.user_id = :user_id AND s.thread = p.thread
    WHERE p.user_id = :user_id AND s.category = '{SUMMARY_CATEGORY}'
)"""


def _scored(rows: str, thread: str, position: str, dated: str, summary: str) -> str:
    return f""", bm25 AS MATERIALIZED (
    SELECT f.id, sum({TERM_BM25}) AS score
    FROM {{table}} AS f CROSS JOIN corpus
    CROSS JOIN LATERAL unnest(f.tsv) AS u JOIN terms ON terms.lexeme = u.lexeme
    WHERE f.id IN (SELECT id FROM {rows}) GROUP BY f.id
)
SELECT f.id, f.{{born}} AS born,
       {_DISTANCE} AS distance,
       coalesce(bm25.score, 0) AS text_rank, f.tsv @@ query_terms.all_words AS text_match,
       {thread} AS thread, {position} AS position, {dated} AS dated, {summary} AS summary
FROM {{table}} AS f CROSS JOIN query_terms LEFT JOIN bm25 ON bm25.id = f.id
WHERE {_TENANT} AND f.id IN (SELECT id FROM {rows})"""


_WITH = f"WITH {QUERY_WORDS}, {_TERM_STATS}, {_PICKED}"
# candidates: the best rows by BM25 and by cosine and `:ids`, scored for `rescore` (episodes).
CANDIDATES = _WITH + _scored("picked", "NULL::text", "NULL::int", "false", "false")
# candidates_in_threads: the same, and each one's neighbours in its thread (facts).
CANDIDATES_IN_THREADS = (
    _WITH
    + _AROUND
    + _scored(
        "around", "f.thread", "f.position", "f.text ~ :dated", f"f.category = '{SUMMARY_CATEGORY}'"
    )
)


@dataclass(frozen=True)
class Weights:
    """The second stage's weights (module docstring); 0 turns a part off (the benchmark's
    ablation rows)."""

    text: float = TEXT_WEIGHT
    context: float = CONTEXT_WEIGHT
    dates: float = DATE_WEIGHT
    summaries: float = SUMMARY_WEIGHT
    grouped: bool = True


@dataclass(frozen=True)
class Candidate:
    """One row to rank: cosine `distance` in [0, 2], `text_rank` its BM25 (0 without a shared
    word), `text_match` whether every query word matches, `born` (UTC), and its place in a
    conversation (`thread`, `position`; both None outside one); `summary`: a session summary
    (`models.memory.session_summaries`), which lifts its thread's rows and is never returned."""

    id: int
    born: datetime
    distance: float
    text_rank: float
    text_match: bool
    thread: str | None = None
    position: int | None = None
    dated: bool = False
    summary: bool = False


def hybrid(session: Session, query: Search, weights: Weights = Weights()) -> list[Scored[int]]:
    """The best `query.k` row ids of `query.source` for `query`, best first (see the module
    docstring); one SQL statement, scoped to the tenant and the embedding model."""
    with search_settings(session, pool=query.pool):  # iterative HNSW scans, custom plans
        found = candidates(session, query)
    ranked = rescore(found, query, weights)
    return group_turns(ranked, found, query.k) if weights.grouped else ranked[: query.k]


def candidates(session: Session, query: Search, ids: Collection[int] = ()) -> list[Candidate]:
    """The tenant's best `query.pool` rows by BM25 and by cosine, and `ids` (rows of the tenant;
    others are ignored), and for facts their thread neighbours, each with what `rescore` needs:
    one query. Call it inside `models.memory.retrieval.search_settings`, as `hybrid` does."""
    template = CANDIDATES_IN_THREADS if query.source.threads else CANDIDATES
    params = {
        **query.params(),
        "idf_sample": IDF_SAMPLE,
        "ids": sorted(ids),
        "dated": RESOLVED_DATE,
    }
    rows = session.execute(sa.text(query.sql(template)), params)
    return [Candidate(**row._mapping) for row in rows]


def rescore(
    found: Sequence[Candidate], query: Search, weights: Weights = Weights()
) -> list[Scored[int]]:
    """All of `found` worth returning, best first, scored as the module docstring says;
    `Scored.relevance` is the score before recency. Ties: higher similarity, then newer id."""
    best_text = max((c.text_rank for c in found), default=0.0)
    dates = weights.dates if asks_when(query.query_text) else 0.0
    base = {c.id: _base(c, best_text, weights.text) + dates * c.dated for c in found}
    relevant = {c.id for c in found if _relevant(c, query.min_similarity)}
    at: dict[tuple[str, int], list[int]] = {}
    for c in found:
        if c.thread is not None and c.position is not None and not c.summary:
            at.setdefault((c.thread, c.position), []).append(c.id)
    summaries = session_lift(found, base, relevant) if weights.summaries else {}
    results = []
    for c in found:
        around, lift = neighbours(c, at), summaries.get(c.thread or "", 0.0)
        if c.summary or not (c.id in relevant or lift or _in_context(around, relevant, weights)):
            continue
        context = max((base[i] for i in around if i in relevant), default=0.0)
        relevance = base[c.id] + weights.context * max(context, 0.0) + weights.summaries * lift
        age_s = (query.now - c.born).total_seconds()
        recency = recency_weight(age_s, half_life_days=query.half_life_days)
        parts = (1.0 - c.distance, c.text_rank, c.text_match, relevance, recency)
        results.append(Scored(c.id, *parts, max(relevance, 0.0) * recency))
    results.sort(key=lambda r: (-r.score, -r.similarity, -r.item))
    return results


def session_lift(
    found: Sequence[Candidate], base: dict[int, float], relevant: Collection[int]
) -> dict[str, float]:
    """thread -> the best base score (> 0) among the relevant session summaries of `found` in
    that thread (`base`: id -> base score), which every row of the thread gains a share of."""
    lift: dict[str, float] = {}
    for c in found:
        if c.summary and c.thread is not None and c.id in relevant and base[c.id] > 0:
            lift[c.thread] = max(lift.get(c.thread, 0.0), base[c.id])
    return lift


def asks_when(question: str) -> bool:
    """Whether `question` asks when something happened or how long ago (`TEMPORAL_QUESTION`:
    "when", "how long", "what/which year, month, date, day, time")."""
    return TEMPORAL_QUESTION.search(question) is not None


def group_turns(
    ranked: Sequence[Scored[int]], found: Sequence[Candidate], k: int
) -> list[Scored[int]]:
    """The first `k` results of `ranked` (best first), where the rows at one thread position (a
    turn and the facts extracted from it, `models.memory.conversation_turns`) are one result: they
    follow each other, at the place of the best of them. Rows outside a thread are one each."""
    place = {c.id: (c.thread, c.position) for c in found if c.thread is not None}
    groups: dict[object, list[Scored[int]]] = {}
    for r in ranked:
        groups.setdefault(place.get(r.item, r.item), []).append(r)
    return [r for group in list(groups.values())[:k] for r in group]


def neighbours(c: Candidate, at: dict[tuple[str, int], list[int]]) -> list[int]:
    """The other ids in `at` ((thread, position) -> ids) at `c`'s position in its thread and
    just before and after it."""
    if c.thread is None or c.position is None:
        return []
    steps = (at.get((c.thread, c.position + step), []) for step in (-1, 0, 1))
    return [i for ids in steps for i in ids if i != c.id]


def _base(c: Candidate, best_text: float, weight: float) -> float:
    return 1.0 - c.distance + (weight * c.text_rank / best_text if best_text > 0 else 0.0)


def _in_context(around: Collection[int], relevant: Collection[int], weights: Weights) -> bool:
    return bool(weights.context) and any(i in relevant for i in around)


def _relevant(c: Candidate, min_similarity: float) -> bool:
    return 1.0 - c.distance >= min_similarity or c.text_match
