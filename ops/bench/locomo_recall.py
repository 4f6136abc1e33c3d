"""LoCoMo recall: agentq's hybrid `recall` against plain cosine top-k, on the evidence turns.

`python -m ops.bench.locomo_recall [--data PATH] [--k 10] [--conversations N] [--data-dir DIR]
[--no-dates]`

LoCoMo (Maharana et al., ACL 2024): long two-person conversations; each question's `evidence`
names the turns ("D3:5": session 3, turn 5) holding the answer. A conversation is one tenant, a
turn one fact ("<speaker> (<session date>): <text> [image: <caption>]", category "event", its
relative time expressions resolved against the session's date unless `--no-dates`) in its
session's thread, embedded in batches by all-MiniLM-L6-v2. Per question, in turn: agentq's
recall as `models.facts.recall` runs it (`models.rerank.hybrid`: HNSW cosine, BM25, context,
recency, default `min_similarity`; Postgres 18 + pgvector from `LocalStack`), the same with one
part off (`rerank.Weights`: an ablation row each), the recall it replaced (RRF of HNSW and
`ts_rank_cd`), and exact cosine top k over the same embeddings (numpy). recall@n: the share of
the question's evidence turns in the first n results (n = 5, k), averaged by category. Evidence
is parsed leniently ("D8:6; D9:17" is two turns); what is unusable is counted and skipped. Also:
tokens (`count_tokens`) of the k results against the whole conversation's; ms per call (after a
warm-up, query embedding excluded), p50 and p95; ingest time; results cut by the threshold.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from functools import partial
from pathlib import Path
from statistics import fmean
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlmodel import Session

from models import facts, rerank, retrieval
from models.db import session_scope
from models.embedders import LocalEmbedder
from models.migrate import upgrade
from models.retrieval import MIN_SIMILARITY
from models.time_expressions import annotate
from models.tokens import count_tokens
from ops import processes
from ops.bench.figures import percentile
from ops.stack import LocalStack

# The development conversations beside the repository (`../shared/data` from its root), never an
# absolute path; `--data` takes any other LoCoMo file.
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "locomo-dev.json"
DEFAULT_K, SHORT_K, WARMUP_CALLS = 10, 5, 5
# The released data's codes (not the paper's order): 2 ask "When ...", 5 have adversarial answers.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
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
    """One LoCoMo sample: turn i is `dia_ids[i]`, `speakers[i]`, `texts[i]`, `tokens[i]`."""

    sample_id: str
    dia_ids: list[str]
    speakers: list[str]
    texts: list[str]
    tokens: list[int]
    questions: list[Question]


@dataclass(frozen=True)
class Outcome:
    """One retriever on one question: `recall` at (5, k); `share`: of the conversation's tokens."""

    category: int
    recall: tuple[float, float]
    tokens: int
    share: float
    latency_ms: float
    short: bool = False
    text_match: bool = False


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
    expressions resolved against the session's date: `models.time_expressions.annotate`), and
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
    said = [annotate(t["text"], session_date(d)) if resolve_dates else t["text"] for t, d in turns]
    texts = [
        f"{t['speaker']} ({d}): {text}{c}"
        for (t, d), text, c in zip(turns, said, captions, strict=True)
    ]
    dia_ids, speakers = [t["dia_id"] for t, _ in turns], [t["speaker"] for t, _ in turns]
    tokens = [count_tokens(text) for text in texts]
    return Conversation(item["sample_id"], dia_ids, speakers, texts, tokens, questions)


def session_date(text: str) -> date:
    """The date of a LoCoMo session's `date_time` ("1:56 pm on 8 May, 2023", "8 May 2023");
    `ValueError` naming `text` for another form."""
    found = SESSION_DATE.search(text)
    if found is None:
        raise ValueError(f"session date {text!r}: expected '<day> <Month>, <year>' at its end")
    return datetime.strptime(" ".join(found.groups()), "%d %B %Y").date()


def store(session: Session, conv: Conversation, vectors: Matrix) -> dict[int, list[int]]:
    """Remember every turn as a fact of tenant `locomo-<sample_id>` (after forgetting what a
    previous run on this data dir left), placed in its session's thread ("D3" for "D3:5");
    fact id -> turn indices (a duplicate text shares one)."""
    user_id, turns = f"locomo-{conv.sample_id}", dict[int, list[int]]()
    facts.forget_facts(session, user_id=user_id)
    for i, text in enumerate(conv.texts):
        thread, position = conv.dia_ids[i].split(":")
        done = facts.remember(
            session,
            user_id=user_id,
            subject=conv.speakers[i],
            attribute=None,
            category="event",
            text=text,
            embedding=vectors[i].tolist(),
            embedding_model=LocalEmbedder.model,
            turn=(thread, int(position)),
        )
        turns.setdefault(done.fact_id, []).append(i)
    return turns


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


# The retrievers compared, by row label: agentq's recall as shipped, then one row per part.
AGENTQ = "agentq: BM25 + context"
VARIANTS: dict[str, Callable[[Session, retrieval.Search], list[retrieval.Scored[int]]]] = {
    AGENTQ: rerank.hybrid,
    "without context (BM25 + cosine)": partial(rerank.hybrid, weights=rerank.Weights(context=0)),
    "without BM25 (cosine + context)": partial(rerank.hybrid, weights=rerank.Weights(text=0)),
    "before: RRF of HNSW + ts_rank_cd": rrf_before,
}
COSINE = "plain cosine (exact, numpy)"


def outcome(conv: Conversation, q: Question, ranked: list[list[int]], ms: float, k: int) -> Outcome:
    """Score one retrieval: `ranked` holds turn indices per result, best first."""
    ids = [[conv.dia_ids[i] for i in group] for group in ranked]
    used = sum(conv.tokens[i] for group in ranked[:k] for i in group)
    scores = (recall_at(ids, q.evidence, SHORT_K), recall_at(ids, q.evidence, k))
    return Outcome(q.category, scores, used, used / sum(conv.tokens), ms, len(ranked) < k)


def evaluate(
    session: Session,
    conv: Conversation,
    fact_turns: dict[int, list[int]],
    vectors: Matrix,
    queries: Matrix,
    k: int,
) -> dict[str, list[Outcome]]:
    """Every retriever on each question of `conv`, in turn, each call timed."""
    found: dict[str, list[Outcome]] = {name: [] for name in [*VARIANTS, COSINE]}
    for q, vector in zip(conv.questions, queries, strict=True):
        user_id, model, now = f"locomo-{conv.sample_id}", LocalEmbedder.model, datetime.now(UTC)
        search = retrieval.Search(facts.FACTS, user_id, model, q.text, vector.tolist(), k, now)
        for name, retriever in VARIANTS.items():
            start = time.perf_counter()
            ranked = retriever(session, search)
            ms = 1000 * (time.perf_counter() - start)
            scored = outcome(conv, q, [fact_turns[r.item] for r in ranked], ms, k)
            found[name].append(replace(scored, text_match=any(r.text_match for r in ranked)))
        start = time.perf_counter()
        top = cosine_top(vectors, vector, k)
        ms = 1000 * (time.perf_counter() - start)
        found[COSINE].append(outcome(conv, q, [[i] for i in top], ms, k))
    return found


def run_all(convs: list[Conversation], k: int, url: str) -> dict[str, Any]:
    """Embed, store and query every conversation; outcomes by retriever, and timings (s)."""
    embedder = LocalEmbedder()
    embedder.embed(["warm-up"])  # loads the model, so embed_s is embedding alone
    results: dict[str, Any] = {"found": {}, "embed_s": 0.0, "store_s": 0.0}
    for conv in convs:
        start = time.perf_counter()
        vectors = np.asarray(embedder.embed(conv.texts), dtype=np.float32)
        queries = np.asarray(embedder.embed([q.text for q in conv.questions]), dtype=np.float32)
        embedded = time.perf_counter()
        with session_scope(url) as session:
            fact_turns = store(session, conv, vectors)
        with session_scope(url) as session:  # the planner's statistics, as autovacuum keeps them
            session.execute(sa.text("ANALYZE facts"))
        results["embed_s"] += embedded - start
        results["store_s"] += time.perf_counter() - embedded
        with session_scope(url) as session:
            first = replace(conv, questions=conv.questions[:WARMUP_CALLS])  # untimed warm-up
            evaluate(session, first, fact_turns, vectors, queries[:WARMUP_CALLS], k)
            for name, outcomes in evaluate(session, conv, fact_turns, vectors, queries, k).items():
                results["found"].setdefault(name, []).extend(outcomes)
        print(f"{conv.sample_id}: {len(conv.texts)} turns, {len(conv.questions)} questions")
    return results


def recall_rows(agentq: list[Outcome], cosine: list[Outcome]) -> list[list[str]]:
    """Rows: group, questions, agentq recall@5 and @k, cosine recall@5 and @k; groups: the
    categories, all, all split by a full-text match in agentq's results."""
    pairs = list(zip(agentq, cosine, strict=True))
    groups = {f"{c} {n}": [p for p in pairs if p[0].category == c] for c, n in CATEGORIES.items()}
    groups["all"] = pairs
    groups["all, full-text match in agentq's"] = [p for p in pairs if p[0].text_match]
    groups["all, no full-text match"] = [p for p in pairs if not p[0].text_match]
    rows = []
    for label, group in groups.items():
        cells = [fmean(p[i].recall[n] for p in group) for i in (0, 1) for n in (0, 1)]
        rows += [[label, str(len(group)), *(f"{x:.3f}" for x in cells)]] if group else []
    return rows


def ablation_rows(found: dict[str, list[Outcome]]) -> list[list[str]]:
    """Rows: retriever, recall@5 and @k, recall@k of each category, mean tokens of its top k,
    latency p95 (ms)."""
    rows = []
    for name, outcomes in found.items():
        recall = [fmean(o.recall[n] for o in outcomes) for n in (0, 1)]
        by_category = [
            fmean([o.recall[1] for o in outcomes if o.category == c] or [0.0]) for c in CATEGORIES
        ]
        tokens, p95 = (
            fmean(o.tokens for o in outcomes),
            percentile([o.latency_ms for o in outcomes], 95),
        )
        cells = [*(f"{x:.3f}" for x in [*recall, *by_category]), f"{tokens:.0f}", f"{p95:.2f}"]
        rows.append([name, *cells])
    return rows


def cost_rows(found: dict[str, list[Outcome]]) -> list[list[str]]:
    """Rows: context tokens per question, share of the conversation, latency p50 and p95."""
    rows = []
    for name in (AGENTQ, COSINE):
        outcomes = found[name]
        ms = [o.latency_ms for o in outcomes]
        tokens, share = (
            fmean([o.tokens for o in outcomes]),
            100 * fmean([o.share for o in outcomes]),
        )
        latency = [f"{percentile(ms, p):.2f}" for p in (50, 95)]
        rows.append([name, f"{tokens:.0f}", f"{share:.2f}%", *latency])
    return rows


def render(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    """An aligned text table, or a GitHub markdown table."""
    if markdown:
        lines = [header, ["---"] * len(header), *rows]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(map(str.ljust, row, widths)) for row in [header, *rows])


def report(results: dict[str, Any], convs: list[Conversation], skips: Counter[str], k: int) -> None:
    """Print the counts, then the tables (plain, then markdown)."""
    found, agentq = results["found"], results["found"][AGENTQ]
    turns = sum(len(c.texts) for c in convs)
    recall_head = ["questions", "agentq R@5", f"agentq R@{k}", "cosine R@5", f"cosine R@{k}"]
    names = [n.split()[0] for n in CATEGORIES.values()]
    ablation_head = ["retriever", "R@5", f"R@{k}", *names, f"tokens of top {k}", "p95 ms"]
    cost_head = ["retriever", f"tokens of top {k}", "of conversation", "p50 ms", "p95 ms"]
    tables = [
        (["category", *recall_head], recall_rows(agentq, found[COSINE])),
        (ablation_head, ablation_rows(found)),
        (cost_head, cost_rows(found)),
    ]
    print(f"""
LoCoMo: {len(convs)} conversations, {turns} turns, {len(agentq)} questions, k={k}
skipped: {skips["questions"]} questions without valid evidence, {skips["malformed"]} malformed \
evidence entries, {skips["unknown"]} evidence ids of missing turns
ingest: embedding {results["embed_s"]:.1f} s (turns and questions), remember \
{results["store_s"]:.1f} s ({1000 * results["store_s"] / turns:.1f} ms/turn)
conversation tokens: mean {fmean([sum(c.tokens) for c in convs]):.0f}
agentq returned fewer than {k} (min_similarity {MIN_SIMILARITY}): {sum(o.short for o in agentq)} \
questions; with a full-text match in its top {k}: {sum(o.text_match for o in agentq)}""")
    for markdown in (False, True):
        for header, rows in tables:
            print("\n" + render(header, rows, markdown))


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
        os.environ["AGENTQ_DATABASE_URL"] = url
        upgrade(url)
        with session_scope(url) as session:
            facts.ensure_vector_indexes(session, model=LocalEmbedder.model, dim=LocalEmbedder.dim)
        report(run_all(convs, args.k, url), convs, skips, args.k)
    finally:
        stack.stop()
        if args.data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nwall clock: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
