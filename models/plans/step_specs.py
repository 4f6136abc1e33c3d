"""A stored step as the plan step it came from: what a reviewer's draft and a procedure saved
from a run both start from (`models.plans.plans.StepSpec`'s fields, as JSON-ready values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.tables import Step


def spec_of(step: Step, after: Sequence[str]) -> dict[str, Any]:
    """`step` as a plan step (`models.plans.plans.StepSpec`'s fields) waiting for `after`
    (names)."""
    spec: dict[str, Any] = {"name": step.name, "instruction": step.instruction}
    spec["kind"] = "model" if step.kind == "model" else "tool"
    if step.tool:
        spec["tool"] = step.tool
    spec["args"] = step.args
    if step.tools:
        spec["tools"] = step.tools
    if step.expect:
        spec["expect"] = step.expect
    if step.output:
        spec["output"] = step.output
    spec["after"] = list(after)
    return spec
