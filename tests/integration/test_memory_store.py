"""Facts and episodes on the real embedded Postgres with pgvector: tenancy, dedupe, supersession,
expiry, forgetting, hybrid retrieval, and filtered top-k through the per-model HNSW index."""

from __future__ import annotations

import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from models.db import get_engine, session_scope
from models.errors import DatabaseError
from models.memory import facts as facts_module
from models.memory import retrieval
from models.memory.embeddings import HashEmbedder
from models.memory.episodes import forget_episodes, recall_episodes, record_episode
from models.memory.facts import (
    FACTS,
    Fact,
    Remembered,
    content_hash,
    ensure_vector_indexes,
    expire,
    facts_of,
    forget_facts,
    recall,
    remember,
)
from models.tables import utcnow
from ops.stack import LocalStack

pytestmark = pytest.mark.integration
EMBEDDER = HashEmbedder()  # "hash-384"
OTHER = HashEmbedder(64)  # "hash-64": a second model in the same tables


def embed(text: str, embedder: HashEmbedder = EMBEDDER) -> list[float]:
    return embedder.embed([text])[0]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def memory(engine: LocalStack) -> None:
    """Both test models have their HNSW indexes."""
    with session_scope() as session:
        for embedder in (EMBEDDER, OTHER):
            ensure_vector_indexes(session, model=embedder.model, dim=embedder.dim)


@pytest.fixture
def new_user(memory: None) -> Callable[[], str]:
    return lambda: f"mem-{uuid.uuid4().hex[:12]}"


def store(user_id: str, text: str, **overrides: Any) -> Remembered:
    """Remember `text` for `user_id` in its own transaction (embedding of `text` by default)."""
    args: dict[str, Any] = {"subject": "user", "attribute": None, "category": "knowledge"}
    args.update(text=text, embedding=embed(text), embedding_model=EMBEDDER.model)
    with session_scope() as session:
        return remember(session, user_id=user_id, **{**args, **overrides})


def ask(user_id: str, text: str, embedder: HashEmbedder = EMBEDDER, **kw: Any) -> list[str]:
    """The texts `recall` returns for `text`, best first."""
    with session_scope() as session:
        found = recall(
            session,
            user_id=user_id,
            query_text=text,
            query_embedding=embed(text, embedder),
            embedding_model=embedder.model,
            **kw,
        )
        return [f.item.text for f in found]


def episode(session: Session, user_id: str, run_id: int, summary: str) -> int:
    row = record_episode(
        session,
        user_id=user_id,
        run_id=run_id,
        goal=summary,
        outcome="succeeded",
        plan=[{"name": "search", "tool": "web", "status": "succeeded"}],
        failures=[{"step": "search", "tool": "web", "error": "timeout", "fixed_by": "retry"}],
        final_answer="done",
        summary=summary,
        embedding=embed(summary),
        embedding_model=EMBEDDER.model,
    )
    return row.id or 0


def run_id() -> int:
    """A run id no real run of this test session has (runs count up from 1)."""
    return random.randrange(1_000_000_000, 2**31 - 1)


# --- tenancy, dedupe, supersession -------------------------------------------------------------


def test_no_path_returns_another_users_memory(new_user: Callable[[], str]) -> None:
    a, b = new_user(), new_user()
    text = "Prefers aisle seats on flights over four hours"
    store(a, text, category="preference")
    a_run = run_id()
    with session_scope() as session:
        episode(session, a, a_run, "Booked a flight to Lisbon with an aisle seat")
    assert ask(a, text) == [text]
    assert ask(b, text) == []
    with session_scope() as session:
        assert facts_of(session, user_id=b, include_history=True) == []
        assert (
            recall_episodes(
                session,
                user_id=b,
                query_text="Booked a flight to Lisbon with an aisle seat",
                query_embedding=embed("Booked a flight to Lisbon with an aisle seat"),
                embedding_model=EMBEDDER.model,
            )
            == []
        )
        with pytest.raises(ValueError, match="another user"):
            episode(session, b, a_run, "hijack")


def test_the_same_fact_remembered_twice_is_one_row(new_user: Callable[[], str]) -> None:
    user = new_user()
    first = store(user, "Works at Acme Corp")
    second = store(user, "  works at ACME corp ")
    assert (first.outcome, second.outcome) == ("added", "duplicate")
    assert second.fact_id == first.fact_id
    with session_scope() as session:
        assert len(facts_of(session, user_id=user, include_history=True)) == 1


def test_concurrent_writers_of_one_fact_end_with_one_row(new_user: Callable[[], str]) -> None:
    user, writers = new_user(), 4
    start, outcomes = threading.Barrier(writers), []

    def write() -> None:
        start.wait()
        outcomes.append(store(user, "Has a dog called Miso", attribute="pet").outcome)

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["added"] + ["duplicate"] * (writers - 1)
    with session_scope() as session:
        assert len(facts_of(session, user_id=user, include_history=True)) == 1


def test_without_the_lock_on_conflict_still_keeps_one_row(
    new_user: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers that both saw no candidate: the second INSERT waits on the unique index, then
    does nothing, and reports the first writer's row."""
    monkeypatch.setattr(facts_module, "FACT_LOCK", "SELECT CAST(:key AS text)")
    lost_races: list[int] = []
    current_id = facts_module._current_id
    monkeypatch.setattr(
        facts_module, "_current_id", lambda s, f: lost_races.append(1) or current_id(s, f)
    )
    user, text = new_user(), "Was born in Coimbra"
    first = Session(get_engine(), expire_on_commit=False)
    added = remember(
        first,
        user_id=user,
        subject="user",
        attribute=None,
        category="profile",
        text=text,
        embedding=embed(text),
        embedding_model=EMBEDDER.model,
    )
    second: list[Remembered] = []
    writer = threading.Thread(target=lambda: second.append(store(user, text, category="profile")))
    writer.start()
    time.sleep(0.5)  # the second writer is now blocked in its INSERT
    first.commit()
    first.close()
    writer.join(timeout=30)
    assert second == [Remembered("duplicate", added.fact_id)]
    assert lost_races == [1]


def test_the_database_refuses_a_second_current_copy(new_user: Callable[[], str]) -> None:
    """Even a writer that bypasses `remember` cannot store one fact twice."""
    user = new_user()
    stored = store(user, "Speaks Portuguese")
    with session_scope() as session:
        row = session.get(Fact, stored.fact_id)
        assert row is not None
        copy = row.model_dump(exclude={"id", "tsv"})
    with pytest.raises(DatabaseError, match="facts_current_content"), session_scope() as session:
        session.execute(sa.insert(Fact).values(**copy))


def test_a_newer_value_supersedes_the_older_one(new_user: Callable[[], str]) -> None:
    user = new_user()
    kw: dict[str, Any] = {"attribute": "preferred_currency", "category": "preference"}
    usd = store(user, "prefers USD", **kw)
    eur = store(user, "prefers EUR", **kw)
    assert eur.outcome == "superseded"
    assert eur.superseded_ids == (usd.fact_id,)
    assert ask(user, "which currency does the user prefer") == ["prefers EUR"]
    assert set(ask(user, "which currency does the user prefer", include_history=True)) == {
        "prefers USD",
        "prefers EUR",
    }
    with session_scope() as session:
        old, new = facts_of(session, user_id=user, include_history=True)
    assert (old.text, new.text) == ("prefers USD", "prefers EUR")
    assert old.valid_to is not None
    assert old.superseded_by == eur.fact_id
    assert new.valid_to is None


def test_an_episode_is_recorded_once_per_run_and_recalled(new_user: Callable[[], str]) -> None:
    user, run = new_user(), run_id()
    summary = "Planned a weekend in Lisbon; the hotel search timed out once, a retry fixed it"
    with session_scope() as session:
        first = episode(session, user, run, summary)
    with session_scope() as session:
        assert episode(session, user, run, "a redelivered task writes nothing") == first
        found = recall_episodes(
            session,
            user_id=user,
            query_text="Lisbon hotel",
            query_embedding=embed("Lisbon hotel"),
            embedding_model=EMBEDDER.model,
        )
    assert [e.item.id for e in found] == [first]
    assert found[0].item.summary == summary
    assert found[0].item.failures[0]["fixed_by"] == "retry"


def test_vector_indexes_can_be_ensured_concurrently(engine: LocalStack) -> None:
    model, errors = f"race-{uuid.uuid4().hex[:6]}", []
    start = threading.Barrier(3)

    def build() -> None:
        start.wait()
        try:
            with session_scope() as session:
                ensure_vector_indexes(session, model=model, dim=8)
        except Exception as exc:  # the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    with session_scope() as session:
        names = set(session.scalars(sa.text("SELECT indexname FROM pg_indexes")))
    assert {retrieval.vector_index_name(t, model, 8) for t in ("facts", "episodes")} <= names


# --- retrieval ---------------------------------------------------------------------------------


def test_a_rare_keyword_finds_a_far_vector_and_far_rows_are_dropped(
    new_user: Callable[[], str],
) -> None:
    user = new_user()
    named = "The locker code word is xylophonequartz"
    store(user, named, embedding=embed("sunny weather forecast for the weekend"))
    store(user, "Enjoys hiking in the Alps")
    question = "xylophonequartz"
    q = embed(question)
    assert cosine(q, embed("sunny weather forecast for the weekend")) < retrieval.MIN_SIMILARITY
    assert cosine(q, embed("Enjoys hiking in the Alps")) < retrieval.MIN_SIMILARITY
    with session_scope() as session:
        found = recall(
            session,
            user_id=user,
            query_text=question,
            query_embedding=q,
            embedding_model=EMBEDDER.model,
        )
    assert [f.item.text for f in found] == [named]
    assert found[0].text_match and found[0].text_rank > 0
    assert found[0].similarity < retrieval.MIN_SIMILARITY


def test_of_two_equally_similar_facts_the_newer_ranks_first(new_user: Callable[[], str]) -> None:
    user, now = new_user(), utcnow()
    same = embed("favourite hot drink")
    store(user, "Drinks green tea", embedding=same, now=now - timedelta(days=90))
    store(user, "Drinks black coffee", embedding=same, now=now - timedelta(days=1))
    with session_scope() as session:
        found = recall(
            session,
            user_id=user,
            query_text="favourite beverage",
            query_embedding=same,
            embedding_model=EMBEDDER.model,
            now=now,
        )
    assert [f.item.text for f in found] == ["Drinks black coffee", "Drinks green tea"]
    assert found[0].similarity == pytest.approx(found[1].similarity)
    assert found[0].relevance == found[1].relevance
    assert found[0].score > found[1].score


def test_a_fact_past_its_ttl_is_history(new_user: Callable[[], str]) -> None:
    user, t0 = new_user(), utcnow()
    text = "Is in a meeting until noon"
    stored = store(user, text, category="event", ttl_s=1, now=t0)
    assert ask(user, text, now=t0) == [text]
    assert ask(user, text, now=t0 + timedelta(seconds=2)) == []  # before expire() runs too
    with session_scope() as session:
        assert expire(session, now=t0 + timedelta(seconds=2)) >= 1
    assert ask(user, text, now=t0 + timedelta(seconds=2)) == []
    assert ask(user, text, now=t0 + timedelta(seconds=2), include_history=True) == [text]
    with session_scope() as session:
        assert facts_of(session, user_id=user) == []
        (row,) = facts_of(session, user_id=user, include_history=True)
    assert row.id == stored.fact_id
    assert row.valid_to == row.expires_at == t0 + timedelta(seconds=1)


def test_forgetting_a_user_removes_all_their_memory_and_only_theirs(
    new_user: Callable[[], str],
) -> None:
    gone, kept = new_user(), new_user()
    kw: dict[str, Any] = {"attribute": "home_city"}
    store(gone, "Lives in Porto", **kw)
    store(gone, "Lives in Lisbon", **kw)  # the Porto version becomes history
    store(kept, "Lives in Madrid", **kw)
    with session_scope() as session:
        episode(session, gone, run_id(), "Moved from Porto to Lisbon")
        episode(session, kept, run_id(), "Visited Madrid")
    with session_scope() as session:
        assert forget_facts(session, user_id=gone) == 2
        assert forget_episodes(session, user_id=gone) == 1
    with session_scope() as session:
        assert session.scalar(sa.text(COUNT_MEMORY), {"user_id": gone}) == 0
        assert session.scalar(sa.text(COUNT_MEMORY), {"user_id": kept}) == 2


# count_memory: every fact version and episode row of one user
COUNT_MEMORY = """SELECT (SELECT count(*) FROM facts WHERE user_id = :user_id)
                       + (SELECT count(*) FROM episodes WHERE user_id = :user_id)"""


def test_rows_of_one_model_never_answer_a_query_of_another(new_user: Callable[[], str]) -> None:
    user = new_user()
    text_a, text_b = "Allergic to peanuts", "Allergic to shellfish"
    store(user, text_a)
    store(user, text_b, embedding=embed(text_b, OTHER), embedding_model=OTHER.model)
    assert ask(user, text_a, OTHER) == [text_b]  # the exact words of A's fact, asked with model B
    assert ask(user, text_b, EMBEDDER) == [text_a]
    with session_scope() as session:
        assert len(facts_of(session, user_id=user)) == 2


def test_recall_leaves_the_callers_settings_as_they_were(new_user: Callable[[], str]) -> None:
    user = new_user()
    with session_scope() as session:
        before = session.scalar(sa.text("SELECT current_setting('hnsw.ef_search', true)"))
        recall(
            session,
            user_id=user,
            query_text="anything",
            query_embedding=embed("anything"),
            embedding_model=EMBEDDER.model,
            k=50,
        )
        after = session.execute(sa.text(SHOW_SEARCH_SETTINGS)).one()
    assert after == (before or "40", "off", "auto")


# show_search_settings: the settings `models.memory.retrieval.search_settings` changes
SHOW_SEARCH_SETTINGS = """SELECT current_setting('hnsw.ef_search'),
    current_setting('hnsw.iterative_scan'), current_setting('plan_cache_mode')"""


# --- filtered top-k through the HNSW index -----------------------------------------------------

BULK = HashEmbedder(64)  # only its dimension; the bulk vectors are random
BULK_MODEL = "bulk-random-64"
SIZES = {"three": 3, "two-hundred": 200, "heavy": 3000} | {f"other-{i}": 40 for i in range(47)}


@pytest.fixture(scope="module")
def bulk(engine: LocalStack) -> Iterator[dict[str, str]]:
    """~5,000 facts of 50 users under one model with random vectors, then its HNSW index and
    ANALYZE; yields name -> user id."""
    tag, rng = uuid.uuid4().hex[:8], random.Random(20261130)
    users = {name: f"bulk-{tag}-{name}" for name in SIZES}
    rows = [bulk_row(users[name], i, rng) for name, n in SIZES.items() for i in range(n)]
    with session_scope() as session:
        session.execute(sa.insert(Fact), rows)
        ensure_vector_indexes(session, model=BULK_MODEL, dim=BULK.dim)
    with session_scope() as session:
        session.execute(sa.text("ANALYZE facts"))
    yield users


def bulk_row(user_id: str, i: int, rng: random.Random) -> dict[str, Any]:
    vector = [rng.gauss(0, 1) for _ in range(BULK.dim)]
    norm = math.sqrt(sum(x * x for x in vector))
    text = f"note {i} of {user_id}"
    digest = content_hash(subject="user", attribute=None, category="knowledge", text=text)
    now = utcnow()
    return {
        "user_id": user_id,
        "subject": "user",
        "attribute": None,
        "category": "knowledge",
        "text": text,
        "content_hash": digest,
        "embedding": [x / norm for x in vector],
        "embedding_model": BULK_MODEL,
        "embedding_dim": BULK.dim,
        "valid_from": now,
        "created_at": now,
    }


def bulk_search(user_id: str, k: int = 10) -> retrieval.Search:
    """A search whose vector is random and whose words match nothing: only the vector path."""
    vector = [random.Random(7).gauss(0, 1) for _ in range(BULK.dim)]
    return retrieval.Search(
        FACTS, user_id, BULK_MODEL, "qqqzzz", vector, k, utcnow(), min_similarity=-1.0
    )


def nearest_via_hnsw(session: Session, query: retrieval.Search, mode: str) -> tuple[int, str]:
    """Rows and plan of the indexed nearest query with `hnsw.iterative_scan = mode`, with sorts
    disabled so the HNSW index is the planner's only ordered path."""
    with retrieval.search_settings(session, pool=query.pool, iterative_scan=mode):
        session.execute(sa.text("SET LOCAL enable_sort = off"))
        sql, params = query.sql(retrieval.NEAREST_INDEXED), query.params()
        plan = "\n".join(session.scalars(sa.text("EXPLAIN " + sql), params))
        return len(retrieval.hits(session, query, retrieval.NEAREST_INDEXED)), plan


def test_filtered_top_k_returns_min_of_k_and_the_users_rows(bulk: dict[str, str]) -> None:
    with session_scope() as session:
        for name, expected in (("three", 3), ("two-hundred", 10), ("heavy", 10)):
            found = recall(
                session,
                user_id=bulk[name],
                query_text="qqqzzz",
                embedding_model=BULK_MODEL,
                query_embedding=bulk_search(bulk[name]).embedding,
                k=10,
                min_similarity=-1.0,
            )
            assert len(found) == expected, name
            assert {f.item.user_id for f in found} == {bulk[name]}


def test_iterative_scans_are_what_fill_a_filtered_hnsw_top_k(bulk: dict[str, str]) -> None:
    index = retrieval.vector_index_name("facts", BULK_MODEL, BULK.dim)
    with session_scope() as session:
        for name, rows in (("three", 3), ("two-hundred", 200)):
            query = bulk_search(bulk[name])
            without, plan_off = nearest_via_hnsw(session, query, "off")
            with_iterative, plan_on = nearest_via_hnsw(session, query, "relaxed_order")
            assert f"Index Scan using {index}" in plan_off
            assert f"Index Scan using {index}" in plan_on
            assert without < min(query.k, rows), name
            assert with_iterative == min(query.pool, rows), name


def test_the_planner_picks_the_models_hnsw_index_for_a_large_tenant(
    bulk: dict[str, str],
) -> None:
    index = retrieval.vector_index_name("facts", BULK_MODEL, BULK.dim)
    query = bulk_search(bulk["heavy"])
    with session_scope() as session, retrieval.search_settings(session, pool=query.pool):
        sql = query.sql(retrieval.NEAREST_INDEXED)
        plan = "\n".join(session.scalars(sa.text("EXPLAIN " + sql), query.params()))
    assert f"Index Scan using {index} on facts" in plan, plan
