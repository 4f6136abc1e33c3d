"""The console's pages over plain HTTP: a run with no plan under review, decided escalations,
action addresses opened as pages, the runs list's filter and paging, progress, cancelling a run,
and untrusted text kept from reordering the page around it."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator

import httpx
import pytest
from sqlmodel import select

from models.engine import run_transitions, transitions
from models.engine.runs import submit_run
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Escalation, Run
from tests.support.console import (
    Console,
    csrf_of,
    escalate_run,
    wait_for_event,
    wait_for_status,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
SignIn = Callable[[str], httpx.Client]
MakeToken = Callable[..., tuple[int, str]]
Planless = Callable[[str], tuple[int, int]]
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: what follows it displays reversed
PLANLESS_GOAL = f"pay invoice {RLO}fdp.exe"
ESCALATION_TIMEOUT_S = 24 * 3600  # the default, whatever this test process's settings say


def _planless(console: Console, raw_output: str, user: str = "planless") -> tuple[int, int]:
    """A run whose planner's output never validated: `waiting_review` with no plan and an
    `invalid_plan` escalation, written in one transaction (no worker sees it before): (run id,
    escalation id)."""
    with console.db() as session:
        run = submit_run(session, settings=get_settings(), user_id=user, goal=PLANLESS_GOAL)
        run_id = run.id or 0
        run_transitions.start_planning(session, run_id)
        detail = {"error": "steps.0.tool: unknown tool 'rm_rf'", "raw_output": raw_output}
        esc = run_transitions.escalate(
            session,
            run_id,
            expected="planning",
            reason="invalid_plan",
            detail=detail,
            timeout_s=ESCALATION_TIMEOUT_S,
        )
        assert esc is not None
        return run_id, esc.id or 0


@pytest.fixture(scope="module")
def left_open(console: Console) -> Iterator[list[int]]:
    """Run ids this module leaves waiting for review: cancelled at its end, so the inbox the
    README's screenshot shows holds only the demo's escalation and what came before."""
    runs: list[int] = []
    yield runs
    with console.db() as session:
        for run_id in runs:
            run = transitions.lock_run(session, run_id)
            if run is not None and run.status not in RUN_TERMINAL:
                transitions.cancel_run(session, run_id)


@pytest.fixture
def planless(console: Console, left_open: list[int]) -> Planless:
    """`planless(raw_output)`: `_planless`, cancelled at the module's end if still waiting."""

    def make(raw_output: str) -> tuple[int, int]:
        run_id, esc_id = _planless(console, raw_output)
        left_open.append(run_id)
        return run_id, esc_id

    return make


def _textarea(page: str, field_id: str) -> str:
    found = re.search(rf'<textarea id="{field_id}"[^>]*>(.*?)</textarea>', page, re.S)
    assert found, page
    return html.unescape(found.group(1))


def _row(page: str, attribute: str, value: int) -> str:
    found = re.search(rf'<tr [^>]*{attribute}="{value}">(.*?)</tr>', page, re.S)
    assert found, page
    return found.group(1)


@pytest.fixture(scope="module")
def reviewer(sign_in: SignIn, make_token: MakeToken) -> httpx.Client:
    return sign_in(make_token("reviewer", "pages-reviewer")[1])


def test_a_planless_run_starts_from_the_planners_output_or_an_example_that_validates(
    console: Console, planless: Planless, reviewer: httpx.Client
) -> None:
    plan = {"steps": [{"name": "wipe", "kind": "tool", "tool": "rm_rf"}]}
    raw = f"Here it is:\n```json\n{json.dumps(plan)}\n```"
    _, esc_id = planless(raw)
    page = reviewer.get(f"/ui/reviews/{esc_id}").text
    assert json.loads(_textarea(page, "plan"))["steps"][0]["tool"] == "rm_rf"
    assert "The planner&#39;s last output, which did not validate" in page

    run_id, esc_id = planless("I could not think of a plan.")
    page = reviewer.get(f"/ui/reviews/{esc_id}").text
    assert "an example plan that validates" in page
    example = _textarea(page, "plan")
    assert json.loads(example)["steps"][0]["kind"] == "model"
    sent = reviewer.post(
        f"/ui/reviews/{esc_id}/edit", data={"plan": example, "csrf_token": csrf_of(page)}
    )
    assert sent.status_code == 303, sent.text  # the example is accepted as it is
    assert wait_for_status(console, run_id, ("succeeded",)).plan_version == 1


def test_a_decided_escalation_shows_how_long_it_waited_and_who_decided(
    planless: Planless, reviewer: httpx.Client
) -> None:
    _, esc_id = planless("")
    page = reviewer.get(f"/ui/reviews/{esc_id}").text
    assert "the planner left no output" in page
    rejected = reviewer.post(
        f"/ui/reviews/{esc_id}/reject", data={"comment": "no", "csrf_token": csrf_of(page)}
    )
    assert rejected.status_code == 303
    page = reviewer.get(f"/ui/reviews/{esc_id}").text
    assert "decided <strong>reject</strong> by <strong><bdi>pages-reviewer</bdi></strong>" in page
    assert re.search(r"after waiting \d+[smh]", page) and "· waiting" not in page
    inbox = reviewer.get("/ui/reviews?tab=decided").text
    assert "Decided by" in inbox and "Took" in inbox and "Claimed by" not in inbox
    assert "pages-reviewer" in _row(inbox, "data-escalation", esc_id)


def test_a_claimed_escalation_reads_deadline_then_claimant_with_a_space(
    planless: Planless, reviewer: httpx.Client
) -> None:
    _, esc_id = planless("")
    page = reviewer.get(f"/ui/reviews/{esc_id}").text
    claimed = reviewer.post(f"/ui/reviews/{esc_id}/claim", data={"csrf_token": csrf_of(page)})
    assert claimed.status_code == 303
    meta = reviewer.get(f"/ui/reviews/{esc_id}").text.split('class="meta"')[1].split("</p>")[0]
    assert re.search(r"in 23h</span>\s+· claimed by", meta), meta


def test_a_decision_address_opened_as_a_page_leads_to_the_escalation(
    planless: Planless, reviewer: httpx.Client
) -> None:
    _, esc_id = planless("")
    for action in ("approve", "reject", "respond", "edit", "claim", "release"):
        opened = reviewer.get(f"/ui/reviews/{esc_id}/{action}")
        assert opened.status_code == 303 and opened.headers["location"] == f"/ui/reviews/{esc_id}"
    assert reviewer.get(f"/ui/reviews/{esc_id}/delete").status_code == 404


def test_an_unknown_status_filter_names_the_known_ones(reviewer: httpx.Client) -> None:
    refused = reviewer.get("/ui/runs?status=bogus")
    assert refused.status_code == 400
    assert "&#39;bogus&#39; is not a run status" in refused.text
    assert "waiting_review" in refused.text and "cancelled" in refused.text


def test_the_runs_list_pages_back_to_older_runs(
    console: Console, sign_in: SignIn, make_token: MakeToken
) -> None:
    with console.db() as session:
        ids = []
        for n in range(51):  # one more than a page; cancelled at once, so nothing runs them
            run = submit_run(session, settings=get_settings(), user_id="pager", goal=f"run {n}")
            ids.append(transitions.cancel_run(session, run.id or 0).id or 0)
    pam = sign_in(make_token("submitter", "pam", user="pager")[1])
    first = pam.get("/ui/runs?status=cancelled").text
    shown = [int(i) for i in re.findall(r'data-run="(\d+)"', first)]
    assert shown == sorted(ids, reverse=True)[:50]
    older = re.search(r'<a href="([^"]+)" class="older"', first)
    assert older and html.unescape(older.group(1)) == f"/ui/runs?status=cancelled&before={ids[1]}"
    second = pam.get(html.unescape(older.group(1))).text
    assert re.findall(r'data-run="(\d+)"', second) == [str(ids[0])]
    assert 'class="older"' not in second and "Newest runs" in second


def test_progress_counts_succeeded_steps_and_failed_ones_apart(
    console: Console, sign_in: SignIn, make_token: MakeToken, left_open: list[int]
) -> None:
    run_id, _ = escalate_run(console, user="progress")  # step a succeeds, step x fails
    left_open.append(run_id)
    pat = sign_in(make_token("submitter", "pat", user="progress")[1])
    row = _row(pat.get("/ui/runs").text, "data-run", run_id)
    assert ">1/2</span>" in row and "1 failed" in row


def _cancel(http: httpx.Client, run_id: int, page: str = "/ui/runs") -> httpx.Response:
    """POST the run's cancel form with the CSRF token of `page` (a page of this session)."""
    csrf = csrf_of(http.get(page).text)
    return http.post(f"/ui/runs/{run_id}/cancel", data={"csrf_token": csrf})


def test_a_submitter_cancels_an_active_run_of_its_own(
    console: Console, sign_in: SignIn, make_token: MakeToken, reviewer: httpx.Client
) -> None:
    run_id, esc_id = escalate_run(console, user="canceller")
    cid = sign_in(make_token("submitter", "cid", user="canceller")[1])
    oona = sign_in(make_token("submitter", "oona", user="someone-else")[1])
    assert 'id="cancel-form"' in cid.get(f"/ui/runs/{run_id}").text
    assert 'id="cancel-form"' not in reviewer.get(f"/ui/runs/{run_id}").text
    assert _cancel(oona, run_id).status_code == 404  # another user's run is not found
    assert _cancel(reviewer, run_id).status_code == 403  # reviewers decide, they do not cancel
    assert wait_for_status(console, run_id, ("waiting_review",))  # nothing changed

    done = _cancel(cid, run_id)
    assert done.status_code == 303 and done.headers["location"] == f"/ui/runs/{run_id}"
    after = cid.get(f"/ui/runs/{run_id}").text
    assert f"Run {run_id} cancelled." in after and 'id="cancel-form"' not in after
    with console.db() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.status == "cancelled"
        esc = session.exec(select(Escalation).where(Escalation.id == esc_id)).one()
        assert esc.decision == "withdrawn"
    wait_for_event(console, run_id, "memory.remembered")  # follow_up sent the episode's task

    again = _cancel(cid, run_id)
    assert again.status_code == 303
    shown = cid.get(again.headers["location"]).text
    assert "has already ended (cancelled); nothing was changed" in shown
    assert cid.get(f"/ui/runs/{run_id}/cancel").headers["location"] == f"/ui/runs/{run_id}"


def test_untrusted_text_is_isolated_and_no_favicon_is_fetched(
    planless: Planless, reviewer: httpx.Client
) -> None:
    run_id, _ = planless("")
    page = reviewer.get(f"/ui/runs/{run_id}").text
    shown = PLANLESS_GOAL.replace(RLO, "⟨U+202E⟩")  # isolated, and the override made visible
    assert f'<h1 class="goal-title"><bdi>{shown}</bdi></h1>' in page and RLO not in page
    listed = reviewer.get("/ui/runs").text
    assert f"<bdi>{shown}</bdi>" in _row(listed, "data-run", run_id)
    assert '<link rel="icon" href="data:image/svg+xml,' in page
