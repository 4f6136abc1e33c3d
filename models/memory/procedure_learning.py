"""Procedures learned from runs: what a run that had to find its way teaches its user (issue 31).

A run teaches when it succeeded after finding out something its first plan did not know
(`lesson_reason`): a replan (a failed step, or a should-replan check that found the rest of the
plan pointless), or a reviewer's answer or edit. What worked is then its user's procedure, so the
next run of that kind plans it at once (the offline planner and small models adopt a recalled
template by reference, `worker.phases.adoption`): ExpeL (Zhao et al., "ExpeL: LLM Agents Are
Experiential Learners", 2023) keeps insights from successful trajectories; Voyager (Wang et al.,
2023) keeps a skill once it has worked. The procedure (`distill`):

- when to use it: the goal; the how-to: why the run had to learn, what failed, the plan that worked;
- the plan template: the run's final plan (`models.memory.procedure_admin.template_of`: the steps
  that did not fail, no reviewer's answer steps), with each argument that is the value of one of
  the user's pinned facts written back as `${facts.KEY}` (`templated`), so the next run's own value
  fills it.

Never a near-duplicate (`decide`, pure): the procedure this run adopted, or one of the user's
procedures recalled for the goal above `SAME_KIND_SIMILARITY` whose template is of the same kind
(`same_kind`: its steps' names, kinds and order of waiting, and their tools but the one a replan
swapped), is the same procedure: a new version of it
when the template differs, nothing when it is the same. Otherwise a new procedure.

A learned version is `origin = learned`, written by `LEARNER`; from a run holding a reviewer's
words it is the reviewer's words, not the user's (issue 27): written as a reviewer, so a plan that
adopts it acts with a reviewer's rights (`worker.phases.adoption.author`). The orchestration (read,
embed between transactions, write) is `worker.memory.procedure_learning`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from models.memory import procedures as book
from models.memory.procedures import Actor, ProcedureSpec
from models.memory.stop_words import ENGLISH_STOP_WORDS
from models.plans.references import references

LEARNER: Final = "agentq"  # the writer of a learned version
# A procedure of the user at least this similar to the goal (cosine) with a template of the same
# shape is the same kind of goal. Measured 2026-12-06 on the agent-tasks goals
# (ops/bench/agent_goals.py, 23 goals, 253 pairs): pairs of one kind have a median similarity of
# 0.68 with all-MiniLM-L6-v2 (0.66 with hash-384), pairs of different kinds 0.30 (0.06). 0.6 lies
# between; the shape must match as well, so goals of one kind with different plans stay apart.
SAME_KIND_SIMILARITY: Final = 0.6
# A procedure is about a goal when this share of its title's content words are the goal's: "File a
# trip's expense report" is about "File my Lisbon trip expense report" (four of four), "Tally the
# receipts of my Porto trip" about "... my Madrid trip" (three of four); "File my Lisbon trip
# expense report" is not about "File the expense claim for my Berlin trip" (three of five: another
# kind of filing, with other tools, which the agent-tasks benchmark showed adopted and failing).
ABOUT_GOAL_SHARE: Final = 0.75
FACT_VALUE_MIN_CHARS: Final = 2  # a shorter pinned value ("1") is too common to stand for it
ERROR_CHARS: Final = 200

Reason = Literal["replan", "doubt", "reviewer_answer", "reviewer_edit"]
REASON_WORDS: Final[dict[str, str]] = {
    "replan": "a replan",
    "doubt": "a should-replan check found the rest of its plan pointless",
    "reviewer_answer": "a reviewer's answer",
    "reviewer_edit": "a reviewer's edit of its plan",
}


def content_words(text: str) -> set[str]:
    """`text`'s words less English stop words and words of one letter, lower-cased, a plural's
    final s dropped: what two texts must share to be about the same thing."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    kept = {w for w in words if len(w) > 1 and w not in ENGLISH_STOP_WORDS}
    return {w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in kept}


def about_goal(title: str, goal: str, *, share: float = ABOUT_GOAL_SHARE) -> bool:
    """Whether a procedure titled `title` is about `goal`: at least `share` of the title's content
    words are the goal's. A rule, not a model: recall finds a procedure by any shared word (a
    shared everyone-procedure "File a customer note" for "File my expense report"), and a planner
    that follows what recall offers would adopt it; the offline planner follows only one whose
    title says what the goal asks (`worker.model_calls.offline`, at ABOUT_GOAL_SHARE)."""
    said = content_words(title)
    return bool(said) and len(said & content_words(goal)) >= share * len(said)


def template_applies(title: str, origin: str, goal: str) -> bool:
    """Whether a procedure's plan template (titled `title`, of `origin`) may be a plan for `goal`:
    a person's template always (people write them to be reused; recall decides relevance), a
    learned one only for a goal holding every content word of its title, the goal of the run it
    was learned from. What that run found out (the live rate service down for CHF) may not hold
    for another goal: the offline planner filed three claims at the monthly table's rates while
    their live rates worked (four false successes in the agent-tasks benchmark's second pass), and
    SmolLM2, offered a learned Zurich claim's template for a London claim, adopted it (a false
    success, issue 31). Elsewhere a learned procedure's how-to still reads."""
    return origin != "learned" or about_goal(title, goal, share=1.0)


def lesson_reason(
    *, succeeded: bool, replanned: bool, decisions: Sequence[str], doubted: bool = False
) -> Reason | None:
    """Why a run teaches a procedure, or None: it `succeeded` after a replan (one a
    should-replan check asked for: `doubted`), or after a reviewer's `edit` or answer decision
    (`decisions`: its escalations' decisions as stored, `Escalation.decision`: an answer is
    `respond`)."""
    if not succeeded:
        return None
    if "edit" in decisions:
        return "reviewer_edit"
    if doubted:
        return "doubt"
    if replanned:
        return "replan"
    if "respond" in decisions:
        return "reviewer_answer"
    return None


def templated(value: Any, facts: Mapping[str, str]) -> Any:
    """`value` (a step's arguments, any JSON) with every string that is exactly the value of one
    of `facts` (key -> value; values under `FACT_VALUE_MIN_CHARS` and values two keys share left
    out) replaced by `${facts.KEY}`."""
    by_value: dict[str, str | None] = {}
    for key, fact in facts.items():
        if len(fact) >= FACT_VALUE_MIN_CHARS:
            by_value[fact] = None if fact in by_value else key
    return _templated(value, {v: k for v, k in by_value.items() if k is not None})


def _templated(value: Any, keys: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return f"${{facts.{keys[value]}}}" if value in keys else value
    if isinstance(value, list):
        return [_templated(v, keys) for v in value]
    if isinstance(value, dict):
        return {k: _templated(v, keys) for k, v in value.items()}
    return value


def shape(template: Mapping[str, Any] | None) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """A template's shape: each step's name, kind and the names it waits for, in order; the tools
    and arguments a new version may change are not part of it."""
    steps = (template or {}).get("steps") or []
    return tuple(
        (str(s.get("name")), str(s.get("kind") or "tool"), tuple(sorted(s.get("after") or ())))
        for s in steps
    )


def same_kind(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two templates do the same kind of thing: the same `shape`, and the same tool in
    all their steps but at most one, and fewer than half (a replan swaps the tool of the step that
    failed; two expense plans with the same step names over other services are two kinds). Two
    how-tos without a template are of one kind (the goal's similarity decides)."""
    if shape(a) != shape(b):
        return False
    if not shape(a):
        return True
    pairs = zip((a or {})["steps"], (b or {})["steps"], strict=True)
    other: int = sum(bool(x.get("tool") != y.get("tool")) for x, y in pairs)
    return other <= 1 and 2 * other < len(shape(a))


@dataclass(frozen=True)
class Candidate:
    """One of the user's procedures that may be the one a run learned: its id, current version,
    cosine similarity to the goal, and template."""

    id: int
    version: int
    similarity: float
    template: Mapping[str, Any] | None


@dataclass(frozen=True)
class Decision:
    """What to write: `add` a procedure, a new `version` of `target` (at `expected`), or `keep`
    `target` as it is (it already says this)."""

    action: Literal["add", "version", "keep"]
    target: int | None = None
    expected: int | None = None


def decide(
    template: Mapping[str, Any], candidates: Sequence[Candidate], *, adopted: int | None = None
) -> Decision:
    """The write for a learned `template`, given the user's candidate procedures (any order):
    the one the run `adopted` is the same procedure; else the most similar candidate at or above
    `SAME_KIND_SIMILARITY` whose template is of the `same_kind`; none: `add`. The same procedure
    gets a new `version` when its template differs, `keep` when it is the same."""
    same = [c for c in candidates if c.id == adopted]
    if not same:
        alike = [
            c
            for c in candidates
            if c.similarity >= SAME_KIND_SIMILARITY and same_kind(c.template, template)
        ]
        same = sorted(alike, key=lambda c: (-c.similarity, -c.id))[:1]
    if not same:
        return Decision("add")
    (match,) = same
    if dict(match.template or {}) == dict(template):
        return Decision("keep", match.id, match.version)
    return Decision("version", match.id, match.version)


def stands_alone(steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether each of `steps` (a template's, as dicts) refers, in its `args` and `after`, only to
    steps among them."""
    names = {s["name"] for s in steps}
    return all(references(s.get("args") or {}) | set(s.get("after") or ()) <= names for s in steps)


@dataclass(frozen=True)
class Lesson:
    """What a run taught, ready to embed and write: the procedure, who writes it, the run, why
    it taught (`lesson_reason`)."""

    run_id: int
    spec: ProcedureSpec
    writer: Actor
    adopted: int | None
    reason: Reason


def distill(
    *,
    run_id: int,
    user_id: str,
    goal: str,
    reason: Reason,
    template: Mapping[str, Any],
    failures: Sequence[tuple[str, str | None, str | None]],
    facts: Mapping[str, str],
    doubts: Sequence[tuple[str, str]] = (),
    reviewer: str | None,
    adopted: int | None,
    tools: Sequence[str],
) -> Lesson:
    """The procedure run `run_id` of `user_id` teaches (module docstring). `template`: its final
    plan (`template_of`); `failures`: its failed steps as (name, tool, error); `facts`: the
    user's own pinned facts; `doubts`: the should-replan check's `replan` answers as (step name,
    reason); `reviewer`: the reviewer whose words are in the run, if any (the procedure is then
    theirs). A `doubt` lesson is a how-to without a template: what made the rest of that plan
    pointless was the data of that run (no receipts, nothing owed), and a template ending in that
    run's "tell the user why" step, adopted for a goal whose data differs, would stop short and
    succeed without delivering. Raises `InvalidInput` when the template is not a valid plan of
    `tools` (a tool since removed). A template that does not stand on its own (`stands_alone`:
    a kept step refers to one a reviewer answered in its place, which `template_of` leaves out)
    is left out too: the lesson is then a how-to that says a reviewer answered."""
    steps = [{**s, "args": templated(s.get("args") or {}, facts)} for s in template["steps"]]
    keep_template = reason != "doubt" and stands_alone(steps)
    failed = "; ".join(
        f"step {name}{f' ({tool})' if tool else ''} failed: {(error or '')[:ERROR_CHARS]}"
        for name, tool, error in failures
    )
    worked = "; ".join(
        f"{s['name']}: {s.get('tool') or 'model'}" + (f" {s['args']}" if s.get("args") else "")
        for s in steps
    )
    doubted = "; ".join(f"after step {name}: {why[:ERROR_CHARS]}" for name, why in doubts)
    body = (
        f"Learned from run {run_id}, which succeeded after {REASON_WORDS[reason]}. "
        + (f"What failed: {failed}. " if failed else "")
        + ("A reviewer answered in its place. " if reason == "reviewer_answer" else "")
        + (
            f"Check each result before going on; the rest was pointless {doubted}."
            if reason == "doubt"
            else f"The plan that worked: {worked}."
        )
    )
    data = {
        "title": goal[: book.TITLE_MAX_CHARS],
        "when_to_use": goal[: book.WHEN_MAX_CHARS],
        "body": body[: book.BODY_MAX_CHARS],
        "plan_template": {"steps": steps} if keep_template else None,
        "scope": "user",
        "user_id": user_id,
    }
    spec = book.checked(data, tools=tools)
    writer = (
        Actor(f"{LEARNER} (from reviewer {reviewer})", "reviewer")
        if reviewer is not None
        else Actor(LEARNER, "submitter", user_id)
    )
    return Lesson(run_id, spec, writer, adopted, reason)
