"""The agent-tasks benchmark's outcome checks and figures: pure functions, no services.

An outcome is checked from what a run's rows say happened (`Observed`, read by
`ops.bench.agent_runs.observe`): its status, the results of every successful call of the goal's
effect tool (a tool step's result, or a model step's journaled tool call), its escalations.
Never from the run's own verdict: a run marked `succeeded` whose outcome check fails is a
**false success**, the figure issue 12 asks to be 0 on the offline provider.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ops.bench.agent_goals import Expected
from ops.bench.figures import markdown_table

CENT: Final = 0.005  # numbers in an effect's result agree to within half a cent
ENDED: Final = frozenset({"succeeded", "waiting_review"})  # how a stopped plan may end
TABLE_HEAD: Final = (
    "pass",
    "provider",
    "goals",
    "outcome as expected",
    "runs succeeded",
    "false success",
    "replans",
    "escalations",
    "model calls/goal",
    "tokens/goal",
    "s/goal",
)


@dataclass(frozen=True)
class Observed:
    """What one run's rows say: `status` (`runs.status`; "timeout" if it had not ended),
    `effects` (the results of each successful call of the goal's effect tool, oldest first),
    `escalations` (their reasons, oldest first), `replans` (`runs.replans_used`), `tokens`
    (`runs.tokens_used`), `seconds` (submit to the run's end or its last escalation),
    `model_calls` (its `model.call` events: every attempt, its memory's extraction included)."""

    status: str
    effects: tuple[Mapping[str, Any], ...]
    escalations: tuple[str, ...]
    replans: int
    tokens: int
    seconds: float
    model_calls: int = 0


@dataclass(frozen=True)
class Checked:
    """Goal `goal`'s run `run_id` and its verdict: `ok` when the outcome is the expected one,
    `why` says what was found otherwise (or what matched)."""

    goal: str
    run_id: int
    observed: Observed
    ok: bool
    why: str

    @property
    def false_success(self) -> bool:
        """The run says `succeeded` and its outcome check failed."""
        return self.observed.status == "succeeded" and not self.ok


def check(expected: Expected, seen: Observed) -> tuple[bool, str]:
    """`(ok, why)`: whether `seen` is the outcome `expected` describes (see `Expected`)."""
    if expected.kind == "met":
        return _met(expected, seen)
    if expected.kind == "escalates":
        last = seen.escalations[-1] if seen.escalations else None
        if seen.status != "waiting_review" or last not in expected.reasons:
            return False, f"expected an escalation {'/'.join(expected.reasons)}; {_found(seen)}"
        return True, f"escalated {last}"
    if seen.effects:
        return False, f"expected no {expected.effect}; it ran {len(seen.effects)}x; {_found(seen)}"
    if seen.status not in ENDED:
        return False, f"expected a stop that says why; {_found(seen)}"
    return True, f"stopped before {expected.effect} ({seen.status})"


def _met(expected: Expected, seen: Observed) -> tuple[bool, str]:
    if seen.status != "succeeded" or len(seen.effects) != 1:
        return False, f"expected one {expected.effect} in a succeeded run; {_found(seen)}"
    (effect,) = seen.effects
    wrong = [
        f"{key}={effect.get(key)!r} (expected {value!r})"
        for key, value in expected.fields.items()
        if not same(value, effect.get(key))
    ]
    if wrong:
        return False, f"{expected.effect} delivered " + ", ".join(wrong)
    return True, ", ".join(f"{key}={value}" for key, value in expected.fields.items())


def same(wanted: Any, found: Any) -> bool:
    """Numbers agree within `CENT` (a bool is no number); anything else must be equal."""
    if _is_number(wanted) and _is_number(found):
        return math.isclose(float(wanted), float(found), abs_tol=CENT, rel_tol=0.0)
    return bool(wanted == found)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _found(seen: Observed) -> str:
    escalated = f", escalated {'/'.join(seen.escalations)}" if seen.escalations else ""
    return f"found {seen.status} with {len(seen.effects)} effect(s){escalated}"


@dataclass(frozen=True)
class Totals:
    """One provider's figures over its checked goals."""

    goals: int
    as_expected: int
    succeeded: int
    false_success: int
    replans: int
    escalated: int
    tokens_per_goal: float
    seconds_per_goal: float
    model_calls_per_goal: float = 0.0


def totals(checked: Sequence[Checked]) -> Totals:
    """The sums and means of `checked` (means 0 when there are none)."""
    n = len(checked)
    seen = [c.observed for c in checked]
    return Totals(
        goals=n,
        as_expected=sum(c.ok for c in checked),
        succeeded=sum(o.status == "succeeded" for o in seen),
        false_success=sum(c.false_success for c in checked),
        replans=sum(o.replans for o in seen),
        escalated=sum(bool(o.escalations) for o in seen),
        tokens_per_goal=sum(o.tokens for o in seen) / n if n else 0.0,
        seconds_per_goal=sum(o.seconds for o in seen) / n if n else 0.0,
        model_calls_per_goal=sum(o.model_calls for o in seen) / n if n else 0.0,
    )


def table_row(provider: str, found: Totals, pass_no: int = 1) -> list[str]:
    """The table's row for pass `pass_no` on `provider` (`TABLE_HEAD`)."""
    return [
        str(pass_no),
        provider,
        str(found.goals),
        f"{found.as_expected}/{found.goals}",
        str(found.succeeded),
        str(found.false_success),
        str(found.replans),
        str(found.escalated),
        f"{found.model_calls_per_goal:.1f}",
        f"{found.tokens_per_goal:,.0f}",
        f"{found.seconds_per_goal:.1f}",
    ]


def table(passes: Sequence[tuple[str, Sequence[Checked]]]) -> str:
    """The Markdown table of the passes, (provider, checked goals) each: a row per pass."""
    rows = [table_row(p, totals(c), i) for i, (p, c) in enumerate(passes, start=1)]
    return markdown_table(TABLE_HEAD, rows)


def learning_line(passes: Sequence[Sequence[Checked]]) -> str:
    """`learning: replans R1 -> RN, tokens/goal T1 -> TN, expected E1 -> EN, false successes F`:
    the first pass against the last over the goals both ran (a time box may end the last one
    early: then `, over G of their goals` follows), false successes over all passes."""
    ran = {c.goal for c in passes[-1]}
    first = totals([c for c in passes[0] if c.goal in ran])
    last = totals(passes[-1])
    false = sum(totals(p).false_success for p in passes)
    line = (
        f"learning: replans {first.replans} -> {last.replans}, "
        f"tokens/goal {first.tokens_per_goal:,.0f} -> {last.tokens_per_goal:,.0f}, "
        f"expected {first.as_expected} -> {last.as_expected}, false successes {false}"
    )
    return line if len(ran) == len(passes[0]) else f"{line}, over {len(ran)} of their goals"


def goal_line(kind: str, c: Checked) -> str:
    """One goal's line for `--verbose`: verdict, goal id and kind, the run's figures, why."""
    o = c.observed
    mark = "ok  " if c.ok else ("FALSE SUCCESS" if c.false_success else "MISS")
    figures = f"{o.status}, {o.replans} replans, {o.tokens} tokens, {o.seconds:.1f} s"
    return f"{mark:<13} {c.goal:<28} {kind:<10} run {c.run_id}, {figures}: {c.why}"
