"""A spent token budget through the CLI (issue 27, item 11): `agentq run submit --tokens 500` of a
goal escalates `token_budget_spent`; `review list` and `review show` give the spend, the limit,
the default new limit and the ceiling; `review approve --tokens N` sets N and says so, and a
limit over the ceiling is refused naming it. Before, approve said only "run resumes" and the run
went on with 200,000 more tokens."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_api_up import start_up
from tests.acceptance.test_cli import agentq
from tests.integration.conftest import engine_dir
from tests.support.net import free_port

pytestmark = pytest.mark.acceptance


@pytest.fixture
def home() -> Iterator[Path]:
    yield from engine_dir()


def test_review_shows_the_spent_budget_and_approve_sets_the_chosen_limit(home: Path) -> None:
    proc, out = start_up(home, free_port())
    try:
        assert "agentq is up" in out, out
        submitted = agentq(home, "run", "submit", "plan this", "--tokens", "500", "--watch")
        assert "waiting for review" in submitted.stdout, submitted.stdout + submitted.stderr
        listed = agentq(home, "review", "list")
        assert re.search(r"token_budget_spent \(tokens \d+/500\)", listed.stdout), listed.stdout
        shown = agentq(home, "review", "show", "1")
        assert re.search(
            r"tokens: \d+ spent of 500 \(original 500\); approve sets \d+ \(spent \+ original",
            shown.stdout,
        ), shown.stdout
        assert "AGENTQ_MAX_TOKEN_BUDGET" in shown.stdout
        over = agentq(home, "review", "approve", "1", "--tokens", "2000000")
        assert over.returncode == 2, over.stdout + over.stderr
        assert "budget.tokens: at most 1000000 (AGENTQ_MAX_TOKEN_BUDGET)" in over.stderr
        approved = agentq(home, "review", "approve", "1", "--tokens", "50000")
        assert approved.returncode == 0, approved.stdout + approved.stderr
        assert "tokens 500 -> 50000 (chosen by the reviewer" in approved.stdout
        status = agentq(home, "run", "show", "1", "--json")
        assert '"tokens_limit": 50000' in status.stdout, status.stdout
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
