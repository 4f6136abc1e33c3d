"""The stack's limits are the stack's (issue 27, item 12): `agentq up` started with
`AGENTQ_USER_MAX_ACTIVE_RUNS=1` refuses a second active run of a user submitted by `agentq
submit` from a shell whose environment says 100, and the CLI says, in one line, that its
environment disagrees. Before, the CLI enforced its own environment's value and accepted it."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_api_up import start_up
from tests.acceptance.test_cli import agentq
from tests.integration.conftest import engine_dir
from tests.support.net import free_port

pytestmark = pytest.mark.acceptance
FAILS = {"steps": [{"name": "x", "kind": "tool", "tool": "always_fails", "args": {}}]}


@pytest.fixture
def home() -> Iterator[Path]:
    yield from engine_dir()


def test_a_cli_with_a_looser_environment_is_held_to_the_stacks_quota(home: Path) -> None:
    proc, out = start_up(home, free_port(), {"AGENTQ_USER_MAX_ACTIVE_RUNS": "1"})
    try:
        assert "agentq is up" in out, out
        plan = home / "fails.json"
        plan.write_text(json.dumps(FAILS))
        looser = {"AGENTQ_USER_MAX_ACTIVE_RUNS": "100"}
        submit = ("submit", "stays active", "--user", "u1", "--plan", str(plan), "--replans", "0")
        first = agentq(home, *submit, env=looser)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "run 1 submitted" in first.stdout
        said = first.stderr.strip().splitlines()
        assert len(said) == 1, first.stderr  # one line, whatever the terminal's width
        assert "AGENTQ_USER_MAX_ACTIVE_RUNS=100 (the stack's: 1, set by agentq up" in said[0]
        second = agentq(home, *submit, env=looser)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "AGENTQ_USER_MAX_ACTIVE_RUNS: user 'u1' has 1 runs not yet ended" in second.stderr
        agreeing = agentq(home, *submit, env={"AGENTQ_USER_MAX_ACTIVE_RUNS": "1"})
        # no line about the limits: the refusal alone
        assert agreeing.returncode == 2, agreeing.stderr
        assert agreeing.stderr.startswith("error: ") and len(agreeing.stderr.splitlines()) == 1
        assert "AGENTQ_USER_MAX_ACTIVE_RUNS: user 'u1'" in agreeing.stderr, agreeing.stderr
        other = agentq(home, "run", "submit", "another user", "--user", "u2", env=looser)
        assert other.returncode == 0, other.stdout + other.stderr
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
