"""Fixtures shared by every kind of test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from models.settings import get_settings
from ops.fake_provider import FakeOpenAI
from ops.local import start_engine
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, engine_dir

SESSION_POOL = 2  # the session engine's worker pool processes


@pytest.fixture(scope="session")
def engine() -> Iterator[LocalStack]:
    """The running engine (tests/integration, tests/api), one per session, with the shortened
    timeout ladder of TEST_ENV; fails (never skips) when a service cannot start."""
    os.environ.update(TEST_ENV)
    get_settings.cache_clear()
    for data_dir in engine_dir():
        stack = start_engine(data_dir, worker_concurrency=SESSION_POOL)
        yield stack
        stack.stop()


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """A misbehaving OpenAI-compatible server on 127.0.0.1 at a free port, for one test."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with FakeOpenAI() as server:
        yield server
