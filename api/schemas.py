"""The request bodies of the HTTP API (pydantic), and the input checks they share.

Request bodies refuse unknown fields, and refuse anywhere in the body what Postgres cannot store:
a NUL character, a lone surrogate, a non-finite number (JSON's `NaN` is not JSON, but Python's
parser accepts it). The response bodies are in `api.responses`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from models.engine.runs import (
    FACT_VALUE_MAX_CHARS,
    GOAL_MAX_CHARS,
    MAX_PINNED_FACTS,
    USER_ID_MAX_CHARS,
)
from models.memory.procedures import BODY_MAX_CHARS, TITLE_MAX_CHARS, WHEN_MAX_CHARS, Scope
from models.patterns import (
    FACT_KEY_PATTERN,
    NOT_BLANK_PATTERN,
    SCHEDULE_NAME_PATTERN,
    STEP_NAME_PATTERN,
)
from models.plans.plans import MAX_CRITERIA, MAX_CRITERION_CHARS, PlanSpec
from models.schedules.due_times import CRON_MAX_CHARS, TIMEZONE_MAX_CHARS
from models.schedules.schedules import CATCH_UP_MAX
from models.sql import PG_INT_MAX as PG_INT_MAX
from models.storable import json_integer, storable_problem, too_deep

WALL_TIME_MAX_S: Final = 30 * 86_400  # as `agentq run submit --wall-time`: longer is a typo
COST_MAX_USD: Final = 1_000_000.0
COMMENT_MAX_CHARS: Final = 4_000
# An integer field of a strict body also takes `3.0` (after its constraints, which must come
# first in `Annotated` for pydantic to state them in the schema).
WHOLE_NUMBER: Final = BeforeValidator(json_integer)

RunStatus = Literal[
    "queued",
    "planning",
    "running",
    "replanning",
    "synthesizing",
    "waiting_review",
    "succeeded",
    "failed",
    "cancelled",
]  # models.states.RUN_STATUSES (a unit test keeps them equal)
EscalationStatus = Literal["open", "claimed", "decided"]
UserId = Annotated[
    str, StringConstraints(min_length=1, max_length=USER_ID_MAX_CHARS, pattern=NOT_BLANK_PATTERN)
]
FactKey = Annotated[str, StringConstraints(pattern=FACT_KEY_PATTERN)]
FactValue = Annotated[str, StringConstraints(min_length=1, max_length=FACT_VALUE_MAX_CHARS)]
Comment = Annotated[str, StringConstraints(min_length=1, max_length=COMMENT_MAX_CHARS)]
RequiredComment = Annotated[
    str, StringConstraints(max_length=COMMENT_MAX_CHARS, pattern=NOT_BLANK_PATTERN)
]
# A reviewer's answer: any JSON value but null, "" and {} (`api.reviews.respond` refuses those).
ANSWER_SCHEMA: Final = {
    "description": 'A JSON object, or a plain value such as 0.95; not null, "" or {}.',
    "anyOf": [
        {"type": "object", "minProperties": 1},
        {"type": "array"},
        {"type": "string", "minLength": 1},
        {"type": "number"},
        {"type": "boolean"},
    ],
}


class Body(BaseModel):
    """A request body: unknown fields refused, and nothing Postgres cannot store. Strict: a value
    of another JSON type is refused, never converted (`false` is not 0, `"1"` is not 1).

    What cannot be stored is refused before any field is read (pydantic's validation recurses:
    nesting is checked first), located at its field (`loc` `["body", "goal"]`), with the exact
    place in the message (`body.goal: NUL characters ...`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        if not isinstance(data, dict) or too_deep(data):
            if problem := storable_problem(data):
                raise PydanticCustomError("value_error", problem)
            return data
        for field, value in data.items():
            if problem := storable_problem({field: value}):
                raise _located(cls.__name__, field, value, problem)
        return data


def _located(title: str, field: Any, value: Any, problem: str) -> ValidationError:
    """The refusal of `problem` at `field` (a raised `ValidationError` keeps its `loc`, which a
    `ValueError` would not have: pydantic-core takes its line errors as they are); at the body
    itself when the field's own name cannot be stored."""
    loc = () if storable_problem(field) else (field,)
    error = PydanticCustomError("value_error", problem)
    return ValidationError.from_exception_data(
        title, [InitErrorDetails(type=error, loc=loc, input=value)]
    )


class Budgets(Body):
    """A run's budgets; each one left out takes its default (`AGENTQ_DEFAULT_*`)."""

    replans: Annotated[int, Field(ge=0, le=PG_INT_MAX), WHOLE_NUMBER] | None = Field(
        default=None, description="Replans."
    )
    tokens: Annotated[int, Field(ge=1, le=PG_INT_MAX), WHOLE_NUMBER] | None = Field(
        default=None, description="Model tokens."
    )
    cost_usd: float | None = Field(default=None, ge=0, le=COST_MAX_USD, description="USD.")
    wall_time_s: float | None = Field(
        default=None,
        ge=1,
        le=WALL_TIME_MAX_S,
        description="Seconds, at most AGENTQ_MAX_WALL_TIME_BUDGET_S (a week by default).",
    )


class RunSubmit(Body):
    """A goal to run. `user` defaults to a submitter token's user; a submitter may name only
    its own, and an admin must name one (403 otherwise: the rule depends on the token). `plan`
    skips the planning call (`{"steps": [...]}`)."""

    goal: Annotated[
        str, StringConstraints(min_length=1, max_length=GOAL_MAX_CHARS, pattern=NOT_BLANK_PATTERN)
    ]
    user: UserId | None = None
    facts: dict[FactKey, FactValue] = Field(
        default_factory=dict, max_length=MAX_PINNED_FACTS, description="Pinned facts."
    )
    budgets: Budgets = Field(default_factory=Budgets)
    plan: PlanSpec | None = None
    success_criteria: list[
        Annotated[
            str,
            StringConstraints(
                min_length=1, max_length=MAX_CRITERION_CHARS, pattern=NOT_BLANK_PATTERN
            ),
        ]
    ] = Field(
        default_factory=list,
        max_length=MAX_CRITERIA,
        description="What must hold once the run is done, one sentence each; may name pinned "
        "facts as `${facts.KEY}`. Judged after the answer: not met is replanned, then escalated "
        "`goal_not_met`.",
    )
    replan_check: Literal["off", "model"] | None = Field(
        default=None,
        description="After each step that succeeds, ask the model whether the rest of the plan "
        "still makes sense (a `no` is a replan under the replan budget); default "
        "`AGENTQ_REPLAN_CHECK`.",
    )
    pin_from_goal: StrictBool = Field(
        default=False,
        description="Also pin the values the goal states (amounts with their currency, ISO "
        "dates and months, currency codes, identifiers such as CC-4410; "
        "`models.plans.goal_values`); a fact given in `facts` always wins. Off unless asked: a pin "
        "binds every step and the goal check. The response's `from_goal` shows what was found "
        "either way. An explicit `plan` may refer only to `facts`.",
    )
    approvals: dict[str, Any] = Field(
        default_factory=dict,
        description="Tighten the operator's approval policy for this run: tool name or pattern "
        '-> "always" or {"when": [{"arg": <name>, <comparison>: <value>}]} (never "never": a '
        "run may only ask for more approvals). A gated call waits for a reviewer "
        "(`approval_required`) before it runs.",
    )


class RunFork(Body):
    """Fork a run from a step (`models.engine.forks`): `from_step` and every step waiting for it
    run anew; the steps before it keep their results. `plan` (`{"steps": [...]}`) replaces
    `from_step` and what waits for it, its steps waiting for the kept steps by name; `facts` are
    pinned over the source run's."""

    from_step: Annotated[str, StringConstraints(pattern=STEP_NAME_PATTERN)]
    plan: PlanSpec | None = None
    facts: dict[FactKey, FactValue] = Field(
        default_factory=dict,
        max_length=MAX_PINNED_FACTS,
        description="Pinned over the source run's facts: a key given replaces its value.",
    )


class Approve(Body):
    """Approve: retry the failed step once more (or re-plan, or carry on). `budget` sets new
    limits: each at most its ceiling (`AGENTQ_MAX_*`, 400 naming `budget.<name>`) and at least
    what the run spent (409 naming it); a spent budget left out gets the default, spent plus
    its original limit, which the answer states (`said`, `escalation.granted`)."""

    comment: Comment | None = None
    budget: Budgets | None = None


class Reject(Body):
    """Reject: the run fails with the comment."""

    comment: RequiredComment


class Respond(Body):
    """Respond: `answer` becomes the failed step's result. A JSON object is taken as it is; any
    other value becomes `{key: value}` when the failed tool declares exactly one result key, else
    `{"answer": value}`. It is run state: it becomes a fact of the run's user (source
    `reviewer:<name>`) only with `remember`."""

    answer: Annotated[Any, WithJsonSchema(ANSWER_SCHEMA)]
    comment: Comment | None = None
    remember: StrictBool = Field(
        default=False,
        description="Also remember the answer as a fact of the run's user (source "
        "`reviewer:<name>`), written when the run ends; otherwise it is this run's state only.",
    )


class Edit(Body):
    """Edit: these steps replace every step that has not run yet (add, remove, reorder, rewrite);
    for an `approval_required` escalation, `arguments` replace the gated call's instead."""

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        strict=True,
        json_schema_extra={  # exactly one of the two, as `_one_edit` checks
            "oneOf": [
                {"required": ["plan"], "properties": {"plan": {"type": "object"}}},
                {"required": ["arguments"], "properties": {"arguments": {"type": "object"}}},
            ]
        },
    )
    plan: PlanSpec | None = None
    arguments: dict[str, Any] | None = Field(
        default=None,
        description="For an approval_required escalation: the gated call's new arguments, "
        "checked against the tool's schema; give either this or plan.",
    )
    comment: Comment | None = None

    @model_validator(mode="after")
    def _one_edit(self) -> Self:
        if (self.plan is None) == (self.arguments is None):
            raise ValueError("give either plan (the steps) or arguments (a gated call's)")
        return self


class Forget(Body):
    """Whose memory to delete (a submitter token's own user when left out), and what else."""

    user: UserId | None = None
    cancel_runs: StrictBool = Field(
        default=False,
        description="Also cancel the user's active runs (a waiting escalation is withdrawn).",
    )
    runs: StrictBool = Field(
        default=False,
        description="Also erase the content of the user's runs (goals, pinned facts, step "
        "arguments and results, event details, escalation details, comments and answers), "
        "keeping ids, statuses, timings and spend. 400 while the user has active runs, "
        "unless `cancel_runs`.",
    )


Title = Annotated[
    str, StringConstraints(min_length=1, max_length=TITLE_MAX_CHARS, pattern=NOT_BLANK_PATTERN)
]
When = Annotated[
    str, StringConstraints(min_length=1, max_length=WHEN_MAX_CHARS, pattern=NOT_BLANK_PATTERN)
]
HowTo = Annotated[str, StringConstraints(max_length=BODY_MAX_CHARS)]
ToolName = Annotated[str, StringConstraints(min_length=1, max_length=100)]
RULES = (
    "A procedure needs a how-to (`body`, not blank) or a `plan_template`, or both; the template "
    "follows the rules of a plan (`PlanSpec`)."
)


class _Content(Body):
    title: Title
    when_to_use: When = Field(description="When to use it: what recall matches a goal with.")
    body: HowTo = Field(default="", description="The how-to text. " + RULES)
    plan_template: PlanSpec | None = Field(default=None, description="A plan to adapt. " + RULES)


class EveryoneProcedure(_Content):
    """A procedure for every run (reviewers and admins write these)."""

    scope: Literal["everyone"]


class UserProcedure(_Content):
    """A procedure of one user's runs only; `user` defaults to a submitter token's own."""

    scope: Literal["user"]
    user: UserId | None = None


class ToolProcedure(_Content):
    """A procedure for any run whose catalogue or plan has `tool` (an enabled tool)."""

    scope: Literal["tool"]
    tool: ToolName


NewProcedure = Annotated[
    EveryoneProcedure | UserProcedure | ToolProcedure, Field(discriminator="scope")
]


class ProcedureChange(Body):
    """The fields to change (at least one); `null` clears `plan_template`, `user` or `tool`.
    The procedure with the changes must still be a valid one (409 otherwise)."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})
    title: Title | None = None
    when_to_use: When | None = None
    body: HowTo | None = None
    plan_template: PlanSpec | None = None
    scope: Scope | None = None
    user: UserId | None = None
    tool: ToolName | None = None

    @model_validator(mode="after")
    def _some(self) -> Self:
        if not self.model_fields_set:
            raise ValueError(f"give at least one of {', '.join(type(self).model_fields)}")
        return self


class SaveFromRun(Body):
    """How to save the run's plan: default title the goal, default scope the run's user's
    (everyone's for a reviewer token)."""

    title: Title | None = None
    scope: Scope | None = None
    tool: ToolName | None = None


class ScheduleCreate(RunSubmit):
    """A goal on a schedule (`models.schedules`): the run as `POST /api/v1/runs` takes it, submitted
    as `user` at each due time of `cron` (read in `timezone`) or every `every_s` seconds; give
    exactly one of the two (400 naming them otherwise)."""

    name: Annotated[str, StringConstraints(pattern=SCHEDULE_NAME_PATTERN)] = Field(
        description="Unique among the user's schedules."
    )
    cron: Annotated[str, StringConstraints(min_length=1, max_length=CRON_MAX_CHARS)] | None = Field(
        default=None,
        description="Five fields (minute hour day-of-month month day-of-week, such as "
        "`0 9 * * 1-5`) or @hourly, @daily, @weekly, @monthly, @yearly.",
    )
    timezone: Annotated[str, StringConstraints(max_length=TIMEZONE_MAX_CHARS)] | None = Field(
        default=None, description="The IANA time zone `cron` is read in (default UTC)."
    )
    every_s: Annotated[int, Field(ge=1, le=PG_INT_MAX), WHOLE_NUMBER] | None = Field(
        default=None,
        description="An interval, s, from now: at least AGENTQ_SCHEDULE_MIN_INTERVAL_S.",
    )
    overlap: Literal["skip", "allow"] = Field(
        default="skip", description="skip: no run while this schedule's last run is active."
    )
    catch_up: Annotated[int, Field(ge=1, le=CATCH_UP_MAX), WHOLE_NUMBER] | None = Field(
        default=None,
        description="Of the due times missed while no scheduler ran, how many fire (the latest); "
        "default AGENTQ_SCHEDULE_CATCH_UP.",
    )
