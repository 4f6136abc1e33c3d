"""Session summaries (`models.memory.session_summaries`): the tf-idf topic-word rule, the row text
with its date, and how the second stage (`models.memory.rerank.rescore`) lets a summary lift its
session's turns without ever returning it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime

import pytest

from models.memory.facts import FACTS
from models.memory.rerank import CONTEXT_WEIGHT, SUMMARY_WEIGHT, Candidate, Weights, rescore
from models.memory.retrieval import Search
from models.memory.session_summaries import summarize, summary_text, topic_words

NOW = datetime(2026, 12, 1, tzinfo=UTC)


@dataclass(frozen=True)
class T:
    speaker: str
    said: str
    thread: str
    position: int
    said_on: date | None = None


def test_one_summary_per_session_with_its_earliest_date_and_first_position() -> None:
    turns = [
        T("Caroline", "The adoption agency called me.", "D1", 3, date(2023, 5, 9)),
        T("Melanie", "Adoption is wonderful news!", "D1", 4, date(2023, 5, 8)),
        T("Melanie", "My pottery class starts soon.", "D2", 1, date(2023, 6, 1)),
    ]
    first, second = summarize(turns)
    assert (first.thread, first.position, first.said_on) == ("D1", 3, date(2023, 5, 8))
    assert first.text.startswith("On 8 May 2023 (session D1), Caroline and Melanie talked about: ")
    assert "adoption" in first.text and "pottery" not in first.text
    assert (second.thread, second.said_on) == ("D2", date(2023, 6, 1))
    assert "pottery" in second.text and "adoption" not in second.text


def test_names_stop_words_and_contractions_are_not_topics() -> None:
    turns = [T("Caroline", "Melanie! I'm sure that's the pottery we don't want.", "D1", 1)]
    turns.append(T("Melanie", "Caroline, which pottery?", "D1", 2))
    (summary,) = summarize(turns)
    assert summary.text == "In session D1, Caroline and Melanie talked about: pottery, sure, want."


def test_a_word_of_one_session_outranks_a_more_frequent_word_of_every_session() -> None:
    df = Counter({"really": 4, "adoption": 1})
    assert topic_words(Counter({"really": 3, "adoption": 2}), df, 4, 1) == ["adoption"]
    assert topic_words(Counter({"really": 9, "adoption": 1}), df, 4, 1) == ["really"]


def test_the_number_of_topic_words_is_bounded_and_checked() -> None:
    said = " ".join(f"topic{chr(97 + i)}" for i in range(20)).replace("topic", "word")
    (summary,) = summarize([T("A", said, "D1", 0)], words=3)
    assert summary.text.count(",") == 3  # "In session D1, A talked about: w1, w2, w3."
    with pytest.raises(ValueError, match="words 0: must be an integer >= 1"):
        summarize([T("A", said, "D1", 0)], words=0)


def test_summary_text_without_a_date_names_the_session() -> None:
    assert (
        summary_text("D7", ["A", "B", "A"], None, ["x"])
        == "In session D7, A and B talked about: x."
    )


def _query() -> Search:
    return Search(FACTS, "u", "m", "q", [1.0, 0.0], 10, NOW, 0.2)


def _row(
    id_: int, similarity: float, thread: str, position: int, summary: bool = False
) -> Candidate:
    return Candidate(id_, NOW, 1.0 - similarity, 0.0, False, thread, position, summary=summary)


def test_a_relevant_summary_lifts_every_turn_of_its_session_and_is_not_returned() -> None:
    summary = _row(1, 0.6, "D1", 1, summary=True)
    far_turn = _row(2, 0.25, "D1", 9)  # no relevant neighbour: kept and lifted by the summary
    other = _row(3, 0.25, "D2", 9)
    found = {r.item: r for r in rescore([summary, far_turn, other], _query())}
    assert set(found) == {2, 3}
    assert found[2].relevance == pytest.approx(0.25 + SUMMARY_WEIGHT * 0.6)
    assert found[3].relevance == pytest.approx(0.25)


def test_a_summary_is_no_position_neighbour_and_weight_zero_turns_it_off() -> None:
    summary = _row(1, 0.6, "D1", 1, summary=True)
    first = _row(2, 0.05, "D1", 1)  # at the summary's position, irrelevant itself
    turn = _row(3, 0.3, "D1", 2)
    found = {r.item: r for r in rescore([summary, first, turn], _query(), Weights(summaries=0))}
    assert set(found) == {2, 3}  # 2 kept by its relevant neighbour 3, not by the summary
    assert found[2].relevance == pytest.approx(0.05 + CONTEXT_WEIGHT * 0.3)
    assert found[3].relevance == pytest.approx(0.3)


def test_an_irrelevant_summary_lifts_nothing() -> None:
    summary = _row(1, 0.1, "D1", 1, summary=True)
    turn = _row(2, 0.3, "D1", 9)
    assert [r.relevance for r in rescore([summary, turn], _query())] == [pytest.approx(0.3)]
