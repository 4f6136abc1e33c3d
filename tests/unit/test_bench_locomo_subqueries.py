"""Multi-hop sub-queries of the LoCoMo benchmark (`ops.bench.locomo_subqueries`): clause
splitting and the CombMAX fusion of max-normalised lists."""

from __future__ import annotations

import pytest

from models.memory.retrieval import Scored
from ops.bench.locomo_subqueries import clauses, fuse_max


def scored(item: int, score: float, similarity: float = 0.5) -> Scored[int]:
    return Scored(item, similarity, 0.0, False, score, 1.0, score)


def test_clauses_split_at_commas_and_conjunctions_of_whole_clauses() -> None:
    question = "What schools did John play basketball in and how many years was he with his team?"
    assert clauses(question) == [
        "What schools did John play basketball in",
        "how many years was he with his team",
    ]


@pytest.mark.parametrize(
    "question",
    ["What activities does Melanie partake in?", "What did Melanie and Caroline do?"],
)
def test_a_question_of_one_clause_is_not_split(question: str) -> None:
    assert clauses(question) == []  # "Caroline do": under three words, no clause


def test_fuse_max_normalises_each_list_by_its_best_and_keeps_each_ids_best_share() -> None:
    whole = [scored(1, 2.0, similarity=0.6), scored(2, 1.0)]
    clause = [scored(3, 0.5), scored(2, 0.45)]
    fused = fuse_max([whole, clause], 3)
    assert [r.item for r in fused] == [1, 3, 2]
    assert [r.score for r in fused] == pytest.approx([1.0, 1.0, 0.9])
    assert fuse_max([whole, clause], 1)[0].item == 1  # tie on 1.0: the higher similarity
    assert fuse_max([[], [scored(4, 0.0)]], 2)[0].score == 0.0
