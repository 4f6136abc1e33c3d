"""The second stage of recall on the real embedded Postgres: BM25 with the tenant's own word
statistics, conversation turns recalled with the turns around them and with the facts
extracted from them, and never another user's rows."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import pytest

from models.db import session_scope
from models.errors import DatabaseError
from models.memory import rerank
from models.memory.conversation_turns import Turn, TurnWritten, remember_turns
from models.memory.embeddings import HashEmbedder
from models.memory.facts import FACTS, Fact, ensure_vector_indexes, facts_of, recall, remember
from models.memory.retrieval import Search, search_settings
from ops.stack import LocalStack

pytestmark = pytest.mark.integration
EMBEDDER = HashEmbedder()


def embed(text: str) -> list[float]:
    return EMBEDDER.embed([text])[0]


@pytest.fixture
def new_user(engine: LocalStack) -> Callable[[], str]:
    with session_scope() as session:
        ensure_vector_indexes(session, model=EMBEDDER.model, dim=EMBEDDER.dim)
    return lambda: f"ctx-{uuid.uuid4().hex[:12]}"


def store(user_id: str, text: str, *, like: str | None = None, **kw: Any) -> int:
    """Remember `text` (embedded as `like`, default itself) for `user_id`; its fact id."""
    with session_scope() as session:
        done = remember(
            session,
            user_id=user_id,
            subject=kw.pop("subject", "caroline"),
            attribute=None,
            category=kw.pop("category", "event"),
            text=text,
            embedding=embed(like or text),
            embedding_model=EMBEDDER.model,
            **kw,
        )
        return done.fact_id


def ask(user_id: str, question: str) -> list[tuple[str, float]]:
    """(text, relevance) of what `recall` returns for `question`, best first."""
    with session_scope() as session:
        found = recall(
            session,
            user_id=user_id,
            query_text=question,
            query_embedding=embed(question),
            embedding_model=EMBEDDER.model,
            k=10,
        )
        return [(f.item.text, f.relevance) for f in found]


def test_a_word_every_fact_holds_weighs_less_than_a_rare_one(new_user: Callable[[], str]) -> None:
    user, same = new_user(), "one embedding for all"
    for i in range(8):
        store(user, f"Melanie said hello number {i}", like=same)
    common = store(user, "Melanie Melanie Melanie likes tea", like=same)
    rare = store(user, "The pottery class was fun", like=same)
    with session_scope() as session:
        query = Search(FACTS, user, EMBEDDER.model, "Melanie pottery", embed(same), 10, _now())
        with search_settings(session, pool=query.pool):
            by_id = {c.id: c for c in rerank.candidates(session, query)}
    assert by_id[rare].text_rank > by_id[common].text_rank > 0


def test_a_reply_is_recalled_through_the_question_it_answers(new_user: Callable[[], str]) -> None:
    user = new_user()
    store(user, "Did you go to the pottery class?", turn=("D1", 4))
    store(user, "Yes! Loved it.", like="unrelated sounds of the sea", turn=("D1", 5))
    store(user, "Yes! Loved it, the beach.", like="unrelated sounds of the sea", turn=("D2", 5))
    found = dict(ask(user, "pottery class"))
    assert "Yes! Loved it." in found  # shares no word with the question, but follows one that does
    assert "Yes! Loved it, the beach." not in found  # another session: no neighbour of it


def test_a_fact_extracted_from_a_turn_is_recalled_with_its_source_turn(
    new_user: Callable[[], str],
) -> None:
    user = new_user()
    store(user, "Ha, you know me, I went last week", like="waves and sand", turn=("D3", 7))
    store(
        user,
        "Caroline went to a pottery class in the week of 1 May 2023",
        category="knowledge",
        turn=("D3", 7),
    )
    texts = [text for text, _ in ask(user, "When did Caroline go to a pottery class?")]
    assert texts[:2] == [
        "Caroline went to a pottery class in the week of 1 May 2023",
        "Ha, you know me, I went last week",
    ]


def test_the_second_stage_never_returns_another_users_rows(new_user: Callable[[], str]) -> None:
    mine, theirs = new_user(), new_user()
    store(mine, "Did you go to the pottery class?", turn=("D1", 4))
    their_reply = store(theirs, "Yes! The pottery class was great", turn=("D1", 5))
    their_question = store(theirs, "pottery class", turn=("D1", 4))
    found = ask(mine, "pottery class")
    assert [text for text, _ in found] == ["Did you go to the pottery class?"]
    with session_scope() as session:
        query = Search(FACTS, mine, EMBEDDER.model, "pottery class", embed("pottery"), 10, _now())
        with search_settings(session, pool=query.pool):
            found_ids = {
                c.id for c in rerank.candidates(session, query, [their_reply, their_question])
            }
    assert found_ids and not found_ids & {their_reply, their_question}


def test_a_turn_needs_a_thread_and_a_position(new_user: Callable[[], str]) -> None:
    user = new_user()
    with pytest.raises(ValueError, match="turn position -1"):
        store(user, "hello", turn=("D1", -1))
    with pytest.raises(ValueError, match="turn thread ''"):
        store(user, "hello", turn=("", 1))
    fact_id = store(user, "hello", turn=("D1", 1))
    with pytest.raises(DatabaseError, match="facts_thread_position"), session_scope() as session:
        row = session.get(Fact, fact_id)
        assert row is not None
        row.position = None  # a thread without a place in it
        session.add(row)
        session.flush()


def _now() -> datetime:
    return datetime.now(UTC)


def remember_conversation(
    user_id: str, turns: list[Turn], *, extract_facts: bool = True
) -> list[TurnWritten]:
    """`turns` through the product path (`remember_turns`), embedded by the hash embedder."""
    with session_scope() as session:
        return remember_turns(
            session,
            user_id=user_id,
            turns=turns,
            embed=EMBEDDER.embed,
            embedding_model=EMBEDDER.model,
            extract_facts=extract_facts,
        )


def test_remembered_turns_bring_their_extracted_facts_and_are_recalled_with_them(
    new_user: Callable[[], str],
) -> None:
    user, said_on = new_user(), date(2023, 5, 8)
    written = remember_conversation(
        user,
        [
            Turn("Melanie", "How have you been lately?", "D1", 1, said_on),
            Turn("Caroline", "Great! I went to a support group yesterday.", "D1", 2, said_on),
            Turn("Melanie", "That sounds lovely, tell me more.", "D1", 3, said_on),
        ],
    )
    assert [len(w.fact_ids) for w in written] == [0, 1, 0]
    found = ask(user, "When did Caroline go to the support group?")
    texts = [text for text, _ in found]
    fact = "Caroline went to a support group yesterday (7 May 2023)."
    turn = "Caroline: Great! I went to a support group yesterday (7 May 2023)."
    assert fact in texts and turn in texts
    assert abs(texts.index(fact) - texts.index(turn)) == 1  # one result: next to each other
    with session_scope() as session:
        row = session.get(Fact, written[1].fact_ids[0])
        assert row is not None and (row.thread, row.position, row.category) == ("D1", 2, "event")


def test_by_default_the_turns_are_stored_with_their_dates_resolved_and_a_session_summary(
    new_user: Callable[[], str],
) -> None:
    user = new_user()
    turn = Turn("Caroline", "I went to a support group yesterday.", "D1", 2, date(2023, 1, 1))
    written = remember_conversation(user, [turn], extract_facts=False)
    assert written[0].fact_ids == ()
    with session_scope() as session:
        stored = {f.category: f.text for f in facts_of(session, user_id=user)}
    assert stored == {
        "event": "Caroline: I went to a support group yesterday (31 December 2022).",
        "session_summary": "On 1 January 2023 (session D1), Caroline talked about: "
        "group, support, went, yesterday.",
    }


def test_with_facts_and_dates_recall_still_never_returns_another_users_rows(
    new_user: Callable[[], str],
) -> None:
    mine, theirs, said_on = new_user(), new_user(), date(2023, 5, 8)
    remember_conversation(mine, [Turn("Ann", "I baked bread last week.", "D1", 0, said_on)])
    their_turns = [
        Turn("Bo", "When did you bake the bread?", "D1", 0, said_on),
        Turn("Bo", "I baked bread yesterday with my kids.", "D1", 1, said_on),
    ]
    remember_conversation(theirs, their_turns)
    found = ask(mine, "When was bread baked?")
    assert sorted(text for text, _ in found) == [
        "Ann baked bread last week (the week of 1 May 2023).",  # the fact extracted
        "Ann: I baked bread last week (the week of 1 May 2023).",  # its turn
    ]
