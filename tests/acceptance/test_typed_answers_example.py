"""The docs' typed-answer example as a new user runs it (issue 31, item 5), on the default
offline provider: the plan of docs/concepts/plans.md ("Typed answers") saved as the file its
commands name, `agentq up`, then the docs' commands as subprocesses. The plan's own command
succeeds with the invoice's values (it escalated: the offline answer read neither the goal nor a
value labelled `total`); the goal-check example of docs/concepts/coordinator.md ("Reading a
verdict") escalates `goal_not_met`, and `agentq run show` says so in the docs' words, the
criteria with the pinned values put in."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import col, select

from models.tables import Step
from tests.support.console import Console, running_console, submitted_id, wait_for_status
from tests.support.doc_pages import block_matching, blocks, pages

pytestmark = pytest.mark.acceptance
PLAN_FILE = "read-invoice.json"


def _command_on(page: str) -> list[str]:
    """The `agentq run submit ... --plan read-invoice.json` of `page`'s shell blocks (their line
    continuations joined), without `agentq` and any comment."""
    (path,) = [p for p in pages() if p.name == page]
    for block in blocks(path):
        text = block.body.replace("\\\n", " ")
        for line in text.splitlines():
            if line.startswith("agentq run submit") and f"--plan {PLAN_FILE}" in line:
                return shlex.split(line.split(" # ", 1)[0])[1:]
    raise AssertionError(f"{page}: no `agentq run submit ... --plan {PLAN_FILE}`")


def _with_plan(args: list[str], plan: Path) -> list[str]:
    return [str(plan) if arg == PLAN_FILE else arg for arg in args]


def _steps(console: Console, run_id: int) -> dict[str, Step]:
    with console.db() as session:
        stmt = select(Step).where(Step.run_id == run_id).order_by(col(Step.id))
        return {s.name: s for s in session.exec(stmt)}


def _flat(text: str) -> list[str]:
    """Each line of `text` with the panel's borders dropped and its spaces collapsed."""
    return [" ".join(line.strip("│ ").split()) for line in text.splitlines()]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Console, Path]]:
    """`agentq up` with its default settings (the offline provider), and the docs' plan saved."""
    plan = tmp_path_factory.mktemp("docs") / PLAN_FILE
    body = block_matching(r"\A\{\"steps\": \[\n  \{\"name\": \"read\"", language="json").body
    plan.write_text(json.dumps(json.loads(body)))
    with running_console() as console:
        yield console, plan


def test_the_typed_answer_example_succeeds_offline(stack: tuple[Console, Path]) -> None:
    console, plan = stack
    out = console.agentq(*_with_plan(_command_on("plans.md"), plan)).stdout
    run = wait_for_status(console, submitted_id(out), ("succeeded", "failed", "waiting_review"))
    assert run.status == "succeeded", console.agentq("run", "show", str(run.id)).stdout
    steps = _steps(console, run.id or 0)
    assert steps["read"].result == {"total": 473.43, "currency": "EUR"}
    assert steps["file"].result == {"value": 473.43}


def test_the_goal_check_example_reads_as_the_docs_say(stack: tuple[Console, Path]) -> None:
    console, plan = stack
    out = console.agentq(*_with_plan(_command_on("coordinator.md"), plan)).stdout
    run_id = submitted_id(out)
    wait_for_status(console, run_id, ("waiting_review",))
    shown = _flat(console.agentq("run", "show", str(run_id)).stdout)
    said = _flat(block_matching(r"\Agoal check ", language="text").body)
    start = shown.index(said[0])
    assert shown[start : start + len(said)] == said, "\n".join(shown)
    assert not any("${facts." in line for line in shown)
    detail = json.loads(console.agentq("run", "show", str(run_id), "--json").stdout)
    assert detail["goal_check"]["state"] == "not_met"
    assert detail["goal_check"]["criteria"] == ["The total filed is 473.43", "Filed in EUR"]
