"""Changing the embedding model or its dimension: refused until `reembed` has rewritten the
stored rows.

Runs in a database of its own (created on the test's Postgres), so the rows of other tests,
stored with other models, do not take part. A dimension changed under the same model name is an
OpenAI-compatible server (`ops.fake_provider`) that now serves the model at another
size; the worker's start-up and the CLI run as processes of their own against that database."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from models.db import get_engine, normalize_url, session_scope
from models.errors import ConfigurationError
from models.memory.embedders import OpenAIEmbedder
from models.memory.embeddings import Embedder, HashEmbedder
from models.memory.episodes import record_episode
from models.memory.facts import facts_of, recall, remember
from models.memory.reembedding import check_embedding_model, reembed
from models.memory.retrieval import vector_index_name
from models.migrate import upgrade
from ops.fake_provider import FakeOpenAI
from tests.integration.conftest import REPO_ROOT

pytestmark = pytest.mark.integration
AGENTQ = shutil.which("agentq") or "agentq"


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


def store(url: str, embedder: Embedder, user: str = "u", run_id: int = 1) -> None:
    """Two facts of `user` and the episode of run `run_id`, embedded by `embedder`, the way a
    worker writes them: after the start-up check, which an empty memory passes with any model."""
    texts = ["The user prefers EUR", "The cost centre is CC-4410"]
    with session_scope(url) as session:
        check_embedding_model(session, embedder)
        for text, vector in zip(texts, embedder.embed(texts), strict=True):
            remember(
                session,
                user_id=user,
                subject="user",
                attribute=None,
                category="preference",
                text=text,
                embedding=vector,
                embedding_model=embedder.model,
            )
        record_episode(
            session,
            user_id=user,
            run_id=run_id,
            goal="g",
            plan=[],
            failures=[],
            outcome="succeeded",
            final_answer="",
            summary="Goal: g",
            embedding=embedder.embed(["Goal: g"])[0],
            embedding_model=embedder.model,
        )


def test_another_model_is_refused_until_reembed(own_database: str) -> None:
    old, new = HashEmbedder(384), HashEmbedder(256)
    store(own_database, old)
    with (
        session_scope(own_database) as session,
        pytest.raises(
            ConfigurationError,
            match=r"hash-384 of 384 dimensions \(3 rows\), but AGENTQ_EMBEDDING_PROVIDER/"
            r"AGENTQ_EMBEDDING_MODEL/AGENTQ_EMBEDDING_DIM give hash-256 of 256 dimensions.*"
            r"agentq memory reembed",
        ),
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


SERVED = "served-embedder"  # one model name, served at 384 dimensions, then at 256


def agentq_env(url: str, fake: FakeOpenAI, dim: int) -> dict[str, str]:
    """The environment of an agentq process on database `url` embedding with `fake`'s SERVED
    model at `dim` dimensions."""
    return {
        **os.environ,
        "AGENTQ_DATABASE_URL": url,
        "AGENTQ_EMBEDDING_PROVIDER": "openai",
        "AGENTQ_EMBEDDING_MODEL": SERVED,
        "AGENTQ_EMBEDDING_DIM": str(dim),
        "AGENTQ_OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "test",
        "COLUMNS": "200",  # rich wraps its tables to the terminal's width
    }


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def worker_start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A worker's start-up checks: importing `worker.app`, as `celery -A worker.app` does."""
    return run([sys.executable, "-c", "import worker.app"], env)


def test_a_dimension_change_is_refused_at_start_up_until_reembed(
    own_database: str, fake_openai: FakeOpenAI
) -> None:
    old = OpenAIEmbedder(model=SERVED, dim=384, base_url=fake_openai.url, api_key="test")
    store(own_database, old)
    fake_openai.embedding_dim = 256  # the same model name, now of another size
    new_env = agentq_env(own_database, fake_openai, 256)
    refused = worker_start(new_env)
    assert refused.returncode != 0
    assert (
        f"memory holds embeddings of {SERVED} of 384 dimensions (3 rows), but "
        f"AGENTQ_EMBEDDING_DIM gives {SERVED} of 256 dimensions" in refused.stderr
    ), refused.stderr
    assert "agentq memory reembed" in refused.stderr
    reembedded = run([AGENTQ, "memory", "reembed"], new_env)
    assert reembedded.returncode == 0, reembedded.stdout + reembedded.stderr
    assert f"re-embedded 2 facts and 1 episodes with {SERVED} (256 dimensions)" in " ".join(
        reembedded.stdout.split()
    )
    started = worker_start(new_env)
    assert started.returncode == 0, started.stderr
    new = OpenAIEmbedder(model=SERVED, dim=256, base_url=fake_openai.url, api_key="test")
    with session_scope(own_database) as session:
        rows = facts_of(session, user_id="u")
        assert {(f.embedding_model, f.embedding_dim, len(f.embedding)) for f in rows} == {
            (SERVED, 256, 256)
        }
        names = set(session.scalars(sa.text("SELECT indexname FROM pg_indexes")))
    assert {vector_index_name(t, SERVED, 256) for t in ("facts", "episodes")} <= names
    assert not {vector_index_name(t, SERVED, 384) for t in ("facts", "episodes")} & names
    store(
        own_database, new, user="v", run_id=2
    )  # a new row of the new size is written, not refused
    found = run([AGENTQ, "memory", "search", "prefers EUR", "--user", "u"], new_env)
    assert found.returncode == 0, found.stdout + found.stderr
    assert "The user prefers EUR" in found.stdout
