"""Facts a conversation turn states about its speaker (`models.memory.conversation_facts`): which
sentences count, their kind, and their third-person text."""

from __future__ import annotations

import pytest

from models.memory.conversation_facts import MAX_FACTS, Extracted, extract, kind_of, third_person


@pytest.mark.parametrize(
    ("sentence", "kind"),
    [
        ("I love painting sunsets by the lake.", "preference"),
        ("My favorite book is Charlotte's Web.", "preference"),
        ("I'm really into pottery these days.", "preference"),
        ("I'm going to a transgender conference next month.", "plan"),
        ("We're planning a camping trip in June.", "plan"),
        ("I'll call the adoption agency tomorrow.", "plan"),
        ("My kids are so excited about summer break!", "relation"),
        ("I have two dogs and a cat.", "relation"),
        ("I went to a support group yesterday.", "event"),
        ("We adopted a puppy last week.", "event"),
        ("I've finally started my counseling course.", "event"),
    ],
)
def test_each_rule_finds_its_kind(sentence: str, kind: str) -> None:
    assert kind_of(sentence) == kind


@pytest.mark.parametrize(
    "sentence",
    [
        "Did you go to the pottery class?",  # a question states nothing
        "I love it!",  # too short
        "That sounds like a wonderful time.",  # no first-person subject
        "The weather was lovely at the beach.",  # nobody did anything
    ],
)
def test_sentences_stating_nothing_about_the_speaker_are_skipped(sentence: str) -> None:
    assert kind_of(sentence) is None


def test_first_person_words_become_the_speaker() -> None:
    assert third_person("Mel", "I'm sure my kids told me I'd love it") == (
        "Mel is sure Mel's kids told Mel Mel would love it"
    )
    assert third_person("Mel", "Idaho is mine, I've said") == "Idaho is Mel's, Mel has said"


def test_a_turn_gives_one_fact_per_sentence_naming_the_speaker() -> None:
    said = (
        "Hey Mel! I went to a support group yesterday (7 May 2023). "
        "Was it good? We painted a mural together."
    )
    assert extract("Caroline", said) == [
        Extracted("event", "Caroline", "Caroline went to a support group yesterday (7 May 2023)."),
        Extracted("event", "Caroline", "Caroline: We painted a mural together."),
    ]


def test_at_most_max_facts_per_turn_and_an_empty_speaker_is_refused() -> None:
    said = " ".join(f"I went to place number {i}." for i in range(MAX_FACTS + 2))
    assert len(extract("Ann", said)) == MAX_FACTS
    assert extract("Ann", "") == []
    with pytest.raises(ValueError, match="speaker"):
        extract(" ", "I went home early today.")
