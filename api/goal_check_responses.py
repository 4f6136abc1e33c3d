"""A run's success criteria and goal check as `GET /api/v1/runs/{id}` answers them (pydantic),
re-exported by `api.responses` (the module the Python client reads them from), which they would
take over its 400 lines."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class Criterion(BaseModel):
    """One success criterion of a run: its `text` as written (pinned facts as `${facts.KEY}`),
    `shown` with the run's pinned values put in, and who gave it (`user` at submit, `planner`
    with the first plan)."""

    text: str
    by: str
    shown: str = Field(
        description="The text with each `${facts.KEY}` replaced by the run's pinned value (a key "
        "not pinned is left as written)."
    )


class GoalCheckOut(BaseModel):
    """The run's goal check in words (`models.engine.goal_reports`: the CLI's `run show` and the
    console's run page tell it the same): from its newest `goal.checked` event."""

    state: Literal["met", "not_met", "accepted", "unchecked", "none"] = Field(
        description="`met`; `not_met`; `accepted`: not met, and a reviewer approved the "
        "`goal_not_met` escalation (the outcome as it is); `unchecked`: no verdict yet (or the "
        "run ended before one); `none`: no success criteria and no pinned facts to check."
    )
    met: bool | None = Field(description="Whether the goal was met; null with no verdict.")
    summary: str = Field(description="One line: the headline, the plan version and checker.")
    headline: str = Field(description="The state in a sentence, e.g. `Goal not met`.")
    criteria: list[str] = Field(
        description="The success criteria judged, with the pinned values put in."
    )
    reason: str | None = Field(description="Why, in the checker's words.")
    missing: list[str] = Field(description="What the outcome lacks, one line each; [] when met.")
    checked_by: str | None = Field(description="Who judged it, in words: rules or a model call.")
    plan_version: int | None = Field(description="The plan version the verdict judged.")
    checked_at: datetime | None
