"""Claims on the human-review queue: take the oldest open escalation, see who holds what, and
give a claim back (`models.review.reviews` re-exports them, where callers have always found them).

Reviewers claim with `FOR UPDATE SKIP LOCKED`, so two reviewers never get the same escalation
(DESIGN.md, invariant 6).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.engine import transitions
from models.review.escalations import get_escalation
from models.tables import Escalation


def claim_next(
    session: Session, *, reviewer: str, token_id: int | None = None
) -> Escalation | None:
    """Claim the oldest open escalation no other reviewer holds, for `reviewer` through the API
    token `token_id` (None: the CLI); None when the queue is empty."""
    row = session.exec(
        select(Escalation)
        .where(Escalation.status == "open")
        .order_by(Escalation.created_at)  # type: ignore[arg-type]
        .with_for_update(skip_locked=True)
        .limit(1)
    ).one_or_none()
    return (
        None
        if row is None
        else transitions.claim_escalation(
            session, row.id or 0, reviewer=reviewer, token_id=token_id
        )
    )


def claims_by_reviewer(session: Session) -> dict[str, int]:
    """How many escalations each reviewer holds claimed, most first: `{"alice": 2, "bob": 1}`."""
    rows = session.exec(
        select(Escalation.claimed_by, sa.func.count())
        .where(Escalation.status == "claimed")
        .group_by(col(Escalation.claimed_by))
        .order_by(sa.func.count().desc(), col(Escalation.claimed_by))
    ).all()
    return {str(reviewer): int(n) for reviewer, n in rows}


def release(
    session: Session,
    escalation_id: int,
    *,
    reviewer: str,
    force: bool = False,
    token_id: int | None = None,
    reason: str | None = None,
) -> Escalation:
    """Give a claimed escalation back to the queue (claimed -> open): by the caller who claimed
    it (the API token `token_id`, or with None the CLI as `reviewer`), or by anyone with `force`
    (its claimer is gone; `reason` is recorded). Raises `NotFound`, `ClaimedByAnother` (someone
    else's claim, no `force`) or `IllegalTransition` (not claimed); records
    `escalation.released`."""
    get_escalation(session, escalation_id)
    return transitions.release_escalation(
        session, escalation_id, reviewer=reviewer, force=force, token_id=token_id, reason=reason
    )
