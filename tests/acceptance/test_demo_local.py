"""`agentq demo --model local` as a user runs it: llama.cpp's server on SmolLM2-135M-Instruct
(the `llama` extra), started by the demo itself, files the first scenario's report (issue 12,
item 7). ops/bench/local_demo.py runs it five times per model; here CI runs it once."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.test_cli import agentq
from tests.integration.conftest import engine_dir

pytestmark = pytest.mark.acceptance


@pytest.fixture
def home() -> Iterator[Path]:
    yield from engine_dir()


def test_the_demo_on_the_local_model_files_the_report(home: Path) -> None:
    result = agentq(home, "demo", "--model", "local", "--scenarios", "1", timeout_s=900)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "model smollm2" in out and "llama.cpp's server on smollm2" in out
    assert re.search(r"total 473\.43 EUR, cost centre CC-4410", out), out
    # the seeded procedures were recalled into the plan and the replan, and the run's plans
    # came from them (adopted by reference, worker.adoption), or from the model itself
    assert re.search(r'"File a trip\'s expense report" \(user\) (adopted|shown) in plan v1', out)
    assert "2. November" not in out  # --scenarios 1
    cache = re.search(r"model server: ([\d,]+) of ([\d,]+) prompt tokens from its cache", out)
    assert cache is not None and int(cache.group(1).replace(",", "")) > 0, out
    assert not (home / "demo" / "stack.json").exists()  # the demo stopped its stack


def test_an_unknown_model_is_refused_naming_the_choices(home: Path) -> None:
    result = agentq(home, "demo", "--model", "gpt-9")
    assert result.returncode == 2
    assert "--model: 'gpt-9' is not one of offline, local, smollm2, gemma3" in result.stdout
