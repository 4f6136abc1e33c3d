"""What a scenario did to the workload, from traces outside agentq's own bookkeeping.

- runs lost: runs that did not succeed, or whose memory task never ended;
- steps committed twice: steps with more than one succeeded attempt (`step_attempts`);
- effects run again: a tool step whose marker is in the effects log more often than once plus
  the number of its attempts that were killed (`ops.chaos.faults.Kill`); a succeeded tool step
  with no line counts as lost work;
- paid twice: a unit of work (a step's model call, a run's plan, synthesis or fact extraction)
  answered by the provider more often than once plus the times a process holding it was killed;
- recovery: kill -> the killed step committed again; service back -> each step unfinished when
  it went down committed (the longest).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlmodel import col, select

from models.db import session_scope
from models.memory.memory_admin import memory_ended
from models.tables import Run, Step, StepAttempt
from ops.chaos.faults import Record
from ops.chaos.workload import STEP_MARKER, count_calls, count_effects
from ops.fake_provider import FakeOpenAI


@dataclass
class Verdict:
    """The checks (each a list of what broke it: empty is a pass) and the figures (seconds)."""

    runs: int
    steps: int
    lost_runs: list[str] = field(default_factory=list)
    committed_twice: list[int] = field(default_factory=list)
    effects_again: list[str] = field(default_factory=list)
    paid_twice: list[str] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)  # per kill, or per step per outage
    kills: int = 0
    killed_holding: int = 0
    calls: int = 0
    throttled: int = 0  # requests the provider answered 429
    refused: int = 0  # deliveries the claims turned away (a duplicate, a late re-send)

    @property
    def passed(self) -> bool:
        """No run lost, nothing committed, run or paid for twice."""
        return not (self.lost_runs or self.committed_twice or self.effects_again or self.paid_twice)

    def pct(self, q: float) -> float | None:
        """The `q` quantile (0..1, nearest rank) of `recovery_s`; None when there is none."""
        if not self.recovery_s:
            return None
        ordered = sorted(self.recovery_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> str:
        """One line: the counts, then the recovery p50 / p90 / max when there was any."""
        parts = [
            f"{self.runs} runs, {self.steps} steps, {self.calls} paid calls",
            f"lost {len(self.lost_runs)}",
            f"committed twice {len(self.committed_twice)}",
            f"effects again {len(self.effects_again)}",
            f"paid twice {len(self.paid_twice)}",
            f"{self.refused} deliveries refused",
        ]
        if self.kills:
            parts.append(f"{self.kills} kills ({self.killed_holding} holding work)")
        if self.recovery_s:
            p50 = statistics.median(self.recovery_s)
            parts.append(
                f"recovery p50 {p50:.1f} s, p90 {self.pct(0.9):.1f} s, "
                f"max {max(self.recovery_s):.1f} s"
            )
        return "; ".join(parts)


def judge(runs: dict[str, int], provider: FakeOpenAI, effects: Path, record: Record) -> Verdict:
    """The verdict on `runs` (marker -> run id) after the scenario that left `record`."""
    with session_scope() as session:
        statuses = dict(
            session.execute(
                select(Run.id, col(Run.status)).where(col(Run.id).in_(runs.values()))
            ).all()
        )
        steps = session.execute(
            select(Step.id, Step.kind, Step.instruction, col(Step.status)).where(
                col(Step.run_id).in_(runs.values())
            )
        ).all()
        attempts = session.execute(
            select(StepAttempt.step_id, StepAttempt.finished_at).where(
                col(StepAttempt.step_id).in_([s.id for s in steps]),
                col(StepAttempt.outcome) == "succeeded",
            )
        ).all()
    committed: dict[int, list[datetime]] = {}
    for step_id, finished in attempts:
        committed.setdefault(step_id, []).append(finished)
    killed_steps = Counter(s for k in record.kills for s in k.steps)
    killed_units = Counter(u for k in record.kills for u in k.phases)
    verdict = Verdict(runs=len(runs), steps=len(steps))
    remembered = _remembered(list(runs.values()))
    verdict.lost_runs = [
        f"{m} ({statuses.get(r)}{'' if r in remembered else ', not remembered'})"
        for m, r in runs.items()
        if statuses.get(r) != "succeeded" or r not in remembered
    ]
    verdict.committed_twice = sorted(s for s, done in committed.items() if len(done) > 1)
    ran = count_effects(effects)
    for step in steps:
        found = STEP_MARKER.search(step.instruction)
        if found is None:
            continue
        unit = found.group(0)
        killed_units[unit] += killed_steps[step.id]
        if step.kind == "tool":
            allowed = 1 + killed_steps[step.id]
            if ran[unit] > allowed or (step.status == "succeeded" and ran[unit] == 0):
                verdict.effects_again.append(f"{unit}: ran {ran[unit]}, allowed {allowed}")
    calls = count_calls(provider)
    verdict.throttled = sum(1 for r in provider.received() if r.reply == "rate_limited")
    verdict.calls = sum(calls.values())
    verdict.paid_twice = [
        f"{unit}: {n} calls, allowed {1 + killed_units[unit]}"
        for unit, n in sorted(calls.items())
        if n > 1 + killed_units[unit]
    ]
    verdict.kills = len(record.kills)
    verdict.killed_holding = sum(1 for k in record.kills if k.steps)
    for kill in record.kills:
        for step_id in kill.steps:
            done = [d.timestamp() for d in committed.get(step_id, []) if d.timestamp() > kill.at]
            if done:
                verdict.recovery_s.append(min(done) - kill.at)
    for _, back, pending in record.outages:
        for step_id in pending:
            done = [d.timestamp() for d in committed.get(step_id, [])]
            if done:
                verdict.recovery_s.append(max(0.0, min(done) - back))
    return verdict


def _remembered(run_ids: list[int]) -> set[int]:
    """Those of `run_ids` whose memory task has ended
    (`models.memory.memory_admin.memory_ended`)."""
    with session_scope() as session:
        return {r for r in run_ids if memory_ended(session, r) is not None}
