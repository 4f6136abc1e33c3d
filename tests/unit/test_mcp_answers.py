"""`agentq mcp`'s pure parts (issue 30, item 8): each refusal an MCP client shows is one line
(`ops.mcp_answers.refusal`), `--http` takes a loopback HOST:PORT only, and the API's URL is
found as documented (`ops.mcp_server.default_api_url`). The server itself runs in
tests/api/test_mcp_server.py."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import typer
from pydantic import ValidationError

from agentq.client import ApiError
from api.schemas import RunSubmit
from models.errors import ConfigurationError
from models.settings import Settings, read_settings
from ops.mcp_answers import Principal, fields_line, refusal
from ops.mcp_server import default_api_url, instructions
from ops.option_values import host_port

URL = "http://127.0.0.1:8765"


def test_the_apis_refusals_are_its_status_kind_and_message() -> None:
    forbidden = ApiError(403, "role 'submitter' may not do this; allowed: admin", "Forbidden")
    assert (
        refusal(forbidden, URL) == "403 Forbidden: role 'submitter' may not do this; allowed: admin"
    )
    unknown = ApiError(401, "invalid or revoked token", "Unauthorized")
    assert refusal(unknown, URL) == (
        "401 Unauthorized: invalid or revoked token (check AGENTQ_API_TOKEN or --token)"
    )
    fields = [
        {"loc": ["body", "plan", "steps", 0, "tool"], "msg": "Field required"},
        {"loc": ["query", "limit"], "msg": "too big"},
    ]
    assert refusal(ApiError(422, fields), URL) == (
        "422 invalid request: plan.steps.0.tool: Field required; query.limit: too big"
    )
    assert refusal(ApiError(502, "<html>bad gateway</html>"), URL) == (
        "502 error: <html>bad gateway</html>"
    )


def test_a_request_refused_before_it_is_sent_names_the_field() -> None:
    with pytest.raises(ValidationError) as refused:
        RunSubmit(goal="  ", facts={"bad key": "x"})
    line = refusal(refused.value, URL)
    assert line is not None and "\n" not in line
    assert line.startswith("goal: ") and "facts.bad key" in line, line


def test_an_api_out_of_reach_is_named_and_a_bug_is_not_a_refusal() -> None:
    line = refusal(httpx.ConnectError("Connection refused"), URL)
    assert line == f"agentq's API at {URL} does not answer (ConnectError: Connection refused)"
    assert refusal(RuntimeError("a bug"), URL) is None  # the SDK logs it, the client sees less


def test_fields_line_takes_what_is_not_a_field_error_as_it_is() -> None:
    assert fields_line([]) == "invalid request"
    assert fields_line(["odd", {"loc": [], "msg": "whole body"}]) == "odd; whole body"


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("[::1]:9", ("::1", 9)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_http_takes_a_loopback_host_and_port(given: str, parsed: tuple[str, int]) -> None:
    assert host_port(given) == parsed


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("0.0.0.0:8000", "only a loopback address is allowed"),
        ("192.168.1.4:8000", "only a loopback address is allowed"),
        ("127.0.0.1", "expected HOST:PORT"),
        ("127.0.0.1:0", "expected HOST:PORT with a port from 1 to 65535"),
        ("127.0.0.1:http", "expected HOST:PORT"),
    ],
)
def test_http_refuses_anything_else_in_one_line(given: str, says: str) -> None:
    with pytest.raises(typer.BadParameter, match=says):
        host_port(given)


def test_the_api_url_is_the_setting_else_the_running_stack_else_host_and_port(
    tmp_path: Path,
) -> None:
    given = Settings(_env_file=None, home=tmp_path, api_url="https://agentq.example/api/v1")
    assert default_api_url(given) == "https://agentq.example/api/v1"
    none_running = Settings(_env_file=None, home=tmp_path, api_port=9000)
    assert default_api_url(none_running) == "http://127.0.0.1:9000"
    everywhere = Settings(_env_file=None, home=tmp_path, api_host="0.0.0.0")
    assert default_api_url(everywhere) == "http://127.0.0.1:8765"


def test_a_bad_api_url_setting_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no `.env`
    monkeypatch.setenv("AGENTQ_API_URL", "127.0.0.1:8765")
    with pytest.raises(ConfigurationError) as refused:
        read_settings()
    said = str(refused.value)
    assert said.startswith("invalid settings: AGENTQ_API_URL: "), said
    assert "such as http://127.0.0.1:8765" in said and "\n" not in said, said
    monkeypatch.setenv("AGENTQ_API_URL", " ")
    monkeypatch.setenv("AGENTQ_API_TOKEN", "")
    blank = read_settings()
    assert (blank.api_url, blank.api_token) == (None, None)


def test_the_instructions_name_the_token_and_its_role() -> None:
    me = Principal(token="rita", role="reviewer", user=None, api_url=URL)
    told = instructions(URL, me)
    assert f"agentq's API at {URL} as the API token 'rita', role reviewer. A submitter" in told
    alice = Principal(token="alice", role="submitter", user="alice", api_url=URL)
    assert "as the API token 'alice', role submitter, user alice." in instructions(URL, alice)
    assert f"API at {URL} (it did not answer when this server started)" in instructions(URL, None)
