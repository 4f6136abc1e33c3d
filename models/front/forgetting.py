"""Forgetting a user, behind `agentq memory forget` and `POST /api/v1/memory/forget`: their memory
(`models.memory.memory_admin.forget`) and, with `runs`, what they wrote that would run again, their
schedules (`models.schedules`), which the memory domain does not own."""

from __future__ import annotations

from models.db import session_scope
from models.memory import memory_admin
from models.memory.memory_admin import Forgotten
from models.schedules import schedules


def forget(user_id: str, *, cancel_runs: bool = False, runs: bool = False) -> Forgotten:
    """`memory_admin.forget(user_id, cancel_runs=..., runs=...)`; with `runs`, then the user's
    schedules are deleted with their fires, counted in `erased_runs["schedules"]`. Raises as
    `memory_admin.forget` does, and then no schedule is deleted."""
    done = memory_admin.forget(user_id, cancel_runs=cancel_runs, runs=runs)
    if runs:
        with session_scope() as session:
            done.erased_runs["schedules"] = schedules.remove_all(session, user_id=user_id)
    return done
