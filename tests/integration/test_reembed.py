"""Changing the embedding model or its dimension: refused until `reembed` has rewritten the
stored rows (facts with their history, episodes, procedures).

Runs in a database of its own (created on the test's Postgres), so the rows of other tests,
stored with other models, do not take part. A dimension changed under the same model name is an
OpenAI-compatible server (`ops.fake_provider`) that now serves the model at another size (or, in
process, `Resized`); the worker's start-up and the CLI run as processes of their own against that
database. Memory is stored at a volume (`FACTS`) that fills the table's pages: with a few rows,
a rewritten row's new version fits on its page (a HOT update) and a new index never sees the old
version, which hid issue 31 ("expected 256 dimensions, not 384" at any real volume).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest
import sqlalchemy as sa

from models.db import get_engine, normalize_url, session_scope
from models.errors import ConfigurationError, DatabaseError, ProviderError
from models.memory import procedures
from models.memory.embedders import OpenAIEmbedder
from models.memory.embeddings import Embedder, HashEmbedder
from models.memory.episodes import record_episode
from models.memory.facts import facts_of, recall, remember
from models.memory.procedure_recall import Visible, recall_procedures
from models.memory.reembedding import check_embedding_model, reembed
from models.memory.retrieval import ensure_vector_index, vector_index_name
from models.migrate import upgrade
from ops.fake_provider import FakeOpenAI
from tests.integration.conftest import REPO_ROOT

pytestmark = pytest.mark.integration
AGENTQ = shutil.which("agentq") or "agentq"
FACTS = 300  # current facts of the user; every third also has an older version (history)
EPISODES = 20
PROCEDURE = "Book travel\nwhen the user asks for a trip\nCompare fares in EUR first."
# (model, dim, rows, rows whose vector is not `dim` long) of each table
SPACES = """SELECT 'facts', embedding_model, embedding_dim, count(*),
    count(*) FILTER (WHERE vector_dims(embedding) <> embedding_dim) FROM facts GROUP BY 2, 3
UNION ALL SELECT 'episodes', embedding_model, embedding_dim, count(*),
    count(*) FILTER (WHERE vector_dims(embedding) <> embedding_dim) FROM episodes GROUP BY 2, 3
UNION ALL SELECT 'procedures', embedding_model, embedding_dim, count(*),
    count(*) FILTER (WHERE vector_dims(embedding) <> embedding_dim) FROM procedures GROUP BY 2, 3
"""
VALID_INDEXES = """SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indisvalid"""


class Resized(HashEmbedder):
    """Hash vectors of `dim` under one model name, as a server serving one model at two sizes."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.model = "resized"


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


def fact_texts(facts: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(attribute, text) of `facts` facts, "The user prefers EUR" first, and of the older
    versions they supersede (one for every third fact)."""
    current = [("currency", "The user prefers EUR")]
    current += [
        (f"item-{i}", f"Fact {i}: project {i % 17} uses tool {i % 5}") for i in range(1, facts)
    ]
    older = [(a, f"Earlier: {text}") for a, text in current[::3]]
    return current, older


def store(
    url: str, embedder: Embedder, *, user: str = "u", facts: int = 2, run_id: int = 1
) -> None:
    """`facts` facts of `user` (every third with an older version it superseded), episodes of
    runs `run_id`.. (one, or `EPISODES` with more than 2 facts) and a procedure of the user, all
    embedded by `embedder`, as a worker and `agentq procedure add` write them: after the start-up
    check, which an empty memory passes with any model."""
    current, older = fact_texts(facts)
    episodes = [f"Goal: trip {i} in EUR" for i in range(1 if facts <= 2 else EPISODES)]
    rows = [*older, *current]
    vectors = embedder.embed([t for _, t in rows] + episodes + [PROCEDURE])
    with session_scope(url) as session:
        check_embedding_model(session, embedder)
        for (attribute, text), vector in zip(rows, vectors[: len(rows)], strict=True):
            remember(
                session,
                user_id=user,
                subject="user",
                attribute=attribute,
                category="preference",
                text=text,
                embedding=vector,
                embedding_model=embedder.model,
            )
        for i, summary in enumerate(episodes):
            record_episode(
                session,
                user_id=user,
                run_id=run_id + i,
                goal="g",
                plan=[],
                failures=[],
                outcome="succeeded",
                final_answer="",
                summary=summary,
                embedding=vectors[len(rows) + i],
                embedding_model=embedder.model,
            )
        title, when, body = PROCEDURE.split("\n")
        spec = procedures.ProcedureSpec(title=title, when_to_use=when, body=body, user_id=user)
        embedded = procedures.Embedded(vectors[-1], embedder.model)
        procedures.insert(session, spec, embedded, by=procedures.Actor("test", "admin"))


def spaces(url: str) -> set[tuple[str, str, int, int, int]]:
    """(table, model, dim, rows, rows whose vector is not `dim` long) of each table."""
    with session_scope(url) as session:
        found = session.execute(sa.text(SPACES))
        return {(str(t), str(m), int(d), int(n), int(bad)) for t, m, d, n, bad in found}


def all_in(model: str, dim: int, facts: int, episodes: int) -> set[tuple[str, str, int, int, int]]:
    """`spaces` when every row is of `model` at `dim`, with `facts` fact rows, `episodes`."""
    return {
        ("facts", model, dim, facts, 0),
        ("episodes", model, dim, episodes, 0),
        ("procedures", model, dim, 1, 0),
    }


def found(url: str, embedder: Embedder, user: str = "u") -> list[str]:
    """The texts of `user`'s facts and procedures that recall finds for a currency question."""
    query = embedder.embed(["Which currency does the user prefer, EUR?"])[0]
    with session_scope(url) as session:
        facts = recall(
            session,
            user_id=user,
            query_text="currency EUR",
            query_embedding=query,
            embedding_model=embedder.model,
            k=5,
            min_similarity=0.0,
        )
        kept = recall_procedures(
            session,
            visible=Visible(user),
            query_text="trip fares EUR",
            query_embedding=query,
            embedding_model=embedder.model,
            min_similarity=0.0,
        )
    return [f.item.text for f in facts] + [p.item.title for p in kept]


def test_another_model_is_refused_until_reembed(own_database: str) -> None:
    old, new = HashEmbedder(384), HashEmbedder(256)
    store(own_database, old)
    with (
        session_scope(own_database) as session,
        pytest.raises(
            ConfigurationError,
            match=r"hash-384 of 384 dimensions \(5 rows\), but AGENTQ_EMBEDDING_PROVIDER/"
            r"AGENTQ_EMBEDDING_MODEL/AGENTQ_EMBEDDING_DIM give hash-256 of 256 dimensions.*"
            r"agentq memory reembed",
        ),
    ):
        check_embedding_model(session, new)
    counts = reembed(new, url=own_database)
    assert counts == {"facts": 3, "episodes": 1, "procedures": 1}  # a fact's history too
    with session_scope(own_database) as session:
        check_embedding_model(session, new)  # accepted now
        rows = facts_of(session, user_id="u", include_history=True)
        assert {(f.embedding_model, f.embedding_dim, len(f.embedding)) for f in rows} == {
            ("hash-256", 256, 256)
        }
    assert "The user prefers EUR" in found(own_database, new)
    assert "Book travel" in found(own_database, new)
    assert found(own_database, old) == []  # nothing of the old model is left to compare against


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
    store(own_database, old, facts=FACTS)
    rows = FACTS + FACTS // 3 + EPISODES + 1
    fake_openai.embedding_dim = 256  # the same model name, now of another size
    new_env = agentq_env(own_database, fake_openai, 256)
    refused = worker_start(new_env)
    assert refused.returncode != 0
    assert (
        f"memory holds embeddings of {SERVED} of 384 dimensions ({rows} rows), but "
        f"AGENTQ_EMBEDDING_DIM gives {SERVED} of 256 dimensions" in refused.stderr
    ), refused.stderr
    assert "agentq memory reembed" in refused.stderr
    reembedded = run([AGENTQ, "memory", "reembed"], new_env)
    assert reembedded.returncode == 0, reembedded.stdout + reembedded.stderr
    said = " ".join(reembedded.stdout.split())
    assert (
        f"re-embedded {FACTS + FACTS // 3} facts, {EPISODES} episodes and 1 procedures with "
        f"{SERVED} (256 dimensions)" in said
    ), said
    assert "facts ━" in said and f"{FACTS + FACTS // 3}/{FACTS + FACTS // 3}" in said  # a bar
    started = worker_start(new_env)
    assert started.returncode == 0, started.stderr
    assert spaces(own_database) == all_in(SERVED, 256, FACTS + FACTS // 3, EPISODES)
    with session_scope(own_database) as session:
        names = set(session.scalars(sa.text(VALID_INDEXES)))
    assert {vector_index_name(t, SERVED, 256) for t in ("facts", "episodes")} <= names
    assert not {vector_index_name(t, SERVED, 384) for t in ("facts", "episodes")} & names
    new = OpenAIEmbedder(model=SERVED, dim=256, base_url=fake_openai.url, api_key="test")
    store(own_database, new, user="v", run_id=1000)  # a row of the new size is written
    searched = run([AGENTQ, "memory", "search", "prefers EUR", "--user", "u"], new_env)
    assert searched.returncode == 0, searched.stdout + searched.stderr
    assert "The user prefers EUR" in searched.stdout
    assert "Book travel" in found(own_database, new)


class FailsOnCall(Resized):
    """`Resized` whose embed call number `fail_on` (1-based) raises `ProviderError`."""

    def __init__(self, dim: int, *, fail_on: int) -> None:
        super().__init__(dim)
        self.calls, self.fail_on = 0, fail_on

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == self.fail_on:
            raise ProviderError("the embedding server went away")
        return super().embed(texts)


class EditsWhileEmbedding(Resized):
    """`Resized` that runs `edit` once, the first time it is asked to embed `text`: a writer
    changing that row between the re-embed's read and its write."""

    def __init__(self, dim: int, *, text: str, edit: Callable[[], None]) -> None:
        super().__init__(dim)
        self.text, self.edit = text, edit

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.text in texts:
            self.edit()
            self.text = ""  # once
        return super().embed(texts)


def test_an_interrupted_reembed_is_finished_by_running_it_again(own_database: str) -> None:
    store(own_database, Resized(384), facts=FACTS)
    versions, batch = FACTS + FACTS // 3, 50
    with pytest.raises(ProviderError, match="went away"):
        reembed(FailsOnCall(256, fail_on=2), url=own_database, batch_rows=batch)
    # The first batch is committed, the rest untouched, no row half-written, no index built.
    assert spaces(own_database) == {
        ("facts", "resized", 256, batch, 0),
        ("facts", "resized", 384, versions - batch, 0),
        ("episodes", "resized", 384, EPISODES, 0),
        ("procedures", "resized", 384, 1, 0),
    }
    left = versions - batch + EPISODES + 1
    with (
        session_scope(own_database) as session,
        pytest.raises(ConfigurationError, match=rf"resized of 384 dimensions \({left} rows\)"),
    ):
        check_embedding_model(session, Resized(256))
    # A concurrent build stopped midway leaves its index invalid: this one fails on the rows
    # of 384 dimensions left, as one started before every row was rewritten would.
    with (
        pytest.raises(DatabaseError, match="expected 256 dimensions, not 384"),
        session_scope(own_database, autocommit=True) as session,
    ):
        ensure_vector_index(session, table="facts", model="resized", dim=256, concurrently=True)
    with session_scope(own_database) as session:
        index = vector_index_name("facts", "resized", 256)
        assert index in set(session.scalars(sa.text("SELECT indexname FROM pg_indexes")))
        assert index not in set(session.scalars(sa.text(VALID_INDEXES)))
    seen: list[tuple[str, int, int]] = []
    counts = reembed(
        Resized(256), url=own_database, batch_rows=batch, progress=lambda *a: seen.append(a)
    )
    assert counts == {"facts": versions - batch, "episodes": EPISODES, "procedures": 1}
    assert ("facts", versions - batch, versions - batch) in seen
    assert seen[-1] == ("HNSW indexes", 2, 2)
    assert spaces(own_database) == all_in("resized", 256, versions, EPISODES)
    with session_scope(own_database) as session:
        assert index in set(session.scalars(sa.text(VALID_INDEXES)))  # dropped and built again
        check_embedding_model(session, Resized(256))
    assert "The user prefers EUR" in found(own_database, Resized(256))


def test_a_procedure_edited_during_reembed_is_embedded_as_edited(own_database: str) -> None:
    old, new = Resized(384), Resized(256)
    store(own_database, old)
    admin = procedures.Actor("t", "admin")
    edited = procedures.ProcedureSpec(
        title="Book trains", when_to_use="when the user travels", body="Night trains.", user_id="u"
    )

    def edit_with_the_old_model() -> None:  # a process still running with the old settings
        with session_scope(own_database) as session:
            (row,) = procedures.listed(session, admin)
            embedded = procedures.Embedded(old.embed([edited.embedded_text()])[0], old.model)
            procedures.update(
                session, row.id or 0, expected=1, spec=edited, embedded=embedded, by=admin
            )

    racing = EditsWhileEmbedding(256, text=PROCEDURE, edit=edit_with_the_old_model)
    counts = reembed(racing, url=own_database)
    assert counts["procedures"] == 1  # skipped while it changed, rewritten by a second walk
    with session_scope(own_database) as session:
        (row,) = procedures.listed(session, admin)
    assert (row.version, row.embedding_model, row.embedding_dim) == (2, "resized", 256)
    assert list(row.embedding) == pytest.approx(new.embed([edited.embedded_text()])[0])
