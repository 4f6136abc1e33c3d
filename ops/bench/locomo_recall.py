"""LoCoMo recall: agentq's hybrid `recall` against plain cosine top-k, on the evidence turns.

`python -m ops.bench.locomo_recall [--data PATH] [--k 10] [--conversations N] [--data-dir DIR]
[--no-dates]`

LoCoMo (Maharana et al., ACL 2024): long two-person conversations; each question's `evidence`
names the turns ("D3:5": session 3, turn 5) holding the answer. A conversation is one tenant,
written through the product's path, `models.memory.conversation_turns.remember_turns`: a turn is one
fact ("<speaker> (<session date>): <text> [image: <caption>]", its relative time expressions
resolved against the session's date unless `--no-dates`) in its session's thread, with one
summary row per session (the default), embedded by all-MiniLM-L6-v2 (each text once,
`CachedEmbedder`); a second tenant holds the same and the facts extracted from the turns
(`extract_facts=True`), a third the turns alone (`summarize_sessions=False`). Per question, in
turn: agentq's recall as `models.memory.facts.recall` runs it (`models.memory.rerank.hybrid`: HNSW
cosine, BM25, context, date boost, session summaries, default `min_similarity`; Postgres 18 +
pgvector from `LocalStack`), the same with one part off or changed, on the tenant with facts or
without summaries, or split into clauses (an ablation row each), the recall it replaced (RRF of HNSW
and `ts_rank_cd`), and exact cosine top k over the turns' embeddings (numpy). recall@n: the share
of the question's evidence turns in the first n results (n = 5, k; a turn and the facts
extracted from it are one result), averaged by category. Evidence is parsed leniently ("D8:6;
D9:17" is two turns); what is unusable is counted and skipped. Also: tokens (`count_tokens`) of
the k results against the whole conversation's; ms per call (after a warm-up, query embedding
excluded), p50 and p95; ingest time; results cut by the threshold. Tables:
`ops.bench.locomo_report`.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlmodel import Session

from models.db import session_scope
from models.memory import conversation_turns, facts, rerank, retrieval
from models.memory.conversation_facts import extract
from models.memory.conversation_turns import Embed, Turn
from models.memory.embedders import LocalEmbedder
from models.memory.tokens import count_tokens
from models.migrate import upgrade
from models.settings import use_settings
from ops import processes
from ops.bench.locomo_report import AGENTQ, COSINE, Outcome, report
from ops.bench.locomo_subqueries import clauses, hybrid_of_clauses
from ops.stack import LocalStack

# The development conversations beside the repository (`../shared/data` from its root), never an
# absolute path; `--data` takes any other LoCoMo file.
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "locomo-dev.json"
DEFAULT_K, SHORT_K, WARMUP_CALLS = 10, 5, 5
# The date at the end of a session's `session_<n>_date_time` ("1:56 pm on 8 May, 2023").
SESSION_DATE = re.compile(r"(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$")
EVIDENCE_ID = re.compile(r"D\s*(\d+)\s*:\s*(\d+)")
Matrix = np.ndarray[Any, np.dtype[np.float32]]


@dataclass(frozen=True)
class Question:
    """One question: its category code, text and evidence turn ids (all in the conversation)."""

    category: int
    text: str
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample: turn i is `dia_ids[i]`, `speakers[i]`, `texts[i]` (as stored),
    `tokens[i]`, and `turns[i]` (what `models.memory.conversation_turns.remember_turns` stores)."""

    sample_id: str
    dia_ids: list[str]
    speakers: list[str]
    texts: list[str]
    tokens: list[int]
    questions: list[Question]
    turns: list[Turn]


def parse_evidence(entries: Sequence[object]) -> tuple[list[str], int]:
    """Turn ids ("D<session>:<turn>") in `entries`, deduplicated in order, and how many entries
    held none. Tolerates spaces and several ids per entry ("D8:6; D9:17")."""
    found, malformed = list[str](), 0
    for entry in entries:
        ids = [f"D{s}:{t}" for s, t in EVIDENCE_ID.findall(str(entry))]
        malformed += not ids
        found += [i for i in ids if i not in found]
    return found, malformed


def recall_at(ranked: Sequence[Collection[str]], evidence: Collection[str], n: int) -> float:
    """The share of `evidence` among the turn ids of the first `n` results (each result holds
    one or more ids). Raises `ValueError` for empty evidence."""
    if not evidence:
        raise ValueError("evidence: must not be empty")
    return len(set().union(*ranked[:n]) & set(evidence)) / len(set(evidence))


def load_conversation(
    item: dict[str, Any], skips: Counter[str], *, resolve_dates: bool = True
) -> Conversation:
    """One sample's turns in session order, each as "<speaker> (<session date>): <text>" plus
    " [image: <caption>]" if it has one (with `resolve_dates`, the text's relative time
    expressions resolved against the session's date: `models.memory.time_expressions.annotate`), and
    its questions with known evidence; counts in `skips` the "malformed" evidence entries,
    "unknown" turn ids and "questions" left without evidence."""
    conv = item["conversation"]
    sessions = sorted((int(k.split("_")[1]), k) for k in conv if re.fullmatch(r"session_\d+", k))
    turns = [(t, conv[f"{k}_date_time"]) for _, k in sessions for t in conv[k]]
    known, questions = {t["dia_id"] for t, _ in turns}, []
    for qa in item["qa"]:
        ids, malformed = parse_evidence(qa.get("evidence", []))
        evidence = frozenset(i for i in ids if i in known)
        skips.update(malformed=malformed, unknown=len(ids) - len(evidence), questions=not evidence)
        if evidence:
            questions.append(Question(int(qa["category"]), qa["question"], evidence))
    captions = [f" [image: {t['blip_caption']}]" if t.get("blip_caption") else "" for t, _ in turns]
    stored = []
    for (t, d), caption in zip(turns, captions, strict=True):
        thread, position = t["dia_id"].split(":")
        on = session_date(d) if resolve_dates else None
        turn = Turn(t["speaker"], t["text"], thread, int(position), on)
        stored.append(replace(turn, text=f"{turn.speaker} ({d}): {turn.resolved()}{caption}"))
    texts = [s.stored() for s in stored]
    dia_ids, speakers = [t["dia_id"] for t, _ in turns], [t["speaker"] for t, _ in turns]
    tokens = [count_tokens(text) for text in texts]
    return Conversation(item["sample_id"], dia_ids, speakers, texts, tokens, questions, stored)


def session_date(text: str) -> date:
    """The date of a LoCoMo session's `date_time` ("1:56 pm on 8 May, 2023", "8 May 2023");
    `ValueError` naming `text` for another form."""
    found = SESSION_DATE.search(text)
    if found is None:
        raise ValueError(f"session date {text!r}: expected '<day> <Month>, <year>' at its end")
    return datetime.strptime(" ".join(found.groups()), "%d %B %Y").date()


@dataclass(frozen=True)
class Stored:
    """One tenant's rows of a conversation: fact id -> the turn indices it stands for (a turn,
    a fact extracted from it, a duplicate text shared by several) and its tokens."""

    user_id: str
    turns: dict[int, list[int]]
    tokens: dict[int, int]


def store(session: Session, conv: Conversation, embed: Embed, *, tenant: str) -> Stored:
    """Remember every turn and its session's summary (with `tenant` WITH_FACTS also the facts
    it states; WITHOUT_SUMMARIES no summaries) through the product path,
    `models.memory.conversation_turns.remember_turns`, as user `locomo-<sample_id><tenant>`, after
    forgetting what a previous run here left."""
    user_id, extract_facts = f"locomo-{conv.sample_id}{tenant}", tenant == WITH_FACTS
    facts.forget_facts(session, user_id=user_id)
    model = LocalEmbedder.model
    written = conversation_turns.remember_turns(
        session,
        user_id=user_id,
        turns=conv.turns,
        embed=embed,
        embedding_model=model,
        extract_facts=extract_facts,
        summarize_sessions=tenant != WITHOUT_SUMMARIES,
    )
    turns, tokens = dict[int, list[int]](), dict[int, int]()
    for i, done in enumerate(written):
        for fact_id, text in [
            (done.turn_id, conv.texts[i]),
            *zip(done.fact_ids, done.fact_texts, strict=True),
        ]:
            turns.setdefault(fact_id, []).append(i)
            tokens[fact_id] = count_tokens(text)
    return Stored(user_id, turns, tokens)


class CachedEmbedder:
    """`LocalEmbedder` remembering every text's vector: each text is embedded once per run,
    whichever tenant stores it (the ablation without facts stores the same turns again)."""

    def __init__(self) -> None:
        self.embedder, self.vectors = LocalEmbedder(), dict[str, list[float]]()

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of `texts`, in order; the new ones embedded in one call."""
        new = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        self.vectors.update(zip(new, self.embedder.embed(new) if new else [], strict=True))
        return [self.vectors[t] for t in texts]


@cache
def embedder() -> CachedEmbedder:
    """The run's one `CachedEmbedder` (loaded on first use)."""
    return CachedEmbedder()


def by_clauses(session: Session, query: retrieval.Search) -> list[retrieval.Scored[int]]:
    """`ops.bench.locomo_subqueries.hybrid_of_clauses`, clauses embedded by `embedder()`."""
    return hybrid_of_clauses(session, query, embedder())


def cosine_top(turns: Matrix, vector: Matrix, k: int) -> list[int]:
    """Exact top `k` turn indices by cosine (the vectors are unit length), best first."""
    scores = turns @ vector
    top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    return [int(i) for i in top[np.argsort(-scores[top])]]


def rrf_before(session: Session, query: retrieval.Search) -> list[retrieval.Scored[int]]:
    """Recall as it was before the second stage: HNSW cosine and `ts_rank_cd` lists, RRF."""
    with retrieval.search_settings(session, pool=query.pool):
        by_vector = retrieval.nearest(session, query)
        by_text = retrieval.hits(session, query, retrieval.TEXT_MATCHES)
    return retrieval.fuse(by_vector, by_text, query)


Retriever = Callable[[Session, retrieval.Search], list[retrieval.Scored[int]]]
WITH_FACTS = "-facts"  # the tenant holding the turns and the facts extracted from them
WITHOUT_SUMMARIES = "-turns"  # the tenant holding the turns alone, no session summaries
# The retrievers compared, by row label: agentq's recall as shipped (turns as
# `remember_turns` stores them by default), then one row per part (`rerank.Weights`, the
# tenant with extracted facts or without summaries, sub-queries), and the recall the second
# stage replaced.
VARIANTS: dict[str, tuple[Retriever, str]] = {
    AGENTQ: (rerank.hybrid, ""),
    "with extracted facts (one result with their turn)": (rerank.hybrid, WITH_FACTS),
    "with extracted facts, each its own result": (
        partial(rerank.hybrid, weights=rerank.Weights(grouped=False)),
        WITH_FACTS,
    ),
    "without session summaries (the previous recall)": (rerank.hybrid, WITHOUT_SUMMARIES),
    "session summary weight 0.1 (shipped: 0.2)": (
        partial(rerank.hybrid, weights=rerank.Weights(summaries=0.1)),
        "",
    ),
    "session summary weight 0.3": (
        partial(rerank.hybrid, weights=rerank.Weights(summaries=0.3)),
        "",
    ),
    "with multi-hop sub-queries (clauses, CombMAX)": (by_clauses, ""),
    "without date boost": (
        partial(rerank.hybrid, weights=rerank.Weights(dates=0)),
        "",
    ),
    "without context": (partial(rerank.hybrid, weights=rerank.Weights(context=0)), ""),
    "without BM25": (partial(rerank.hybrid, weights=rerank.Weights(text=0)), ""),
    "before: RRF of HNSW + ts_rank_cd": (rrf_before, WITHOUT_SUMMARIES),
}


def outcome(
    conv: Conversation, q: Question, ranked: list[tuple[list[int], int]], ms: float, k: int
) -> Outcome:
    """Score one retrieval: `ranked` holds (turn indices, tokens) per row, best first; rows
    standing for the same turns one after another are one result (a turn with its facts)."""
    results: list[tuple[list[int], int]] = []
    for turns, tokens in ranked:
        if results and results[-1][0] == turns:
            results[-1] = (turns, results[-1][1] + tokens)
        else:
            results.append((turns, tokens))
    ids = [[conv.dia_ids[i] for i in turns] for turns, _ in results]
    used = sum(tokens for _, tokens in results[:k])
    scores = (recall_at(ids, q.evidence, SHORT_K), recall_at(ids, q.evidence, k))
    return Outcome(q.category, scores, used, used / sum(conv.tokens), ms, len(results) < k)


def evaluate(
    session: Session,
    conv: Conversation,
    stores: dict[str, Stored],
    vectors: Matrix,
    queries: Matrix,
    k: int,
) -> dict[str, list[Outcome]]:
    """Every retriever on each question of `conv`, in turn, each call timed."""
    found: dict[str, list[Outcome]] = {name: [] for name in [*VARIANTS, COSINE]}
    for q, vector in zip(conv.questions, queries, strict=True):
        for name, (retriever, tenant) in VARIANTS.items():
            rows, model, now = stores[tenant], LocalEmbedder.model, datetime.now(UTC)
            search = retrieval.Search(
                facts.FACTS, rows.user_id, model, q.text, vector.tolist(), k, now
            )
            start = time.perf_counter()
            ranked = retriever(session, search)
            ms = 1000 * (time.perf_counter() - start)
            groups = [(rows.turns[r.item], rows.tokens[r.item]) for r in ranked]
            scored = outcome(conv, q, groups, ms, k)
            found[name].append(replace(scored, text_match=any(r.text_match for r in ranked)))
        start = time.perf_counter()
        top = cosine_top(vectors, vector, k)
        ms = 1000 * (time.perf_counter() - start)
        found[COSINE].append(outcome(conv, q, [([i], conv.tokens[i]) for i in top], ms, k))
    return found


def ingest(url: str, conv: Conversation, embed: CachedEmbedder) -> dict[str, Stored]:
    """Store `conv` three times (as `remember_turns` does by default, with extracted facts,
    without session summaries), then ANALYZE; by tenant suffix."""
    with session_scope(url) as session:
        stores = {
            tenant: store(session, conv, embed, tenant=tenant)
            for tenant in ("", WITH_FACTS, WITHOUT_SUMMARIES)
        }
    with session_scope(url) as session:  # the planner's statistics, as autovacuum keeps them
        session.execute(sa.text("ANALYZE facts"))
    return stores


def run_all(convs: list[Conversation], k: int, url: str) -> dict[str, Any]:
    """Embed, store and query every conversation; outcomes by retriever, and timings (s)."""
    embed = embedder()
    embed(["warm-up"])  # loads the model, so embed_s is embedding alone
    results: dict[str, Any] = {"found": {}, "embed_s": 0.0, "store_s": 0.0}
    for conv in convs:
        start = time.perf_counter()
        facts_said = [f.text for t in conv.turns for f in extract(t.speaker, t.resolved())]
        vectors = np.asarray(embed([*conv.texts, *facts_said])[: len(conv.texts)], np.float32)
        queries = np.asarray(embed([q.text for q in conv.questions]), dtype=np.float32)
        embed([part for q in conv.questions for part in clauses(q.text)])  # timed calls embed none
        embedded = time.perf_counter()
        stores = ingest(url, conv, embed)
        results["embed_s"] += embedded - start
        results["store_s"] += time.perf_counter() - embedded
        with session_scope(url) as session:
            first = replace(conv, questions=conv.questions[:WARMUP_CALLS])  # untimed warm-up
            evaluate(session, first, stores, vectors, queries[:WARMUP_CALLS], k)
            for name, outcomes in evaluate(session, conv, stores, vectors, queries, k).items():
                results["found"].setdefault(name, []).extend(outcomes)
        print(
            f"{conv.sample_id}: {len(conv.texts)} turns, {len(facts_said)} facts extracted, "
            f"{len(conv.questions)} questions"
        )
    return results


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (`argv`, default `sys.argv[1:]`); exits with a usage error naming
    `--data` when its file is missing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON file")
    parser.add_argument("--k", type=int, default=DEFAULT_K, help=f"results per query, >= {SHORT_K}")
    parser.add_argument("--conversations", type=int, default=None, help="first N (default: all)")
    parser.add_argument("--data-dir", type=Path, default=None, help="kept; default: a temp dir")
    parser.add_argument(
        "--no-dates", action="store_true", help="store turns without resolving time expressions"
    )
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"--data: {args.data} is not a file (a LoCoMo JSON file, e.g. {DEFAULT_DATA})")
    return args


def main() -> None:
    """Load, start Postgres, migrate, measure, print, stop."""
    args, skips, started = parse_args(), Counter[str](), time.perf_counter()
    items = json.loads(args.data.read_text())[: args.conversations]
    convs = [load_conversation(item, skips, resolve_dates=not args.no_dates) for item in items]
    root = args.data_dir or Path(tempfile.mkdtemp(prefix="agentq-locomo-"))
    stack = LocalStack(root)
    processes.exit_on_sigterm()  # a TERM stops the stack too
    try:
        url, _ = stack.start_services()
        use_settings(database_url=url)
        upgrade(url)
        with session_scope(url) as session:
            facts.ensure_vector_indexes(session, model=LocalEmbedder.model, dim=LocalEmbedder.dim)
        sizes = [(len(c.texts), sum(c.tokens)) for c in convs]
        report(run_all(convs, args.k, url), sizes, skips, args.k)
    finally:
        stack.stop()
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nwall clock: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
