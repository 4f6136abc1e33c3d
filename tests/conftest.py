"""Fixtures shared by every kind of test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_openai import FakeOpenAI


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """A misbehaving OpenAI-compatible server on 127.0.0.1 at a free port, for one test."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with FakeOpenAI() as server:
        yield server
