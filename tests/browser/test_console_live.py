"""Live progress in the console, in headless Chromium: a run page and the review inbox follow
the console's event streams (`api.ui.live`) and show a new event within ~2 s of its row being
written, in place (a marker set on `window` survives: no navigation, no reload); the runs list,
which has no stream, and a run page whose stream is refused swap in place on the version poll.
Over HTTP: the streams want the session cookie, not an API token, and keep the API's
visibility rules."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from models.engine import run_transitions, transitions
from models.engine.events import record_event
from models.engine.runs import submit_run
from models.settings import get_settings
from models.states import RUN_TERMINAL
from tests.support.console import Console

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
SHOWN_WITHIN_MS = 2_000  # the "within ~2 s of it being written"
POLL_WITHIN_MS = 5_000  # the fallback's poll: every 2 s, then the page is fetched
MARKER = "window.__agentqLiveMarker"
MakeToken = Callable[..., tuple[int, str]]
SignIn = Callable[[str], httpx.Client]


@pytest.fixture(scope="module", autouse=True)
def left_open(console: Console) -> Iterator[list[int]]:
    """The runs this module leaves waiting for review: cancelled at its end, so the inbox the
    README's screenshots show (tests/browser/test_review_console.py) does not list them."""
    runs: list[int] = []
    yield runs
    with console.db() as session:
        for run_id in runs:
            run = transitions.lock_run(session, run_id)
            if run is not None and run.status not in RUN_TERMINAL:
                transitions.cancel_run(session, run_id)


def _signed_in(page: Page, console: Console, token: str, path: str) -> list[str]:
    """Sign `page` in with `token` at `path`, mark its window; the main frame's navigations
    from then on (the list the caller checks stays empty when nothing reloads)."""
    page.goto(f"{console.ui_url}/login?next=/ui{path}")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{console.ui_url}{path}")
    page.wait_for_load_state("load")
    page.evaluate(f"{MARKER} = 'still here'")
    navigations: list[str] = []
    page.on("framenavigated", lambda f: navigations.append(f.url) if f == page.main_frame else None)
    return navigations


def _escalated(console: Console, user: str, left_open: list[int]) -> tuple[int, int]:
    """A run waiting for review (an `invalid_plan` escalation), written in one transaction,
    cancelled at the module's end: (run id, escalation id)."""
    with console.db() as session:
        run = submit_run(session, settings=get_settings(), user_id=user, goal=f"live {user}")
        run_id = run.id or 0
        run_transitions.start_planning(session, run_id)
        esc = run_transitions.escalate(
            session,
            run_id,
            expected="planning",
            reason="invalid_plan",
            detail={"error": "steps: none", "raw_output": "{}"},
            timeout_s=3600,
        )
        assert esc is not None
    left_open.append(run_id)
    return run_id, esc.id or 0


def _shown_in_place(page: Page, navigations: list[str], locator_text: str, css: str) -> float:
    """Wait until `css` contains `locator_text`; the seconds it took. Fails after
    `SHOWN_WITHIN_MS`, or if the page navigated or lost its window marker."""
    started = time.monotonic()
    expect(page.locator(css)).to_contain_text(locator_text, timeout=SHOWN_WITHIN_MS)
    took = time.monotonic() - started
    assert page.evaluate(MARKER) == "still here", "the page was reloaded"
    assert navigations == []
    return took


def test_a_run_page_shows_a_new_event_in_place_within_2_s(
    console: Console, make_token: MakeToken, page: Page, left_open: list[int]
) -> None:
    run_id, _ = _escalated(console, "live-run", left_open)
    _, token = make_token("reviewer", "live-rita")
    navigations = _signed_in(page, console, token, f"/runs/{run_id}")
    expect(page.locator("body")).to_have_attribute("data-live", "stream")
    page.wait_for_timeout(500)  # the stream starts at the page's version: nothing to refresh
    assert page.locator("body").get_attribute("data-refreshed") is None
    note = f"note-{uuid.uuid4().hex[:8]}"
    with console.db() as session:
        record_event(session, run_id, "note.operator", text=note)
    took = _shown_in_place(page, navigations, note, "table.timeline")
    print(f"run page: event shown {took:.2f} s after its commit")
    expect(page.locator("body")).to_have_attribute("data-refreshed", "1")


def test_a_run_page_whose_stream_is_refused_falls_back_to_polling_in_place(
    console: Console, make_token: MakeToken, page: Page, left_open: list[int]
) -> None:
    run_id, _ = _escalated(console, "live-fallback", left_open)
    _, token = make_token("reviewer", "live-fay")
    page.route("**/events/stream*", lambda route: route.fulfill(status=503, body="down"))
    navigations = _signed_in(page, console, token, f"/runs/{run_id}")
    expect(page.locator("body")).to_have_attribute("data-live", "poll")
    note = f"note-{uuid.uuid4().hex[:8]}"
    with console.db() as session:
        record_event(session, run_id, "note.operator", text=note)
    expect(page.locator("table.timeline")).to_contain_text(note, timeout=POLL_WITHIN_MS)
    assert page.evaluate(MARKER) == "still here", "the page was reloaded"
    assert navigations == []


def test_the_review_inbox_shows_a_new_escalation_in_place_within_2_s(
    console: Console, make_token: MakeToken, page: Page, left_open: list[int]
) -> None:
    _, token = make_token("reviewer", "live-ria")
    navigations = _signed_in(page, console, token, "/reviews")
    expect(page.locator("body")).to_have_attribute("data-live", "stream")
    run_id, esc_id = _escalated(console, "live-inbox", left_open)
    took = _shown_in_place(page, navigations, f"run {run_id}", "table")
    print(f"inbox: escalation shown {took:.2f} s after its commit")
    expect(page.locator(f"tr.inbox-row[data-escalation='{esc_id}']")).to_have_count(1)


def test_the_runs_list_swaps_in_place_on_its_poll(
    console: Console, make_token: MakeToken, page: Page, left_open: list[int]
) -> None:
    _, token = make_token("admin", "live-ada")
    navigations = _signed_in(page, console, token, "/runs")
    run_id, _ = _escalated(console, "live-list", left_open)
    expect(page.locator("body")).to_have_attribute("data-live", "poll")
    started = time.monotonic()
    expect(page.locator("main")).to_contain_text("live live-list", timeout=POLL_WITHIN_MS)
    assert time.monotonic() - started < 5, run_id
    assert page.evaluate(MARKER) == "still here"
    assert navigations == []


def test_the_console_streams_want_the_session_not_a_token(
    console: Console, make_token: MakeToken, sign_in: SignIn, left_open: list[int]
) -> None:
    run_id, _ = _escalated(console, "live-auth", left_open)
    _, reviewer_token = make_token("reviewer", "live-rex")
    _, other_token = make_token("submitter", "live-sue", user="someone-else")
    anonymous = httpx.Client(base_url=console.ui_url.removesuffix("/ui"), trust_env=False)
    refused = anonymous.get(f"/ui/runs/{run_id}/events/stream", follow_redirects=False)
    assert refused.status_code == 303 and "/ui/login" in refused.headers["location"]
    rex, sue = sign_in(reviewer_token), sign_in(other_token)
    assert sue.get(f"/ui/runs/{run_id}/events/stream").status_code == 404
    assert sue.get("/ui/reviews/stream").status_code == 403
    # The cookie alone opens no API stream: the console's own route is what the page uses.
    assert rex.get(f"/api/v1/runs/{run_id}/events/stream").status_code == 401
    with rex.stream("GET", f"/ui/runs/{run_id}/events/stream", timeout=10) as streamed:
        assert streamed.headers["content-type"].startswith("text/event-stream")
        first = next(streamed.iter_lines())
    assert first == "event: status"
    anonymous.close()
