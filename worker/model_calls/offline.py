"""The offline provider: a deterministic stand-in for a model, with no network.

It answers from the structured `payload` a prompt was built from (never from the prompt text), so
the whole engine runs and is tested without a model; every completion says `offline=True` and
every text it writes starts with `[offline]` where a person could mistake it for a model's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from models.engine.goal_checks import rule_verdict
from models.errors import ProviderError, ToolArgumentsError
from models.memory.procedure_learning import ABOUT_GOAL_SHARE, about_goal, template_applies
from models.plans.plans import MAX_INSTRUCTION_CHARS
from models.plans.playbooks import find_playbook, playbook_criteria
from models.plans.references import referenced_facts
from worker.model_calls.offline_fields import offline_fields
from worker.model_calls.providers import (
    Completion,
    ModelRequest,
    estimate_messages,
    estimate_tokens,
)

OFFLINE_PREFIX = "[offline] "
SYNTHESIS_LINE_MAX_CHARS = 200
SUMMARY_LINE_MAX_CHARS = 160


class OfflineProvider:
    """A deterministic stand-in for a model, reading `request.purpose` and `request.payload`.

    - plan `{"goal", "facts", "tools"}`: `{"steps": <playbook>, "success_criteria": <its
      criteria>}` if one matches the goal, else one
      model step `answer` whose instruction is the goal (its first `MAX_INSTRUCTION_CHARS`);
    - replan `{"goal", "facts", "tools", "failed_step": {"name", "tool", "args", "tools", "error",
      "instruction", "expect"}, "plan"}`: the failed tool's fallback (from the `tools` catalog) as
      one step with the failed step's name, else the failed step once more (the engine bounds
      replans); either keeps the failed step's expectations; after a should-replan check's
      `replan` (`failed_step.doubt`), one model step that tells the user why the plan stopped;
    - step `{"instruction", "goal", "facts", "results"}`: `"[offline] <instruction>"`; a step
      that declares `output` (`{..., "output": {field: type}}`) gets JSON of its fields instead,
      each found by plain rules in its context (`worker.model_calls.offline_fields`), never
      invented;
    - synthesize `{"goal", "facts", "results": [{"name", "status", "result"}]}`: `"[offline] "` and
      one line `name: <compact JSON, at most 200 chars>` per succeeded step;
    - check_plan `{"goal", "step": {"name", "result"}, "remaining": [{"name", "uses", ...}]}`:
      `{"go_on": false}` when a value a remaining step `uses` is empty or missing, else true;
    - check_goal `{"goal", "criteria": [str], "deliverables": {name: result}, "answer"}`:
      `{"met", "reason", "missing"}` by the criteria's values alone
      (`models.engine.goal_checks.rule_verdict`);
    - summarize `{"previous": str | None, "turns": [str], "max_chars": int}`: extractive, the
      previous summary and the first line of each turn, oldest lines dropped beyond `max_chars`;
    - extract_facts `{"goal", "stated_facts", "failures"}`: one preference fact per fact the user
      pinned (never those a reviewer set: the request's `facts` holds every pinned fact, run
      state, and is not read) and one knowledge fact per failure that a fallback fixed (naming
      the goal it happened in).

    A plan also reads `episodes` (recalled past runs): a step whose tool failed in a past run and
    was fixed by its fallback is planned with the fallback from the start; and `procedures`
    (recalled procedures, `worker.phases.procedure_context.entries`): the first plan template whose
    title is about the goal (`about_goal`; all of a learned one's title), whose tools are all
    offered and whose `${facts.KEY}` are all pinned is the plan, before any playbook (a procedure
    is what a person kept, or agentq learned, from a run that worked).

    Token counts are estimates: ceil(chars / 4) per message and for the answer. Playbooks exist
    once their tool modules are loaded (`load_tool_modules`); until then every plan is `answer`.
    """

    name = "offline"

    def complete(self, request: ModelRequest) -> Completion:
        """Answer `request`; raises `ProviderError` if its payload lacks what the purpose needs."""
        try:
            text = _OFFLINE_ANSWERS[request.purpose](request.payload)
        except (KeyError, TypeError) as exc:
            raise ProviderError(f"offline {request.purpose}: malformed payload ({exc!r})") from exc
        return Completion(
            text=text,
            model="offline",
            prompt_tokens=estimate_messages(request),
            completion_tokens=estimate_tokens(text),
            finish_reason="stop",
            offline=True,
        )


def _offline_plan(payload: Mapping[str, Any]) -> str:
    goal: str = payload["goal"]
    learned = _fixes_from_episodes(payload)
    procedure = _from_procedure(payload)
    steps: list[dict[str, Any]] | None = None
    if procedure is not None:
        steps = [dict(step) for step in procedure["plan_template"]["steps"]]
        if all(_with_fix(step, learned) == step for step in steps):  # adopted as it is
            return json.dumps({"procedure": procedure["id"]})  # worker.phases.adoption
    else:
        steps = find_playbook(goal)
    if steps is None:
        # the goal itself is in every call's run state; the instruction holds what fits of it
        answer = {"name": "answer", "instruction": goal[:MAX_INSTRUCTION_CHARS], "kind": "model"}
        steps = [{**answer, "tool": None, "args": {}}]
    plan: dict[str, Any] = {"steps": [_with_fix(step, learned) for step in steps]}
    if criteria := playbook_criteria(goal):
        plan["success_criteria"] = criteria
    return json.dumps(plan)


def _from_procedure(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first recalled procedure for this goal (`about_goal`) whose plan template this run
    can follow."""
    tools = {t["name"] for t in payload.get("tools", [])}
    facts = set(payload.get("facts") or {})
    goal = str(payload.get("goal") or "")
    for procedure in payload.get("procedures") or []:
        steps = (procedure.get("plan_template") or {}).get("steps") or []
        title, origin = str(procedure.get("title") or ""), str(procedure.get("origin") or "")
        if not steps or not template_applies(title, origin, goal):
            continue
        if origin != "learned" and not about_goal(title, goal, share=ABOUT_GOAL_SHARE):
            continue
        if all(_followable(step, tools, facts) for step in steps):
            return dict(procedure)
    return None


def _followable(step: Mapping[str, Any], tools: set[str], facts: set[str]) -> bool:
    named = [step.get("tool"), *step.get("tools", [])]
    try:
        needed = referenced_facts(step.get("args") or {})
    except ToolArgumentsError:
        return False
    return all(t in tools for t in named if t) and needed <= facts


def _fixes_from_episodes(payload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Tool -> its fallback entry, for tools that failed in a recalled run and whose fallback
    then worked (the episode's `fixed_by` names it)."""
    fallbacks = {t["name"]: t.get("fallback") for t in payload.get("tools", [])}
    fixes: dict[str, dict[str, Any]] = {}
    for episode in payload.get("episodes", []):
        for failure in episode.get("failures", []):
            fallback = fallbacks.get(failure.get("tool"))
            if fallback and failure.get("fixed_by") == fallback["tool"]:
                fixes[failure["tool"]] = fallback
    return fixes


def _with_fix(step: dict[str, Any], fixes: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    fix = fixes.get(step.get("tool") or "")
    if fix is None:
        return step
    note = f"{step['tool']} failed in a past run; use {fix['tool']} from the start"
    return {**step, "tool": fix["tool"], "args": fix["args"], "instruction": note}


def _offline_replan(payload: Mapping[str, Any]) -> str:
    failed: Mapping[str, Any] = payload["failed_step"]
    if failed.get("doubt"):  # the rest of the plan was found pointless: say why, and stop
        why = f"Tell the user why the plan stopped after step {failed['name']}: {failed['doubt']}"
        stop = {
            "name": f"after_{failed['name']}"[:64],
            "kind": "model",
            "instruction": why[:MAX_INSTRUCTION_CHARS],
            "after": [failed["name"]],
        }
        return json.dumps({"steps": [stop]})
    tool_name = failed.get("tool")
    fallbacks = {entry["name"]: entry.get("fallback") for entry in payload.get("tools", [])}
    fallback = fallbacks.get(tool_name) if tool_name else None
    if fallback is not None:
        step = {
            "name": failed["name"],
            "instruction": f"Use {fallback['tool']} instead of {tool_name}",
            "kind": "tool",
            "tool": fallback["tool"],
            "args": fallback["args"],
        }
    else:
        step = {
            "name": failed["name"],
            "instruction": failed.get("instruction", ""),
            "kind": "tool" if tool_name else "model",
            "tool": tool_name,
            "args": failed.get("args", {}),
            **({"tools": failed["tools"]} if failed.get("tools") else {}),
        }
    if failed.get("expect"):  # what the step's result must hold, whichever tool makes it
        step["expect"] = failed["expect"]
    if failed.get("output") and step["kind"] == "model":  # later steps refer to its fields
        step["output"] = failed["output"]
    return json.dumps({"steps": [step]})


def _offline_step(payload: Mapping[str, Any]) -> str:
    if payload.get("output"):
        return json.dumps(offline_fields(payload["output"], payload), ensure_ascii=False)
    return OFFLINE_PREFIX + str(payload["instruction"])


def _offline_synthesize(payload: Mapping[str, Any]) -> str:
    lines = [
        f"{entry['name']}: {_compact(entry.get('result'))}"
        for entry in payload["results"]
        if entry.get("status") == "succeeded"
    ]
    return OFFLINE_PREFIX + ("\n".join(lines) if lines else "no step succeeded")


def _compact(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if len(text) <= SYNTHESIS_LINE_MAX_CHARS:
        return text
    return text[: SYNTHESIS_LINE_MAX_CHARS - 3] + "..."


def _offline_summarize(payload: Mapping[str, Any]) -> str:
    lines = [payload["previous"]] if payload.get("previous") else []
    lines += [_first_line(turn) for turn in payload["turns"]]
    text = "\n".join(lines)
    max_chars = int(payload["max_chars"])
    return OFFLINE_PREFIX + (text if len(text) <= max_chars else text[-max_chars:])


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= SUMMARY_LINE_MAX_CHARS else line[: SUMMARY_LINE_MAX_CHARS - 1] + "…"


def _offline_extract_facts(payload: Mapping[str, Any]) -> str:
    facts = [
        {
            "subject": "user",
            "attribute": key,
            "category": "preference",
            "text": f"The user's {key.replace('_', ' ')} is {value}",
        }
        for key, value in payload["stated_facts"].items()
    ]
    facts += [
        {
            "subject": f"tool:{f['tool']}",
            "attribute": "reliability",
            "category": "knowledge",
            "text": f"When asked to {_lower_first(payload['goal'])}: {f['tool']} failed "
            f"({f['error']}); {f['fixed_by']} worked instead",
        }
        for f in payload.get("failures", [])
        if f.get("fixed_by")
    ]
    return json.dumps({"facts": facts})


def _offline_check_plan(payload: Mapping[str, Any]) -> str:
    """`{"go_on": false}` when a value the remaining steps refer to came back empty or missing
    (null, "", [], {}), naming it; else `{"go_on": true}` (`worker.phases.replan_checks`)."""
    result = payload["step"].get("result") or {}
    name = payload["step"]["name"]
    for later in payload["remaining"]:
        for key in later.get("uses", []):
            value = result if key == "" else result.get(key) if isinstance(result, dict) else None
            if value in (None, "", [], {}):
                shown = f"{name}.{key}" if key else name
                why = f"{shown} is empty, and step {later['name']!r} needs it"
                return json.dumps({"go_on": False, "reason": OFFLINE_PREFIX + why})
    why = "every value the remaining steps use is there"
    return json.dumps({"go_on": True, "reason": OFFLINE_PREFIX + why})


def _offline_check_goal(payload: Mapping[str, Any]) -> str:
    met, reason, missing = rule_verdict(payload["criteria"], payload["deliverables"])
    return json.dumps({"met": met, "reason": OFFLINE_PREFIX + reason, "missing": missing})


_OFFLINE_ANSWERS = {
    "check_plan": _offline_check_plan,
    "check_goal": _offline_check_goal,
    "plan": _offline_plan,
    "replan": _offline_replan,
    "step": _offline_step,
    "synthesize": _offline_synthesize,
    "summarize": _offline_summarize,
    "extract_facts": _offline_extract_facts,
}
