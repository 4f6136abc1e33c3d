"""`/readyz` answers within its deadline when a service accepts connections but never answers (a
SIGSTOPped Redis or Postgres), naming what did not answer."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi import Response

from api import health


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A port on 127.0.0.1 whose connections the kernel accepts and nobody ever answers, as a
    stopped server's; closing it afterwards resets them, which frees the probe threads."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def test_readyz_answers_503_within_its_deadline_when_the_services_hang(
    black_hole: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung = sa.create_engine(f"postgresql+psycopg://agentq@127.0.0.1:{black_hole}/agentq")
    monkeypatch.setattr(health, "get_engine", lambda: hung)
    monkeypatch.setattr(health, "broker_url", lambda: f"redis://127.0.0.1:{black_hole}/0")
    response = Response()
    started = time.monotonic()
    answer = health.readyz(response)
    took_s = time.monotonic() - started
    assert response.status_code == 503 and answer.status == "unavailable"
    assert took_s < health.READY_TIMEOUT_S + 1, took_s
    assert answer.checks["database"] == f"no answer within {health.READY_TIMEOUT_S:g} s"
    assert answer.checks["broker"] != "ok"
    again = time.monotonic()
    assert health.readyz(Response()).status == "unavailable"  # the hung check is not restarted
    assert time.monotonic() - again < health.READY_TIMEOUT_S + 1
    hung.dispose()
