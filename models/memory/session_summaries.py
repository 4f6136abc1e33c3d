"""Session summaries: one row per session of a conversation, with its date and what it was
about, written beside its turns so that recall can lift a session's turns by it.

The rule is offline and plain: a session is summarised by its most distinctive content words,
scored by tf-idf (Sparck Jones 1972; Salton and Buckley 1988) with the sessions written
together as the documents: tf = the word's count in the session, idf = ln(1 + n / df) over the
n sessions (a word every session uses, "today", "really", weighs little; one session's topic,
"adoption", "pottery", much). Stop words: scikit-learn's list (`models.memory.stop_words`); the
speakers' names are left out (every turn carries them). Words rather than the first sentences of the
longest turns: a list of topics covers the whole session, a few sentences only a few turns.

    On 8 May 2023 (session D3), Caroline and Melanie talked about: adoption, agencies, ...

`models.memory.rerank` counts a summary as a neighbour of every turn of its thread: it lifts its
session's turns and is never returned itself (the evidence is the turns).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Protocol

from models.memory.stop_words import ENGLISH_STOP_WORDS

SUMMARY_CATEGORY = "session_summary"  # the category of a summary row (`models.memory.facts.Fact`)
SUMMARY_WORDS = 12  # topic words per summary: about a line, at most 12 ideas (round number)
# Lowercase words of three letters or more, not part of a contraction ("don't", "that's").
WORD = re.compile(r"(?<!['\u2019])\b[a-z]{3,}\b(?!['\u2019])")


class TurnLike(Protocol):
    """What a summary reads of a turn (`models.memory.conversation_turns.Turn` is one)."""

    @property
    def speaker(self) -> str: ...
    @property
    def said(self) -> str: ...
    @property
    def thread(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def said_on(self) -> date | None: ...


@dataclass(frozen=True)
class SessionSummary:
    """One session's summary: its `thread`, the `position` of its first turn, its date
    `said_on` (the earliest of its turns'; None: unknown) and the row `text`."""

    thread: str
    position: int
    said_on: date | None
    text: str


def summarize(turns: Sequence[TurnLike], words: int = SUMMARY_WORDS) -> list[SessionSummary]:
    """One summary per thread of `turns`, in order of first appearance (module docstring): the
    date, the thread, the speakers and the `words` (>= 1) best topic words by tf-idf over the
    threads of `turns`. Raises `ValueError` for `words` < 1."""
    if words < 1:
        raise ValueError(f"words {words!r}: must be an integer >= 1")
    sessions: dict[str, list[TurnLike]] = {}
    for turn in turns:
        sessions.setdefault(turn.thread, []).append(turn)
    counts = {thread: _counts(said) for thread, said in sessions.items()}
    df = Counter(word for c in counts.values() for word in c)
    return [
        _summary(said, topic_words(counts[thread], df, len(sessions), words))
        for thread, said in sessions.items()
    ]


def topic_words(counts: Counter[str], df: Counter[str], n: int, words: int) -> list[str]:
    """The `words` highest of `counts` (a session's word counts) by tf * ln(1 + n / df) (`df`:
    in how many of the `n` sessions a word occurs), best first; ties alphabetical."""
    scores = {word: tf * math.log(1 + n / df[word]) for word, tf in counts.items()}
    return sorted(scores, key=lambda word: (-scores[word], word))[:words]


def summary_text(
    thread: str, speakers: Sequence[str], said_on: date | None, words: list[str]
) -> str:
    """The row text: "On 8 May 2023 (session D3), A and B talked about: w1, w2, ..." ("In
    session D3" when the date is unknown)."""
    when = f"On {said_on.day} {said_on:%B %Y} (session {thread})" if said_on else None
    who = " and ".join(dict.fromkeys(speakers))
    return f"{when or f'In session {thread}'}, {who} talked about: {', '.join(words)}."


def _summary(turns: list[TurnLike], words: list[str]) -> SessionSummary:
    dates = [t.said_on for t in turns if t.said_on is not None]
    said_on = min(dates) if dates else None
    text = summary_text(turns[0].thread, [t.speaker for t in turns], said_on, words)
    return SessionSummary(turns[0].thread, min(t.position for t in turns), said_on, text)


def _counts(turns: list[TurnLike]) -> Counter[str]:
    names = {part for t in turns for part in WORD.findall(t.speaker.lower())}
    skip = ENGLISH_STOP_WORDS | names
    return Counter(w for t in turns for w in WORD.findall(t.said.lower()) if w not in skip)
