"""The `agentq` CLI as a user runs it: a subprocess, on the embedded default."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import engine_dir

pytestmark = pytest.mark.acceptance
AGENTQ = shutil.which("agentq") or ""


def _env(home: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "DATABASE", "BROKER"))
    }
    return {**env, "AGENTQ_HOME": str(home), "COLUMNS": "200", "AGENTQ_REVIEWER": "rita"}


def agentq(home: Path, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTQ, *args],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def home() -> Iterator[Path]:
    """AGENTQ_HOME outside pytest's private tmp root (see tests/integration/conftest.py)."""
    yield from engine_dir()


def test_agentq_is_installed() -> None:
    assert AGENTQ, "the agentq console script is not on PATH: pip install -e '.[test]'"


def test_demo_submits_the_right_totals(home: Path) -> None:
    result = agentq(home, "demo", timeout_s=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "offline (deterministic, no model)" in out
    # scenario 1: 514.60 USD at the cached October rate 0.92
    assert re.search(r"total 473\.43 EUR, cost centre CC-4410", out), out
    # scenario 2: escalated, then the reviewer's rate 0.95
    assert "replan_budget_spent" in out
    assert "agentq review respond" in out
    assert re.search(r"total 488\.87 EUR, cost centre CC-4410", out), out
    assert not (home / "demo" / "stack.json").exists()  # the demo stopped its stack


def test_commands_without_a_stack_say_how_to_start_one(home: Path) -> None:
    result = agentq(home, "runs")
    assert result.returncode == 2
    assert "agentq up" in result.stdout and "DATABASE_URL" in result.stdout


@pytest.fixture
def up(home: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    proc = subprocess.Popen(
        [AGENTQ, "up"],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    deadline, seen = time.monotonic() + 120, ""
    assert proc.stdout is not None
    while "agentq is up" not in seen:
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"agentq up did not start:\n{seen}")
        seen += line
    yield home, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_up_submit_watch_review_and_ctrl_c(up: tuple[Path, subprocess.Popen[str]]) -> None:
    home, proc = up
    plan = home / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "steps": [
                    {"name": "a", "kind": "tool", "tool": "noop"},
                    {"name": "x", "kind": "tool", "tool": "flaky", "args": {"fail_times": 1}},
                ]
            }
        )
    )
    submitted = agentq(
        home,
        "submit",
        "cli test",
        "--plan",
        str(plan),
        "--replans",
        "0",
        "--fact",
        "currency=EUR",
        "--watch",
    )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "waiting_review" in submitted.stdout and "currency=EUR" in submitted.stdout
    queue = agentq(home, "review", "list")
    assert "replan_budget_spent" in queue.stdout
    esc_id = re.search(r"│\s*(\d+)\s*│\s*1\s*│", queue.stdout)
    assert esc_id, queue.stdout
    shown = agentq(home, "review", "show", esc_id.group(1))
    assert "flaky" in shown.stdout and "failing tries" in shown.stdout
    approved = agentq(home, "review", "approve", esc_id.group(1), "--comment", "try again")
    assert approved.returncode == 0, approved.stdout + approved.stderr
    watched = agentq(home, "watch", "1")
    assert watched.returncode == 0 and "succeeded" in watched.stdout
    again = agentq(home, "review", "approve", esc_id.group(1))
    assert again.returncode == 2 and "decided" in again.stdout
    runs = agentq(home, "runs")
    assert "cli test" in runs.stdout and "succeeded" in runs.stdout
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0
    assert not (home / "stack.json").exists()
