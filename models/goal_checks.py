"""Deterministic goal checks: what a run delivers must agree with the facts its user pinned.

A run that finished its steps is not done until its outcome is checked (issue 12, item 1). This
module holds the checks that need no model. A run's deliverables are the results it hands over:
those of the succeeded steps of its current plan version whose results no step of the plan
refers to (`${steps.NAME...}` in its arguments). A result another step refers to is an
intermediate value that fed a later step and may rightly differ from a pinned fact (the
receipts' own currency before they are converted). Merely waiting for a step does not make its
result intermediate: a step added after the report filing changes nothing of what was filed
(an earlier rule, "the steps nothing waits for", let a trailing `noop` hide a USD report).

A pinned fact `key = value` conflicts with a deliverable holding a field named `key` (at any
depth of its result, the name compared case-insensitively) whose value is not `value`: numbers
compare as numbers (`473.43` agrees with `"473.430"`), text case- and space-insensitively, and
a field that is an object or a list is looked into, never compared. So a report submitted in USD
when `currency = EUR` is pinned fails the check.

The synthesis asks `conflicts_of` before its model call (`worker.synthesis`): a run with
conflicts escalates `goal_not_met` with them, and pays for no answer. A reviewer who approves that
escalation accepts the outcome as it is: the check is waived for the run's plan version
(`waived`); an edit makes a new version, which is checked again.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.references import references
from models.runs import pinned_facts
from models.tables import Run, Step

GOAL_NOT_MET: Final = "goal_not_met"  # the escalation reason
MAX_DEPTH: Final = 8  # how deep a result is looked into for a pinned fact's field


@dataclass(frozen=True)
class Conflict:
    """A deliverable's field that disagrees with a pinned fact: step `step`'s result has `path`
    (dotted, e.g. `report.currency`) holding `found`, where `fact` is pinned to `pinned`."""

    step: str
    path: str
    found: Any
    fact: str
    pinned: str

    def describe(self) -> str:
        """One line for the escalation: which step delivered what, and what is pinned."""
        return (
            f"step {self.step!r} delivered {self.path} = {self.found!r}, "
            f"but the pinned fact {self.fact} is {self.pinned!r}"
        )


def deliverables(steps: Sequence[Step]) -> list[Step]:
    """The succeeded `steps` whose results none of `steps` refers to in its arguments
    (`models.references.references`), in order."""
    referred = {name for s in steps for name in references(s.args)}
    return [s for s in steps if s.status == "succeeded" and s.name not in referred]


def conflicts(
    pinned: Mapping[str, str], deliverables: Mapping[str, Mapping[str, Any]]
) -> list[Conflict]:
    """Every field of `deliverables` (step name -> result) that disagrees with `pinned` (fact
    key -> value), in the order of the deliverables, then of their fields."""
    keys = {key.casefold(): key for key in pinned}
    found: list[Conflict] = []
    for step, result in deliverables.items():
        for path, name, value in _fields(result):
            fact = keys.get(name.casefold())
            if fact is not None and not agrees(pinned[fact], value):
                found.append(Conflict(step, path, value, fact, pinned[fact]))
    return found


def agrees(pinned: str, value: Any) -> bool:
    """Whether a scalar field `value` says what the pinned text `pinned` says: equal as numbers
    when both read as finite numbers (a bool is no number), else equal as text, ignoring case
    and surrounding space."""
    number, wanted = _number(value), _number(pinned)
    if number is not None and wanted is not None:
        return math.isclose(number, wanted, rel_tol=0.0, abs_tol=1e-9)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text.strip().casefold() == pinned.strip().casefold()


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _fields(value: Any, path: str = "", depth: int = 0) -> Iterator[tuple[str, str, Any]]:
    """`(dotted path, field name, scalar value)` of each scalar field in `value`, objects and
    lists looked into (list items as `path[i]`) up to `MAX_DEPTH` levels."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, Mapping):
        for name, inner in value.items():
            here = f"{path}.{name}" if path else str(name)
            if isinstance(inner, Mapping | list):
                yield from _fields(inner, here, depth + 1)
            elif inner is not None:
                yield here, str(name), inner
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, Mapping | list):
                yield from _fields(item, f"{path}[{i}]", depth + 1)


# goal_check_waived: a reviewer approved a goal_not_met escalation of the run's plan version.
GOAL_CHECK_WAIVED: Final = f"""
SELECT EXISTS (SELECT 1 FROM escalations e WHERE e.run_id = :run_id AND e.plan_version = :version
    AND e.reason = '{GOAL_NOT_MET}' AND e.decision = 'approve')"""


def waived(session: Session, run: Run) -> bool:
    """Whether a reviewer accepted run `run`'s outcome as it is for its current plan version."""
    params = {"run_id": run.id, "version": run.plan_version}
    row = sql.execute(session, GOAL_CHECK_WAIVED, params).fetchone()
    return bool(row[0])


def conflicts_of(session: Session, run: Run, steps: Sequence[Step]) -> list[Conflict]:
    """The conflicts between run `run`'s pinned facts and its deliverables (`steps`: its current
    plan version's, `models.plans.current_steps`); none when it pins nothing or a reviewer
    waived the check. Reads the pinned facts, then (only when there are some) the waiver."""
    pinned = pinned_facts(session, run.id or 0)
    if not pinned or waived(session, run):
        return []
    return conflicts(pinned, {s.name: s.result or {} for s in deliverables(steps)})
