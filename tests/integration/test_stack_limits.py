"""The stack's limits on the real Postgres (`models.engine.stack_limits`): what the owner writes,
what a deployment's migration step writes (only what its environment sets; the rest only where none
is stored), and a submitter whose own settings disagree held to the stack's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from models.db import session_scope
from models.engine import stack_limits
from models.engine.runs import submit_run
from models.errors import UserQuotaExceeded
from models.settings import Settings, get_settings
from ops.stack import LocalStack

pytestmark = pytest.mark.integration


@pytest.fixture
def owner(engine: LocalStack) -> Iterator[None]:
    """The session engine's limits, written again as its owner wrote them after the test."""
    yield
    with session_scope() as session:
        stack_limits.publish(session, get_settings(), by="agentq up (tests)")


def test_a_migration_writes_what_its_environment_sets_and_keeps_the_rest(owner: None) -> None:
    with session_scope() as session:
        session.execute(sa.text("DELETE FROM stack_limits"))  # a stack no owner wrote yet
    seeded = Settings(max_replan_budget=7)  # as if AGENTQ_MAX_REPLAN_BUDGET=7 were set
    with session_scope() as session:
        changes = stack_limits.publish(session, seeded, by="agentq migrate", only_set=True)
    assert ("AGENTQ_MAX_REPLAN_BUDGET", None, 7) in changes
    assert len(changes) == len(stack_limits.LIMITS)  # the others seeded too
    another = Settings(default_replan_budget=1)  # says nothing of AGENTQ_MAX_REPLAN_BUDGET
    with session_scope() as session:
        changes = stack_limits.publish(session, another, by="agentq migrate", only_set=True)
        stored = stack_limits.read(session)
    assert changes == [("AGENTQ_DEFAULT_REPLAN_BUDGET", 2, 1)]
    assert stored["max_replan_budget"].value == 7  # not set by that environment: kept
    assert stored["default_replan_budget"].set_by == "agentq migrate"


def test_a_submitter_with_looser_settings_is_held_to_the_stacks(owner: None) -> None:
    strict = get_settings().model_copy(update={"user_max_active_runs": 1})
    with session_scope() as session:
        stack_limits.publish(session, strict, by="agentq up (tests)")
    looser, user = Settings(user_max_active_runs=100), f"held-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        note = stack_limits.notice(session, looser)
        submit_run(session, settings=looser, user_id=user, goal="first")
    assert note is not None and "AGENTQ_USER_MAX_ACTIVE_RUNS=100 (the stack's: 1" in note
    with session_scope() as session, pytest.raises(UserQuotaExceeded, match="most allowed \\(1\\)"):
        submit_run(session, settings=looser, user_id=user, goal="second")
