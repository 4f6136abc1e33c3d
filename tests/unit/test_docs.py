"""The docs (README.md and the pages under docs/) document what the code does: their examples
validate and behave as the text around them says. Each example is found by its content on
whichever page holds it (`tests.support.doc_pages.block_matching`)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator

import pytest

from models.errors import InvalidStepOutput
from models.front.commands import checked_plan
from models.plans.expectations import unmet
from models.plans.goal_values import pins
from models.plans.layout import by_wave
from models.plans.plans import Splice, parse_plan
from models.plans.step_outputs import parse_output
from models.plans.tools import catalog, configured_tool_names
from ops.demo import DEMO_GOAL
from ops.inputs import parse_facts
from ops.views import goal_values_text
from tests.support import doc_pages
from tests.support.doc_pages import SHELL_LANGUAGES, Block, block_matching
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.providers import ModelRequest
from worker.tools import expenses

README = (doc_pages.ROOT / "README.md").read_text()


def _page_with(text: str) -> str:
    """The text of the page holding `text` (whitespace and line breaks aside). Fails naming
    `text` when no page has it."""
    flat = " ".join(text.split())
    for page in doc_pages.pages():
        if flat in " ".join(page.read_text().split()):
            return page.read_text()
    raise AssertionError(f"no page of the docs says {text!r}")


def test_readme_gives_the_two_setup_commands() -> None:
    assert "pip install -e '.[local]' && agentq demo" in README
    assert "pip install -e '.[test]' && pytest" in README


def test_ci_runs_the_readme_test_command() -> None:
    ci = (doc_pages.ROOT / ".ci" / "run").read_text()
    assert "pip install --quiet -e '.[test]'" in ci and "python -m pytest" in ci


def test_no_placeholder_is_left_in_the_docs() -> None:
    for page in doc_pages.pages():
        found = re.findall(r"^[A-Z][A-Z_]{6,}$", page.read_text(), flags=re.MULTILINE)
        assert not found, f"{doc_pages.relative(page)}: {found}"


def test_the_docs_graph_plan_validates_and_runs_two_steps_together() -> None:
    block = block_matching(r"\A\{\"steps\".*\"left\"", language="json")
    plan = parse_plan(block.body, tools=configured_tool_names())
    version = Splice().build(plan.steps)
    names = [[version.names[k] for k in wave] for wave in by_wave(version.order, version.after)]
    assert names == [["left", "right"], ["join"]]
    assert json.loads(block.body)["steps"][2]["after"] == ["left", "right"]


def test_the_docs_expectations_validate_and_fail_as_they_say() -> None:
    block = block_matching(r"\A\{\"name\": \"receipts\"", language="json")
    (step,) = parse_plan({"steps": [json.loads(block.body)]}, tools=configured_tool_names()).steps
    result = {"receipts": [{"amount": 6120.5}], "currency": "USD", "month": "2026-10"}
    (reason,) = unmet(step.expect, result)
    said = f"`step 'receipts': unmet\nexpectation: {reason}`"
    assert said in block.page.read_text() or said in _page_with(said)
    assert unmet(step.expect, {**result, "receipts": [{"amount": 412.5}]}) == []


def test_the_docs_output_step_validates_and_is_refused_as_they_say() -> None:
    block = block_matching(r"\A\{\"steps\": \[\n  \{\"name\": \"read\"", language="json")
    plan = parse_plan(json.loads(block.body), tools=configured_tool_names())
    output = plan.steps[0].output or {}
    with pytest.raises(InvalidStepOutput) as refused:
        parse_output('{"total": "473.43 EUR", "currency": "EUR"}', output)
    said = f"(`{refused.value}`)"
    assert said in block.page.read_text().replace("\n", " ") or said in _page_with(said)
    assert parse_output('{"total": 473.43, "currency": "EUR"}', output) == {
        "total": 473.43,
        "currency": "EUR",
    }


def test_the_docs_submit_says_what_submit_says_of_the_goals_values() -> None:
    goal = "Submit 473.43 EUR to CC-4410"
    shown = goal_values_text(pins(goal, {"trip": "x"}, pin=False, room=50), asked=False)
    pinned = goal_values_text(pins(goal, {"currency": "USD"}, pin=True, room=50), asked=True)
    assert shown is not None and pinned is not None
    assert f"run 7 submitted\n{shown.plain}\n" in _page_with("run 7 submitted")
    assert f"run 8 submitted\n{pinned.plain}\n" in _page_with("run 8 submitted")


# A file of this repository named on a page: `models/settings.py`, `ops/grafana/x.json` (not in a
# URL, where the path is another site's).
REPO_FILE = re.compile(
    r"(?<![\w/.:-])((?:models|worker|scheduler|api|ops|agentq|tests|docs|\.ci)/[\w./-]*\w"
    r"\.(?:py|md|json|ya?ml|toml|html|css|js|ini|png))\b"
)


# Named but not a file of the tree: a placeholder in a command.
NOT_FILES = {"tests/integration/test_x.py"}


def test_every_file_the_docs_name_exists() -> None:
    missing = [
        f"{doc_pages.relative(page)}:{number}: {name}"
        for page in doc_pages.pages()
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        for name in REPO_FILE.findall(line)
        if not (doc_pages.ROOT / name).exists() and name not in NOT_FILES
    ]
    assert not missing, "files the docs name that do not exist:\n" + "\n".join(missing)


def _shell_commands(block: Block) -> Iterator[tuple[int, list[str]]]:
    """`(line, words)` of each command of a shell block, as the shell splits it: a line ending
    in a backslash, or inside an open quote (a curl's JSON body), goes on to the next."""
    pending, start = "", block.line
    for number, line in enumerate(block.body.splitlines(), start=block.line):
        start = number if not pending else start
        pending += line + "\n"
        if line.endswith("\\"):
            continue
        try:
            words = shlex.split(pending.replace("\\\n", " "), comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        pending = ""
        yield start, words


def _demo_goal_submits() -> Iterator[tuple[str, dict[str, str]]]:
    """`(page:line, pinned facts)` of every submit of the demo's goal in the docs' shell blocks:
    `agentq run submit "<goal>" --fact K=V ...` and a curl whose JSON body has the goal."""
    for page in doc_pages.pages():
        for block in doc_pages.blocks(page):
            if block.language not in SHELL_LANGUAGES:
                continue
            for number, words in _shell_commands(block):
                where = f"{doc_pages.relative(page)}:{number}"
                if words[:4] == ["agentq", "run", "submit", DEMO_GOAL]:
                    pairs = [words[i + 1] for i, word in enumerate(words) if word == "--fact"]
                    yield where, parse_facts(pairs)
                elif words[:1] == ["curl"] and "-d" in words:
                    body = json.loads(words[words.index("-d") + 1])
                    if body.get("goal") == DEMO_GOAL:
                        yield where, body.get("facts", {})


def test_every_submit_of_the_demo_goal_pins_what_its_plan_needs() -> None:
    """The README's first run escalated `invalid_plan`: the offline planner's expense plan names
    `${facts.trip}` and `${facts.cost_centre}`, which it did not pin, and a trip must be one the
    demo's receipts know (`worker.tools.expenses`)."""
    submits = list(_demo_goal_submits())
    pages = {where.partition(":")[0] for where, _ in submits}
    assert pages >= {"README.md", "docs/getting-started.md", "docs/how-to/python-client.md"}
    for where, facts in submits:
        payload = {"goal": DEMO_GOAL, "facts": facts, "tools": catalog()}
        request = ModelRequest(purpose="plan", messages=[], payload=payload)
        checked_plan(OfflineProvider().complete(request).text, facts=facts)  # raises InvalidPlan
        assert facts.get("trip") in expenses._TRIP_MONTHS, (where, facts)
