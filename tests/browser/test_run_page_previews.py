"""The console's run page shortens large results to a preview with a link to the whole result,
shown on its own page as the API's result endpoint returns it, and pages back through the
timeline (issue 9, finding 2)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable

import httpx
import pytest
from sqlmodel import col, select

from models.tables import RunEvent, Step
from tests.support.console import Console, submitted_id, wait_for_status

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
SignIn = Callable[[str], httpx.Client]
MakeToken = Callable[..., tuple[int, str]]
BIG = "q" * 10_000  # a result of 10 KB, over the 2 KiB preview size


def test_a_large_result_is_a_preview_linking_to_its_whole_page(
    console: Console, sign_in: SignIn, make_token: MakeToken
) -> None:
    user = f"previewed-{uuid.uuid4().hex[:6]}"
    steps = [
        {"name": "small", "kind": "tool", "tool": "echo", "args": {"value": "tiny"}},
        {"name": "big", "kind": "tool", "tool": "echo", "args": {"value": BIG}},
    ]
    plan = console.home / f"plan-{user}.json"
    plan.write_text(json.dumps({"steps": steps}))
    run_id = submitted_id(
        console.agentq("run", "submit", "previews", "--user", user, "--plan", str(plan)).stdout
    )
    wait_for_status(console, run_id, ("succeeded",))
    with console.db() as session:
        stmt = select(Step).where(Step.run_id == run_id).order_by(col(Step.id))
        small_id, big_id = (s.id for s in session.exec(stmt))
    owner = sign_in(make_token("submitter", user, user)[1])
    page = owner.get(f"/ui/runs/{run_id}")
    assert page.status_code == 200
    assert BIG not in page.text  # neither the result nor anything else holds it whole
    link = f"/ui/runs/{run_id}/steps/{big_id}/result"
    assert re.search(rf'href="{link}">whole result \(10,\d\d\d bytes\)</a>', page.text)
    assert f"/steps/{small_id}/result" not in page.text  # a small one is shown whole
    whole = owner.get(link)
    assert whole.status_code == 200 and BIG in whole.text and "Result of step" in whole.text
    other = sign_in(make_token("submitter", f"other-{user}", f"other-{user}")[1])
    assert other.get(link).status_code == 404  # as for the run itself
    missing = owner.get(f"/ui/runs/{run_id}/steps/{big_id + 1000}/result")
    assert missing.status_code == 404 and "has no step" in missing.text


def test_the_timeline_pages_back_through_older_events(
    console: Console, sign_in: SignIn, make_token: MakeToken
) -> None:
    user = f"paged-{uuid.uuid4().hex[:6]}"
    plan = console.home / f"plan-{user}.json"
    plan.write_text(json.dumps({"steps": [{"name": "a", "kind": "tool", "tool": "noop"}]}))
    run_id = submitted_id(
        console.agentq("run", "submit", "paging", "--user", user, "--plan", str(plan)).stdout
    )
    wait_for_status(console, run_id, ("succeeded",))
    with console.db() as session:
        stmt = select(RunEvent.id).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
        ids = list(session.exec(stmt))
    owner = sign_in(make_token("submitter", user, user)[1])
    newest = owner.get(f"/ui/runs/{run_id}").text
    assert "Older events" not in newest  # the newest page holds them all
    older = owner.get(f"/ui/runs/{run_id}", params={"events_before": ids[2]}).text
    assert "2 older events, oldest first" in older and "Newest events" in older
