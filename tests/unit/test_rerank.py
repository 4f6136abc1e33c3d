"""The second stage of recall (`models.rerank.rescore`): BM25 against the best candidate's,
conversation context from the rows around a turn, the relevance threshold, recency, ties."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.facts import FACTS
from models.rerank import CONTEXT_WEIGHT, TEXT_WEIGHT, Candidate, Weights, neighbours, rescore
from models.retrieval import Scored, Search

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def query(min_similarity: float = 0.2, half_life_days: float | None = None) -> Search:
    return Search(FACTS, "u", "m", "q", [1.0, 0.0], 10, NOW, min_similarity, half_life_days)


def row(
    id_: int,
    similarity: float,
    bm25: float = 0.0,
    *,
    match: bool = False,
    at: tuple[str, int] | None = None,
    age_days: float = 0.0,
) -> Candidate:
    thread, position = at if at else (None, None)
    born = NOW - timedelta(days=age_days)
    return Candidate(id_, born, 1.0 - similarity, bm25, match, thread, position)


def by_id(found: list[Scored[int]]) -> dict[int, Scored[int]]:
    return {r.item: r for r in found}


def test_bm25_counts_against_the_best_candidates_so_its_weight_does_not_depend_on_scale() -> None:
    small = rescore([row(1, 0.5, 2.0), row(2, 0.5, 1.0)], query())
    large = rescore([row(1, 0.5, 200.0), row(2, 0.5, 100.0)], query())
    assert [r.relevance for r in small] == pytest.approx([r.relevance for r in large])
    assert by_id(small)[1].relevance == pytest.approx(0.5 + TEXT_WEIGHT)
    assert by_id(small)[2].relevance == pytest.approx(0.5 + TEXT_WEIGHT / 2)


def test_shared_rare_words_outrank_a_slightly_closer_vector() -> None:
    found = rescore([row(1, 0.55), row(2, 0.45, 3.0)], query())
    assert [r.item for r in found] == [2, 1]


def test_a_reply_is_recalled_through_the_turn_it_answers() -> None:
    asked = row(1, 0.6, 1.0, at=("D1", 4))
    reply = row(2, 0.05, at=("D1", 5))  # "Yes, last week!": no shared word, far in meaning
    found = by_id(rescore([asked, reply], query()))
    assert set(found) == {1, 2}
    assert found[2].relevance == pytest.approx(0.05 + CONTEXT_WEIGHT * (0.6 + TEXT_WEIGHT))
    assert found[1].relevance == pytest.approx(0.6 + TEXT_WEIGHT)  # its neighbour is irrelevant


def test_rows_with_no_relevant_neighbour_are_dropped() -> None:
    lonely = row(2, 0.05, at=("D1", 5))
    other_thread = row(3, 0.9, at=("D2", 4))
    two_away = row(4, 0.9, at=("D1", 7))
    found = rescore([lonely, other_thread, two_away], query())
    assert {r.item for r in found} == {3, 4}


def test_a_fact_extracted_from_a_turn_shares_its_position_and_lifts_it() -> None:
    fact = row(1, 0.7, at=("D1", 5))
    turn = row(2, 0.1, at=("D1", 5))
    assert neighbours(turn, {("D1", 5): [1, 2]}) == [1]
    found = by_id(rescore([fact, turn], query()))
    assert found[2].relevance == pytest.approx(0.1 + CONTEXT_WEIGHT * 0.7)


def test_context_off_neither_lifts_nor_brings_in_neighbours() -> None:
    asked, reply = row(1, 0.6, at=("D1", 4)), row(2, 0.05, at=("D1", 5))
    found = rescore([asked, reply], query(), Weights(context=0))
    assert [r.item for r in found] == [1]
    assert found[0].relevance == pytest.approx(0.6)


def test_text_off_ranks_by_similarity_alone() -> None:
    found = rescore([row(1, 0.55), row(2, 0.45, 3.0, match=True)], query(), Weights(text=0))
    assert [r.item for r in found] == [1, 2]


def test_an_all_words_match_keeps_a_row_below_the_similarity_threshold() -> None:
    found = rescore([row(1, 0.1, 1.0, match=True), row(2, 0.1, 1.0)], query(min_similarity=0.2))
    assert [r.item for r in found] == [1]


def test_recency_breaks_near_ties_only() -> None:
    found = rescore([row(1, 0.5, age_days=365), row(2, 0.5)], query(half_life_days=30))
    assert [r.item for r in found] == [2, 1]
    assert found[1].recency == pytest.approx(0.8, abs=1e-3)
    far_better_but_old = rescore([row(1, 0.9, age_days=365), row(2, 0.5)], query(half_life_days=30))
    assert far_better_but_old[0].item == 1


def test_equal_scores_prefer_the_newer_id() -> None:
    found = rescore([row(1, 0.5), row(2, 0.5), row(3, 0.25)], query())
    assert [r.item for r in found] == [2, 1, 3]


def test_no_candidates_is_no_results() -> None:
    assert rescore([], query()) == []
