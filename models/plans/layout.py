"""How a plan version's graph reads to people: each step's wave, and the steps it waits for by
name. Pure; shared by the CLI (`agentq run show`, `agentq run watch`), the review console and
the HTTP API (`PlanVersionOut.waves`), so the three show the same numbers.

A step's wave is `models.plans.graph.waves`'s: 1 for a step that waits for nothing, else one more
than the latest wave it waits for. Steps of one wave wait only for steps of earlier waves, so once
those succeeded they can run together (DESIGN.md, invariant 12). In a plan written as a plain
list every step is its own wave, numbered as its position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from models.plans.graph import waves

NO_DEPENDENCY = "-"  # what `after_text` shows for a step that waits for nothing


@dataclass(frozen=True)
class Place:
    """Where one step stands in its version's graph: its `wave` (1-based) and the names of the
    steps it waits for (`after`, as stored: the order its plan named them in)."""

    wave: int
    after: tuple[str, ...] = ()


def places(
    order: Sequence[int], after: Mapping[int, Iterable[int]], names: Mapping[int, str]
) -> dict[int, Place]:
    """Each step of `order` (ids) with its wave and dependencies by name, by id. `after` maps ids
    to the ids each waits for (`models.plans.plans.dependencies`); a step missing from it waits for
    nothing; a dependency with no name in `names` shows as `#ID`."""
    wave = waves(order, after)
    return {
        step: Place(wave[step], tuple(names.get(d, f"#{d}") for d in after.get(step, ())))
        for step in order
    }


def by_wave(order: Sequence[int], after: Mapping[int, Iterable[int]]) -> list[list[int]]:
    """The ids of `order` grouped by wave: `[[a, b], [c]]` when `c` waits for `a` and `b`, which
    wait for nothing. Waves in order, steps of one wave in plan order; [] for no steps."""
    wave = waves(order, after)
    groups: list[list[int]] = [[] for _ in range(max(wave.values(), default=0))]
    for step in order:
        groups[wave[step] - 1].append(step)
    return groups


def after_text(after: Sequence[str]) -> str:
    """Dependencies as a person reads them: `a, b`, or `-` for none."""
    return ", ".join(after) or NO_DEPENDENCY


def runs_together(found: Mapping[int, Place]) -> bool:
    """Whether two steps of `found` share a wave (the plan is more than a chain)."""
    seen = [p.wave for p in found.values()]
    return len(seen) != len(set(seen))
