"""The response bodies of the HTTP API (pydantic), as the OpenAPI spec documents them.

They are built from rows by the `*_out` functions of the routers; the `from_attributes` ones
read the row's columns directly.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from api.goal_check_responses import Criterion as Criterion
from api.goal_check_responses import GoalCheckOut as GoalCheckOut
from api.memory_responses import DeletedOut as DeletedOut
from api.memory_responses import EpisodeOut as EpisodeOut
from api.memory_responses import FactOut as FactOut
from api.memory_responses import ForgetOut as ForgetOut
from api.memory_responses import Score as Score
from api.memory_responses import ScoredEpisodeOut as ScoredEpisodeOut
from api.memory_responses import ScoredFactOut as ScoredFactOut
from api.memory_responses import SearchOut as SearchOut
from api.procedure_responses import ProcedureDetail as ProcedureDetail
from api.procedure_responses import ProcedureOut as ProcedureOut
from api.procedure_responses import ProcedureOutcomeOut as ProcedureOutcomeOut
from api.procedure_responses import ProcedureVersionOut as ProcedureVersionOut
from api.schedule_responses import ScheduleFireOut as ScheduleFireOut
from api.schedule_responses import ScheduleOut as ScheduleOut


class ErrorOut(BaseModel):
    """Every refusal: `detail` says what was wrong and what is allowed; `error` is its kind."""

    detail: str
    error: str


class PrincipalOut(BaseModel):
    """Who the token acts as."""

    token_id: int
    name: str
    role: Literal["submitter", "reviewer", "admin"]
    user_id: str | None


class Spend(BaseModel):
    """A run's budgets and what it has used of them."""

    replans_used: int
    replans_limit: int
    tokens_used: int
    tokens_limit: int
    cost_used_usd: float
    cost_limit_usd: float
    wall_time_limit_s: float
    deadline_at: datetime | None
    deferrals: int
    step_data_bytes: int = Field(description="Step data the run's steps hold, bytes.")
    step_data_limit_bytes: int = Field(description="The run's step-data budget, bytes.")


class RunOut(BaseModel):
    """One run, as listed."""

    id: int
    user_id: str
    goal: str
    status: str
    plan_version: int
    provider: str
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    spend: Spend


class Preview(BaseModel):
    """A value too large to show whole (over 2 KiB as JSON): its size and its JSON text's start.
    The step result endpoint (`/runs/{run_id}/steps/{step_id}/result`) has a whole result."""

    model_config = ConfigDict(extra="forbid")
    shortened: Literal[True]
    bytes: int = Field(description="The whole value's size as JSON text, bytes.")
    preview: str = Field(description="The first 2,048 characters of its JSON text.")


Shortenable = Preview | dict[str, Any]
"""A JSON object shown whole, or a `Preview` of it when large (the row's `shortened` says)."""


class StepOut(BaseModel):
    """One step row. `plan_version` created it; `position` is its index in the newest version
    that holds it. In a run's detail, args and a result over 2 KiB are `Preview`s, named in
    `shortened`."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    plan_version: int
    position: int
    name: str
    instruction: str
    kind: str
    tool: str | None
    tools: list[str] = []
    expect: list[dict[str, Any]] = Field(
        default=[], description="Checks of the step's result, as the plan declared them."
    )
    output: dict[str, str] | None = Field(
        default=None,
        description="A model step's answer fields and their types, as the plan declared them "
        "(its result holds those fields); null when it declares none.",
    )
    args: Shortenable
    status: str
    attempt: int
    max_attempts: int
    deferrals: int
    tokens_used: int
    cost_used_usd: float
    queued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    result: Shortenable | None
    error: str | None
    shortened: list[Literal["args", "result"]] = Field(
        default=[], description="Which of `args` and `result` are `Preview`s."
    )


class StepResultOut(BaseModel):
    """One step's whole result (null until it has one)."""

    run_id: int
    step_id: int
    name: str
    status: str
    result: dict[str, Any] | None


StepIdKey = Annotated[str, StringConstraints(pattern=r"^[0-9]+$")]


class PlanVersionOut(BaseModel):
    """One version of the plan: its steps' ids in order, the graph they make (`after`, and the
    `waves` it gives), who wrote it and why. A step's dependencies belong to the version, not
    the step: a replan or a reviewer's decision rewires what waited for the step it replaces."""

    model_config = ConfigDict(from_attributes=True)
    version: int
    step_ids: list[int]
    after: dict[StepIdKey, list[int]] = Field(
        description="What each step waits for, as stored: step id (as text) -> the ids of the "
        "steps it waits for ([]: none). A step starts once all of them succeeded."
    )
    waves: list[list[int]] = Field(
        description="The step ids by wave, in plan order within each: the first wave waits for "
        "nothing, each step of a later wave for steps of earlier waves only; the steps of one "
        "wave can run together.",
    )
    created_by: str
    reason: str
    replaces_step_id: int | None
    created_at: datetime


class EventOut(BaseModel):
    """One entry of the run's timeline; a detail over 2 KiB is a `Preview` (`shortened`)."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    step_id: int | None
    at: datetime
    kind: str
    detail: Shortenable
    shortened: bool = Field(default=False, description="Whether `detail` is a `Preview`.")


class StreamEventOut(EventOut):
    """One event of a server-sent event stream (`event: timeline`, `id:` the event's id): the
    timeline entry and the run it belongs to."""

    run_id: int


class RunStatusOut(BaseModel):
    """A run's status as its event stream reports it: `event: status` when it changes (and
    first), `event: end` once it is final (`succeeded`, `failed`, `cancelled`), before the
    stream closes."""

    run_id: int
    status: str
    plan_version: int


class EscalationOut(BaseModel):
    """One entry of the review queue; `waiting_s` runs until the decision."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    run_id: int
    plan_version: int
    step_id: int | None
    reason: str
    detail: dict[str, Any]
    status: str
    claimed_by: str | None
    claimed_at: datetime | None
    decision: str | None
    decided_by: str | None
    decided_at: datetime | None
    comment: str | None
    answer: dict[str, Any] | None
    created_at: datetime
    deadline_at: datetime | None = None
    waiting_s: float = 0.0
    # The budgets its approval set: {"tokens": {"used", "limit_before", "original_limit",
    # "limit", "chosen": "reviewer" | "default"}} (`models.engine.budget_grants`).
    granted: dict[str, Any] | None = None


class BudgetStanding(BaseModel):
    """The budget a budget escalation is about, as approving it finds it: `used` of `limit`
    (`original_limit`: before any reviewer's grant), the operator's `ceiling` (the setting
    `ceiling_setting`), and `default_limit`, what approve sets unless given another: used plus
    the original limit, at most the ceiling (None: none, as for step data when
    `AGENTQ_USER_STEP_DATA_MAX_BYTES` is 0). Wall time counts seconds since the submit."""

    name: str
    used: float
    limit: float
    original_limit: float
    ceiling: float | None
    ceiling_setting: str
    default_limit: float


class ForkedFromOut(BaseModel):
    """Where a forked run came from (`agentq run fork`, `models.engine.forks`): the source run and
    the step it was forked from (that step and every step waiting for it ran anew), and this
    run's steps copied from the source's, this run's step id (text) -> the source's."""

    run_id: int
    step: str
    step_id: int
    copied: dict[StepIdKey, int]


class RunDetail(RunOut):
    """One run with everything about it: pinned facts, every plan version, every step (all
    versions, by id), a page of the timeline (the newest events, oldest first), its escalations
    and the final answer. Values over 2 KiB are `Preview`s."""

    pinned_facts: dict[str, str]
    replan_check: str = Field(description="`model`: after each step, the should-replan check.")
    success_criteria: list[Criterion] = Field(
        description="What the run must achieve, judged once its answer is written "
        "(`goal.checked` events hold each verdict; `goal_check` tells the newest)."
    )
    goal_check: GoalCheckOut = Field(description="The run's goal check, in words.")
    final_result: Shortenable | None
    plan_versions: list[PlanVersionOut]
    current_step_ids: list[int]
    steps: list[StepOut]
    events: list[EventOut]
    events_next_before: int | None = Field(
        default=None,
        description="Pass as `events_before` to read the older events; null when `events` "
        "reaches the run's first event.",
    )
    escalations: list[EscalationOut]
    shortened: list[Literal["final_result"]] = Field(
        default=[], description="`final_result` when it is a `Preview`."
    )
    forked_from: ForkedFromOut | None = None
    forks: list[int] = Field(default=[], description="The runs forked from this one, oldest first.")
    parent_run_id: int | None = Field(
        default=None, description="For a child run: the run whose step of kind `run` submitted it."
    )
    child_runs: list[int] = Field(default=[], description="This run's child runs, oldest first.")


class GoalValuesOut(BaseModel):
    """The values a goal states (`models.plans.goal_values`): `found` (key -> value; a key found
    with several values is numbered, `currency_1`, `currency_2`), `pinned` (those the run pins:
    none unless `pin_from_goal`), `overridden` (found values whose key `facts` pinned, which
    won: key -> the value found)."""

    found: dict[str, str] = {}
    pinned: dict[str, str] = {}
    overridden: dict[str, str] = {}


class SubmittedOut(BaseModel):
    """A submitted run, as its submit left it; `notified` is False when the broker was down (the
    reconciler sends its first messages once the broker is back: the run is safe in Postgres),
    and True once they were sent, or when there were none (the user's slots were full)."""

    run: RunDetail
    notified: bool
    from_goal: GoalValuesOut = Field(
        default_factory=GoalValuesOut,
        description="The values the goal states, and those the run pinned with them.",
    )


class ReviewOut(BaseModel):
    """An escalation with its run, the failed step (if any) and the run's pinned facts."""

    escalation: EscalationOut
    run: RunOut
    failed_step: StepOut | None
    pinned_facts: dict[str, str]
    budget: BudgetStanding | None = Field(
        default=None, description="A spent budget's standing, while the escalation is undecided."
    )


class DecisionOut(BaseModel):
    """A decided escalation and its run; `notified` as in `SubmittedOut`."""

    escalation: EscalationOut
    run: RunOut
    notified: bool
    said: str = Field(default="", description="What the decision did, in words (budgets set).")


class TokenOut(BaseModel):
    """One API token as `agentq token list --json` shows it: never the token or its hash."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    name: str
    role: str
    user_id: str | None
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None
