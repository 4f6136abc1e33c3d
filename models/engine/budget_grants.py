"""What approving an escalation does to its run's budgets: the reviewer sees what the run spent
and may spend (`standing`), and chooses each new limit or takes the default.

Approving a spent budget used to grant, silently, the spend plus the larger of the run's limit
and the default budget: a run submitted with `--tokens 500` went on with 200,000 after a bare
"approve" (issue 27, item 11). Now:

- a budget escalation (`token_budget_spent`, `cost_budget_spent`, `wall_time_budget_spent`,
  `step_data_budget_spent`: its ceiling is the user's total, `AGENTQ_USER_STEP_DATA_MAX_BYTES`) is
  shown with its budget's spend, limit, original limit (before any reviewer's grant), the
  operator's ceiling (`AGENTQ_MAX_*`, the stack's: `models.engine.stack_limits`) and the default new
  limit: spent plus the original limit, at most the ceiling;
- approve takes new limits (`{"tokens": N, "cost_usd": X, "wall_time_s": S, "replans": R}`), each
  checked: not over its ceiling (`InvalidInput` naming `budget.<name>`) and not below what the
  run spent (`Conflict`, naming it: the run's state decides); the spent budget not given takes
  the default, said in the answer;
- the limits set go into the escalation row (`Escalation.granted`) and the run's timeline
  (`run.budget_granted`), in the transaction that decides the escalation and resumes the run.

Wall time is measured from the run's submit: its limit is `runs.wall_time_limit_s` and its
deadline `created_at` plus that limit, so a granted `wall_time_s` moves the deadline with it (the
default, spent plus the original, ends the original budget's length from now).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from sqlmodel import Session, col, select

from models.engine.events import record_event
from models.engine.guards import guarded
from models.errors import Conflict, InvalidInput
from models.settings import Settings, setting_name
from models.tables import Escalation, Run

Chosen = Literal["reviewer", "default"]
# A budget's spend and limit columns of `runs` (wall time: seconds since submit), and its
# ceiling's `Settings` field.
BUDGETS: Final = {
    "tokens": ("tokens_used", "tokens_limit", "max_token_budget"),
    "cost_usd": ("cost_used_usd", "cost_limit_usd", "max_cost_budget_usd"),
    "wall_time_s": (None, "wall_time_limit_s", "max_wall_time_budget_s"),
    "replans": ("replans_used", "replans_limit", "max_replan_budget"),
    # A run's step data (`models.engine.storage`): its ceiling is the user's total, 0 for none.
    "step_data_bytes": ("step_data_bytes", "step_data_limit_bytes", "user_step_data_max_bytes"),
}
UNCAPPED_WHEN_ZERO: Final = frozenset({"step_data_bytes"})  # a ceiling of 0 turns it off
# The escalation reasons of a spent budget, and which.
SPENT: Final = {
    "token_budget_spent": "tokens",
    "cost_budget_spent": "cost_usd",
    "wall_time_budget_spent": "wall_time_s",
    "step_data_budget_spent": "step_data_bytes",
}
# counted in units; the others are real numbers
WHOLE: Final = frozenset({"tokens", "replans", "step_data_bytes"})


@dataclass(frozen=True)
class Standing:
    """A budget of a run as a reviewer decides it: what it `used`, its `limit` now, its
    `original` limit (before any reviewer's grant), the operator's `ceiling` (the `setting`),
    and the `default` new limit: used plus original, at most the ceiling."""

    name: str
    used: float
    limit: float
    original: float
    ceiling: float
    setting: str

    @property
    def default(self) -> float:
        return _unit(self.name, min(self.used + self.original, self.ceiling))


def _unit(name: str, value: float) -> float:
    return float(int(value)) if name in WHOLE else round(value, 6)


def standing(
    session: Session, run: Run, name: str, *, settings: Settings, now: datetime
) -> Standing:
    """Budget `name` (`BUDGETS`) of `run` as it stands at `now`, under `settings`' ceilings
    (give the stack's: `models.engine.stack_limits.effective`)."""
    used_column, limit_column, ceiling = BUDGETS[name]
    used = (
        (now - run.created_at).total_seconds() if used_column is None else getattr(run, used_column)
    )
    limit = float(getattr(run, limit_column))
    original = _original(session, run.id or 0, name)
    return Standing(
        name=name,
        used=float(used),
        limit=limit,
        original=limit if original is None else original,
        ceiling=_ceiling(name, float(getattr(settings, ceiling))),
        setting=setting_name(ceiling),
    )


def _ceiling(name: str, value: float) -> float:
    return math.inf if value == 0 and name in UNCAPPED_WHEN_ZERO else value


def spent(
    session: Session, esc: Escalation, run: Run, *, settings: Settings, now: datetime
) -> Standing | None:
    """The budget escalation `esc` is about, as it stands (None for another reason)."""
    name = SPENT.get(esc.reason)
    return None if name is None else standing(session, run, name, settings=settings, now=now)


def _original(session: Session, run_id: int, name: str) -> float | None:
    """Budget `name`'s limit before the run's first grant of it (None: never granted)."""
    granted = session.exec(
        select(Escalation.granted)
        .where(Escalation.run_id == run_id, col(Escalation.granted).is_not(None))
        .order_by(col(Escalation.decided_at))
    ).all()
    firsts = [g[name]["limit_before"] for g in granted if g and name in g]
    return float(firsts[0]) if firsts else None


def grants(
    session: Session,
    esc: Escalation,
    run: Run,
    asked: dict[str, float],
    *,
    settings: Settings,
    now: datetime,
) -> dict[str, dict[str, Any]]:
    """The new limits approving `esc` sets: each of `asked` (by `BUDGETS` name), and the spent
    budget's default when it is not asked for; `{name: {"used", "limit_before", "limit",
    "chosen"}}`. Raises `InvalidInput` naming `budget.<name>` for an unknown budget or a limit
    over its ceiling, `Conflict` naming it for a limit below what the run spent (or a default
    that cannot be above it); nothing is written."""
    unknown = sorted(set(asked) - set(BUDGETS))
    if unknown:
        raise InvalidInput(f"budget.{unknown[0]}: not a budget; one of {', '.join(BUDGETS)}")
    chosen: dict[str, float | None] = {name: float(value) for name, value in asked.items()}
    for name, value in chosen.items():
        if value is not None and name in WHOLE and not value.is_integer():
            raise InvalidInput(f"budget.{name}: a whole number; got {value:g}")
    if (spent_name := SPENT.get(esc.reason)) is not None:
        chosen.setdefault(spent_name, None)  # None: the default
    out: dict[str, dict[str, Any]] = {}
    for name, value in chosen.items():
        now_standing = standing(session, run, name, settings=settings, now=now)
        how: Chosen = "default" if value is None else "reviewer"
        limit = now_standing.default if value is None else _unit(name, value)
        _check(now_standing, limit, how)
        out[name] = {
            "used": _unit(name, now_standing.used),
            "limit_before": now_standing.limit,
            "original_limit": now_standing.original,
            "limit": limit,
            "chosen": how,
        }
    return out


def _check(budget: Standing, limit: float, how: Chosen) -> None:
    field = f"budget.{budget.name}"
    if limit > budget.ceiling:
        raise InvalidInput(
            f"{field}: at most {_plain(budget.ceiling)} ({budget.setting}); got {_plain(limit)}"
        )
    if limit <= budget.used if how == "default" else limit < budget.used:
        raise Conflict(  # the run's spend, not the request, decides: a 409 over HTTP
            f"{field}: the run has spent {_plain(budget.used)} and {budget.setting} is "
            f"{_plain(budget.ceiling)}: no more can be granted; reject, or edit the plan"
            if how == "default"
            else f"{field}: not below what the run spent, {_plain(budget.used)}; got "
            f"{_plain(limit)}"
        )


def apply(
    session: Session, esc: Escalation, granted: dict[str, dict[str, Any]], *, reviewer: str
) -> None:
    """Set the run's new limits (one guarded UPDATE of the run waiting for review), and record
    them on the escalation (`granted`) and in the run's timeline (`run.budget_granted`), in the
    caller's transaction. Nothing when `granted` is empty."""
    if not granted:
        return
    values: dict[str, Any] = {}
    for name, grant in granted.items():
        column = BUDGETS[name][1]
        values[column] = int(grant["limit"]) if name in WHOLE else grant["limit"]
    run = session.get(Run, esc.run_id)
    if "wall_time_s" in granted and run is not None:
        values["deadline_at"] = run.created_at + timedelta(seconds=values["wall_time_limit_s"])
    guarded(session, Run, esc.run_id, to="waiting_review", expected=["waiting_review"], **values)
    esc.granted = granted
    session.add(esc)
    detail: dict[str, Any] = {"escalation_id": esc.id, "by": reviewer, "budgets": granted}
    record_event(session, esc.run_id, "run.budget_granted", **detail)


def describe(granted: dict[str, dict[str, Any]]) -> str:
    """The limits set, as the answer says them: `tokens 500 -> 1012 (the default: 512 spent +
    the original limit 500)`, or `(chosen by the reviewer; 512 spent)`."""
    parts = []
    for name, g in granted.items():
        why = (
            f"the default: {_plain(g['used'])} spent + the original limit "
            f"{_plain(g['original_limit'])}"
            if g["chosen"] == "default"
            else f"chosen by the reviewer; {_plain(g['used'])} spent"
        )
        parts.append(f"{name} {_plain(g['limit_before'])} -> {_plain(g['limit'])} ({why})")
    return "; ".join(parts)


def _plain(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"
