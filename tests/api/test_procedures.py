"""`/api/v1/procedures` over HTTP: who may read and write each scope, versions, saving a run's
plan, and the console's offer of the plan of a run a reviewer's edit made succeed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from models.memory import procedure_admin
from models.memory.procedures import Actor
from tests.api.conftest import Client, MakeToken, noop, user_of
from tests.integration.conftest import wait_for_run
from tests.support.console import csrf_of

pytestmark = pytest.mark.integration
OPERATOR = Actor("cli:tester", "admin")
TEMPLATE = {"steps": [noop("first"), {**noop("second"), "after": ["first"]}]}


@pytest.fixture
def added(client: Client) -> Iterator[Callable[..., dict[str, Any]]]:
    """`added(who, **fields)`: a procedure `who` added (201); deleted after the test."""
    ids: list[int] = []

    def add(who: str, **fields: Any) -> dict[str, Any]:
        body = {"title": "Tally", "when_to_use": "receipts to total", "body": "Add them.", **fields}
        response = client(who).post("/api/v1/procedures", json=body)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
        return dict(response.json())

    yield add
    for procedure_id in ids:
        client("admin").delete(f"/api/v1/procedures/{procedure_id}")


def test_users_own_procedures_are_theirs_and_shared_ones_need_a_reviewer(
    client: Client, added: Callable[..., dict[str, Any]]
) -> None:
    alice, bob, rita = client("alice"), client("bob"), client("reviewer")
    mine = added("alice", scope="user")
    assert (mine["scope"], mine["user_id"], mine["version"]) == (
        "user",
        user_of(client, "alice"),
        1,
    )
    assert bob.get(f"/api/v1/procedures/{mine['id']}").status_code == 404  # as if it did not exist
    assert rita.get(f"/api/v1/procedures/{mine['id']}").status_code == 404  # nobody's memory
    assert mine["id"] not in [p["id"] for p in bob.get("/api/v1/procedures").json()]
    body = {"title": "Shared", "when_to_use": "always", "body": "x", "scope": "everyone"}
    refused = alice.post("/api/v1/procedures", json=body)
    assert refused.status_code == 403 and "submitter writes only its own" in refused.text
    shared = added("reviewer", scope="everyone", plan_template=TEMPLATE)
    stored = shared["plan_template"]["steps"]  # normalised: defaults such as `args: {}` left out
    assert [(s["name"], s.get("after")) for s in stored] == [("first", None), ("second", ["first"])]
    assert (shared["created_by"], shared["written_as"]) == ("token:rita", "reviewer")
    assert bob.get(f"/api/v1/procedures/{shared['id']}").status_code == 200  # everyone reads it
    assert bob.delete(f"/api/v1/procedures/{shared['id']}").status_code == 403
    tool = {**body, "scope": "tool", "tool": "no_such_tool"}
    unknown = rita.post("/api/v1/procedures", json=tool)  # the spec's enum: the enabled tools
    assert unknown.status_code == 400 and "unknown tool 'no_such_tool'" in unknown.text
    no_scope = rita.post("/api/v1/procedures", json={"title": "x", "when_to_use": "y"})
    assert no_scope.status_code == 422 and "scope: required" in no_scope.text, no_scope.text


def test_an_edit_is_a_new_version_and_a_stale_one_is_refused(
    client: Client, added: Callable[..., dict[str, Any]]
) -> None:
    alice = client("alice")
    mine = added("alice", scope="user")
    url = f"/api/v1/procedures/{mine['id']}"
    edited = alice.patch(url, json={"body": "Add them in EUR."}, params={"expected_version": 1})
    assert edited.status_code == 200, edited.text
    assert (edited.json()["version"], edited.json()["body"]) == (2, "Add them in EUR.")
    stale = alice.patch(url, json={"title": "Other"}, params={"expected_version": 1})
    assert stale.status_code == 409 and "at version 2, not 1" in stale.text
    cleared = alice.patch(url, json={"body": ""})  # neither a how-to nor a template: invalid
    assert cleared.status_code == 409 and "body, plan_template" in cleared.text
    nothing = alice.patch(url, json={})  # the fields to give, as the API names them
    assert nothing.status_code == 422 and "give at least one of" in nothing.text
    assert "user" in nothing.text and "user_id" not in nothing.text
    shown = alice.get(url).json()
    assert [v["version"] for v in shown["versions"]] == [1, 2]
    assert shown["versions"][0]["body"] == "Add them." and shown["version"] == 2


def signed_in(raw_token: str) -> TestClient:
    """The review console in process, signed in with `raw_token`."""
    console = TestClient(create_app())
    data = {"token": raw_token, "csrf_token": csrf_of(console.get("/ui/login").text)}
    assert console.post("/ui/login", data=data, follow_redirects=False).status_code == 303
    return console


def test_a_run_edited_to_success_offers_its_plan_and_saves_it(
    client: Client, escalated: Callable[..., tuple[int, int]], make_token: MakeToken
) -> None:
    run_id, esc_id = escalated()
    saving = f"/api/v1/procedures/from-run/{run_id}"
    assert client("admin").post(saving).status_code == 409  # not succeeded (yet)
    plan = {"plan": {"steps": [noop("instead")]}, "comment": "simpler"}
    assert client("reviewer").post(f"/api/v1/reviews/{esc_id}/edit", json=plan).status_code == 200
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    with signed_in(make_token("admin")) as console:
        page = console.get(f"/ui/runs/{run_id}").text
        assert 'id="offer-procedure"' in page and f"--from-run {run_id}" in page
    with signed_in(make_token("reviewer")) as console:  # it would be the user's memory
        assert 'id="offer-procedure"' not in console.get(f"/ui/runs/{run_id}").text
    refused = client("reviewer").post(saving, json={"title": "Do it simpler"})
    assert refused.status_code == 403, refused.text
    assert "scope: a reviewer does not save run" in refused.text
    saved = client("admin").post(saving, json={"title": "Do it simpler"})
    assert saved.status_code == 201, saved.text
    procedure = saved.json()
    try:
        # the run's user's own (its values are theirs): everyone's only when asked for
        assert (procedure["scope"], procedure["source_run_id"]) == ("user", run_id)
        assert procedure["written_as"] == "admin"
        names = [s["name"] for s in procedure["plan_template"]["steps"]]
        assert names == ["a", "instead"]  # the failed step is left out
        assert "after a reviewer's edit" in procedure["body"]
    finally:
        procedure_admin.remove(OPERATOR, procedure["id"])
