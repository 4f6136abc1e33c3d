"""The console's forms over plain HTTP: CSRF, sign-in, roles, validation, conflicts, escaping."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlmodel import col, select

from models.tables import Escalation, PlanVersion, Run, Step
from tests.support.console import (
    Console,
    csrf_of,
    escalate_run,
    submitted_id,
    wait_for_event,
    wait_for_status,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
SignIn = Callable[[str], httpx.Client]
MakeToken = Callable[..., tuple[int, str]]


def _rows(console: Console, run_id: int) -> dict[str, Any]:
    """What a decision could change: the run, its escalations, plan versions and steps."""
    with console.db() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return {
            "run": run.model_dump(),
            "escalations": [
                e.model_dump()
                for e in session.exec(select(Escalation).where(Escalation.run_id == run_id))
            ],
            "versions": len(
                session.exec(select(PlanVersion).where(PlanVersion.run_id == run_id)).all()
            ),
            "steps": [
                (s.id, s.status)
                for s in session.exec(
                    select(Step).where(Step.run_id == run_id).order_by(col(Step.id))
                )
            ],
        }


@pytest.fixture(scope="module")
def escalated(console: Console) -> tuple[int, int]:
    return escalate_run(console)


@pytest.fixture(scope="module")
def reviewer(sign_in: SignIn, make_token: MakeToken) -> httpx.Client:
    return sign_in(make_token("reviewer", "forms-reviewer")[1])


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    console: Console, reviewer: httpx.Client, escalated: tuple[int, int]
) -> None:
    run_id, esc_id = escalated
    before = _rows(console, run_id)
    page = reviewer.get(f"/ui/reviews/{esc_id}")
    assert page.status_code == 200 and "Why it escalated" in page.text
    for data in ({}, {"csrf_token": "forged"}, {"csrf_token": ""}):
        refused = reviewer.post(f"/ui/reviews/{esc_id}/approve", data={**data, "comment": "x"})
        assert refused.status_code == 403, refused.text
        assert "nothing was changed" in refused.text
    for action in ("reject", "edit", "respond", "claim"):
        refused = reviewer.post(f"/ui/reviews/{esc_id}/{action}", data={"comment": "no"})
        assert refused.status_code == 403
    assert reviewer.post("/ui/logout").status_code == 403
    assert _rows(console, run_id) == before
    # a token from another session is no good either
    other = httpx.Client(base_url=str(reviewer.base_url), trust_env=False)
    stolen = csrf_of(reviewer.get(f"/ui/reviews/{esc_id}").text)
    assert other.post("/ui/login", data={"token": "x", "csrf_token": stolen}).status_code == 403
    other.close()


def test_the_session_cookie_is_signed_httponly_and_lax(
    console: Console, make_token: MakeToken
) -> None:
    http = httpx.Client(base_url=console.ui_url.removesuffix("/ui"), trust_env=False)
    form = http.get("/ui/login")
    cookie = form.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie and "path=/ui" in cookie
    raw = make_token("reviewer", "cookie-check")[1]
    wrong = http.post("/ui/login", data={"token": raw + "x", "csrf_token": csrf_of(form.text)})
    assert wrong.status_code == 401 and "not valid" in wrong.text
    signed = http.post("/ui/login", data={"token": raw, "csrf_token": csrf_of(form.text)})
    assert signed.status_code == 303 and raw not in signed.headers["set-cookie"]
    assert http.get("/ui/reviews").status_code == 200
    http.close()
    forged = httpx.Client(
        base_url=console.ui_url.removesuffix("/ui"),
        cookies={"agentq_ui": '{"token_id": 1}'},
        trust_env=False,
    )
    assert forged.get("/ui/reviews").status_code == 303  # an unsigned cookie is no session
    forged.close()


def test_a_bad_edit_reshows_the_form_naming_the_field_and_stores_nothing(
    console: Console, reviewer: httpx.Client, escalated: tuple[int, int]
) -> None:
    run_id, esc_id = escalated
    before = _rows(console, run_id)
    csrf = csrf_of(reviewer.get(f"/ui/reviews/{esc_id}").text)
    bad = {"steps": [{"name": "x2", "kind": "tool", "tool": "no_such_tool"}]}
    typed = json.dumps(bad)
    shown = reviewer.post(f"/ui/reviews/{esc_id}/edit", data={"plan": typed, "csrf_token": csrf})
    assert shown.status_code == 400
    assert "steps.0.tool: unknown tool &#39;no_such_tool&#39;" in shown.text, shown.text
    assert "no_such_tool" in shown.text.split('id="plan"')[1]  # the typed plan is kept
    garbled = reviewer.post(f"/ui/reviews/{esc_id}/edit", data={"plan": "{", "csrf_token": csrf})
    assert garbled.status_code == 400 and "invalid plan" in garbled.text
    empty = reviewer.post(f"/ui/reviews/{esc_id}/reject", data={"comment": " ", "csrf_token": csrf})
    assert empty.status_code == 400 and "comment" in empty.text
    assert _rows(console, run_id) == before


def test_a_decided_escalation_says_so_and_changes_nothing(
    console: Console, sign_in: SignIn, make_token: MakeToken
) -> None:
    run_id, esc_id = escalate_run(console, user="conflict")
    rita = sign_in(make_token("reviewer", "rita-conflict")[1])
    csrf = csrf_of(rita.get(f"/ui/reviews/{esc_id}").text)
    rejected = rita.post(
        f"/ui/reviews/{esc_id}/reject", data={"comment": "not this one", "csrf_token": csrf}
    )
    assert rejected.status_code == 303 and rejected.headers["location"] == f"/ui/runs/{run_id}"
    assert "rejected" in rita.get(f"/ui/runs/{run_id}").text
    wait_for_event(console, run_id, "memory.remembered")  # the rejected run's episode is written
    after = _rows(console, run_id)
    again = rita.post(f"/ui/reviews/{esc_id}/approve", data={"csrf_token": csrf})
    assert again.status_code == 409
    assert "Nothing was changed" in again.text and "decided" in again.text
    assert "reject</strong> by <bdi>rita-conflict</bdi>" in again.text
    assert _rows(console, run_id) == after
    assert (
        wait_for_status(console, run_id, ("failed",)).error
        == "rejected by rita-conflict: not this one"
    )


def test_submitters_see_their_own_runs_and_no_inbox(
    console: Console, sign_in: SignIn, make_token: MakeToken, escalated: tuple[int, int]
) -> None:
    others_run, esc_id = escalated
    mine = submitted_id(
        console.agentq("run", "submit", "<b>mine</b> & yours", "--user", "sam").stdout
    )
    sam = sign_in(make_token("submitter", "sam", user="sam")[1])
    listed = sam.get("/ui/runs")
    assert listed.status_code == 200
    assert "&lt;b&gt;mine&lt;/b&gt; &amp; yours" in listed.text and "<b>mine" not in listed.text
    assert "forms test" not in listed.text
    assert sam.get(f"/ui/runs/{mine}").status_code == 200
    assert sam.get(f"/ui/runs/{others_run}").status_code == 404
    assert sam.get(f"/ui/runs/{others_run}/version.json").status_code == 404
    assert sam.get("/ui/reviews").status_code == 403
    assert sam.get(f"/ui/reviews/{esc_id}").status_code == 403


def test_revoking_the_token_ends_its_sessions(
    console: Console, sign_in: SignIn, make_token: MakeToken
) -> None:
    token_id, raw = make_token("reviewer", "soon-revoked")
    http = sign_in(raw)
    assert http.get("/ui/reviews").status_code == 200
    console.agentq("token", "revoke", str(token_id))
    gone = http.get("/ui/reviews")
    assert gone.status_code == 303 and gone.headers["location"].startswith("/ui/login")


def test_a_spent_budget_is_shown_and_approve_sets_the_limit_typed(
    console: Console, reviewer: httpx.Client
) -> None:
    out = console.agentq("run", "submit", "plan this", "--user", "forms-budget", "--tokens", "500")
    run_id = submitted_id(out.stdout)
    wait_for_status(console, run_id, ("waiting_review",))
    with console.db() as session:
        esc = session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()
    page = reviewer.get(f"/ui/reviews/{esc.id}").text
    assert 'id="budget-standing"' in page and "AGENTQ_MAX_TOKEN_BUDGET" in page, page
    assert "of its tokens limit 500" in page and 'name="budget_limit"' in page
    form = {"budget_name": "tokens", "budget_limit": "lots", "csrf_token": csrf_of(page)}
    refused = reviewer.post(f"/ui/reviews/{esc.id}/approve", data=form)
    assert refused.status_code == 400 and "budget.tokens: a number" in refused.text
    decided = reviewer.post(f"/ui/reviews/{esc.id}/approve", data={**form, "budget_limit": "40000"})
    assert decided.status_code == 303, decided.text
    landed = reviewer.get(decided.headers["location"]).text
    assert "tokens 500 -&gt; 40000 (chosen by the reviewer" in landed, landed
    with console.db() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.tokens_limit == 40000
