"""The README documents what the code does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from models.errors import InvalidStepOutput
from models.plans.expectations import unmet
from models.plans.goal_values import pins
from models.plans.layout import by_wave
from models.plans.plans import Splice, parse_plan
from models.plans.step_outputs import parse_output
from models.plans.tools import configured_tool_names
from models.settings import Settings
from ops.views import goal_values_text

README = (Path(__file__).parents[2] / "README.md").read_text()


def test_every_setting_is_in_the_configuration_table() -> None:
    missing = [name for name in Settings.model_fields if f"`AGENTQ_{name.upper()}`" not in README]
    assert not missing, f"settings missing from README's configuration table: {missing}"


def test_readme_gives_the_two_setup_commands() -> None:
    assert "pip install -e '.[local]' && agentq demo" in README
    assert "pip install -e '.[test]' && pytest" in README


def test_ci_runs_the_readme_test_command() -> None:
    ci = (Path(__file__).parents[2] / ".ci" / "run").read_text()
    assert "pip install --quiet -e '.[test]'" in ci and "python -m pytest" in ci


def test_no_placeholder_is_left_in_the_readme() -> None:
    assert not re.findall(r"^[A-Z][A-Z_]{6,}$", README, flags=re.MULTILINE)


def test_the_readmes_graph_plan_validates_and_runs_two_steps_together() -> None:
    block = re.search(r"```json\n(\{\"steps\".*?)```", README, flags=re.S)
    assert block, "the CLI section's example plan"
    plan = parse_plan(block.group(1), tools=configured_tool_names())
    version = Splice().build(plan.steps)
    names = [[version.names[k] for k in wave] for wave in by_wave(version.order, version.after)]
    assert names == [["left", "right"], ["join"]]
    assert json.loads(block.group(1))["steps"][2]["after"] == ["left", "right"]


def test_the_readmes_expectations_validate_and_fail_as_it_says() -> None:
    block = re.search(r"```json\n(\{\"name\": \"receipts\".*?)```", README, flags=re.S)
    assert block, "the CLI section's example of `expect`"
    (step,) = parse_plan(
        {"steps": [json.loads(block.group(1))]}, tools=configured_tool_names()
    ).steps
    result = {"receipts": [{"amount": 6120.5}], "currency": "USD", "month": "2026-10"}
    (reason,) = unmet(step.expect, result)
    assert f"`step 'receipts': unmet\nexpectation: {reason}`" in README
    assert unmet(step.expect, {**result, "receipts": [{"amount": 412.5}]}) == []


def test_the_readmes_output_step_validates_and_is_refused_as_it_says() -> None:
    block = re.search(r"```json\n(\{\"steps\": \[\n  \{\"name\": \"read\".*?)```", README, re.S)
    assert block, "the CLI section's example of `output`"
    plan = parse_plan(json.loads(block.group(1)), tools=configured_tool_names())
    output = plan.steps[0].output or {}
    with pytest.raises(InvalidStepOutput) as refused:
        parse_output('{"total": "473.43 EUR", "currency": "EUR"}', output)
    assert f"(`{refused.value}`)" in README.replace("\n", " ")
    assert parse_output('{"total": 473.43, "currency": "EUR"}', output) == {
        "total": 473.43,
        "currency": "EUR",
    }


def test_the_readmes_submit_says_what_submit_says_of_the_goals_values() -> None:
    goal = "Submit 473.43 EUR to CC-4410"
    shown = goal_values_text(pins(goal, {"trip": "x"}, pin=False, room=50), asked=False)
    pinned = goal_values_text(pins(goal, {"currency": "USD"}, pin=True, room=50), asked=True)
    assert shown is not None and pinned is not None
    assert f"run 7 submitted\n{shown.plain}\n" in README
    assert f"run 8 submitted\n{pinned.plain}\n" in README
