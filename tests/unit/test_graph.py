"""Plan graphs: `after`, splices in the place of a failed step, and the checks on the whole
version (cycles, unknown names, references to steps not waited for); no services."""

from __future__ import annotations

from typing import Any

import pytest

from models.errors import InvalidPlan, PlanConflict
from models.plans.graph import NewStep, Node, ancestors, linear, splice, waves
from models.plans.plans import Splice, parse_plan
from models.tables import Step

TOOLS = ["noop"]


def step(name: str, *, after: list[str] | None = None, **args: str) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, "kind": "tool", "tool": "noop", "args": args}
    if after is not None:
        data["after"] = after
    return data


def built(*steps: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """What each step waits for, by name, in the version the plan makes on its own."""
    spec = parse_plan({"steps": list(steps)}, tools=TOOLS)
    version = Splice().build(spec.steps)
    names = version.names
    return {names[k]: tuple(names[d] for d in version.after[k]) for k in version.order}


def test_after_left_out_means_the_step_before() -> None:
    assert built(step("a"), step("b"), step("c")) == {"a": (), "b": ("a",), "c": ("b",)}


def test_fan_out_and_join() -> None:
    graph = built(
        step("a", after=[]),
        step("b", after=["a"], x="${steps.a.k}"),
        step("c", after=["a"]),
        step("d", after=["b", "c"], x="${steps.b.k}", y="${steps.a.k}"),
    )
    assert graph == {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c")}


def test_after_may_name_a_later_step() -> None:
    assert built(step("b", after=["a"]), step("a", after=[])) == {"b": ("a",), "a": ()}


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([step("a", after=["zz"])], r"steps\.0\.after: no step named 'zz'"),
        ([step("a", after=["a"])], r"steps\.0\.after: step 'a' cannot wait for itself"),
        (
            [step("a", after=[]), step("b", after=["a", "a"])],
            r"steps\.1\.after: names 'a' more than once",
        ),
        (  # a reference to a step the plan lacks is not advice to wait for it
            [step("a", x="${steps.zz.k}")],
            r"steps\.0\.args: refers to step 'zz', and the plan has no step of that name",
        ),
        ([step("a", x="${steps.a.k}")], r"steps\.0\.args: refers to its own result"),
        (
            [step("a", after=["c"]), step("b", after=["a"]), step("c", after=["b"])],
            r"after: a cycle: .*'a'.*'b'.*'c'|after: a cycle",
        ),
        (
            [step("a", after=[]), step("b", after=[], x="${steps.a.k}")],
            r"steps\.1\.args: refers to step 'a', which step 'b' does not wait for",
        ),
        (
            [step("a"), step("b", after=[]), step("c", after=["b"], x="${steps.a.k}")],
            r"steps\.2\.args: refers to step 'a', which step 'c' does not wait for",
        ),
        ([step("a"), step("a")], r"steps\.1\.name: 'a' is used twice"),
    ],
)
def test_bad_graphs_are_refused_naming_the_step(steps: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(InvalidPlan, match=message):
        parse_plan({"steps": steps}, tools=TOOLS)


def test_reference_through_other_steps_is_allowed() -> None:
    plan = parse_plan(
        {"steps": [step("a"), step("b"), step("c", after=["b"], x="${steps.a.k}")]}, tools=TOOLS
    )
    assert [s.after for s in plan.steps] == [None, None, ["b"]]


def row(id: int, name: str, status: str, **args: str) -> Step:
    return Step(
        id=id,
        run_id=1,
        plan_version=1,
        position=0,
        name=name,
        kind="tool",
        tool="noop",
        args=args,
        status=status,
    )


# receipts -> rate -> convert -> submit, and receipts -> attach -> submit; `rate` failed
KEPT = [
    row(1, "receipts", "succeeded"),
    row(2, "rate", "failed", x="${steps.receipts.k}"),
    row(3, "attach", "running", x="${steps.receipts.k}"),
    row(4, "convert", "pending", r="${steps.rate.rate}", x="${steps.receipts.k}"),
    row(5, "submit", "pending", t="${steps.convert.total}", a="${steps.attach.a}"),
]
AFTER = {1: (), 2: (1,), 3: (1,), 4: (1, 2), 5: (4, 3)}


def test_replan_takes_the_failed_steps_place_inside_a_graph() -> None:
    here = Splice(KEPT, AFTER, replaced=2)
    spec = parse_plan(
        {"steps": [step("lookup", x="${steps.receipts.k}"), step("rate", m="${steps.lookup.k}")]},
        tools=TOOLS,
        splice=here,
    )
    version = here.build(spec.steps)
    assert not version.problems
    lookup, rate = -1, -2
    assert version.order == (1, 2, lookup, rate, 3, 4, 5)
    assert version.after[lookup] == (1,)  # what the failed step waited for
    assert version.after[rate] == (lookup,)
    assert version.after[4] == (1, rate)  # its dependents wait for the last spliced step
    assert version.after[5] == (4, 3)
    assert version.after[3] == (1,)  # the branch already running keeps its place


def test_a_splice_of_parallel_steps_is_waited_for_whole() -> None:
    new = [NewStep(-1, "rate", ()), NewStep(-2, "audit", ())]
    nodes = [Node(n.id or 0, n.name, n.status, AFTER[n.id or 0]) for n in KEPT]
    version = splice(nodes, new, replaced=2)
    assert version.after[4] == (1, -1, -2)


def test_replan_without_the_failed_steps_name_breaks_its_dependents() -> None:
    with pytest.raises(InvalidPlan, match=r"step 'convert' of the plan refers to step 'rate'"):
        parse_plan(
            {"steps": [step("cached", x="${steps.receipts.k}")]},
            tools=TOOLS,
            splice=Splice(KEPT, AFTER, replaced=2),
        )


def test_new_steps_cannot_take_a_kept_name() -> None:
    here = Splice(KEPT, AFTER, replaced=2)
    with pytest.raises(PlanConflict, match=r"'receipts' is the name of a step that already"):
        parse_plan({"steps": [step("rate"), step("receipts")]}, tools=TOOLS, splice=here)
    with pytest.raises(InvalidPlan, match=r"'attach' is taken by another step"):
        parse_plan({"steps": [step("attach"), step("rate")]}, tools=TOOLS, splice=here)


def test_a_cycle_through_a_kept_dependent_is_refused() -> None:
    with pytest.raises(InvalidPlan, match=r"cycle"):
        parse_plan(
            {"steps": [step("rate", after=["convert"])]},
            tools=TOOLS,
            splice=Splice(KEPT, AFTER, replaced=2),
        )


def test_helpers() -> None:
    assert linear([7, 8, 9]) == {7: (), 8: (7,), 9: (8,)}
    assert ancestors(AFTER, 5) == {1, 2, 3, 4}
    assert waves([1, 2, 3, 4, 5], AFTER) == {1: 1, 2: 2, 3: 2, 4: 3, 5: 4}


def test_a_step_waiting_for_itself_twice_is_told_once_and_the_repeat_named() -> None:
    with pytest.raises(InvalidPlan) as info:
        parse_plan({"steps": [step("a", after=["a", "a"])]}, tools=TOOLS)
    message = str(info.value)
    assert message.count("cannot wait for itself") == 1
    assert "names 'a' more than once" in message


def test_a_succeeded_step_replaced_leaves_the_version_and_frees_its_name() -> None:
    """A deliverable that missed the run's goal (`models.engine.goal_checks`) is replaced in its
    place: the new step waits for what it waited for, takes its name, and what waited for it waits
    for the new step; a failed step replaced stays, as the record of the failure."""
    kept = [
        Node(1, "convert", "succeeded"),
        Node(2, "report", "succeeded", (1,)),
        Node(3, "notify", "pending", (2,)),
    ]
    version = splice(kept, [NewStep(-1, "report")], replaced=2)
    assert version.problems == ()
    assert version.order == (1, -1, 3)
    assert dict(version.after) == {1: (), -1: (1,), 3: (-1,)}
    failed = [Node(1, "convert", "succeeded"), Node(2, "report", "failed", (1,))]
    assert splice(failed, [NewStep(-1, "report")], replaced=2).order == (1, 2, -1)
