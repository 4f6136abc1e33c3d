"""Playbooks: canned plans (lists of step dicts) that the offline planner returns for goals that
contain all of a playbook's keywords (`worker.model_calls.offline`); a tool module registers its
own with `playbook` (the expense demo's: `worker.tools.expenses`)."""

from __future__ import annotations

import copy
from typing import Any

_PLAYBOOKS: list[tuple[tuple[str, ...], list[dict[str, Any]], tuple[str, ...]]] = []


def playbook(
    keywords: tuple[str, ...], steps: list[dict[str, Any]], criteria: tuple[str, ...] = ()
) -> None:
    """Register a canned plan for goals containing every keyword (case-insensitive), with the
    success criteria the offline planner writes with it (`models.engine.goal_checks`).

    Raises `ValueError` for an empty keyword tuple or one already registered.
    """
    key = tuple(word.lower() for word in keywords)
    if not key:
        raise ValueError("a playbook needs at least one keyword")
    if any(existing == key for existing, _, _ in _PLAYBOOKS):
        raise ValueError(f"a playbook for {key!r} is already registered")
    _PLAYBOOKS.append((key, copy.deepcopy(steps), tuple(criteria)))


def find_playbook(goal: str) -> list[dict[str, Any]] | None:
    """A copy of the first registered playbook whose keywords all appear in `goal`, else None."""
    found = _matching(goal)
    return copy.deepcopy(found[1]) if found is not None else None


def playbook_criteria(goal: str) -> list[str]:
    """The success criteria of the playbook `find_playbook` finds for `goal` ([] for none)."""
    found = _matching(goal)
    return list(found[2]) if found is not None else []


def _matching(goal: str) -> tuple[tuple[str, ...], list[dict[str, Any]], tuple[str, ...]] | None:
    text = goal.lower()
    return next((p for p in _PLAYBOOKS if all(word in text for word in p[0])), None)
