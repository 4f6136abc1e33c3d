"""Why a run escalated, as every front end tells it (`agentq run show`, `agentq review show`,
the console's review page): the reason in a reviewer's words, the failed step's error, and
what else the escalation's detail holds. Pure functions of the rows they are given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from models.formats import DETAIL_SHOWN_ELSEWHERE
from models.tables import Escalation, Step

# Why a run escalated, in a reviewer's words; an unlisted reason is shown as its code.
REASON_TEXT: Final = {
    "replan_budget_spent": "A step failed and the run has no replans left in its budget.",
    "token_budget_spent": "The run spent its token budget.",
    "cost_budget_spent": "The run spent its cost budget.",
    "wall_time_budget_spent": "The run ran out of wall time.",
    "step_data_budget_spent": "A step's result does not fit the run's step-data budget: it was "
    "not stored. Approve grants the budget once more; edit asks for less data.",
    "user_step_data_spent": "A step's result does not fit what its user's runs may store "
    "together: it was not stored. Purged or erased runs give theirs back.",
    "budget_spent": "The run spent a budget.",
    "quota_exhausted": "The model provider's account has no quota left.",
    "rate_limited": "The model provider kept refusing requests (rate limited).",
    "context_overflow": "The step's context does not fit the model's context window.",
    "invalid_plan": "The planner did not produce a valid plan.",
    "synthesis_failed": "The final answer could not be written.",
    "goal_not_met": "The steps finished, but what the run delivered fails its goal check, and "
    "no replan is left (or an earlier run of the same request replanned in vain): approve "
    "accepts it as it is; edit replaces the step that delivered it.",
    "invalid_goal_check": "The goal check's answer never validated.",
    "approval_required": "A tool call needs a person's approval before it runs (the approval "
    "policy): approve runs it once as asked; edit runs it with your arguments; reject (with a "
    "reason) fails it; respond answers in the tool's place.",
    "internal_error": "agentq itself failed while planning or answering; see the worker log.",
}


@dataclass(frozen=True)
class Why:
    """`reason`: the escalation's code (`replan_budget_spent`); `text`: it in a reviewer's words
    (`REASON_TEXT`, else the code); `error`: the failed step's error, else the one the detail
    holds (None without either); `extra`: the detail's other keys with a value, in its order
    (those in `models.formats.DETAIL_SHOWN_ELSEWHERE` are shown in rows of their own)."""

    reason: str
    text: str
    error: str | None
    extra: dict[str, Any]

    @property
    def summary(self) -> str:
        """The code, then its words when it has any: `replan_budget_spent: A step failed ...`."""
        return self.reason if self.text == self.reason else f"{self.reason}: {self.text}"


def why(esc: Escalation, failed: Step | None) -> Why:
    """Why `esc` was opened; `failed` is its step (`esc.step_id`) when the caller has it."""
    error = (failed.error if failed is not None else None) or esc.detail.get("error") or None
    extra = {
        k: v
        for k, v in esc.detail.items()
        if k not in DETAIL_SHOWN_ELSEWHERE and v not in ("", None, {}, [])
    }
    return Why(esc.reason, REASON_TEXT.get(esc.reason, esc.reason), error, extra)
