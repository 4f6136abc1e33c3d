"""Procedures in one model call's context: which the run may recall, and how they read.

A call with a recall query (`Prompt.query`: the goal for a plan or replan, the instruction for a
model step) recalls up to `AGENTQ_RECALL_PROCEDURES_K` procedures
(`models.memory.procedure_recall`): everyone's, the run's user's, and those of the tools the call's
catalogue, the plan's steps or the step's own tools name. Once a reviewer's words are in the run
(`models.review.authorship.reviewer_in_run`) the user's own procedures are left out, as the user's
memory is (`worker.memory.withholding.recall_or_withhold`); everyone's and the tools' still come. A
shared procedure a reviewer wrote is a reviewer's words too (`reviewers_procedure`): a call that
recalls one gets none of the user's memory, and a plan it writes is the reviewer's
(`worker.phases.adoption.author`). In a plan or
replan call a procedure's plan template is shown as a worked example to adapt, never as the
run's plan; other calls see its how-to only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from sqlmodel import Session

from models.memory.memory_admin import embedder, min_similarity
from models.memory.procedure_learning import template_applies
from models.memory.procedure_recall import ScoredProcedure, Visible, recall_procedures, tools_of
from models.review.authorship import USER_WRITERS, reviewer_in_run
from models.settings import get_settings
from models.tables import Run, Step
from worker.model_calls.prompts import Prompt
from worker.phases import adoption

PLANNING: Final = adoption.PLANNING
EXAMPLE_NOTE: Final = (
    "A worked example of a plan that did this before (adapt it to this goal, its tools and its "
    "pinned facts; it is an example, not this run's plan):"
)


def recalls_procedures() -> bool:
    """Whether model calls recall procedures at all (`AGENTQ_RECALL_PROCEDURES_K` > 0)."""
    return get_settings().recall_procedures_k > 0


def visible(session: Session, run: Run, prompt: Prompt, steps: Sequence[Step]) -> Visible:
    """The scopes this call may recall: everyone's, the run's user's unless a reviewer's words
    are in the run, and the tools of the catalogue offered, of the plan and of the step."""
    catalogue = [t.get("name") for t in prompt.payload.get("tools") or [] if isinstance(t, dict)]
    offered = [t.get("function", {}).get("name") for t in prompt.tools]
    planned = [s.tool for s in steps] + [t for s in steps for t in s.tools]
    user = None if reviewer_in_run(session, run.id or 0) is not None else run.user_id
    return Visible(user, tools_of([*catalogue, *offered, *planned]))


def recalled(
    session: Session, run: Run, prompt: Prompt, steps: Sequence[Step]
) -> list[ScoredProcedure]:
    """The procedures this call recalls, best first; none without a query or with
    `AGENTQ_RECALL_PROCEDURES_K` 0. The query is embedded here unless `prompt.query_vector`
    holds it (a remote embedder's, computed before the transaction)."""
    if not prompt.query or not recalls_procedures():
        return []
    model = embedder()
    vector = prompt.query_vector or model.embed([prompt.query])[0]
    return recall_procedures(
        session,
        visible=visible(session, run, prompt, steps),
        query_text=prompt.query,
        query_embedding=list(vector),
        embedding_model=model.model,
        k=get_settings().recall_procedures_k,
        min_similarity=min_similarity(),
    )


def reviewers_procedure(found: Sequence[ScoredProcedure]) -> dict[str, Any] | None:
    """The first of `found` whose current version a reviewer wrote, or a writer of unknown role
    (`written_as` not in `models.review.authorship.USER_WRITERS`), as a `memory.withheld` event's
    detail, `{"procedure", "version", "author"}`; None when the user or an admin wrote each.
    Its how-to (or template) is a reviewer's words in the call's context: the call recalls none
    of the user's memory, the user's own procedures included (issue 27)."""
    for f in found:
        if f.item.written_as not in USER_WRITERS:
            author = f.item.written_as or "unknown"
            return {"procedure": f.item.id, "version": f.item.version, "author": author}
    return None


def text_of(found: ScoredProcedure, prompt: Prompt) -> str:
    """How one procedure reads in `prompt`'s call: its id, title, version, scope, when to use
    it, the how-to, and (planning only, when it applies to the goal: a learned one's only to the
    goal it was learned for, `models.memory.procedure_learning.template_applies`) its plan
    template as a worked example, with how to adopt it by reference when the call may
    (`worker.phases.adoption`)."""
    p = found.item
    scope = {"user": "the user's own", "tool": f"tool {p.tool}"}.get(p.scope, "everyone")
    lines = [f"Procedure {p.id} ({scope}, version {p.version}): {p.title}"]
    lines.append(f"Use it when: {p.when_to_use}")
    if p.body:
        lines.append(f"How to: {p.body}")
    goal = str(prompt.payload.get("goal") or "")
    if p.plan_template and prompt.purpose in PLANNING and template_applies(p.title, p.origin, goal):
        lines.append(EXAMPLE_NOTE + "\n" + template_lines(p.plan_template))
        if adoption.adoptable(p.plan_template, prompt.payload.get("failed_step")):
            lines.append(adoption.ADOPT_NOTE % (p.id or 0))
    return "\n".join(lines)


def template_lines(template: dict[str, Any]) -> str:
    """A plan template as numbered lines, one step each: `N. name: tool(arg=value, ...)`, or
    `N. name: model: instruction` (with `[tools: ...]` and `-> {field: type}`), then `(after
    ...)` when it names what it waits for. A third of its JSON's tokens (114 of 332 for the
    demo's five-step expense plan), so a procedure's share of the context holds more of them."""
    lines = []
    for n, step in enumerate(template.get("steps") or [], 1):
        if step.get("kind") == "model":
            does = f"model: {step.get('instruction', '')}"
            does += f" [tools: {', '.join(step['tools'])}]" if step.get("tools") else ""
            does += f" -> {json.dumps(step['output'])}" if step.get("output") else ""
        else:
            args = (f"{k}={_shown(v)}" for k, v in (step.get("args") or {}).items())
            does = f"{step.get('tool')}({', '.join(args)})"
        after = step.get("after")
        tail = f" (after {', '.join(after) if after else 'nothing'})" if after is not None else ""
        lines.append(f"{n}. {step.get('name')}: {does}{tail}")
    for criterion in template.get("success_criteria") or []:
        lines.append(f"success criterion: {criterion}")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def entries(found: Sequence[ScoredProcedure], used: Sequence[int]) -> list[dict[str, Any]]:
    """The procedures the context carried (ids `used`, in order), as the payload lists them:
    id, version, title, scope, origin (a person's or learned), plan template (the offline planner
    reads it) and the role its
    version's writer wrote with (`written_as`: whose rights an adopted template acts with,
    `worker.phases.adoption.author`)."""
    by_id = {f.item.id: f.item for f in found}
    return [
        {
            "id": p.id,
            "version": p.version,
            "title": p.title,
            "scope": p.scope,
            "plan_template": p.plan_template,
            "written_as": p.written_as,
            "origin": p.origin,
        }
        for p in (by_id[i] for i in used if i in by_id)
    ]
