"""How a plan graph reads (`models.plans.layout`), and the plan a reviewer's edit starts from
(`models.review.drafts`): its `after` rebuilds the graph it came from; no services."""

from __future__ import annotations

import json
from typing import Any

from models.plans.graph import linear
from models.plans.layout import Place, after_text, by_wave, places, runs_together
from models.plans.plans import Splice, parse_plan
from models.plans.step_specs import spec_of
from models.review.drafts import PLAN_NOTE_MISSED, PLAN_NOTE_REMAINING, starting_plan
from models.tables import Escalation, Run, Step

TOOLS = ["noop"]
# a -> (b, c) -> d, and e on its own: the fan-out and join of the README's example plan
FAN = {1: (), 2: (1,), 3: (1,), 4: (2, 3), 5: ()}
NAMES = {1: "a", 2: "b", 3: "c", 4: "d", 5: "e"}


def test_places_number_waves_and_name_what_each_step_waits_for() -> None:
    found = places([1, 2, 3, 4, 5], FAN, NAMES)
    assert found == {
        1: Place(1, ()),
        2: Place(2, ("a",)),
        3: Place(2, ("a",)),
        4: Place(3, ("b", "c")),
        5: Place(1, ()),
    }
    assert runs_together(found)
    assert places([9], {9: (8,)}, {})[9] == Place(1, ("#8",))  # outside the version: no wave


def test_by_wave_groups_steps_in_plan_order() -> None:
    assert by_wave([1, 2, 3, 4, 5], FAN) == [[1, 5], [2, 3], [4]]
    assert by_wave([], {}) == []


def test_a_plain_list_is_one_step_per_wave_numbered_as_its_position() -> None:
    found = places([7, 8, 9], linear([7, 8, 9]), {7: "x", 8: "y", 9: "z"})
    assert [p.wave for p in found.values()] == [1, 2, 3]
    assert not runs_together(found)
    assert [after_text(p.after) for p in found.values()] == ["-", "x", "y"]
    assert after_text(("b", "c")) == "b, c"


def row(id_: int, name: str, status: str = "pending", **fields: Any) -> Step:
    data: dict[str, Any] = {"kind": "tool", "tool": "noop", "args": {}, "instruction": ""}
    data |= {"run_id": 1, "plan_version": 1, "position": 0, **fields}
    return Step(id=id_, name=name, status=status, **data)


def by_name(version: Any) -> dict[str, tuple[str, ...]]:
    names = version.names
    return {names[k]: tuple(names[d] for d in version.after[k]) for k in version.order}


def test_the_edit_draft_names_each_steps_after_and_rebuilds_the_same_graph() -> None:
    """a succeeded; b failed while c still runs; d joins b and c; e waits for d. Sent back
    unchanged, the draft (b, d, e) makes the graph the version had, by name."""
    steps = [
        row(1, "a", "succeeded"),
        row(2, "b", "failed", args={"x": "${steps.a.k}"}),
        row(3, "c", "running"),
        row(4, "d"),
        row(5, "e"),
    ]
    after = {1: (), 2: (1,), 3: (1,), 4: (2, 3), 5: (4,)}
    esc = Escalation(id=1, run_id=1, plan_version=1, step_id=2, reason="replan_budget_spent")
    start = starting_plan(esc, Run(id=1, goal="g"), steps, steps[1], after)
    assert start.note == PLAN_NOTE_REMAINING
    draft = json.loads(start.text)["steps"]
    assert [(s["name"], s["after"]) for s in draft] == [
        ("b", ["a"]),
        ("d", ["b", "c"]),
        ("e", ["d"]),
    ]
    assert draft[0]["args"] == {"x": "${steps.a.k}"}

    kept = [s for s in steps if s.status != "pending"]  # what `models.review.reviews.edit` keeps
    splice = Splice(kept, after, replaced=2)
    spec = parse_plan(start.text, tools=TOOLS, splice=splice)
    version = splice.build(spec.steps)  # new b, d, e are keyed -1, -2, -3
    assert (version.after[-1], version.after[-2], version.after[-3]) == ((1,), (-1, 3), (-2,))
    rebuilt = by_name(version)
    assert rebuilt == {"a": (), "b": ("a",), "c": ("a",), "d": ("b", "c"), "e": ("d",)}
    assert rebuilt == by_name(Splice(steps, after).build([]))


def test_a_step_that_waits_for_nothing_says_so_with_an_empty_after() -> None:
    spec = spec_of(row(1, "a", kind="model", tool=None, instruction="think"), [])
    assert spec == {"name": "a", "instruction": "think", "kind": "model", "args": {}, "after": []}


def test_the_edit_draft_keeps_a_steps_expectations_and_parses_again() -> None:
    expect = [{"key": "ok", "in": [True]}, {"key": "n", "min": 0, "max": 3}]
    spec = spec_of(row(1, "a", expect=expect), [])
    assert spec["expect"] == expect
    (parsed,) = parse_plan({"steps": [spec]}, tools=TOOLS).steps
    assert [e.model_dump() for e in parsed.expect] == expect
    assert "expect" not in spec_of(row(2, "b"), [])  # none declared: the draft shows none


def test_a_goal_not_met_draft_offers_the_deliverable_that_missed_it() -> None:
    """Sent back as it is, the draft replaces the deliverable (`models.plans.graph.remaining`): the
    reviewer edits the value that missed the goal, and the new step takes its name."""
    steps = [row(1, "convert", "succeeded"), row(2, "report", "succeeded", args={"c": "USD"})]
    after = {1: (), 2: (1,)}
    esc = Escalation(id=1, run_id=1, plan_version=1, step_id=2, reason="goal_not_met")
    start = starting_plan(esc, Run(id=1, goal="g"), steps, steps[1], after)
    assert start.note == PLAN_NOTE_MISSED
    (draft,) = json.loads(start.text)["steps"]
    assert (draft["name"], draft["after"], draft["args"]) == ("report", ["convert"], {"c": "USD"})
    spec = parse_plan(start.text, tools=TOOLS, splice=Splice(steps, after, replaced=2))
    version = Splice(steps, after, replaced=2).build(spec.steps)
    assert version.order == (1, -1) and by_name(version) == {"convert": (), "report": ("convert",)}
