"""Per-user submit quotas: runs not yet ended, and runs submitted in the last minute.

Issue 9, finding 3: one user's 200 submits in 7 s were all accepted and starved everyone else.
`check_submit` runs inside `models.engine.runs.submit_run`, so the CLI, the HTTP API and the console
share one rule. It first takes a transaction-level advisory lock on the user, so two submits of
one user take turns and cannot both pass on the same count; the lock ends with the transaction.
The counts are read from `runs` rows (no counter to drift); the decision, `refusal`, is pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from sqlmodel import Session

from models import sql
from models.errors import UserQuotaExceeded
from models.settings import Settings
from models.tables import utcnow

SUBMIT_WINDOW_S: Final = 60  # AGENTQ_USER_SUBMITS_PER_MINUTE counts submits in any 60 s
# Retry-After for the active-run limit, s: no row says when a run will end. A tool-only run
# ends in seconds and a model run in tens of seconds; asking again sooner only adds load.
ACTIVE_RUNS_RETRY_AFTER_S: Final = 30

# submit_lock: one user's submits take turns until the transaction ends (a hash collision
# between two users only makes them take turns too).
SUBMIT_LOCK: Final = "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"
# quota_state: how many of the user's runs have not ended (partial index ix_runs_user_active),
# and when each of its runs created after :since was created, oldest first (ix_runs_user_created).
QUOTA_STATE: Final = """
SELECT (SELECT count(*) FROM runs
        WHERE user_id = :user_id AND status NOT IN ('succeeded', 'failed', 'cancelled')) AS active,
    ARRAY(SELECT created_at FROM runs WHERE user_id = :user_id AND created_at > :since
          ORDER BY created_at) AS recent"""


def refusal(
    *, user_id: str, active: int, recent: Sequence[datetime], settings: Settings, now: datetime
) -> UserQuotaExceeded | None:
    """Why a new run of `user_id`, who has `active` runs not ended and runs created at `recent`
    (the last `SUBMIT_WINDOW_S` seconds, oldest first), is refused; None when it may be.

    - `active` >= `AGENTQ_USER_MAX_ACTIVE_RUNS`: refused, retry after `ACTIVE_RUNS_RETRY_AFTER_S`;
    - `len(recent)` >= `AGENTQ_USER_SUBMITS_PER_MINUTE`: refused until enough of them leave the
      window (`retry_after_s`).
    A limit of 0 is off.
    """
    max_active, per_minute = settings.user_max_active_runs, settings.user_submits_per_minute
    if max_active and active >= max_active:
        return UserQuotaExceeded(
            f"AGENTQ_USER_MAX_ACTIVE_RUNS: user {user_id!r} has {active} runs not yet ended, "
            f"the most allowed ({max_active}); submit again once one has ended (or cancel one)",
            setting="AGENTQ_USER_MAX_ACTIVE_RUNS",
            retry_after_s=ACTIVE_RUNS_RETRY_AFTER_S,
        )
    if per_minute and len(recent) >= per_minute:
        wait = retry_after_s(recent, limit=per_minute, now=now)
        return UserQuotaExceeded(
            f"AGENTQ_USER_SUBMITS_PER_MINUTE: user {user_id!r} submitted {len(recent)} runs in "
            f"the last {SUBMIT_WINDOW_S} s, the most allowed ({per_minute}); try again in {wait} s",
            setting="AGENTQ_USER_SUBMITS_PER_MINUTE",
            retry_after_s=wait,
        )
    return None


def retry_after_s(recent: Sequence[datetime], *, limit: int, now: datetime) -> int:
    """Whole seconds (at least 1) until fewer than `limit` of the submit times `recent` (oldest
    first, all within the window) are left in the `SUBMIT_WINDOW_S` window ending then.

    A sliding-window log: with k >= `limit` times in the window, a submit passes again once the
    (k - limit + 1)-th oldest has left it, at that time + the window. Rounded up, so a client
    that waits exactly `Retry-After` (RFC 9110, section 10.2.3: whole seconds) is not refused.
    """
    leaving = recent[len(recent) - limit]
    wait = (leaving + timedelta(seconds=SUBMIT_WINDOW_S) - now).total_seconds()
    return max(1, math.ceil(wait))


def check_submit(session: Session, *, settings: Settings, user_id: str) -> None:
    """Raise `UserQuotaExceeded` when `user_id` may not submit a run now (see `refusal`).

    Call it in the transaction that inserts the run: the user's advisory lock is held until that
    transaction ends, so a concurrent submit of the same user counts this one. The lock and the
    counts are one round trip (`models.sql.first_rows`; the counts are read after the lock is
    granted, in a snapshot of their own).
    """
    if not (settings.user_max_active_runs or settings.user_submits_per_minute):
        return
    now = utcnow()
    since = now - timedelta(seconds=SUBMIT_WINDOW_S)
    _, state = sql.first_rows(  # one round trip; the count is read once the lock is held
        session,
        (SUBMIT_LOCK, {"key": json.dumps(["submits", user_id])}),
        (QUOTA_STATE, {"user_id": user_id, "since": since}),
    )
    problem = refusal(
        user_id=user_id,
        active=int(state.active),
        recent=list(state.recent),
        settings=settings,
        now=now,
    )
    if problem is not None:
        raise problem
