"""Memory over HTTP: a user's facts with their history, search, and forgetting (an admin, or the
user's own submitter token)."""

from __future__ import annotations

import uuid

import pytest

from models.db import session_scope
from models.memory import memory_admin
from models.memory.embeddings import HashEmbedder
from models.memory.facts import remember
from tests.api.conftest import Client, MakeToken

pytestmark = pytest.mark.integration


def store(user: str, text: str, attribute: str) -> None:
    model = memory_admin.embedder()
    with session_scope() as session:
        remember(
            session,
            user_id=user,
            subject="user",
            attribute=attribute,
            category="preference",
            text=text,
            embedding=model.embed([text])[0],
            embedding_model=model.model,
        )


@pytest.fixture
def carol(make_token: MakeToken) -> tuple[str, str]:
    """A submitter token of a fresh user with two versions of one fact; (token, user)."""
    user = f"carol-{uuid.uuid4().hex[:8]}"
    store(user, "Carol's reports are in EUR", "currency")
    store(user, "Carol's reports are in CHF", "currency")  # supersedes the EUR one
    return make_token("submitter", user=user), user


def test_facts_with_and_without_history(client: Client, carol: tuple[str, str]) -> None:
    token, user = carol
    current = client(token).get("/api/v1/memory/facts")
    assert current.status_code == 200, current.text
    assert [f["text"] for f in current.json()] == ["Carol's reports are in CHF"]
    history = client(token).get("/api/v1/memory/facts", params={"history": True}).json()
    assert [f["text"] for f in history] == [
        "Carol's reports are in EUR",
        "Carol's reports are in CHF",
    ]
    old, new = history
    assert old["valid_to"] is not None and old["superseded_by"] == new["id"]
    as_admin = client("admin").get("/api/v1/memory/facts", params={"user": user}).json()
    assert as_admin == current.json()
    assert client("admin").get("/api/v1/memory/facts").status_code == 403  # whose? (token rule)


def test_search_finds_the_users_facts_only(client: Client, carol: tuple[str, str]) -> None:
    token, user = carol
    found = client(token).get("/api/v1/memory/search", params={"q": "which currency, CHF?"})
    assert found.status_code == 200, found.text
    body = found.json()
    assert [f["fact"]["text"] for f in body["facts"]] == ["Carol's reports are in CHF"]
    assert body["facts"][0]["text_match"] is True and body["embedding_model"]
    others = client("alice").get("/api/v1/memory/search", params={"q": "CHF"}).json()
    assert all(f["fact"]["user_id"] != user for f in others["facts"])


def test_search_of_memory_another_model_embedded_is_refused(
    client: Client, make_token: MakeToken
) -> None:
    """Issue 11: a user whose memory another embedding model wrote (before a model switch) got
    200 and no results; now a 503 naming the settings and the command that fixes it."""
    user, other = f"dora-{uuid.uuid4().hex[:8]}", HashEmbedder(64)
    text = "Dora's reports are in EUR"
    with session_scope() as session:
        remember(
            session,
            user_id=user,
            subject="user",
            attribute="currency",
            category="preference",
            text=text,
            embedding=other.embed([text])[0],
            embedding_model=other.model,
        )
    refused = client(make_token("submitter", user=user)).get(
        "/api/v1/memory/search", params={"q": "which currency, EUR?"}
    )
    assert refused.status_code == 503, refused.text
    body = refused.json()
    assert body["error"] == "ConfigurationError"
    assert (
        f"the memory of user '{user}' holds embeddings of hash-64 of 64 dimensions (1 row)"
        in body["detail"]
    )
    configured = memory_admin.embedder()
    assert (
        f"AGENTQ_EMBEDDING_MODEL/AGENTQ_EMBEDDING_DIM give {configured.model} of "
        f"{configured.dim} dimensions" in body["detail"]
    )
    assert "`agentq memory reembed`" in body["detail"]


def test_a_submitter_reads_only_its_own_memory(client: Client, carol: tuple[str, str]) -> None:
    _, user = carol
    for path, params in (
        ("/api/v1/memory/facts", {"user": user}),
        ("/api/v1/memory/search", {"user": user, "q": "x"}),
    ):
        refused = client("alice").get(path, params=params)
        assert refused.status_code == 403 and "own user" in refused.json()["detail"]


def test_forget_deletes_the_users_memory(client: Client, carol: tuple[str, str]) -> None:
    token, user = carol
    forgot = client("admin").post("/api/v1/memory/forget", json={"user": user})
    assert forgot.status_code == 200, forgot.text
    assert forgot.json()["deleted"]["facts"] == 2
    assert client(token).get("/api/v1/memory/facts", params={"history": True}).json() == []
    # users own their memory (issue 9): its own submitter token may forget it, nobody else's
    assert client("alice").post("/api/v1/memory/forget", json={"user": user}).status_code == 403
    assert client("reviewer").post("/api/v1/memory/forget", json={"user": user}).status_code == 403
    assert client(token).post("/api/v1/memory/forget", json={"user": user}).status_code == 200
