"""A live console page carries the version of what it shows (`api.ui.run_details.last_event_id`),
never a newer one, so that a change committed while it is being built makes it reload.

The review console's browser test saw a run page stay `running` for good: the page read the run
row while the run was still running, the run ended within the same request, and the version read
at the end of the request was already that of the run's last event, so the page's poll
(`static/console.js`) never saw anything newer. Here the change is committed at a fixed point
inside the request (a hook around one of the page's reads), so the test does not depend on
timing. In process (FastAPI's TestClient on the real database): the hook must run inside the
request.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.ui import review_details, run_details
from models.access import api_tokens
from models.db import session_scope
from models.engine import transitions
from models.tables import Run
from ops.stack import LocalStack
from tests.integration.conftest import wait_for_run
from tests.support.console import csrf_of

pytestmark = pytest.mark.integration
POLL_VERSION = re.compile(r'data-poll-version="(\d+)"')
SignIn = Callable[..., TestClient]


@pytest.fixture
def sign_in(engine: LocalStack) -> Iterator[SignIn]:
    """`sign_in(role, user=None)`: a console client signed in with a new token of `role`."""
    opened: list[TestClient] = []

    def make(role: str, user: str | None = None) -> TestClient:
        with session_scope() as session:
            name = f"versions-{uuid.uuid4().hex[:8]}"
            _, raw = api_tokens.create_token(session, name=name, role=role, user_id=user)
        client = TestClient(create_app())
        opened.append(client)
        form = client.get("/ui/login")
        signed = client.post(
            "/ui/login",
            data={"token": raw, "csrf_token": csrf_of(form.text)},
            follow_redirects=False,
        )
        assert signed.status_code == 303, signed.text
        return client

    yield make
    for client in opened:
        client.close()


def _escalated(make_run: Callable[..., int], user: str) -> int:
    """A run of `user` waiting for a reviewer (its one step always fails, no replans)."""
    run_id = make_run([{"name": "x", "kind": "tool", "tool": "always_fails"}], user=user, replans=0)
    assert wait_for_run(run_id).status == "waiting_review"
    return run_id


def _cancelled_during(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, run_id: int) -> None:
    """Make `module.name`, one of a page's reads, first commit the run's cancellation (its own
    transaction): the run ends while its page is being built, after the page read its row."""
    original = getattr(module, name)

    def moved_meanwhile(*args: Any, **kwargs: Any) -> Any:
        with session_scope() as session:
            transitions.lock_run(session, run_id)
            transitions.cancel_run(session, run_id)  # run.cancelled, escalation.decided
        monkeypatch.setattr(module, name, original)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, moved_meanwhile)


def _page_version(html: str) -> int:
    found = POLL_VERSION.search(html)
    assert found, "the page does not poll"
    return int(found.group(1))


# Each page, where its rows have been read and before it is done, and what shows the run there
# as it was before its end.
PAGES = {
    "run": (run_details, "plan_columns", 'data-status="waiting_review"'),
    "runs": (run_details, "progress_of", 'data-run="{run}"'),
    "reviews": (review_details, "tab_counts", "run {run}"),
}


@pytest.mark.parametrize("page", PAGES)
def test_a_change_while_a_page_is_built_makes_it_reload(
    page: str,
    make_run: Callable[..., int],
    sign_in: SignIn,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    module, read, before_end = PAGES[page]
    user = f"versions-{uuid.uuid4().hex[:8]}"
    run_id = _escalated(make_run, user)
    client = sign_in("reviewer") if page == "reviews" else sign_in("submitter", user)
    path = {"run": f"/ui/runs/{run_id}", "runs": "/ui/runs", "reviews": "/ui/reviews"}[page]
    _cancelled_during(monkeypatch, module, read, run_id)

    shown = client.get(path)

    assert shown.status_code == 200, shown.text
    assert before_end.format(run=run_id) in shown.text  # the run as it was before it ended
    with session_scope() as session:
        assert session.get_one(Run, run_id).status == "cancelled"  # the hook ran
    polled = client.get(f"{path}/version.json")
    assert polled.status_code == 200, polled.text
    # Its version must be older than the end, so that its next poll reloads it.
    assert polled.json()["version"] > _page_version(shown.text)
