"""One attempt of a step, as the worker holds it: the claimed step with what it needs from its
run (`Claimed`), what the attempt came to (`Outcome`), and the back-off before the next one
(`retry_countdown_s`). Plain data, shared by the step task
(`worker.execution.steps`), the should-replan check that annotates an outcome
(`worker.phases.replan_checks`) and the outage retry that carries one (`worker.execution.outages`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from models.settings import get_settings
from models.tables import Step


@dataclass(frozen=True)
class Outcome:
    """What one attempt of a step came to.

    `deferred`: rate-limited, due again in `retry_after_s`; `escalated`: the step failed and the
    run waits for a reviewer (`reason`); `retry`: a retryable failure with attempts left;
    `awaiting_approval`: stopped before the gated call `stopped` (JSON, as the outcome is carried
    across a database outage: `worker.execution.outages`); `awaiting_child`: a step of kind `run`
    whose child run is to be submitted with the step's end (`child`: its `facts`).
    """

    kind: Literal[
        "succeeded",
        "retry",
        "failed",
        "deferred",
        "escalated",
        "awaiting_approval",
        "awaiting_child",
    ]
    result: dict[str, Any] | None = None
    error: str = ""
    retry_after_s: float = 0.0
    reason: str = ""
    raw: str = ""  # the model output that could not be used, kept with the escalation
    check: dict[str, str] | None = (
        None  # the should-replan check's answer (`worker.phases.replan_checks`)
    )
    stopped: dict[str, Any] | None = None  # `models.approvals.calls.ApprovalRequired.row`
    child: dict[str, Any] | None = None  # `awaiting_child`: the child run's facts


@dataclass(frozen=True)
class Claimed:
    """A claimed step with what it needs from its run: its pinned facts, the results of the
    steps it waits for (by name; only for a model step or one whose arguments refer to steps),
    how many attempts steps of its name have had, and the run's user."""

    step: Step
    facts: dict[str, str]
    results: dict[str, dict[str, Any]]
    tries: int
    user_id: str = ""
    replan_check: str = "off"  # the run's (`models.plans.plan_checks`)
    deadline_at: datetime | None = (
        None  # the run's wall-time deadline (`worker.execution.time_limits`)
    )
    approvals: dict[str, Any] | None = None  # the run's tightening of the approval policy


def retry_countdown_s(attempt: int) -> float:
    """Exponential backoff before attempt `attempt + 1`: backoff x 2^(attempt-1) seconds."""
    return float(get_settings().retry_backoff_s * 2 ** (attempt - 1))
