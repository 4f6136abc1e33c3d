"""Multi-hop sub-queries, measured on LoCoMo (`ops.bench.locomo_recall`): a question split into
its clauses, each clause recalled as a query of its own, the lists fused by max-normalised score.

A multi-hop question joins what several turns say ("What schools did John play basketball in
and how many years was he with his team?"); one embedding of the whole question sits between
its parts. The clauses are the parts between commas, semicolons and the conjunctions "and",
"or", "but"; a part of fewer than MIN_CLAUSE_WORDS words (a name: "Melanie and Caroline") is
no clause, and a question of one clause is recalled as it is. Each list (the whole question's
and each clause's, `models.memory.rerank.hybrid`) is divided by its best score, so a clause's best
row counts as much as the question's (Fox and Shaw's CombMAX over max-normalised scores, 1994),
and a row takes its best share.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from sqlmodel import Session

from models.memory import rerank
from models.memory.conversation_turns import Embed
from models.memory.retrieval import Scored, Search

CLAUSE_BREAK = re.compile(r"\s*(?:[,;]|\b(?:and|or|but)\b)\s*", re.IGNORECASE)
MIN_CLAUSE_WORDS = 3  # fewer: a name or a noun ("her kids"), no question of its own


def clauses(question: str) -> list[str]:
    """The clauses of `question` (module docstring), or [] when it has fewer than two."""
    parts = [part.strip(" ?.!") for part in CLAUSE_BREAK.split(question)]
    found = [part for part in parts if len(part.split()) >= MIN_CLAUSE_WORDS]
    return found if len(found) > 1 else []


def fuse_max(lists: Sequence[Sequence[Scored[int]]], k: int) -> list[Scored[int]]:
    """The best `k` ids of `lists`, each list's scores divided by its best (> 0), an id taking
    its best share (CombMAX); ties: higher similarity, then newer id."""
    best: dict[int, Scored[int]] = {}
    for ranked in lists:
        top = max((r.score for r in ranked), default=0.0)
        for r in ranked:
            share = r.score / top if top > 0 else 0.0
            if r.item not in best or share > best[r.item].score:
                best[r.item] = replace(r, score=share)
    return sorted(best.values(), key=lambda r: (-r.score, -r.similarity, -r.item))[:k]


def hybrid_of_clauses(session: Session, search: Search, embed: Embed) -> list[Scored[int]]:
    """`models.memory.rerank.hybrid` for `search` and for each of its question's clauses (embedded
    by `embed`), fused by `fuse_max`; the question alone when it has one clause."""
    parts = clauses(search.query_text)
    lists = [rerank.hybrid(session, search)]
    for part, vector in zip(parts, embed(parts) if parts else [], strict=True):
        lists.append(rerank.hybrid(session, replace(search, query_text=part, embedding=vector)))
    return fuse_max(lists, search.k) if parts else lists[0]
