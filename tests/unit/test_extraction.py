"""When a run's end asks the model for facts (`worker.memory.extraction.skip_reason`), on plain
values."""

from __future__ import annotations

import pytest

from models.tables import Step
from worker.memory.extraction import NOTHING_TO_LEARN, model_steps, skip_reason


def test_a_run_with_nothing_to_learn_from_skips_extraction() -> None:
    assert skip_reason(model_steps=0, failures=0, stated_facts=0) == NOTHING_TO_LEARN


@pytest.mark.parametrize(
    "found",
    [
        {"model_steps": 1, "failures": 0, "stated_facts": 0},  # a model step's turns
        {"model_steps": 0, "failures": 1, "stated_facts": 0},  # a failure, fixed or not
        {"model_steps": 0, "failures": 0, "stated_facts": 2},  # the user's own words
    ],
)
def test_any_one_thing_to_learn_from_asks_the_model(found: dict[str, int]) -> None:
    assert skip_reason(**found) is None


def test_model_steps_counts_only_steps_of_kind_model() -> None:
    steps = [
        Step(run_id=1, name="a", kind="tool", tool="noop"),
        Step(run_id=1, name="b", kind="model", instruction="write"),
        Step(run_id=1, name="c", kind="human"),
        Step(run_id=1, name="d", kind="model", instruction="check"),
    ]
    assert model_steps(steps) == 2
    assert model_steps(steps[:1]) == 0
