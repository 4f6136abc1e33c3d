"""The webhook receiver the docs give (docs/how-to/webhooks.md, found by its handler wherever
it is) accepts what agentq's sender signs and refuses the rest: its code is run as written, with
only its last line (serve on port 9099 forever) replaced by a server on a free port."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import HTTPServer
from typing import Any

import httpx
import pytest

from models.operations.deliveries import Claimed, signed_headers
from tests.support.doc_pages import block_matching

SECRET = "whsec-docs-example"


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The docs' receiver serving on 127.0.0.1 (its URL)."""
    block = block_matching(r"class Hook\(BaseHTTPRequestHandler\)", language="python")
    code = "\n".join(line for line in block.body.splitlines() if not line.startswith("HTTPServer("))
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    namespace: dict[str, Any] = {"__name__": "docs_receiver"}
    exec(compile(code, f"{block.page}:{block.line}", "exec"), namespace)
    server = HTTPServer(("127.0.0.1", 0), namespace["Hook"])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _headers(body: str, *, secret: str = SECRET, age_s: int = 0) -> dict[str, str]:
    """The headers agentq's sender puts on an attempt posting `body`."""
    delivery = Claimed(
        id=1,
        key=uuid.uuid4(),
        event="run.finished",
        snapshot={},
        attempt=1,
        give_up_at=datetime.now(UTC),
        subscription_id=1,
        url="http://127.0.0.1/",
    )
    return signed_headers(delivery, body, secret, timestamp=int(time.time()) - age_s)


def _post(url: str, body: str, headers: dict[str, str]) -> int:
    """The status of POSTing `body` to `url` (no proxy from the environment: it is loopback)."""
    with httpx.Client(trust_env=False) as client:
        return client.post(url, content=body, headers=headers).status_code


def test_the_docs_receiver_accepts_what_agentq_signs(
    receiver: str, capsys: pytest.CaptureFixture[str]
) -> None:
    body = '{"event": "run.finished", "run_id": 7}'
    headers = _headers(body)
    assert _post(receiver, body, headers) == 204
    # The receiver's thread prints after its answer is sent: wait for the line a little.
    printed, deadline = "", time.monotonic() + 5
    while f"{headers['Idempotency-Key']} {body}" not in printed and time.monotonic() < deadline:
        time.sleep(0.02)
        printed += capsys.readouterr().out
    assert f"{headers['Idempotency-Key']} {body}" in printed


def test_the_docs_receiver_refuses_a_forgery_and_a_replay(receiver: str) -> None:
    body = '{"event": "run.finished", "run_id": 7}'
    tampered = body.replace("7", "8")
    assert _post(receiver, tampered, _headers(body)) == 401
    wrong = _headers(body, secret="another")
    assert _post(receiver, body, wrong) == 401
    old = _headers(body, age_s=3600)
    assert _post(receiver, body, old) == 401
