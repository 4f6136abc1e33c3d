"""The second stage of recall (`models.memory.rerank.rescore`): BM25 against the best candidate's,
conversation context from the rows around a turn, the relevance threshold, recency, ties."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from models.memory.facts import FACTS
from models.memory.rerank import (
    CONTEXT_WEIGHT,
    DATE_WEIGHT,
    TEXT_WEIGHT,
    Candidate,
    Weights,
    asks_when,
    group_turns,
    neighbours,
    rescore,
)
from models.memory.retrieval import Scored, Search

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


@pytest.mark.parametrize(
    ("question", "temporal"),
    [
        ("When did Caroline go to the support group?", True),
        ("How long ago was Caroline's 18th birthday?", True),
        ("In what year did Melanie start running?", True),
        ("Which month did they move?", True),
        ("What does Melanie like to paint?", False),
        ("Where has Melanie camped?", False),
    ],
)
def test_asks_when_finds_questions_about_time(question: str, temporal: bool) -> None:
    assert asks_when(question) is temporal


def test_a_dated_row_gains_only_for_a_question_asking_when() -> None:
    plain, dated = row(1, 0.5), replace(row(2, 0.5), dated=True)
    when = replace(query(), query_text="When did she go?")
    boosted = by_id(rescore([plain, dated], when))
    assert boosted[2].relevance == pytest.approx(boosted[1].relevance + DATE_WEIGHT)
    unboosted = by_id(rescore([plain, dated], replace(query(), query_text="Where did she go?")))
    assert unboosted[2].relevance == pytest.approx(unboosted[1].relevance)
    off = by_id(rescore([plain, dated], when, Weights(dates=0)))
    assert off[2].relevance == pytest.approx(off[1].relevance)


def test_a_turn_and_its_facts_are_one_result_at_the_place_of_the_best() -> None:
    turn, fact, other = row(1, 0.3, at=("D1", 4)), row(2, 0.9, at=("D1", 4)), row(3, 0.6)
    later, episode = row(4, 0.5, at=("D2", 1)), row(5, 0.4)
    found = [turn, fact, other, later, episode]
    ranked = rescore(found, query(), Weights(context=0))
    assert [r.item for r in ranked] == [2, 3, 4, 5, 1]
    assert [r.item for r in group_turns(ranked, found, 2)] == [2, 1, 3]
    assert [r.item for r in group_turns(ranked, found, 10)] == [2, 1, 3, 4, 5]
