"""Tokens and roles over HTTP: refused tokens, wrong roles, open health, tokens never logged."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from models.access import api_tokens
from models.db import session_scope
from ops.stack import LocalStack
from tests.api.conftest import Client, MakeToken

pytestmark = pytest.mark.integration


def test_me_says_who_the_token_acts_as(client: Client) -> None:
    alice = client("alice").get("/api/v1/me")
    assert alice.status_code == 200
    assert alice.json()["role"] == "submitter" and alice.json()["user_id"].startswith("alice-")
    reviewer = client("reviewer").get("/api/v1/me").json()
    assert (reviewer["name"], reviewer["role"], reviewer["user_id"]) == ("rita", "reviewer", None)


@pytest.mark.parametrize(
    "headers",
    [
        {},  # no token
        {"Authorization": "Bearer aq_not-a-real-token"},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic YWRhOnNlY3JldA=="},
        {"Authorization": "aq_no_scheme"},
    ],
    ids=["missing", "wrong", "empty", "basic", "no-scheme"],
)
def test_requests_without_a_valid_token_are_refused(api_url: str, headers: dict[str, str]) -> None:
    for method, path in (("GET", "/api/v1/runs"), ("GET", "/api/v1/me"), ("POST", "/api/v1/runs")):
        response = httpx.request(method, api_url + path, headers=headers, json={}, trust_env=False)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"] == "Unauthorized"


def test_a_revoked_token_is_refused(client: Client, make_token: MakeToken) -> None:
    raw = make_token("admin")
    assert client(raw).get("/api/v1/runs").status_code == 200
    with session_scope() as session:
        row = api_tokens.lookup(session, raw)
        assert row is not None
        api_tokens.revoke_token(session, row.id or 0)
    refused = client(raw).get("/api/v1/runs")
    assert refused.status_code == 401 and "revoked" in refused.json()["detail"]


def logged(engine: LocalStack, text: str, timeout_s: float = 5) -> str:
    """The API's log once it has `text` (a request is logged just after it is answered)."""
    deadline = time.monotonic() + timeout_s
    while text not in (log := engine.log_path("api").read_text()):
        assert time.monotonic() < deadline, f"{text!r} is not in the API's log"
        time.sleep(0.05)
    return log


def test_a_token_in_the_query_string_is_refused_and_never_logged(
    api_url: str, make_token: MakeToken, engine: LocalStack
) -> None:
    raw = make_token("admin")
    for name in ("token", "access_token"):
        response = httpx.get(f"{api_url}/api/v1/runs", params={name: raw}, trust_env=False)
        assert response.status_code == 401
    marker = f"/api/v1/nowhere-{uuid.uuid4().hex}"
    missing = httpx.get(f"{api_url}{marker}", params={"token": raw}, trust_env=False)
    assert missing.status_code == 404
    log = logged(engine, f"path='{marker}'")
    assert f"method='GET' path='{marker}' status=404" in log
    assert raw not in log and raw[len(api_tokens.TOKEN_PREFIX) :] not in log
    assert "token=" not in log


@pytest.mark.parametrize(
    ("who", "method", "path", "body"),
    [
        ("reviewer", "POST", "/api/v1/runs", {"goal": "g", "user": "u"}),
        ("reviewer", "POST", "/api/v1/runs/1/cancel", None),
        ("reviewer", "GET", "/api/v1/memory/facts?user=u", None),
        ("reviewer", "POST", "/api/v1/memory/forget", {"user": "u"}),
        ("alice", "GET", "/api/v1/reviews", None),
        ("alice", "GET", "/api/v1/reviews/1", None),
        ("alice", "POST", "/api/v1/reviews/claim", None),
        ("alice", "POST", "/api/v1/reviews/1/approve", {}),
        ("alice", "POST", "/api/v1/reviews/1/reject", {"comment": "no"}),
        # a submitter may forget its own user's memory (issue 9); another user's is a 403 of its
        # own (tests/api/test_memory.py)
    ],
)
def test_wrong_roles_are_refused_with_403(
    client: Client, who: str, method: str, path: str, body: object
) -> None:
    response = client(who).request(method, path, json=body)
    assert response.status_code == 403, response.text
    assert "may not do this" in response.json()["detail"]


def test_health_and_spec_are_open(api_url: str) -> None:
    assert httpx.get(f"{api_url}/healthz", trust_env=False).json()["status"] == "ok"
    ready = httpx.get(f"{api_url}/readyz", trust_env=False)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}
    spec = httpx.get(f"{api_url}/openapi.json", trust_env=False).json()
    assert "/api/v1/runs" in spec["paths"] and "HTTPBearer" in spec["components"]["securitySchemes"]
    # Swagger UI is off by default: FastAPI's page loads it from a CDN (issue 9)
    assert httpx.get(f"{api_url}/docs", trust_env=False).status_code == 404


def test_tokens_never_reach_the_log(
    client: Client, tokens: dict[str, str], engine: LocalStack
) -> None:
    for who in ("admin", "reviewer", "alice"):
        client(who).get("/api/v1/runs")
    client("aq_guessed-token").get("/api/v1/runs", params={"marker": "guessed"})
    log = logged(engine, "path='/api/v1/runs' status=401")  # the access log is on
    assert "guessed" not in log  # nor any query string
    for name in ("admin", "reviewer", "alice"):
        assert tokens[name] not in log
        assert api_tokens.hash_token(tokens[name]) not in log
    assert "aq_guessed-token" not in log and "Bearer" not in log
