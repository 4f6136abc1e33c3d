"""Remembering a conversation: each turn as a fact in its thread, optionally with the facts it
states.

`remember_turns` is the write path for conversation turns: every turn is stored as a fact
(category "event", `turn` = its thread and position, `models.memory.facts.remember`); relative time
expressions are resolved against the turn's date first (`models.memory.time_expressions`). With
`extract_facts`, the facts `models.memory.conversation_facts.extract` finds in a turn are stored
beside it, at the same thread and position, under their kind ("preference", "plan", "relation",
"event"), and recall returns a turn and its facts together, as one result
(`models.memory.rerank.group_turns`). Off by default, by measurement (README "Memory benchmarks",
LoCoMo development set): the facts raised multi-hop and temporal recall@10 but lowered
single-hop and adversarial more (a fact names its speaker, so a question naming the wrong
person finds the wrong person's facts), and the whole set's. With `summarize_sessions` (on by
default, by the same measurement: recall@10 0.768 to 0.779, no category lower by more than
0.005), one summary row per session, with its date (`models.memory.session_summaries`), which lifts
its session's turns in recall and is never returned itself. All texts are embedded in one call
of `embed`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date

from sqlmodel import Session

from models.memory import facts
from models.memory.conversation_facts import extract
from models.memory.session_summaries import SUMMARY_CATEGORY, SessionSummary, summarize
from models.memory.time_expressions import annotate

Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]


@dataclass(frozen=True)
class Turn:
    """One turn: `speaker`, the words `said`, the date it was `said_on` (None: unknown, nothing
    resolved), its `thread` (a conversation or a session of it) and `position` (>= 0) there, and
    `text`, the row as stored (default: "<speaker>: <said>", time expressions resolved)."""

    speaker: str
    said: str
    thread: str
    position: int
    said_on: date | None = None
    text: str | None = None

    def resolved(self) -> str:
        """`said` with its relative time expressions resolved against `said_on`."""
        return self.said if self.said_on is None else annotate(self.said, self.said_on)

    def stored(self) -> str:
        """The turn's row text."""
        return self.text or f"{self.speaker}: {self.resolved()}"


@dataclass(frozen=True)
class TurnWritten:
    """What `remember_turns` wrote for one turn: the turn's fact id, and its extracted facts'
    ids with their texts (in the same order)."""

    turn_id: int
    fact_ids: tuple[int, ...]
    fact_texts: tuple[str, ...] = ()


def remember_turns(
    session: Session,
    *,
    user_id: str,
    turns: Sequence[Turn],
    embed: Embed,
    embedding_model: str,
    extract_facts: bool = False,
    summarize_sessions: bool = True,
) -> list[TurnWritten]:
    """Store each of `turns` and (with `extract_facts`) the facts it states, for `user_id`, in
    order; one `TurnWritten` per turn. With `summarize_sessions`, then one summary row per
    thread of `turns` (`models.memory.session_summaries`; category SUMMARY_CATEGORY, at its first
    turn's position). `embed` maps texts to vectors of `embedding_model`, one each. Raises what
    `models.memory.facts.remember` raises (a bad thread or position: `ValueError`)."""
    found = [extract(t.speaker, t.resolved()) if extract_facts else [] for t in turns]
    summaries = summarize(turns) if summarize_sessions else []
    stored = [t.stored() for t in turns]
    texts = stored + [f.text for fs in found for f in fs]
    vectors = iter(embed(texts + [s.text for s in summaries]))
    turn_vectors = [next(vectors) for _ in turns]
    written = []
    for turn, text, vector, extracted in zip(turns, stored, turn_vectors, found, strict=True):
        turn_id = _write(session, user_id, turn, "event", text, vector, embedding_model)
        ids = tuple(
            _write(session, user_id, turn, f.kind, f.text, next(vectors), embedding_model)
            for f in extracted
        )
        written.append(TurnWritten(turn_id, ids, tuple(f.text for f in extracted)))
    for summary in summaries:
        _summary(session, user_id, turns, summary, next(vectors), embedding_model)
    return written


def _summary(
    session: Session,
    user_id: str,
    turns: Sequence[Turn],
    summary: SessionSummary,
    vector: Sequence[float],
    model: str,
) -> int:
    speakers = " and ".join(dict.fromkeys(t.speaker for t in turns if t.thread == summary.thread))
    turn = Turn(speakers, summary.text, summary.thread, summary.position, summary.said_on)
    return _write(session, user_id, turn, SUMMARY_CATEGORY, summary.text, vector, model)


def _write(
    session: Session,
    user_id: str,
    turn: Turn,
    category: str,
    text: str,
    vector: Sequence[float],
    model: str,
) -> int:
    done = facts.remember(
        session,
        user_id=user_id,
        subject=turn.speaker,
        attribute=None,
        category=category,
        text=text,
        embedding=list(vector),
        embedding_model=model,
        turn=(turn.thread, turn.position),
    )
    return done.fact_id
