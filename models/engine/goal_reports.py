"""A run's goal check as a person reads it: whether the goal was met, the success criteria it was
judged by (pinned values put in, never `${facts.KEY}`), why, and what was missing (issue 31,
item 5). One wording for every front end: `agentq run show`, the console's run page and the
API's run resource (`goal_check`), so they cannot tell it three ways.

It is read from the run's newest `goal.checked` event (`models.engine.goal_checks.record`:
`{plan_version, met, source, reason, missing, criteria}`) and its row: `report` is the pure
wording, `report_of` reads what it needs. A verdict recorded before the criteria were kept with
it shows the run's criteria as they read now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from sqlmodel import Session

from models import sql
from models.engine.goal_checks import GOAL_CHECK_WAIVED, GOAL_CHECKED, criteria_texts
from models.states import RUN_TERMINAL
from models.tables import Run

State = Literal["met", "not_met", "accepted", "unchecked", "none"]
HEADLINES: Final[dict[State, str]] = {
    "met": "Goal met",
    "not_met": "Goal not met",
    "accepted": "Goal not met; a reviewer accepted the outcome as it is",
    "unchecked": "Not checked yet: the goal is checked once the steps finish and the answer "
    "is written",
    "none": "No goal check: the run has no success criteria and no pinned facts",
}
ENDED_UNCHECKED: Final = "No verdict recorded: the run ended before its goal check"
CHECKED_BY: Final = {"rules": "rules, with no model call", "model": "a model call"}
OFFLINE_CHECK: Final = "the offline provider, by the values the criteria name"
MET: Final[dict[State, bool]] = {"met": True, "not_met": False, "accepted": False}

# last_verdict: the run's newest goal check (any plan version), with when it was made.
LAST_VERDICT: Final = """
SELECT e.detail, e.at FROM run_events e WHERE e.run_id = :run_id AND e.kind = :kind
ORDER BY e.id DESC LIMIT 1"""


@dataclass(frozen=True)
class GoalReport:
    """A run's goal check in words. `state`: `met`, `not_met`, `accepted` (not met, and a
    reviewer approved the `goal_not_met` escalation of that plan version), `unchecked` (it has
    something to check and no verdict yet) or `none` (nothing to check); `headline` says it in
    a sentence. For a verdict: the `criteria` it judged, its `reason`, what was `missing` (one
    line each), who checked it (`checked_by`, in words), its `plan_version` and `checked_at`;
    `later` says when the run has moved on to a plan version not checked yet."""

    state: State
    headline: str
    criteria: tuple[str, ...] = ()
    reason: str | None = None
    missing: tuple[str, ...] = ()
    checked_by: str | None = None
    plan_version: int | None = None
    checked_at: datetime | None = None
    later: str | None = None

    @property
    def met(self) -> bool | None:
        """True when met, False when not (accepted or not), None with no verdict."""
        return MET.get(self.state)

    @property
    def summary(self) -> str:
        """One line: the headline, then for a verdict its plan version and checker, e.g.
        `Goal not met (plan version 1, checked by rules, with no model call)`."""
        line = self.headline
        if self.plan_version is not None:
            line += f" (plan version {self.plan_version}, checked by {self.checked_by})"
        return f"{line}; {self.later}" if self.later else line

    @property
    def rows(self) -> list[tuple[str, tuple[str, ...]]]:
        """The report as labelled lines, in the order every front end shows them: `goal check`
        (the summary), `criteria`, `why` (the reason) and `missing`; empty ones left out."""
        rows = [
            ("goal check", (self.summary,)),
            ("criteria", self.criteria),
            ("why", (self.reason,) if self.reason else ()),
            ("missing", self.missing),
        ]
        return [(label, lines) for label, lines in rows if lines]


def report(
    run: Run,
    verdict: Mapping[str, Any] | None,
    *,
    pinned: Mapping[str, str],
    accepted: bool = False,
    checked_at: datetime | None = None,
) -> GoalReport:
    """`run`'s goal check from its newest verdict (`verdict`: a `goal.checked` event's detail,
    made at `checked_at`; None when it has none, and an erased one, `{}`, is none:
    `models.engine.erased_runs`), its `pinned` facts (key -> value) and whether a reviewer
    `accepted` that verdict's plan version as it is."""
    if verdict is None or "met" not in verdict:
        return _without_verdict(run, criteria_texts(run, pinned), pinned)
    met = bool(verdict.get("met"))
    state: State = "met" if met else "accepted" if accepted else "not_met"
    version = int(verdict.get("plan_version") or run.plan_version)
    judged = verdict.get("criteria")
    criteria = judged if isinstance(judged, list) else criteria_texts(run, pinned)
    return GoalReport(
        state=state,
        headline=HEADLINES[state],
        criteria=tuple(str(c) for c in criteria),
        reason=str(verdict.get("reason") or "") or None,
        missing=() if met else tuple(str(m) for m in verdict.get("missing") or ()),
        checked_by=_checked_by(str(verdict.get("source", "")), run.provider),
        plan_version=version,
        checked_at=checked_at,
        later=_later(run, version),
    )


def _without_verdict(run: Run, criteria: Sequence[str], pinned: Mapping[str, str]) -> GoalReport:
    if not criteria and not pinned:
        return GoalReport("none", HEADLINES["none"])
    ended = run.status in RUN_TERMINAL
    headline = ENDED_UNCHECKED if ended else HEADLINES["unchecked"]
    return GoalReport("unchecked", headline, criteria=tuple(criteria))


def _checked_by(source: str, provider: str) -> str:
    if source == "model" and provider == "offline":
        return OFFLINE_CHECK
    return CHECKED_BY.get(source, source or "an unknown checker")


def _later(run: Run, version: int) -> str | None:
    """What a verdict on plan version `version` leaves unsaid of a run that went on past it."""
    if version >= run.plan_version or run.status in RUN_TERMINAL:
        return None
    return f"plan version {run.plan_version} is checked once its steps finish"


def report_of(session: Session, run: Run, pinned: Mapping[str, str]) -> GoalReport:
    """`report` for `run` as its rows stand (`pinned`: its pinned facts, which the caller has
    read): its newest verdict, and whether a reviewer accepted that verdict's plan version."""
    params = {"run_id": run.id, "kind": GOAL_CHECKED}
    row = sql.execute(session, LAST_VERDICT, params).fetchone()
    if row is None:
        return report(run, None, pinned=pinned)
    detail = dict(row.detail)
    accepted = False
    if detail.get("met") is False:
        version = {"run_id": run.id, "version": detail.get("plan_version", run.plan_version)}
        accepted = bool(sql.execute(session, GOAL_CHECK_WAIVED, version).fetchone()[0])
    return report(run, detail, pinned=pinned, accepted=accepted, checked_at=row.at)
