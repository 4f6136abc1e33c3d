"""The request and response bodies of the HTTP API (pydantic), and the input checks they share.

Request bodies refuse unknown fields, and refuse anywhere in the body what Postgres cannot store:
a NUL character, a lone surrogate, a non-finite number (JSON's `NaN` is not JSON, but Python's
parser accepts it). Responses are built from rows by the `*_out` functions of the routers.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from models.plans import PlanSpec
from models.runs import FACT_KEY_PATTERN, GOAL_MAX_CHARS, USER_ID_MAX_CHARS

PG_INT_MAX: Final = 2**31 - 1  # ids, counts and budgets are Postgres `integer` columns
WALL_TIME_MAX_S: Final = 30 * 86_400  # as `agentq submit --wall-time`: longer is a typo
COST_MAX_USD: Final = 1_000_000.0
COMMENT_MAX_CHARS: Final = 4_000
NO_NUL_PATTERN: Final = r"^[^\x00]*$"  # Postgres text cannot hold NUL; query strings can send it

RunStatus = Literal[
    "queued", "planning", "running", "replanning", "synthesizing", "waiting_review",
    "succeeded", "failed", "cancelled",
]  # fmt: skip  # models.states.RUN_STATUSES (a unit test keeps them equal)
EscalationStatus = Literal["open", "claimed", "decided"]
UserId = Annotated[str, StringConstraints(min_length=1, max_length=USER_ID_MAX_CHARS)]
FactKey = Annotated[str, StringConstraints(pattern=FACT_KEY_PATTERN)]
FactValue = Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
Comment = Annotated[str, StringConstraints(min_length=1, max_length=COMMENT_MAX_CHARS)]


def storable_problem(value: Any, path: str = "body") -> str | None:
    """Where in `value` (decoded JSON) something is that Postgres cannot store, or None."""
    if isinstance(value, str):
        if "\x00" in value:
            return f"{path}: NUL characters (\\u0000) are not allowed"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{path}: unpaired surrogates are not valid Unicode text"
    elif isinstance(value, float) and not math.isfinite(value):
        return f"{path}: numbers must be finite"
    elif isinstance(value, dict):
        for key, item in value.items():
            found = storable_problem(key, f"{path} key") or storable_problem(item, f"{path}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if found := storable_problem(item, f"{path}.{i}"):
                return found
    return None


class Body(BaseModel):
    """A request body: unknown fields refused, and nothing Postgres cannot store."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        if problem := storable_problem(data):
            raise ValueError(problem)
        return data


class Budgets(Body):
    """A run's budgets; each one left out takes its default (`AGENTQ_DEFAULT_*`)."""

    replans: int | None = Field(default=None, ge=0, le=PG_INT_MAX, description="Replans.")
    tokens: int | None = Field(default=None, ge=1, le=PG_INT_MAX, description="Model tokens.")
    cost_usd: float | None = Field(default=None, ge=0, le=COST_MAX_USD, description="USD.")
    wall_time_s: float | None = Field(
        default=None, ge=1, le=WALL_TIME_MAX_S, description="Seconds, at most 30 days."
    )


class RunSubmit(Body):
    """A goal to run. `user` defaults to a submitter token's user and is required otherwise; a
    submitter may name only its own. `plan` skips the planning call (`{"steps": [...]}`)."""

    goal: Annotated[str, StringConstraints(min_length=1, max_length=GOAL_MAX_CHARS)]
    user: UserId | None = None
    facts: dict[FactKey, FactValue] = Field(default_factory=dict, description="Pinned facts.")
    budgets: Budgets = Field(default_factory=Budgets)
    plan: PlanSpec | None = None


class Approve(Body):
    """Approve: retry the failed step once more (or re-plan, or carry on)."""

    comment: Comment | None = None


class Reject(Body):
    """Reject: the run fails with the comment."""

    comment: Comment


class Respond(Body):
    """Respond: `answer` becomes the failed step's result. A JSON object is taken as it is; any
    other value becomes `{key: value}` when the failed tool declares exactly one result key, else
    `{"answer": value}`."""

    answer: Annotated[Any, Field(description="A JSON object, or a plain value such as 0.95.")]
    comment: Comment | None = None


class Edit(Body):
    """Edit: these steps replace every step that has not run yet (add, remove, reorder, rewrite)."""

    plan: PlanSpec
    comment: Comment | None = None


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


class StepOut(BaseModel):
    """One step row. `plan_version` created it; `position` is its index in the newest version
    that holds it."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    plan_version: int
    position: int
    name: str
    instruction: str
    kind: str
    tool: str | None
    tools: list[str] = []
    args: dict[str, Any]
    status: str
    attempt: int
    max_attempts: int
    deferrals: int
    tokens_used: int
    cost_used_usd: float
    queued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    result: dict[str, Any] | None
    error: str | None


class PlanVersionOut(BaseModel):
    """One version of the plan: its steps' ids in order, who wrote it and why."""

    model_config = ConfigDict(from_attributes=True)
    version: int
    step_ids: list[int]
    created_by: str
    reason: str
    replaces_step_id: int | None
    created_at: datetime


class EventOut(BaseModel):
    """One entry of the run's timeline."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    step_id: int | None
    at: datetime
    kind: str
    detail: dict[str, Any]


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


class RunDetail(RunOut):
    """One run with everything about it: pinned facts, every plan version, every step (all
    versions, by id), the timeline, its escalations and the final answer."""

    pinned_facts: dict[str, str]
    final_result: dict[str, Any] | None
    plan_versions: list[PlanVersionOut]
    current_step_ids: list[int]
    steps: list[StepOut]
    events: list[EventOut]
    escalations: list[EscalationOut]


class SubmittedOut(BaseModel):
    """A submitted run; `notified` is False when the broker was down (the reconciler sends the
    coordinator its message once the broker is back: the run is safe in Postgres)."""

    run: RunDetail
    notified: bool


class ReviewOut(BaseModel):
    """An escalation with its run, the failed step (if any) and the run's pinned facts."""

    escalation: EscalationOut
    run: RunOut
    failed_step: StepOut | None
    pinned_facts: dict[str, str]


class DecisionOut(BaseModel):
    """A decided escalation and its run; `notified` as in `SubmittedOut`."""

    escalation: EscalationOut
    run: RunOut
    notified: bool


class FactOut(BaseModel):
    """One version of a fact; current while `valid_to` is null (and `expires_at` not past)."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    user_id: str
    subject: str
    attribute: str | None
    category: str
    text: str
    valid_from: datetime
    valid_to: datetime | None
    superseded_by: int | None
    source_run_id: int | None
    expires_at: datetime | None
    embedding_model: str


class EpisodeOut(BaseModel):
    """One finished run as remembered."""

    model_config = ConfigDict(from_attributes=True)
    id: int
    user_id: str
    run_id: int
    goal: str
    outcome: str
    final_answer: str
    summary: str
    created_at: datetime


class Score(BaseModel):
    """How a recalled item ranked: cosine `similarity`, whether the text matched, `score`."""

    similarity: float
    text_match: bool
    score: float


class ScoredFactOut(Score):
    fact: FactOut


class ScoredEpisodeOut(Score):
    episode: EpisodeOut


class SearchOut(BaseModel):
    """Hybrid recall over a user's facts and episodes, best first."""

    facts: list[ScoredFactOut]
    episodes: list[ScoredEpisodeOut]
    embedding_model: str


class ForgetOut(BaseModel):
    """Rows deleted per kind (facts, episodes, turns, summaries, recall events)."""

    user_id: str
    deleted: dict[str, int]


class HealthOut(BaseModel):
    """`ok`, or what is not reachable."""

    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = {}
