"""Changing the embedding model: refused until `reembed` has rewritten the stored rows.

Runs in a database of its own (created on the test's Postgres), so the rows of other tests,
stored with other models, do not take part."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from models.db import get_engine, normalize_url, session_scope
from models.embeddings import HashEmbedder
from models.episodes import record_episode
from models.errors import ConfigurationError
from models.facts import facts_of, recall, remember
from models.memory import check_embedding_model, reembed
from models.migrate import upgrade

pytestmark = pytest.mark.integration


@pytest.fixture
def own_database(engine: object) -> Iterator[str]:
    base = normalize_url(os.environ["AGENTQ_DATABASE_URL"])
    name = f"reembed_{uuid.uuid4().hex[:8]}"
    with get_engine(base).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    url = sa.make_url(base).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    yield url
    get_engine(url).dispose()
    with get_engine(base).connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(sa.text(f"DROP DATABASE {name}"))


def test_another_model_is_refused_until_reembed(own_database: str) -> None:
    old, new = HashEmbedder(384), HashEmbedder(256)
    texts = ["The user prefers EUR", "The cost centre is CC-4410"]
    with session_scope(own_database) as session:
        check_embedding_model(session, old)  # an empty memory accepts any model
        for text, vector in zip(texts, old.embed(texts), strict=True):
            remember(
                session,
                user_id="u",
                subject="user",
                attribute=None,
                category="preference",
                text=text,
                embedding=vector,
                embedding_model=old.model,
            )
        record_episode(
            session,
            user_id="u",
            run_id=1,
            goal="g",
            plan=[],
            failures=[],
            outcome="succeeded",
            final_answer="",
            summary="Goal: g",
            embedding=old.embed(["Goal: g"])[0],
            embedding_model=old.model,
        )
    with (
        session_scope(own_database) as session,
        pytest.raises(ConfigurationError, match=r"hash-384 \(3 rows\).*agentq memory reembed"),
    ):
        check_embedding_model(session, new)
    with session_scope(own_database) as session:
        assert reembed(session, new) == {"facts": 2, "episodes": 1}
    with session_scope(own_database) as session:
        check_embedding_model(session, new)  # accepted now
        rows = facts_of(session, user_id="u")
        assert {(f.embedding_model, f.embedding_dim, len(f.embedding)) for f in rows} == {
            ("hash-256", 256, 256)
        }
        query = new.embed(["Which currency?"])[0]
        found = recall(
            session,
            user_id="u",
            query_text="currency EUR",
            query_embedding=query,
            embedding_model=new.model,
            k=5,
            min_similarity=0.0,
        )
        assert "The user prefers EUR" in [f.item.text for f in found]
        stale = recall(
            session,
            user_id="u",
            query_text="currency EUR",
            query_embedding=old.embed(["Which currency?"])[0],
            embedding_model=old.model,
            k=5,
            min_similarity=0.0,
        )
        assert stale == []  # nothing of the old model is left to compare against
