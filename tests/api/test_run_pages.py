"""A run's detail over HTTP pages its events and shortens large values to previews; one step's
whole result has its own endpoint, visible as the run is (issue 9, finding 2)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import events
from models.engine.previews import PREVIEW_MAX_BYTES
from models.tables import RunEvent
from tests.api.conftest import Client, noop
from tests.integration.conftest import wait_for_run

pytestmark = pytest.mark.integration

BIG = "z" * (3 * PREVIEW_MAX_BYTES)  # an echoed value whose result is over the preview size


def submit(client: Client, who: str, steps: list[dict[str, Any]]) -> int:
    created = client(who).post("/api/v1/runs", json={"goal": "pages", "plan": {"steps": steps}})
    assert created.status_code == 201, created.text
    run_id = int(created.json()["run"]["id"])
    assert wait_for_run(run_id, memory=True).status == "succeeded"  # no event comes later
    return run_id


def echo(name: str, value: Any) -> dict[str, Any]:
    return {"name": name, "kind": "tool", "tool": "echo", "args": {"value": value}}


def test_events_page_back_from_the_newest_without_gaps_or_repeats(client: Client) -> None:
    run_id = submit(client, "alice", [noop(f"s{i}") for i in range(4)])
    with session_scope() as session:
        stmt = select(RunEvent.id).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
        every = list(session.exec(stmt))
    assert len(every) > 6  # so that a limit of 3 takes several pages
    alice, seen, before, pages = client("alice"), [], None, 0
    while True:
        params = {"events_limit": 3, **({"events_before": before} if before else {})}
        detail = alice.get(f"/api/v1/runs/{run_id}", params=params).json()
        ids = [e["id"] for e in detail["events"]]
        assert ids == sorted(ids) and len(ids) <= 3  # each page oldest first
        seen = ids + seen
        pages += 1
        before = detail["events_next_before"]
        if before is None:
            break
        assert before == ids[0]
    assert seen == every and pages == -(-len(every) // 3)
    newest = alice.get(f"/api/v1/runs/{run_id}").json()
    assert [e["id"] for e in newest["events"]] == every  # the default page holds them all
    assert newest["events_next_before"] is None


def test_events_limit_is_bounded(client: Client) -> None:
    run_id = submit(client, "alice", [noop("a")])
    for limit in (0, 1001):
        response = client("alice").get(f"/api/v1/runs/{run_id}", params={"events_limit": limit})
        assert response.status_code == 422, response.text


def test_large_values_are_previews_and_the_result_endpoint_has_them_whole(client: Client) -> None:
    run_id = submit(client, "alice", [echo("small", "hi"), echo("big", BIG)])
    with session_scope() as session:
        events.record_event(session, run_id, "test.large", blob=BIG)
    detail = client("alice").get(f"/api/v1/runs/{run_id}").json()
    small, big = detail["steps"]
    assert small["result"] == {"value": "hi"} and small["shortened"] == []
    assert big["shortened"] == ["args", "result"]
    assert big["result"]["shortened"] is True and big["result"]["bytes"] > len(BIG)
    assert len(big["result"]["preview"]) == PREVIEW_MAX_BYTES
    assert big["result"]["preview"].startswith('{"value": "zzz')
    event = next(e for e in detail["events"] if e["kind"] == "test.large")
    assert event["shortened"] is True and event["detail"]["bytes"] > len(BIG)
    assert all(not e["shortened"] for e in detail["events"] if e["kind"] != "test.large")
    assert detail["shortened"] == ["final_result"]  # its outputs hold the big result
    assert detail["final_result"]["shortened"] is True
    whole = client("alice").get(f"/api/v1/runs/{run_id}/steps/{big['id']}/result")
    assert whole.status_code == 200, whole.text
    expected = {"run_id": run_id, "step_id": big["id"], "name": "big", "status": "succeeded"}
    assert whole.json() == {**expected, "result": {"value": BIG}}


def test_a_step_result_is_visible_as_its_run_is(client: Client) -> None:
    run_id = submit(client, "alice", [echo("mine", "alice's")])
    step_id = client("alice").get(f"/api/v1/runs/{run_id}").json()["steps"][0]["id"]
    url = f"/api/v1/runs/{run_id}/steps/{step_id}/result"
    assert client("alice").get(url).json()["result"] == {"value": "alice's"}
    assert client("reviewer").get(url).status_code == 200
    refused = client("bob").get(url)
    assert refused.status_code == 404
    assert refused.json() == {"detail": f"run {run_id} does not exist", "error": "NotFound"}
    other_run = submit(client, "alice", [noop("a")])
    wrong = client("alice").get(f"/api/v1/runs/{other_run}/steps/{step_id}/result")
    assert wrong.status_code == 404 and str(step_id) in wrong.json()["detail"]
    assert client(None).get(url).status_code == 401
