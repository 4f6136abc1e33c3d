"""What counts as evidence that a run delivered a value its success criteria name (issue 31).

The goal check's rules (`models.engine.goal_checks.rule_verdict`) look for each value a criterion
names in what the run delivered. A criterion all of whose values the run was *given* (pinned
facts' values, and the values its goal states: `models.plans.goal_values.extract`) is not met by
text a model step wrote from what it was given: a model restating its instructions delivers no
effect. A criterion naming a value the run worked out (a total) may be met by such a step's
answer, its given values (the currency) with it. SmolLM2-135M showed why on the agent-tasks
benchmark (`ops/bench/agent_tasks.py`): asked to "Draft a note to the account manager of
customer ACME-1001", it planned two model steps that wrote "plan a note to customer ACME-1001";
the criterion "The note about ACME-1001 is drafted to its account manager" found ACME-1001 in
that text, and the run succeeded with no note drafted.

A model step *restates* when it read nothing from outside the run: it was offered no tool, and no
step it waits for (directly or through others, `models.plans.graph.ancestors`) is a tool step,
a person's answer (`human`), or a model step offered a tool. What any other step delivers
counts as before. A run whose deliverable is only a model's text and whose criterion names only
given values (a greeting "to 'Ana'" for a pinned name, written from nothing) is then not met by
these rules: it escalates `goal_not_met`, and a reviewer who approves accepts it (the check is
waived). A false success is the worse error here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from models.plans.goal_values import extract
from models.plans.graph import ancestors
from models.tables import Step

READS_OUTSIDE = frozenset({"tool", "human"})  # step kinds whose results come from outside the run


def restating(steps: Sequence[Step], after: Mapping[int, Iterable[int]]) -> frozenset[str]:
    """The names of the model steps of `steps` (one plan version; `after`: step id -> the ids it
    waits for) that read nothing from outside the run (the module docstring)."""
    outside = {s.id for s in steps if s.kind in READS_OUTSIDE or (s.kind == "model" and s.tools)}
    return frozenset(
        s.name
        for s in steps
        if s.kind == "model" and s.id not in outside and not ancestors(after, s.id or 0) & outside
    )


def given_values(goal: str, pinned: Mapping[str, str]) -> frozenset[str]:
    """The values the run was given: its pinned facts' values and the values its goal states
    (`models.plans.goal_values.extract`), as written (`goal_checks.agrees` compares them)."""
    return frozenset(v for v in [*pinned.values(), *(g.value for g in extract(goal))] if v.strip())
