"""Plans: the validated shape of a plan, and writing plan versions as rows.

A plan is a graph of steps (DESIGN.md, invariant 12): each step may name the steps it waits for
(`after`; `[]` starts at once; left out, the step before it in the list). Model output, a
reviewer's edit and an explicit plan given at submit all pass through `parse_plan` before anything
is written, so malformed input is refused whole and nothing is half-written. Steps pass data with
references in their tool args: `"${steps.NAME.KEY}"` (a key of the result of a step it waits for,
directly or not) and `"${facts.KEY}"` (a pinned fact). The graph rules are `models.plans.graph`'s.
A step may declare checks of its result (`expect`, `models.plans.expectations`) that fail it when
unmet, and a model step the typed fields of its answer (`output`, `models.plans.step_outputs`),
which become its result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlmodel import Session, select

from models import sql
from models.errors import InvalidPlan, PlanConflict, ToolArgumentsError
from models.patterns import FACT_KEY_PATTERN, STEP_NAME_PATTERN, WORDS, error_message
from models.plans import graph
from models.plans.expectations import MAX_STEP_EXPECTATIONS, Expectation
from models.plans.references import referenced_facts, references
from models.plans.step_outputs import MAX_OUTPUT_FIELDS, OutputSpec
from models.plans.tools import unavailable_reason
from models.states import STEP_NOT_STARTED
from models.storable import parse_json, storable_problem
from models.tables import PlanVersion, Run, Step

MAX_PLAN_STEPS: Final = 50
MAX_INSTRUCTION_CHARS: Final = 4000
MAX_STEP_TOOLS: Final = 20  # tools offered to one model step; each costs prompt tokens
# A step's arguments as JSON text, at most: arguments are names and small values (the data steps
# pass to each other travels by `${steps...}` reference); a bigger one is almost surely a mistake,
# and every prompt, event and page that shows the plan would carry it.
MAX_ARGS_CHARS: Final = 64_000
MAX_CRITERIA: Final = 10  # success criteria of a plan, and of a run (the user's and planner's)
MAX_CRITERION_CHARS: Final = 500
# current_steps: the steps of version :version of run :run_id, in the version's order.
CURRENT_STEPS: Final = """
SELECT s.* FROM plan_versions v
CROSS JOIN LATERAL jsonb_array_elements_text(v.step_ids) WITH ORDINALITY AS e(step_id, n)
JOIN steps s ON s.id = e.step_id::int
WHERE v.run_id = :run_id AND v.version = :version
ORDER BY e.n"""


class StepSpec(BaseModel):
    """One step as a planner, a reviewer or a user writes it."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=STEP_NAME_PATTERN, description="Result name, e.g. 'receipts'.")
    instruction: str = Field(default="", max_length=MAX_INSTRUCTION_CHARS)
    kind: Literal["tool", "model", "run"] = Field(
        description="tool: call `tool`; model: a model call; run: a child run whose goal is "
        '`instruction`, with `args` `{"facts": {...}}` (`models.engine.children`).',
    )
    tool: str | None = Field(default=None, max_length=100)
    args: dict[str, Any] = Field(default_factory=dict)
    tools: list[str] = Field(
        default_factory=list,
        max_length=MAX_STEP_TOOLS,
        description="Kind 'model' only: tools the model may call itself, by name.",
    )
    after: list[Annotated[str, Field(max_length=100)]] | None = Field(
        default=None,
        max_length=MAX_PLAN_STEPS,
        description="Names of the steps this one waits for; [] starts at once; left out, the "
        "step before it.",
    )
    expect: list[Expectation] = Field(
        default_factory=list,
        max_length=MAX_STEP_EXPECTATIONS,
        description="Checks of the step's result (`expectations`); one unmet fails it.",
    )
    output: OutputSpec | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_OUTPUT_FIELDS,
        description="Kind 'model' only: the fields of its answer and their types "
        "(`models.plans.step_outputs`), stored as its result.",
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
        if self.kind == "tool" and self.output is not None:
            raise ValueError(
                f"step {self.name!r}: 'output' is for kind 'model' steps only (a tool's result "
                "has the fields the tool returns)"
            )
        if self.kind in ("model", "run") and not self.instruction.strip():
            what = "an 'instruction'" if self.kind == "model" else "an 'instruction' (its goal)"
            raise ValueError(f"step {self.name!r}: kind {self.kind!r} needs {what}")
        if self.kind == "run":
            _check_child(self)
        if len(set(self.tools)) != len(self.tools):
            raise ValueError(f"step {self.name!r}: 'tools' names a tool twice")
        return self


def _check_child(step: StepSpec) -> None:
    """A step of kind `run` names no tool and no output, and its only `args` are its child's
    `facts` (key -> text, or a `${...}` reference to a fact or a result it waits for). Raises
    `ValueError` naming the step."""
    if step.tool is not None or step.tools or step.output is not None:
        raise ValueError(f"step {step.name!r}: kind 'run' takes no 'tool', 'tools' or 'output'")
    facts = step.args.get("facts", {})
    if set(step.args) - {"facts"} or not isinstance(facts, dict):
        raise ValueError(f"step {step.name!r}: kind 'run' takes 'args' {{\"facts\": {{...}}}} only")
    if not all(isinstance(v, str) for v in facts.values()):
        raise ValueError(f"step {step.name!r}: args.facts: each value a text")
    bad = sorted(k for k in facts if not re.fullmatch(FACT_KEY_PATTERN, k))
    if bad:
        raise ValueError(
            f"step {step.name!r}: args.facts: key {bad[0]!r} {WORDS[FACT_KEY_PATTERN]}"
        )


class PlanSpec(BaseModel):
    """A whole plan (or, for a replan, the steps to splice in after the failed one)."""

    model_config = ConfigDict(extra="forbid")
    steps: list[StepSpec] = Field(min_length=1, max_length=MAX_PLAN_STEPS)
    # What must hold once the plan is done (`models.engine.goal_checks`); kept from a submitted plan
    # and from the planner's first plan.
    success_criteria: list[Annotated[str, Field(min_length=1, max_length=MAX_CRITERION_CHARS)]] = (
        Field(default_factory=list, max_length=MAX_CRITERIA)
    )

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        if problem := storable_problem(data, "plan"):
            raise ValueError(problem)
        return data


ArgsCheck = Callable[[str, dict[str, Any]], list[str]]


@dataclass(frozen=True)
class Splice:
    """Where a plan's steps go: after the steps `kept` from the run's current version (in order,
    `after` their dependencies by id), in the place of step `replaced` (a failed step; None: at
    the end). The empty splice is a run's first plan."""

    kept: Sequence[Step] = ()
    after: dict[int, tuple[int, ...]] | None = None
    replaced: int | None = None

    def nodes(self) -> list[graph.Node]:
        """The kept steps as graph nodes."""
        deps = self.after or {}
        return [
            graph.Node(s.id or 0, s.name, s.status, deps.get(s.id or 0, ()), _refs(s.args))
            for s in self.kept
        ]

    def build(self, new: Sequence[StepSpec | Step]) -> graph.Version:
        """The version these steps make, with new step i keyed `-(i + 1)` (`graph.splice`); a
        `Step` row among them waits as a step with `after` left out would."""
        added = [
            graph.NewStep(-(i + 1), s.name, _after_of(s), _refs(s.args)) for i, s in enumerate(new)
        ]
        return graph.splice(self.nodes(), added, replaced=self.replaced)


def _after_of(step: StepSpec | Step) -> tuple[str, ...] | None:
    return tuple(step.after) if isinstance(step, StepSpec) and step.after is not None else None


def parse_plan(
    data: Any,
    *,
    tools: Collection[str],
    splice: Splice | None = None,
    facts: Collection[str] | None = None,
    check_args: ArgsCheck | None = None,
) -> PlanSpec:
    """Validate `data` (a dict, or JSON text) into a plan whose tools and references exist.

    `splice` says where the steps go (a replan's or a reviewer's: see `Splice`; default: a whole
    plan); the version they make must be a graph whose every reference names a step the
    referring step waits for (`models.plans.graph`). `facts`, when given, are the pinned facts that
    `${facts.KEY}` may name; `check_args(tool, args)` returns the problems of a tool call's
    arguments (the tool registry's check). Raises `InvalidPlan` with every problem found, each
    naming the step and field; `PlanConflict` (an `InvalidPlan`) when the only problem is a new
    step taking the name of a step that succeeded, which depends on the run's state rather than
    on the plan.
    """
    try:
        plan = PlanSpec.model_validate(parse_json(data) if isinstance(data, str) else data)
    except ValueError as exc:  # pydantic's ValidationError is one
        raise InvalidPlan(_describe(exc)) from exc
    problems = list(_plan_problems(plan, tools=tools))
    problems += _facts_problems(plan, facts)
    if check_args is not None:
        problems += [
            f"steps.{i}.args: {problem}"
            for i, step in enumerate(plan.steps)
            if step.tool in tools
            for problem in check_args(step.tool or "", step.args)
        ]
    splice = splice or Splice()
    if not problems:  # the graph is checked on steps whose references parse
        problems += splice.build(plan.steps).problems
    added = [graph.NewStep(0, s.name) for s in plan.steps]
    clashes = graph.succeeded_clashes(graph.remaining(splice.nodes(), splice.replaced), added)
    if problems:
        raise InvalidPlan("; ".join(problems + clashes))
    if clashes:
        raise PlanConflict("; ".join(clashes))
    return plan


def _describe(exc: ValueError) -> str:
    if not isinstance(exc, ValidationError):
        return f"invalid plan: not JSON: {exc}"
    parts = [
        f"{'.'.join(str(p) for p in e['loc']) or 'plan'}: {error_message(e)}" for e in exc.errors()
    ]
    return "invalid plan: " + "; ".join(parts[:10])


def _plan_problems(plan: PlanSpec, *, tools: Collection[str]) -> Iterator[str]:
    for i, step in enumerate(plan.steps):
        if step.tool and step.tool not in tools:
            yield f"steps.{i}.tool: {_unknown(step.tool, tools)}"
        for name in step.tools:
            if name not in tools:
                yield f"steps.{i}.tools: {_unknown(name, tools)}"
        try:
            references(step.args)
        except ToolArgumentsError as exc:
            yield f"steps.{i}.args: {exc}"


def _unknown(name: str, tools: Collection[str]) -> str:
    """`unknown tool 'x'; known: ...`, saying why first for an MCP tool that is not offered
    (`models.plans.tools.unavailable_reason`: its server cannot start, ...)."""
    why = unavailable_reason(name)
    return f"unknown tool {name!r}{f' ({why})' if why else ''}; known: {', '.join(sorted(tools))}"


def _refs(args: Any) -> frozenset[str]:
    """The step names `args` refer to; none when a reference is malformed (reported apart)."""
    try:
        return frozenset(references(args))
    except ToolArgumentsError:
        return frozenset()


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
    """The steps of the run's current plan version, in order (one statement: every model call's
    context and every synthesis reads them)."""
    params = {"run_id": run.id, "version": run.plan_version}
    return sql.rows_of(session, Step, CURRENT_STEPS, params)


def current_graph(session: Session, run: Run, *, replaced: int | None = None) -> Splice:
    """The run's current plan version as a `Splice` (every step kept, in order, with what each
    waits for), to put new steps in the place of `replaced`."""
    version = session.exec(
        select(PlanVersion).where(
            PlanVersion.run_id == run.id, PlanVersion.version == run.plan_version
        )
    ).one_or_none()
    if version is None:
        return Splice(replaced=replaced)
    by_id = {
        s.id: s
        for s in session.exec(select(Step).where(Step.id.in_(version.step_ids)))  # type: ignore[union-attr]
    }
    steps = [by_id[i] for i in version.step_ids]
    return Splice(steps, dependencies(version), replaced)


def edit_splice(session: Session, run: Run, *, replaced: int | None) -> Splice:
    """Where a reviewer's edit puts its steps: after the steps of the current version that
    succeeded or still run, and the failures already answered, in the place of `replaced` (the
    escalation's failed step). Another branch's unanswered failure goes with the steps not yet
    run: the reviewer's plan replaces it too, so it does not escalate again."""
    current = current_graph(session, run)
    answered = handled_failures(session, run.id or 0) | {replaced}
    kept = [
        s
        for s in current.kept
        if (s.id in answered if s.status == "failed" else s.status not in STEP_NOT_STARTED)
    ]
    at = replaced if replaced in {s.id for s in kept} else None
    return Splice(kept, current.after, at)


def dependencies(version: PlanVersion) -> dict[int, tuple[int, ...]]:
    """What each step of `version` waits for, by id (`plan_versions.after`)."""
    return {int(k): tuple(v) for k, v in (version.after or {}).items()}


def handled_failures(session: Session, run_id: int) -> set[int]:
    """Ids of failed steps that a later plan version answered (replan, edit, answer)."""
    rows = session.exec(
        select(PlanVersion.replaces_step_id).where(
            PlanVersion.run_id == run_id,
            PlanVersion.replaces_step_id.is_not(None),  # type: ignore[union-attr]
        )
    )
    return {r for r in rows if r is not None}
