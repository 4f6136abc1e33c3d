"""`Idempotency-Key` on `POST /api/v1/runs` over real HTTP (issue 27, item 13): a retried
submit answers with the run the first one made, a key sent with another body is a 409,
concurrent requests with one key make one run, keys are each token's own, and the Python
client's own retries (a lost answer) make one run. Before, every POST made a new run."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import col

from agentq.client import Client
from models.db import session_scope
from models.tables import Run
from tests.api.conftest import MakeToken, noop

pytestmark = pytest.mark.integration
CONCURRENT = 8


def _user_and_http(api_url: str, make_token: MakeToken) -> tuple[str, httpx.Client]:
    user = f"idem-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {make_token('submitter', user=user)}"}
    return user, httpx.Client(base_url=api_url, headers=headers, timeout=60, trust_env=False)


def _runs_of(user: str) -> list[int]:
    with session_scope() as session:
        return list(session.scalars(sa.select(col(Run.id)).where(col(Run.user_id) == user)))


def _body(goal: str = "once") -> dict[str, Any]:
    return {"goal": goal, "plan": {"steps": [noop("a")]}}


def test_a_retry_with_the_key_answers_the_first_run_and_another_body_is_409(
    api_url: str, make_token: MakeToken
) -> None:
    user, http = _user_and_http(api_url, make_token)
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with http:
        first = http.post("/api/v1/runs", json=_body(), headers=key)
        again = http.post("/api/v1/runs", json=_body(), headers=key)
        other = http.post("/api/v1/runs", json=_body("another goal"), headers=key)
        fresh = http.post("/api/v1/runs", json=_body(), headers={"Idempotency-Key": "k-2"})
        unkeyed = http.post("/api/v1/runs", json=_body())
        bad = http.post("/api/v1/runs", json=_body(), headers={"Idempotency-Key": "a key"})
    assert (first.status_code, again.status_code) == (201, 201), (first.text, again.text)
    assert again.json() == first.json()  # the same body: the run as the first answer showed it
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert other.status_code == 409, other.text
    assert other.json()["error"] == "IdempotencyKeyReused"
    assert key["Idempotency-Key"] in other.json()["detail"]
    assert bad.status_code == 422, bad.text
    run_id = first.json()["run"]["id"]
    made = [run_id, fresh.json()["run"]["id"], unkeyed.json()["run"]["id"]]
    assert sorted(_runs_of(user)) == sorted(made) and len(set(made)) == 3


def test_keys_are_each_tokens_own(api_url: str, make_token: MakeToken) -> None:
    user, http = _user_and_http(api_url, make_token)
    other_token = make_token("submitter", user=user)
    key = {"Idempotency-Key": "shared-key"}
    with (
        http,
        httpx.Client(
            base_url=api_url,
            headers={"Authorization": f"Bearer {other_token}"},
            timeout=60,
            trust_env=False,
        ) as second,
    ):
        mine = http.post("/api/v1/runs", json=_body(), headers=key)
        theirs = second.post("/api/v1/runs", json=_body(), headers=key)
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["run"]["id"] != theirs.json()["run"]["id"]
    assert len(_runs_of(user)) == 2


def test_concurrent_requests_with_one_key_make_one_run(api_url: str, make_token: MakeToken) -> None:
    user, http = _user_and_http(api_url, make_token)
    http.close()
    token = make_token("submitter", user=user)
    key = {"Idempotency-Key": str(uuid.uuid4()), "Authorization": f"Bearer {token}"}
    start = threading.Barrier(CONCURRENT)
    answers: list[httpx.Response] = []

    def post() -> None:
        with httpx.Client(base_url=api_url, timeout=60, trust_env=False) as client:
            start.wait()
            answers.append(client.post("/api/v1/runs", json=_body(), headers=key))

    threads = [threading.Thread(target=post) for _ in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [201] * CONCURRENT, [a.text for a in answers]
    assert len({a.json()["run"]["id"] for a in answers}) == 1
    assert len(_runs_of(user)) == 1
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == CONCURRENT - 1


class LosesFirstAnswer(httpx.HTTPTransport):
    """Sends every request; the first submit's answer is lost on the way back (a timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/runs"):
            self.keys.append(request.headers.get("Idempotency-Key"))
            if len(self.keys) == 1:
                response.read()
                raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


def test_the_clients_retry_after_a_lost_answer_makes_one_run(
    api_url: str, make_token: MakeToken
) -> None:
    user = f"idem-{uuid.uuid4().hex[:8]}"
    transport = LosesFirstAnswer()
    with Client(api_url, make_token("submitter", user=user), transport=transport) as agentq:
        submitted = agentq.submit("lost answer", plan={"steps": [noop("a")]})
    assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1] is not None
    assert _runs_of(user) == [submitted.run.id]


def test_the_spec_documents_the_header_and_the_409(api_url: str) -> None:
    spec = httpx.get(f"{api_url}/openapi.json", trust_env=False).json()
    submit: dict[str, Any] = spec["paths"]["/api/v1/runs"]["post"]
    (header,) = [p for p in submit["parameters"] if p["name"] == "Idempotency-Key"]
    assert header["in"] == "header" and not header.get("required")
    assert "IdempotencyKeyReused" in submit["responses"]["409"]["description"]
    assert "Idempotent-Replayed" in submit["responses"]["201"]["headers"]
