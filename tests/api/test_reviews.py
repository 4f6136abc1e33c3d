"""The review queue over HTTP: list, read, claim, release, and the four decisions; a decision on
a decided escalation is a 409 that changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from models.db import session_scope
from models.review import drafts, reviews
from tests.api.conftest import Client, noop, open_escalation, snapshot, wait_for_event
from tests.integration.conftest import run_steps, wait_for_run

pytestmark = pytest.mark.integration
Escalated = Callable[..., tuple[int, int]]
DECISIONS = {
    "approve": {"comment": "once more"},
    "reject": {"comment": "not worth it"},
    "respond": {"answer": {"ok": True}},
    "edit": {"plan": {"steps": [noop("instead")]}},
}


def test_listing_reading_and_claiming(client: Client, escalated: Escalated) -> None:
    run_id, esc_id = escalated()
    rita, ralf = client("reviewer"), client("reviewer2")
    queue = rita.get("/api/v1/reviews").json()
    mine = next(r for r in queue if r["escalation"]["id"] == esc_id)
    assert mine["run"]["id"] == run_id and mine["escalation"]["status"] == "open"
    assert mine["failed_step"]["name"] == "x" and mine["failed_step"]["status"] == "failed"
    assert mine["escalation"]["reason"] == "replan_budget_spent"
    ages = [r["escalation"]["created_at"] for r in queue]
    assert ages == sorted(ages)  # oldest first
    newest = rita.get("/api/v1/reviews", params={"order": "newest"}).json()
    assert [r["escalation"]["created_at"] for r in newest] == sorted(ages, reverse=True)
    assert rita.get(f"/api/v1/reviews/{esc_id}").json()["escalation"]["id"] == esc_id

    claimed = rita.post(f"/api/v1/reviews/{esc_id}/claim")
    assert claimed.status_code == 200 and claimed.json()["escalation"]["claimed_by"] == "rita"
    assert ralf.post(f"/api/v1/reviews/{esc_id}/claim").status_code == 409
    assert [
        r["escalation"]["id"] for r in rita.get("/api/v1/reviews", params={"mine": True}).json()
    ] == [esc_id]
    assert ralf.get("/api/v1/reviews", params={"mine": True}).json() == []
    claimed_list = ralf.get("/api/v1/reviews", params={"status": "claimed"}).json()
    assert esc_id in [r["escalation"]["id"] for r in claimed_list]
    taken = ralf.post(f"/api/v1/reviews/{esc_id}/approve", json={})
    assert taken.status_code == 409 and taken.json()["error"] == "ClaimedByAnother"
    not_his = ralf.post(f"/api/v1/reviews/{esc_id}/release")
    assert not_his.status_code == 409 and not_his.json()["error"] == "ClaimedByAnother"
    assert not_his.json()["detail"] == (
        f"escalation {esc_id} is claimed by rita; only rita or an admin token can release it"
    )
    released = rita.post(f"/api/v1/reviews/{esc_id}/release")
    assert released.status_code == 200 and released.json()["escalation"]["status"] == "open"
    assert (
        client("admin")
        .post(f"/api/v1/reviews/{esc_id}/reject", json={"comment": "cleaning up"})
        .status_code
        == 200
    )
    assert rita.get("/api/v1/reviews/999999").status_code == 404


def test_claim_next_takes_the_oldest_open_one_and_says_when_none_is_left(
    client: Client, escalated: Escalated
) -> None:
    rita = client("reviewer")
    escalated()
    escalated()
    claimed: list[int] = []
    while (response := rita.post("/api/v1/reviews/claim")).status_code == 200:
        claimed.append(response.json()["escalation"]["id"])
        assert response.json()["escalation"]["claimed_by"] == "rita"
    assert response.status_code == 204 and len(claimed) >= 2
    assert claimed == sorted(claimed)
    for esc_id in claimed:
        decided = rita.post(f"/api/v1/reviews/{esc_id}/reject", json={"comment": "done"})
        assert decided.status_code == 200, decided.text


def test_reviewers_claiming_at_once_never_get_the_same_escalation(
    client: Client, escalated: Escalated
) -> None:
    escalated()
    escalated()
    who = ["reviewer", "reviewer2"] * 3
    with ThreadPoolExecutor(len(who)) as pool:
        answers = list(pool.map(lambda w: client(w).post("/api/v1/reviews/claim"), who))
    claimed = [a.json()["escalation"]["id"] for a in answers if a.status_code == 200]
    assert sorted(a.status_code for a in answers) == [200, 200, 204, 204, 204, 204]
    assert len(set(claimed)) == 2
    for answer in answers:
        if answer.status_code == 200:
            esc = answer.json()["escalation"]
            holder = "reviewer" if esc["claimed_by"] == "rita" else "reviewer2"
            done = client(holder).post(
                f"/api/v1/reviews/{esc['id']}/reject", json={"comment": "done"}
            )
            assert done.status_code == 200, done.text


def test_approve_retries_the_failed_step(client: Client, escalated: Escalated) -> None:
    run_id, esc_id = escalated(tool="flaky")
    decided = client("reviewer").post(f"/api/v1/reviews/{esc_id}/approve")  # the body is optional
    assert decided.status_code == 200, decided.text
    body = decided.json()
    assert body["escalation"]["comment"] is None
    assert (
        body["escalation"]["decision"] == "approve" and body["escalation"]["decided_by"] == "rita"
    )
    assert body["notified"] is True
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"


def test_reject_fails_the_run_with_the_comment(client: Client, escalated: Escalated) -> None:
    _, esc_id = escalated()
    rita = client("reviewer")
    assert rita.post(f"/api/v1/reviews/{esc_id}/reject", json={}).status_code == 422
    blank = rita.post(f"/api/v1/reviews/{esc_id}/reject", json={"comment": "  "})
    assert blank.status_code == 422 and "comment" in blank.text  # the spec's pattern says so
    decided = rita.post(f"/api/v1/reviews/{esc_id}/reject", json={"comment": "wrong goal"})
    assert decided.status_code == 200 and decided.json()["run"]["status"] == "failed"
    assert "wrong goal" in decided.json()["run"]["error"]


def test_respond_answers_for_the_failed_step(client: Client, escalated: Escalated) -> None:
    run_id, esc_id = escalated()
    rita = client("reviewer")
    assert rita.post(f"/api/v1/reviews/{esc_id}/respond", json={"answer": None}).status_code == 400
    decided = rita.post(f"/api/v1/reviews/{esc_id}/respond", json={"answer": 0.95})
    assert decided.status_code == 200, decided.text
    assert decided.json()["escalation"]["answer"] == {"answer": 0.95}
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    human = [s for s in run_steps(run_id) if s.kind == "human"]
    assert [(s.name, s.result) for s in human] == [("x", {"answer": 0.95})]


def test_edit_replaces_the_steps_not_yet_run(client: Client, escalated: Escalated) -> None:
    run_id, esc_id = escalated()
    rita = client("reviewer")
    invalid = {"plan": {"steps": [{"name": "z", "kind": "tool", "tool": "nope"}]}}
    refused = rita.post(f"/api/v1/reviews/{esc_id}/edit", json=invalid)
    assert refused.status_code == 400 and "unknown tool 'nope'" in refused.text
    assert rita.get(f"/api/v1/reviews/{esc_id}").json()["escalation"]["status"] == "open"
    plan = {"plan": {"steps": [noop("first"), noop("second")]}, "comment": "simpler"}
    decided = rita.post(f"/api/v1/reviews/{esc_id}/edit", json=plan)
    assert decided.status_code == 200, decided.text
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    detail = client("admin").get(f"/api/v1/runs/{run_id}").json()
    assert detail["plan_versions"][-1]["created_by"] == "reviewer"
    current = [s["name"] for s in detail["steps"] if s["id"] in detail["current_step_ids"]]
    assert current == ["a", "x", "first", "second"]


def test_an_edit_sent_back_as_drafted_rebuilds_the_graph(client: Client) -> None:
    """a, then b (fails) and c side by side, d joins them, e follows d. The edit's draft (what
    `agentq review plan` prints and the console's edit box holds) names each remaining step's
    `after`; with b's tool fixed and nothing else changed, the new version waits as the old
    one did, with the new b in the failed one's place."""
    steps = [
        {**noop("a"), "after": []},
        {"name": "b", "kind": "tool", "tool": "always_fails", "args": {}, "after": ["a"]},
        {**noop("c"), "after": ["a"]},
        {**noop("d"), "after": ["b", "c"]},
        noop("e"),  # after left out: d, the step before it
    ]
    body = {"goal": "edit a graph", "user": "graph", "plan": {"steps": steps}}
    created = client("admin").post("/api/v1/runs", json={**body, "budgets": {"replans": 0}})
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]["id"]
    assert wait_for_run(run_id).status == "waiting_review"
    esc_id = open_escalation(run_id)
    with session_scope() as session:
        start = drafts.draft(session, reviews.get_escalation(session, esc_id))
    draft = json.loads(start.text)
    assert [(s["name"], s["after"]) for s in draft["steps"]] == [
        ("b", ["a"]),
        ("d", ["b", "c"]),
        ("e", ["d"]),
    ]
    draft["steps"][0]["tool"] = "noop"
    decided = client("reviewer").post(f"/api/v1/reviews/{esc_id}/edit", json={"plan": draft})
    assert decided.status_code == 200, decided.text
    assert wait_for_run(run_id).status == "succeeded"
    detail = client("admin").get(f"/api/v1/runs/{run_id}").json()
    old, new = detail["plan_versions"]
    rows = {s["id"]: s for s in detail["steps"]}
    assert graph_by_name(old, rows) == graph_by_name(new, rows, skip=old["step_ids"][1])
    new_b = next(i for i in new["step_ids"] if rows[i]["name"] == "b" and i not in old["step_ids"])
    d = next(i for i in new["step_ids"] if rows[i]["name"] == "d")
    assert new["after"][str(d)][0] == new_b  # the join waits for the fixed step, not the failed
    waves = [[rows[i]["name"] for i in wave] for wave in new["waves"]]
    assert waves == [["a"], ["b", "b", "c"], ["d"], ["e"]]  # the failed b stays, the new beside


def graph_by_name(
    version: dict[str, Any], rows: dict[int, dict[str, Any]], skip: int | None = None
) -> dict[str, list[str]]:
    """What each step of `version` waits for, by name (the step `skip` left out)."""
    return {
        rows[int(i)]["name"]: [rows[d]["name"] for d in deps]
        for i, deps in version["after"].items()
        if int(i) != skip
    }


@pytest.mark.parametrize("first", ["approve", "reject"])
def test_a_second_decision_is_refused_and_changes_nothing(
    client: Client, escalated: Escalated, first: str
) -> None:
    run_id, esc_id = escalated(tool="flaky")  # approved, the retry succeeds: the run ends
    rita, ada = client("reviewer"), client("admin")
    assert rita.post(f"/api/v1/reviews/{esc_id}/{first}", json=DECISIONS[first]).status_code == 200
    wait_for_run(run_id, ("succeeded", "failed"))
    wait_for_event(run_id, ("memory.remembered", "memory.failed"))  # the worker's last write
    before = snapshot(run_id)
    for who in (rita, ada):
        for decision, body in DECISIONS.items():
            again = who.post(f"/api/v1/reviews/{esc_id}/{decision}", json=body)
            assert again.status_code == 409, (decision, again.text)
            assert "decided" in again.json()["detail"]
        assert who.post(f"/api/v1/reviews/{esc_id}/claim").status_code == 409
    assert snapshot(run_id) == before


def _token_escalation(client: Client, user: str) -> tuple[int, int]:
    """A goal whose 500-token budget cannot pay for its planning call: it escalates
    `token_budget_spent` (the case of issue 27, item 11)."""
    body = {"goal": "plan with too few tokens", "user": user, "budgets": {"tokens": 500}}
    created = client("admin").post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    run_id = created.json()["run"]["id"]
    assert wait_for_run(run_id).status == "waiting_review"
    return run_id, open_escalation(run_id)


def test_a_budget_escalation_shows_the_spend_and_approve_says_the_limit_it_sets(
    client: Client,
) -> None:
    rita = client("reviewer")
    run_id, esc_id = _token_escalation(client, "budgets")
    shown = rita.get(f"/api/v1/reviews/{esc_id}").json()
    assert shown["escalation"]["reason"] == "token_budget_spent"
    budget = shown["budget"]
    used = budget["used"]
    assert (budget["name"], budget["limit"], budget["original_limit"]) == ("tokens", 500, 500)
    assert budget["default_limit"] == used + 500 and budget["ceiling"] == 1_000_000
    assert budget["ceiling_setting"] == "AGENTQ_MAX_TOKEN_BUDGET"
    over = {"budget": {"tokens": 2_000_000}}
    refused = rita.post(f"/api/v1/reviews/{esc_id}/approve", json=over)
    assert refused.status_code == 400, refused.text
    assert "budget.tokens: at most 1000000 (AGENTQ_MAX_TOKEN_BUDGET)" in refused.json()["detail"]
    approved = rita.post(f"/api/v1/reviews/{esc_id}/approve")
    assert approved.status_code == 200, approved.text
    decided = approved.json()
    assert decided["run"]["spend"]["tokens_limit"] == used + 500  # not 200,000 more
    assert decided["escalation"]["granted"]["tokens"]["chosen"] == "default"
    assert (
        f"tokens 500 -> {used + 500:g} (the default: {used:g} spent + the original limit 500)"
        in (decided["said"])
    )
    other_run, other_esc = _token_escalation(client, "budgets-2")
    chosen = rita.post(f"/api/v1/reviews/{other_esc}/approve", json={"budget": {"tokens": 50_000}})
    assert chosen.status_code == 200, chosen.text
    assert chosen.json()["run"]["spend"]["tokens_limit"] == 50_000
    assert "tokens 500 -> 50000 (chosen by the reviewer" in chosen.json()["said"]
    for run in (run_id, other_run):
        client("admin").post(f"/api/v1/runs/{run}/cancel")
