"""Runs over HTTP: submit, list with filters, read one whole, cancel; a submitter's own only."""

from __future__ import annotations

import json
import socket

import pytest
import sqlalchemy as sa

from api.limits import BODY_MAX_BYTES
from models.db import session_scope
from models.patterns import FACT_KEY_PATTERN, WORDS
from models.tables import Run
from tests.api.conftest import Client, noop, snapshot, user_of, wait_for_event
from tests.integration.conftest import wait_for_run

pytestmark = pytest.mark.integration


def run_count() -> int:
    with session_scope() as session:
        return int(session.scalar(sa.select(sa.func.count()).select_from(Run)) or 0)


def test_a_submitter_submits_an_explicit_plan_and_reads_the_whole_run(client: Client) -> None:
    alice = client("alice")
    body = {
        "goal": "two no-ops",
        "facts": {"currency": "EUR"},
        "budgets": {"replans": 1, "tokens": 5000, "cost_usd": 0.5, "wall_time_s": 600},
        "plan": {
            "steps": [
                noop("a"),
                {
                    "name": "b",
                    "kind": "tool",
                    "tool": "echo",
                    "args": {"value": "${facts.currency}"},
                },
            ]
        },
    }
    created = alice.post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    run = created.json()["run"]
    assert created.json()["notified"] is True
    assert (run["status"], run["plan_version"], run["user_id"]) == (
        "running",
        1,
        user_of(client, "alice"),
    )
    assert run["spend"]["replans_limit"] == 1 and run["spend"]["tokens_limit"] == 5000
    assert run["spend"]["cost_limit_usd"] == 0.5 and run["spend"]["wall_time_limit_s"] == 600
    assert wait_for_run(run["id"]).status == "succeeded"
    detail = alice.get(f"/api/v1/runs/{run['id']}").json()
    assert detail["status"] == "succeeded" and detail["pinned_facts"] == {"currency": "EUR"}
    assert [v["created_by"] for v in detail["plan_versions"]] == ["submitter"]
    assert [s["name"] for s in detail["steps"]] == ["a", "b"]
    assert detail["current_step_ids"] == [s["id"] for s in detail["steps"]]
    assert detail["steps"][1]["result"] == {"value": "EUR"}
    assert {"run.submitted", "run.succeeded"} <= {e["kind"] for e in detail["events"]}
    assert detail["final_result"] is not None and detail["escalations"] == []


def test_a_submit_shows_the_goals_values_and_pins_them_when_asked(client: Client) -> None:
    alice = client("alice")
    goal = "Submit 473.43 EUR to CC-4410"
    plan = {"steps": [noop("a")]}
    body = {"goal": goal, "facts": {"currency": "USD"}, "plan": plan, "pin_from_goal": True}
    created = alice.post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    from_goal = created.json()["from_goal"]
    assert from_goal == {
        "found": {"amount": "473.43", "currency": "EUR", "cost_centre": "CC-4410"},
        "pinned": {"amount": "473.43", "cost_centre": "CC-4410"},
        "overridden": {"currency": "EUR"},  # the explicit fact won
    }
    pinned = {"currency": "USD", "amount": "473.43", "cost_centre": "CC-4410"}
    assert created.json()["run"]["pinned_facts"] == pinned
    unasked = alice.post("/api/v1/runs", json={"goal": goal, "plan": plan})
    assert unasked.json()["from_goal"]["pinned"] == {}
    assert unasked.json()["from_goal"]["found"] == from_goal["found"]
    assert unasked.json()["run"]["pinned_facts"] == {}


def test_success_criteria_and_the_replan_check_are_taken_at_submit(client: Client) -> None:
    alice = client("alice")
    body = {
        "goal": "report",
        "facts": {"cost_centre": "CC-4410"},
        "success_criteria": ["Filed against ${facts.cost_centre}"],
        "replan_check": "model",
        "plan": {
            "steps": [{"name": "a", "kind": "tool", "tool": "echo", "args": {"value": "CC-4410"}}],
            "success_criteria": ["Says CC-4410"],
        },
    }
    created = alice.post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]["id"]
    assert created.json()["run"]["success_criteria"] == [
        {
            "text": "Filed against ${facts.cost_centre}",
            "by": "user",
            "shown": "Filed against CC-4410",
        },
        {"text": "Says CC-4410", "by": "user", "shown": "Says CC-4410"},
    ]
    assert wait_for_run(run_id).status == "succeeded"
    detail = alice.get(f"/api/v1/runs/{run_id}").json()
    (checked,) = [e for e in detail["events"] if e["kind"] == "goal.checked"]
    assert checked["detail"]["met"] is True
    before = run_count()
    for bad, field in (
        ({"success_criteria": [""]}, "success_criteria"),
        ({"success_criteria": ["x"] * 11}, "success_criteria"),
        ({"replan_check": "sometimes"}, "replan_check"),
    ):
        response = alice.post("/api/v1/runs", json={"goal": "g", **bad})
        assert response.status_code == 422 and field in response.text, response.text
    unpinned = alice.post("/api/v1/runs", json={"goal": "g", "success_criteria": ["${facts.x}"]})
    assert (
        unpinned.status_code == 400 and "success_criteria[0]: refers to fact 'x'" in unpinned.text
    )
    for typo in ("Filed in ${fact.currency}", "Filed in ${facts.currency", "${steps.a.total}"):
        body = {"goal": "g", "facts": {"currency": "EUR"}, "success_criteria": [typo]}
        refused = alice.post("/api/v1/runs", json=body)
        assert refused.status_code == 400 and "write ${facts.KEY}" in refused.text, typo
    assert run_count() == before


def after(step: dict[str, object], *names: str) -> dict[str, object]:
    return {**step, "after": list(names)}


def test_a_graph_plan_runs_and_its_detail_returns_the_graph(client: Client) -> None:
    """Two steps that wait for nothing, and a join that waits for both and uses their results."""
    join = {
        "name": "join",
        "kind": "tool",
        "tool": "echo",
        "args": {"value": "${steps.right.value}"},
        "after": ["left", "right"],
    }
    right = {"name": "right", "kind": "tool", "tool": "echo", "args": {"value": 2}, "after": []}
    body = {"goal": "fan out and join", "plan": {"steps": [after(noop("left")), right, join]}}
    created = client("alice").post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]["id"]
    assert wait_for_run(run_id).status == "succeeded"
    detail = client("alice").get(f"/api/v1/runs/{run_id}").json()
    left_id, right_id, join_id = detail["current_step_ids"]
    (version,) = detail["plan_versions"]
    assert version["after"] == {
        str(left_id): [],
        str(right_id): [],
        str(join_id): [left_id, right_id],
    }
    assert version["waves"] == [[left_id, right_id], [join_id]]
    assert {s["name"]: s["result"] for s in detail["steps"]}["join"] == {"value": 2}


def test_a_plan_whose_after_makes_a_cycle_is_a_400_naming_the_step(client: Client) -> None:
    before = run_count()
    admin = client("admin")
    for steps, named in (
        ([after(noop("a"), "c"), after(noop("b"), "a"), after(noop("c"), "b")], "a cycle"),
        ([after(noop("a"), "a")], "steps.0.after: step 'a' cannot wait for itself"),
        ([noop("a"), after(noop("b"), "zz")], "steps.1.after: no step named 'zz'"),
        ([after(noop("a"), "b"), noop("b")], "a cycle: 'a' -> 'b' -> 'a'"),  # b: after a, implied
    ):
        body = {"goal": "g", "user": "u", "plan": {"steps": steps}}
        response = admin.post("/api/v1/runs", json=body)
        assert response.status_code == 400 and named in response.text, (steps, response.text)
        assert response.json()["error"] == "InvalidPlan"
    assert run_count() == before


def test_a_goal_alone_is_planned(client: Client) -> None:
    created = client("bob").post("/api/v1/runs", json={"goal": "say hello"})
    assert created.status_code == 201, created.text
    # planning starts in the submit transaction, or the run waits `queued` for one of bob's
    # dispatch slots (his other tests' runs may hold them)
    assert created.json()["run"]["status"] in ("planning", "queued")
    run = wait_for_run(created.json()["run"]["id"])
    assert run.status in ("succeeded", "waiting_review") and run.plan_version >= 1


def test_a_submitter_never_sees_another_users_run(client: Client) -> None:
    bobs = client("bob").post("/api/v1/runs", json={"goal": "bob's secret"}).json()["run"]["id"]
    response = client("alice").get(f"/api/v1/runs/{bobs}")
    assert response.status_code == 404
    missing = client("alice").get("/api/v1/runs/2000000000")
    assert response.json()["detail"] == f"run {bobs} does not exist"  # as if it did not exist
    assert missing.status_code == 404
    assert client("alice").post(f"/api/v1/runs/{bobs}/cancel").status_code == 404
    listed = client("alice").get("/api/v1/runs", params={"user": user_of(client, "bob")}).json()
    assert listed == []
    assert client("reviewer").get(f"/api/v1/runs/{bobs}").status_code == 200
    assert client("admin").get(f"/api/v1/runs/{bobs}").status_code == 200


def test_list_filters_by_status_and_user_newest_first(client: Client) -> None:
    alice_user, bob_user = user_of(client, "alice"), user_of(client, "bob")
    ids = [
        client("admin")
        .post("/api/v1/runs", json={"goal": f"g{i}", "user": alice_user})
        .json()["run"]["id"]
        for i in range(3)
    ]
    client("bob").post("/api/v1/runs", json={"goal": "bob's"})
    admin = client("admin")
    listed = admin.get("/api/v1/runs", params={"user": alice_user, "limit": 2}).json()
    assert [r["id"] for r in listed] == ids[::-1][:2]
    assert all(r["user_id"] == alice_user for r in listed)
    page = admin.get("/api/v1/runs", params={"user": alice_user, "before": ids[1]}).json()
    assert ids[0] in [r["id"] for r in page] and ids[1] not in [r["id"] for r in page]
    mine = client("alice").get("/api/v1/runs", params={"limit": 1000}).json()
    assert {r["user_id"] for r in mine} == {alice_user} and bob_user != alice_user
    for run_id in ids:
        wait_for_run(run_id)
    done = admin.get("/api/v1/runs", params={"status": "succeeded", "user": alice_user}).json()
    assert done and all(r["status"] == "succeeded" for r in done)
    bad = admin.get("/api/v1/runs", params={"status": "done"})
    assert bad.status_code == 422 and "succeeded" in bad.text


def _nested(levels: int) -> list[object]:
    """`[[[...]]]`, `levels` arrays deep."""
    value: list[object] = []
    for _ in range(levels - 1):
        value = [value]
    return value


# Arrays 300 deep, far under every size cap: refused whole (they once gave 500s after writing).
DEEP_PLAN = {
    "steps": [{"name": "a", "kind": "tool", "tool": "echo", "args": {"value": _nested(300)}}]
}


def test_bad_submissions_name_the_field_and_write_nothing(client: Client) -> None:
    before = run_count()
    admin, alice = client("admin"), client("alice")
    unknown_tool = {
        "goal": "g",
        "user": "u",
        "plan": {"steps": [{"name": "a", "kind": "tool", "tool": "nope"}]},
    }
    response = admin.post("/api/v1/runs", json=unknown_tool)
    assert response.status_code == 400 and "steps.0.tool: unknown tool 'nope'" in response.text
    fact_ref = {
        "goal": "g",
        "user": "u",
        "plan": {
            "steps": [
                {"name": "a", "kind": "tool", "tool": "echo", "args": {"value": "${facts.missing}"}}
            ]
        },
    }
    response = admin.post("/api/v1/runs", json=fact_ref)
    assert response.status_code == 400 and "'missing', which is not pinned" in response.text
    assert admin.post("/api/v1/runs", json={"goal": "g"}).json()["detail"].startswith("user:")
    other = alice.post("/api/v1/runs", json={"goal": "g", "user": "someone-else"})
    assert other.status_code == 403 and "acts only for its own user" in other.text
    over = admin.post("/api/v1/runs", json={"goal": "g", "user": "u", "budgets": {"tokens": 10**7}})
    assert over.status_code == 400 and "AGENTQ_MAX_TOKEN_BUDGET" in over.text
    assert "got 10000000" in over.text and "e+" not in over.text  # numbers as people write them
    for body, field in (
        ({"goal": "g", "user": "u", "facts": {"Bad Key": "x"}}, "facts"),
        ({"goal": "g", "user": "u", "budgets": {"tokens": 0}}, "tokens"),
        ({"goal": "g", "user": "u", "budgets": {"wall_time_s": 10**9}}, "wall_time_s"),
        ({"goal": "g", "user": "u", "budgets": {"tokens": 2**40}}, "tokens"),
        ({"goal": "g", "user": "u", "colour": "red"}, "colour"),
        ({"goal": "nul \u0000 inside", "user": "u"}, "NUL"),
        ({"goal": "   ", "user": "u"}, "other than whitespace"),
        ({"goal": "g", "user": "u", "budgets": {"cost_usd": False}}, "cost_usd"),
        ({"goal": "g", "user": "u", "facts": {"k": "v"}, "plan": DEEP_PLAN}, "nest deeper"),
        ({"goal": "g", "user": "u", "plan": {"steps": []}}, "steps"),
    ):
        response = admin.post("/api/v1/runs", json=body)
        assert response.status_code == 422 and field in response.text, (body, response.text)
        assert response.json()["error"] == "ValidationError"
        assert all("input" not in error for error in response.json()["detail"])
    key = admin.post("/api/v1/runs", json={"goal": "g", "user": "u", "facts": {"Bad Key": "x"}})
    assert [e["msg"] for e in key.json()["detail"]] == [WORDS[FACT_KEY_PATTERN]]  # no regex
    nul = admin.post("/api/v1/runs", json={"goal": "nul \u0000 inside", "user": "u"})
    assert [e["loc"] for e in nul.json()["detail"]] == [["body", "goal"]]  # was ["body"]
    assert run_count() == before


LONE = "x \ud800"  # an unpaired surrogate: JSON can carry it, UTF-8 (and Postgres) cannot
STEP = {"name": "a", "kind": "tool", "tool": "echo", "args": {"value": "v"}}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/v1/runs", {"goal": LONE, "user": "u"}, "body.goal"),
        ("/api/v1/runs", {"goal": "g", "user": LONE}, "body.user"),
        ("/api/v1/runs", {"goal": "g", "user": "u", "facts": {"k": LONE}}, "body.facts.k"),
        ("/api/v1/runs", {"goal": "g", "user": "u", "facts": {LONE: "v"}}, "body.facts key"),
        (
            "/api/v1/runs",
            {"goal": "g", "user": "u", "plan": {"steps": [{**STEP, "args": {"value": LONE}}]}},
            "body.plan.steps.0.args.value",
        ),
        ("/api/v1/reviews/999999/approve", {"comment": LONE}, "body.comment"),
        ("/api/v1/reviews/999999/reject", {"comment": LONE}, "body.comment"),
        ("/api/v1/reviews/999999/respond", {"answer": {"a": LONE}}, "body.answer.a"),
        (
            "/api/v1/reviews/999999/edit",
            {"plan": {"steps": [{**STEP, "instruction": LONE}]}},
            "body.plan.steps.0.instruction",
        ),
        ("/api/v1/memory/forget", {"user": LONE}, "body.user"),
    ],
)
def test_unencodable_text_is_a_422_naming_the_field(
    client: Client, path: str, body: dict[str, object], field: str
) -> None:
    raw = json.dumps(body)  # ASCII, with the surrogate as the escape `\ud800`
    response = client("admin").post(path, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "ValidationError"
    assert f"{field}: unpaired surrogates" in response.json()["detail"][0]["msg"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(api_url: str) -> None:
    declared = BODY_MAX_BYTES * 50  # only the headers and a little of it are sent
    head = (
        "POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    )
    status, body = raw_request(api_url, head.encode() + b'{"goal": "')
    assert status == 413, body
    assert json.loads(body) == {
        "detail": f"request body over {BODY_MAX_BYTES} bytes is not accepted",
        "error": "BodyTooLarge",
    }


def test_a_chunked_body_over_the_limit_is_refused_as_it_streams(
    api_url: str, tokens: dict[str, str]
) -> None:
    # the limit and one byte more, in chunks, and no last chunk: all of it is read, and no more
    sizes = [65536] * (BODY_MAX_BYTES // 65536) + [1]
    chunks = b"".join(b"%x\r\n%s\r\n" % (size, b"x" * size) for size in sizes)
    head = (
        "POST /api/v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {tokens['admin']}\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    status, body = raw_request(api_url, head.encode() + chunks)
    assert status == 413, body
    assert json.loads(body)["error"] == "BodyTooLarge"


def raw_request(api_url: str, request: bytes, timeout_s: float = 10) -> tuple[int, str]:
    """Send `request` as it is and read the answer until the server closes: (status, body)."""
    host, port = api_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            if not (data := sock.recv(65536)):
                break
            answer += data
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def test_cancel_ends_an_active_run_once(client: Client) -> None:
    sleepy = {"name": "s", "kind": "tool", "tool": "sleep", "args": {"seconds": 2}}
    body = {"goal": "slow", "plan": {"steps": [sleepy, noop("after")]}}
    run_id = client("alice").post("/api/v1/runs", json=body).json()["run"]["id"]
    cancelled = client("alice").post(f"/api/v1/runs/{run_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert {s["name"]: s["status"] for s in cancelled.json()["steps"]}["after"] == "cancelled"
    wait_for_event(run_id, ("memory.remembered", "memory.failed"))  # the worker's last write
    before = snapshot(run_id)
    again = client("admin").post(f"/api/v1/runs/{run_id}/cancel")
    assert again.status_code == 409 and "cancelled" in again.json()["detail"]
    assert again.json()["error"] == "IllegalTransition"
    assert snapshot(run_id)["run"] == before["run"]
