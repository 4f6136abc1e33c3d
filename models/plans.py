"""Plans: the validated shape of a plan, and writing plan versions as rows.

A plan is an ordered list of steps. Model output, a reviewer's edit and an explicit plan given at
submit all pass through `PlanSpec` before anything is written, so malformed input is refused whole
and nothing is half-written. Steps pass data with references in their tool args:
`"${steps.NAME.KEY}"` (a key of an earlier step's result) and `"${facts.KEY}"` (a pinned fact).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlmodel import Session, select

from models.errors import InvalidPlan, PlanConflict, ToolArgumentsError
from models.references import referenced_facts, references
from models.storable import parse_json, storable_problem
from models.tables import PlanVersion, Run, Step, utcnow

MAX_PLAN_STEPS: Final = 50
MAX_INSTRUCTION_CHARS: Final = 4000
MAX_STEP_TOOLS: Final = 20  # tools offered to one model step; each costs prompt tokens
# A step's arguments as JSON text, at most: arguments are names and small values (the data steps
# pass to each other travels by `${steps...}` reference); a bigger one is almost surely a mistake,
# and every prompt, event and page that shows the plan would carry it.
MAX_ARGS_CHARS: Final = 64_000
STEP_NAME_PATTERN: Final = r"^[a-z][a-z0-9_]{0,63}$"


class StepSpec(BaseModel):
    """One step as a planner, a reviewer or a user writes it."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=STEP_NAME_PATTERN, description="Result name, e.g. 'receipts'.")
    instruction: str = Field(default="", max_length=MAX_INSTRUCTION_CHARS)
    kind: Literal["tool", "model"]
    tool: str | None = Field(default=None, max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)
    tools: list[str] = Field(
        default_factory=list,
        max_length=MAX_STEP_TOOLS,
        description="Kind 'model' only: tools the model may call itself, by name.",
    )

    @field_validator("args")
    @classmethod
    def _args_size(cls, args: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(args, ensure_ascii=False))
        if size > MAX_ARGS_CHARS:
            raise ValueError(f"at most {MAX_ARGS_CHARS} characters as JSON (got {size})")
        return args

    @model_validator(mode="after")
    def _tool_matches_kind(self) -> StepSpec:
        if self.kind == "tool" and not self.tool:
            raise ValueError(f"step {self.name!r}: kind 'tool' needs a 'tool' name")
        if self.kind == "model" and self.tool is not None:
            raise ValueError(f"step {self.name!r}: kind 'model' takes no 'tool'")
        if self.kind == "model" and self.args:
            raise ValueError(f"step {self.name!r}: kind 'model' takes no 'args'")
        if self.kind == "tool" and self.tools:
            raise ValueError(f"step {self.name!r}: 'tools' is for kind 'model' steps only")
        if self.kind == "model" and not self.instruction.strip():
            raise ValueError(f"step {self.name!r}: kind 'model' needs an 'instruction'")
        if len(set(self.tools)) != len(self.tools):
            raise ValueError(f"step {self.name!r}: 'tools' names a tool twice")
        return self


class PlanSpec(BaseModel):
    """A whole plan (or, for a replan, the steps to splice in after the failed one)."""

    model_config = ConfigDict(extra="forbid")
    steps: list[StepSpec] = Field(min_length=1, max_length=MAX_PLAN_STEPS)

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        if problem := storable_problem(data, "plan"):
            raise ValueError(problem)
        return data


ArgsCheck = Callable[[str, dict[str, Any]], list[str]]


def parse_plan(
    data: Any,
    *,
    tools: Collection[str],
    earlier: Collection[str] = (),
    facts: Collection[str] | None = None,
    check_args: ArgsCheck | None = None,
) -> PlanSpec:
    """Validate `data` (a dict, or JSON text) into a plan whose tools and references exist.

    `earlier` names the results available before the first step (a replan's done steps; no new
    step may take one of these names);
    `facts`, when given, the pinned facts that `${facts.KEY}` may name; `check_args(tool, args)`
    returns the problems of a tool call's arguments (the tool registry's check). Step names must
    be unique within the plan. Raises `InvalidPlan` with every problem found, each naming the
    step and field; `PlanConflict` (an `InvalidPlan`) when the only problem is a new step taking
    an `earlier` name, which depends on the run's state rather than on the plan.
    """
    try:
        plan = PlanSpec.model_validate(parse_json(data) if isinstance(data, str) else data)
    except ValueError as exc:  # pydantic's ValidationError is one
        raise InvalidPlan(_describe(exc)) from exc
    problems = list(_plan_problems(plan, tools=tools, earlier=earlier))
    problems += _names_problems(plan)
    problems += _facts_problems(plan, facts)
    if check_args is not None:
        problems += [
            f"steps.{i}.args: {problem}"
            for i, step in enumerate(plan.steps)
            if step.tool in tools
            for problem in check_args(step.tool or "", step.args)
        ]
    clashes = _clashes(plan, earlier)
    if problems:
        raise InvalidPlan("; ".join(problems + clashes))
    if clashes:
        raise PlanConflict("; ".join(clashes))
    return plan


def _describe(exc: ValueError) -> str:
    if not isinstance(exc, ValidationError):
        return f"invalid plan: not JSON: {exc}"
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'plan'}: {e['msg']}" for e in exc.errors()]
    return "invalid plan: " + "; ".join(parts[:10])


def _plan_problems(
    plan: PlanSpec, *, tools: Collection[str], earlier: Collection[str]
) -> Iterator[str]:
    available = set(earlier)
    for i, step in enumerate(plan.steps):
        if step.tool and step.tool not in tools:
            yield f"steps.{i}.tool: unknown tool {step.tool!r}; known: {', '.join(sorted(tools))}"
        for name in step.tools:
            if name not in tools:
                yield f"steps.{i}.tools: unknown tool {name!r}; known: {', '.join(sorted(tools))}"
        try:
            referenced = references(step.args)
        except ToolArgumentsError as exc:
            yield f"steps.{i}.args: {exc}"
            referenced = set()
        for name in referenced - available:
            yield f"steps.{i}.args: refers to step {name!r}, which does not come before it"
        available.add(step.name)


def _names_problems(plan: PlanSpec) -> list[str]:
    """Names are unique within the plan: a `${steps.NAME...}` reference must mean one step."""
    seen: set[str] = set()
    problems = []
    for i, step in enumerate(plan.steps):
        if step.name in seen:
            problems.append(f"steps.{i}.name: {step.name!r} is used twice; names must be unique")
        seen.add(step.name)
    return problems


def _clashes(plan: PlanSpec, earlier: Collection[str]) -> list[str]:
    """New steps never take the name of an earlier result (a step that already succeeded)."""
    return [
        f"steps.{i}.name: {step.name!r} is the name of a step that already succeeded; "
        "choose another"
        for i, step in enumerate(plan.steps)
        if step.name in earlier
    ]


def _facts_problems(plan: PlanSpec, facts: Collection[str] | None) -> list[str]:
    if facts is None:
        return []
    known = ", ".join(sorted(facts)) or "none"
    return [
        f"steps.{i}.args: refers to fact {name!r}, which is not pinned (pinned: {known})"
        for i, step in enumerate(plan.steps)
        for name in sorted(_facts_of(step) - set(facts))
    ]


def _facts_of(step: StepSpec) -> set[str]:
    """The pinned facts the step's args refer to; none when a reference is malformed (which
    `_plan_problems` reports)."""
    try:
        return referenced_facts(step.args)
    except ToolArgumentsError:
        return set()


def current_steps(session: Session, run: Run) -> list[Step]:
    """The steps of the run's current plan version, in order."""
    version = session.exec(
        select(PlanVersion).where(
            PlanVersion.run_id == run.id, PlanVersion.version == run.plan_version
        )
    ).one_or_none()
    if version is None:
        return []
    by_id = {
        s.id: s
        for s in session.exec(select(Step).where(Step.id.in_(version.step_ids)))  # type: ignore[union-attr]
    }
    return [by_id[i] for i in version.step_ids]


def handled_failures(session: Session, run_id: int) -> set[int]:
    """Ids of failed steps that a later plan version answered (replan, edit, answer)."""
    rows = session.exec(
        select(PlanVersion.replaces_step_id).where(
            PlanVersion.run_id == run_id,
            PlanVersion.replaces_step_id.is_not(None),  # type: ignore[union-attr]
        )
    )
    return {r for r in rows if r is not None}


def add_plan_version(
    session: Session,
    run: Run,
    *,
    before: Sequence[Step],
    new: Sequence[StepSpec],
    after: Sequence[Step],
    created_by: str,
    max_attempts: int,
    reason: str = "",
    replaces_step_id: int | None = None,
) -> PlanVersion:
    """Write plan version `run.plan_version + 1`: `before`, then the `new` steps, then `after`.

    The run's `plan_version` is moved to it by the caller's transition (`resume_run`), in the same
    transaction. Returns the new `PlanVersion` row.
    """
    version = run.plan_version + 1
    created = [
        Step(
            run_id=run.id or 0,
            plan_version=version,
            position=0,
            name=s.name,
            instruction=s.instruction,
            kind=s.kind,
            tool=s.tool,
            args=s.args,
            tools=s.tools,
            max_attempts=max_attempts,
        )
        for s in new
    ]
    session.add_all(created)
    session.flush()
    ordered = [*before, *created, *after]
    for position, step in enumerate(ordered):
        step.position = position
    row = PlanVersion(
        run_id=run.id or 0,
        version=version,
        step_ids=[s.id or 0 for s in ordered],
        created_by=created_by,
        reason=reason,
        replaces_step_id=replaces_step_id,
    )
    session.add(row)
    session.flush()
    return row


def add_answer_step(session: Session, run: Run, *, name: str, answer: dict[str, Any]) -> Step:
    """A reviewer's answer, stored as an already-succeeded `human` step named `name`."""
    step = Step(
        run_id=run.id or 0,
        plan_version=run.plan_version + 1,
        position=0,
        name=name,
        instruction="answer from a reviewer",
        kind="human",
        status="succeeded",
        result=answer,
        finished_at=utcnow(),
    )
    session.add(step)
    session.flush()
    return step
