"""`agentq demo --model local` as a user runs it: llama.cpp's server on SmolLM2-135M-Instruct
(the `llama` extra), started by the demo itself, files the first scenario's report (issue 12,
item 7). ops/bench/local_demo.py runs it five times per model; here CI runs it once."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_cli import AGENTQ, _env, agentq
from tests.integration.conftest import engine_dir

pytestmark = pytest.mark.acceptance


@pytest.fixture
def home() -> Iterator[Path]:
    yield from engine_dir()


# About 2 min on a quiet 2-core machine, all of it the model's CPU; past 300 s (the default) on
# stop 38's loaded CI machine, so it has the subprocess's own limit.
@pytest.mark.timeout(600)
def test_the_demo_on_the_local_model_files_the_report(home: Path) -> None:
    result = agentq(home, "demo", "--model", "local", "--scenarios", "1", timeout_s=570)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "model smollm2" in out and "llama.cpp's server on smollm2" in out
    assert re.search(r"total 473\.43 EUR, cost centre CC-4410", out), out
    # the seeded procedures were recalled into the plan and the replan, and the run's plans
    # came from them (adopted by reference, worker.phases.adoption), or from the model itself
    assert re.search(r'"File a trip\'s expense report" \(user\) (adopted|shown) in plan v1', out)
    assert "2. November" not in out  # --scenarios 1
    cache = re.search(r"model server: ([\d,]+) of ([\d,]+) prompt tokens from its cache", out)
    assert cache is not None and int(cache.group(1).replace(",", "")) > 0, out
    assert not (home / "demo" / "stack.json").exists()  # the demo stopped its stack


def test_an_unknown_model_is_refused_naming_the_choices(home: Path) -> None:
    result = agentq(home, "demo", "--model", "gpt-9")
    assert result.returncode == 2
    assert "--model: 'gpt-9' is not one of offline, local, smollm2, gemma3" in result.stderr


def test_a_terminated_demo_stops_its_stack_and_leaves_no_process(home: Path) -> None:
    """A TERM (a time box, a supervisor) unwinds the demo as ^C does (ops.demo.run_demo)."""
    proc = subprocess.Popen(
        [AGENTQ, "demo"],
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen, deadline = "", time.monotonic() + 120
    while "$ agentq run submit" not in seen:  # the stack is up and a run is going
        line = proc.stdout.readline()
        assert line and time.monotonic() < deadline, seen
        seen += line
    proc.terminate()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert not (home / "demo" / "stack.json").exists()
    time.sleep(2)  # children that were told to stop have gone
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True)
    assert left.stdout == "", f"processes of the demo's session still running: {left.stdout}"
