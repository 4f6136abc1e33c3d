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

A run also has success criteria (`runs.success_criteria`: given at submit, and written by the
planner with plan version 1), each a sentence that may name pinned facts as `${facts.KEY}`
(`criteria_texts` puts their values in). Once its answer is written, a model call judges them
(`worker.phases.goal_check`); the offline provider judges by `rule_verdict`: a criterion is met when
each value it names (`terms`: numbers, codes such as `EUR` or `CC-4410`, quoted text) is held by
a deliverable's field (or is a whole token of its text), so "filed in EUR against CC-4410" fails
for a report in USD, and "all 4 receipts" is not met by the "4" of `CC-4410`.

The synthesis asks `conflicts_of` before its model call (`worker.phases.synthesis`): a run with
conflicts pays for no answer. Either way a goal not met is a replan in the place of the
deliverable (`models.engine.coordinator.decide_unmet`, under the replan budget), and once that is
spent an escalation `goal_not_met` naming the deliverable, the reason and what is missing. A
reviewer who approves that escalation accepts the outcome as it is: the check is waived for the
run's plan version (`waived`); an edit puts new steps in the deliverable's place, a new version,
which is checked again. Every verdict is recorded as a `goal.checked` event (`record`), with
the criteria it judged; so is the met verdict of a run with pinned facts and no criteria
(`Checks.agreed`). `models.engine.goal_reports` tells the newest in words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.engine import goal_evidence
from models.engine.coordinator import GoalVerdict
from models.engine.events import record_event
from models.engine.runs import current_graph, pinned_facts
from models.plans.references import references
from models.tables import Run, Step

GOAL_NOT_MET: Final = "goal_not_met"  # the escalation reason
GOAL_CHECKED: Final = "goal.checked"  # the event each verdict is recorded as
MAX_DEPTH: Final = 8  # how deep a result is looked into for a pinned fact's field
AGREED: Final = "every delivered value agrees with the pinned facts; there are no criteria"
_FACT_REFERENCE = re.compile(r"\$\{facts\.([A-Za-z0-9_]+)\}")
# What a criterion names that a deliverable must hold: quoted text, then identifiers with a
# digit or a hyphen between capitals and digits (CC-4410, EXP-1a2b), codes of 3+ capitals (EUR),
# and numbers (473.43, 1,200 read as 1200).
_TERM = re.compile(
    r"\"([^\"]{1,200})\"|'([^']{1,200})'"
    r"|\b([A-Za-z]+-[A-Za-z0-9]*\d[A-Za-z0-9-]*)\b"
    r"|\b([A-Z]{3,})\b"
    r"|(?<![\w.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\w])"
)
# A number after one of these is a bound, not a value to deliver ("a total under 500 EUR").
_BOUND = re.compile(
    r"(?:under|over|below|above|less than|more than|fewer than|at least|at most|up to|within|"
    r"no more than|no less than|exceeds?|<=?|>=?|≤|≥)\s*$",
    re.IGNORECASE,
)


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
    (`models.plans.references.references`), in order."""
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


@dataclass(frozen=True)
class Checks:
    """What a synthesis checks of run `run`'s outcome: the `deliverables` (`deliverables`), their
    `conflicts` with the pinned facts, and the success `criteria` to judge (`criteria_texts`);
    `checked` when there was anything to check (pinned facts or criteria): not once a reviewer
    waived the check, which leaves no conflicts and no criteria. `given`: the values the run was
    given, `restating`: the deliverables that may only restate them
    (`models.engine.goal_evidence`)."""

    deliverables: list[Step]
    conflicts: list[Conflict]
    criteria: list[str]
    checked: bool = False
    given: frozenset[str] = frozenset()
    restating: frozenset[str] = frozenset()

    def rules_verdict(self) -> GoalVerdict | None:
        """The verdict that needs no model, for any provider: not met when a deliverable
        conflicts with a pinned fact (naming the first that does), or when a value the criteria
        name is delivered by no step (`rule_verdict`, naming the last deliverable); None when
        neither (the check call judges the criteria). So no model can call a report met whose
        cost centre the criteria name and no step filed."""
        by_name = {s.name: s.id for s in self.deliverables}
        if self.conflicts:
            missing = tuple(c.describe() for c in self.conflicts)
            verb = "disagrees" if len(missing) == 1 else "disagree"
            reason = f"{_count(missing, 'delivered value')} {verb} with the pinned facts"
            step_id = by_name[self.conflicts[0].step]
            return GoalVerdict(False, reason, missing, step_id, "rules", tuple(self.criteria))
        if not self.criteria:
            return None
        results = {s.name: s.result or {} for s in self.deliverables}
        met, reason, lacking = rule_verdict(
            self.criteria, results, given=self.given, restating=self.restating
        )
        if met:
            return None
        last = self.deliverables[-1].id if self.deliverables else None
        return GoalVerdict(False, reason, tuple(lacking), last, "rules", tuple(self.criteria))

    def agreed(self) -> GoalVerdict | None:
        """The verdict of a run with pinned facts and no criteria whose deliverables agree with
        them: met, by the rules (recorded like any verdict, so the run's goal check can be
        shown); None when there was nothing to check, or something left to judge."""
        if not self.checked or self.conflicts or self.criteria:
            return None
        last = self.deliverables[-1].id if self.deliverables else None
        return GoalVerdict(True, AGREED, (), last, "rules")


def checks_of(
    session: Session, run: Run, steps: Sequence[Step], pinned: Mapping[str, str] | None = None
) -> Checks:
    """What to check of run `run` (`steps`: its current plan version's, `models.plans.plans.
    current_steps`). Reads the pinned facts (unless given: key -> value, every author's), then
    (only when there is something to check) the waiver, and the plan's graph when there are
    criteria."""
    pinned = dict(pinned) if pinned is not None else pinned_facts(session, run.id or 0)
    delivered = deliverables(steps)
    if (not pinned and not run.success_criteria) or waived(session, run):
        return Checks(delivered, [], [])
    found = conflicts(pinned, {s.name: s.result or {} for s in delivered})
    criteria = criteria_texts(run, pinned)
    if not criteria:  # the pinned facts alone: nothing a model could only restate
        return Checks(delivered, found, criteria, checked=True)
    given = goal_evidence.given_values(run.goal, pinned)
    restated = goal_evidence.restating(steps, current_graph(session, run.id or 0))
    return Checks(delivered, found, criteria, checked=True, given=given, restating=restated)


def criteria_texts(run: Run, facts: Mapping[str, str]) -> list[str]:
    """Run `run`'s success criteria as text, each `${facts.KEY}` replaced by the pinned value
    (`facts`; a key not pinned is left as written), in the order they were added."""
    return [
        _FACT_REFERENCE.sub(lambda m: facts.get(m.group(1), m.group(0)), str(c["text"]))
        for c in run.success_criteria
    ]


def terms(criterion: str) -> list[str]:
    """The values `criterion` names that an outcome must hold (`_TERM`), in order, once each:
    `'filed in EUR against CC-4410, total 1,200.50'` -> `['EUR', 'CC-4410', '1200.50']`. A
    number that follows a bound (`_BOUND`: "under", "at least", "<=", ...) is no such value."""
    found: list[str] = []
    for match in _TERM.finditer(criterion):
        term = next(g for g in match.groups() if g is not None)
        if match.group(5) is not None:
            if _BOUND.search(criterion[: match.start()]):
                continue
            term = term.replace(",", "")
        if term not in found:
            found.append(term)
    return found


def rule_verdict(
    criteria: Sequence[str],
    deliverables: Mapping[str, Mapping[str, Any]],
    *,
    given: frozenset[str] = frozenset(),
    restating: frozenset[str] = frozenset(),
) -> tuple[bool, str, list[str]]:
    """`(met, reason, missing)` for `criteria` judged by their values alone: a criterion is met
    when every one of its `terms` agrees with a scalar field of a deliverable (`agrees`) or is
    a whole token of a text field (`_in_text`: "4" is not in "CC-4410"); `missing` names each
    term no deliverable holds. A criterion every one of whose terms the run was `given` (each
    agrees with one of them) is not met by the deliverables named in `restating`
    (`models.engine.goal_evidence`: a model's text restating what it was told); one that names a
    value the run worked out is, as by any deliverable. A criterion naming no value cannot be
    judged this way and counts as met (the reason says how many did)."""

    def values(names: Iterable[str]) -> list[Any]:
        return [value for name in names for _, _, value in _fields(deliverables[name])]

    evidence = values(n for n in deliverables if n not in restating)
    restated = values(n for n in deliverables if n in restating)
    missing: list[str] = []
    unjudged = 0
    for criterion in criteria:
        wanted = terms(criterion)
        unjudged += not wanted
        told = bool(wanted) and all(any(agrees(g, t) for g in given) for t in wanted)
        pool = evidence if told else evidence + restated  # what may hold this criterion's values
        for term in wanted:
            if not any(_holds(v, term) for v in pool):
                echoed = any(_holds(v, term) for v in restated)
                note = " (a model step only restated it)" if echoed else ""
                missing.append(f"{criterion!r}: nothing the run delivered holds {term!r}{note}")
    if missing:
        reason = f"the run did not deliver {_count(missing, 'value')} the criteria name"
        return False, reason, missing
    return True, _met_reason(len(criteria), unjudged), []


def _met_reason(criteria: int, unjudged: int) -> str:
    """Why `rule_verdict` found `criteria` criteria met, `unjudged` of them naming no value (the
    words a person reads in `agentq run show`; issue 31 found "every value 0 criteria name is
    delivered (1 name none)" there)."""
    if unjudged == criteria:
        return (
            "no criterion names a value to look for (a number, a code, quoted text), so values "
            "alone find nothing missing"
        )
    held = "every value the criteria name is in what the run delivered"
    if not unjudged:
        return held
    return f"{held}; {unjudged} of the {criteria} criteria name no value to look for"


def _count(items: Sequence[Any], noun: str) -> str:
    """`1 value`, `2 values`."""
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def _holds(value: Any, term: str) -> bool:
    """Whether scalar field `value` holds `term`: it agrees with it (`agrees`), or it is text
    holding the term as a whole token (`_in_text`)."""
    return agrees(term, value) or (isinstance(value, str) and _in_text(term, value))


def _in_text(term: str, text: str) -> bool:
    """Whether `term` appears in `text` as a whole token, any case: not inside a longer word,
    identifier or number. A bare substring let the criterion "all 4 receipts are attached" be
    met by a report with 3, its cost centre `CC-4410` holding a "4" (the agent-tasks
    benchmark, `ops/bench/agent_tasks.py`, found it as a false success)."""
    token = rf"(?<![\w.-]){re.escape(term)}(?![\w-]|[.,]\d)"
    return re.search(token, text, flags=re.IGNORECASE) is not None


def record(session: Session, run: Run, verdict: GoalVerdict) -> None:
    """Record `verdict` on run `run`'s plan version as a `goal.checked` event (in the caller's
    transaction): `{plan_version, met, source, reason, missing, criteria}` and its step id
    (`models.engine.goal_reports` tells it to people)."""
    record_event(
        session,
        run.id or 0,
        GOAL_CHECKED,
        step_id=verdict.step_id,
        plan_version=run.plan_version,
        met=verdict.met,
        source=verdict.source,
        reason=verdict.reason,
        missing=list(verdict.missing),
        criteria=list(verdict.criteria),
    )


def last_unmet(session: Session, run: Run) -> dict[str, Any] | None:
    """The detail of the last `goal.checked` event of run `run` that found its goal not met (for
    a replan's prompt), None when there is none."""
    row = sql.execute(session, LAST_UNMET, {"run_id": run.id, "kind": GOAL_CHECKED}).fetchone()
    return dict(row[0]) if row is not None else None


# last_unmet: the newest verdict of a run that found its goal not met.
LAST_UNMET: Final = """
SELECT e.detail FROM run_events e
WHERE e.run_id = :run_id AND e.kind = :kind AND e.detail->>'met' = 'false'
ORDER BY e.id DESC LIMIT 1"""
