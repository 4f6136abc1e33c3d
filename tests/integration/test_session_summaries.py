"""Session summaries on the real embedded Postgres: written by `remember_turns` with their
session's date, lifting their session's turns in recall, never returned, never another user's."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import date

import pytest

from models.db import session_scope
from models.memory.conversation_turns import Turn, remember_turns
from models.memory.embeddings import HashEmbedder
from models.memory.facts import ensure_vector_indexes, facts_of, recall
from models.memory.session_summaries import SUMMARY_CATEGORY
from ops.stack import LocalStack

pytestmark = pytest.mark.integration
EMBEDDER = HashEmbedder()
QUESTION = "adoption agency"
# "Done, all signed!" shares no word with QUESTION and is far from the session's turns that do:
# only its session's summary (which names adoption and the agency) can lift it.
SESSIONS = {
    ("D1", date(2023, 5, 8)): [
        ("Caroline", "I called the adoption agency today."),
        ("Melanie", "Adoption is such a big step, and the agency sounds kind."),
        ("Caroline", "How was your weekend at the lake?"),
        ("Melanie", "Sunny and calm, the kids swam a lot."),
        ("Caroline", "Done, all signed!"),
    ],
    ("D2", date(2023, 6, 1)): [
        ("Melanie", "I painted a sunset over the lake."),
        ("Caroline", "Painting must relax you after work."),
        ("Melanie", "How was your weekend at the market?"),
        ("Caroline", "Busy, I bought fresh bread."),
        ("Melanie", "Done, all signed!"),
    ],
}


@pytest.fixture
def new_user(engine: LocalStack) -> Callable[[], str]:
    with session_scope() as session:
        ensure_vector_indexes(session, model=EMBEDDER.model, dim=EMBEDDER.dim)
    return lambda: f"sum-{uuid.uuid4().hex[:12]}"


def remember(user_id: str, *, summarize_sessions: bool) -> None:
    turns = [
        Turn(speaker, said, thread, position, on)
        for (thread, on), said_in in SESSIONS.items()
        for position, (speaker, said) in enumerate(said_in, start=1)
    ]
    with session_scope() as session:
        remember_turns(
            session,
            user_id=user_id,
            turns=turns,
            embed=EMBEDDER.embed,
            embedding_model=EMBEDDER.model,
            summarize_sessions=summarize_sessions,
        )


def ask(user_id: str, question: str) -> list[tuple[int, str]]:
    with session_scope() as session:
        found = recall(
            session,
            user_id=user_id,
            query_text=question,
            query_embedding=EMBEDDER.embed([question])[0],
            embedding_model=EMBEDDER.model,
            k=10,
        )
        return [(f.item.id, f.item.text) for f in found]


def test_a_summary_is_stored_per_session_with_its_date(new_user: Callable[[], str]) -> None:
    user = new_user()
    remember(user, summarize_sessions=True)
    with session_scope() as session:
        rows = [f for f in facts_of(session, user_id=user) if f.category == SUMMARY_CATEGORY]
    by_thread = {f.thread: f for f in rows}
    assert sorted(by_thread) == ["D1", "D2"] and len(rows) == 2
    assert by_thread["D1"].text.startswith("On 8 May 2023 (session D1), Caroline and Melanie")
    assert "adoption" in by_thread["D1"].text and "agency" in by_thread["D1"].text
    assert by_thread["D2"].text.startswith("On 1 June 2023 (session D2), Melanie and Caroline")
    assert by_thread["D1"].position == 1


def test_a_summary_lifts_its_sessions_turn_that_shares_no_word_with_the_question(
    new_user: Callable[[], str],
) -> None:
    plain, summarized = new_user(), new_user()
    remember(plain, summarize_sessions=False)
    remember(summarized, summarize_sessions=True)
    lifted = "Caroline: Done, all signed!"
    assert lifted not in [text for _, text in ask(plain, QUESTION)]
    texts = [text for _, text in ask(summarized, QUESTION)]
    assert lifted in texts and "Melanie: Done, all signed!" not in texts  # only its session
    assert not any("talked about" in text for text in texts)  # the summary lifts, never returned


def test_summaries_never_bring_another_users_rows(new_user: Callable[[], str]) -> None:
    mine, theirs = new_user(), new_user()
    remember(mine, summarize_sessions=False)
    remember(theirs, summarize_sessions=True)  # same threads, with summaries
    with session_scope() as session:
        my_ids = {f.id for f in facts_of(session, user_id=mine)}
    found = ask(mine, QUESTION)
    assert found and {i for i, _ in found} <= my_ids
    assert not any("talked about" in text for _, text in found)
