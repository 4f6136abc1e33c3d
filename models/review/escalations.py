"""Escalations as every part of the review queue reads them: one by id, who may be named as
their reviewer, how long one has waited and has left before its deadline, and the next whose
deadline passed (`next_due`, for the beat; `models.review.reviews.pass_deadline` applies it).

Shared by the decisions and claims (`models.review.reviews`), the commands
(`models.front.commands`), the API tokens (`models.access.api_tokens`: a token is named after its
reviewer) and the front ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final

from sqlmodel import Session, col, select

from models.engine import transitions
from models.errors import InvalidInput, NotFound
from models.tables import Escalation

DEADLINE_ACTIONS: Final = ("reject", "wait")  # AGENTQ_ESCALATION_DEADLINE_ACTION's values
DEADLINE_REVIEWER: Final = "deadline"  # who decides an escalation its deadline rejected

# The reviewers agentq records for decisions no person made: an escalation withdrawn with its
# run, one its deadline rejected. A person so named would pass for agentq in the audit trail.
RESERVED_REVIEWERS: Final = frozenset({transitions.WITHDRAWN_BY, DEADLINE_REVIEWER})
# Who claims and decides is recorded by name, so a name must read as itself: letters, digits and
# . _ @ + - only (no spaces, no control or invisible characters that make "rita" and "rita\u200b"
# look the same).
REVIEWER_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$"


def check_reviewer_name(name: str, *, field: str) -> None:
    """Refuse a reviewer (or token) name that breaks `REVIEWER_NAME_PATTERN` or is one of
    `RESERVED_REVIEWERS` (compared case-insensitively); raises `InvalidInput` naming `field`."""
    if not re.fullmatch(REVIEWER_NAME_PATTERN, name):
        raise InvalidInput(
            f"{field}: {name!r} is not a reviewer name: 1 to 100 letters, digits and . _ @ + -, "
            "starting with a letter or digit"
        )
    if name.casefold() in RESERVED_REVIEWERS:
        raise InvalidInput(
            f"{field}: {name!r} is reserved (agentq records it for decisions no person made; "
            f"reserved: {', '.join(sorted(RESERVED_REVIEWERS))}); pick another name"
        )


def get_escalation(session: Session, escalation_id: int) -> Escalation:
    """The escalation `escalation_id`; raises `NotFound`."""
    esc = session.get(Escalation, escalation_id)
    if esc is None:
        raise NotFound(f"escalation {escalation_id} does not exist")
    return esc


def waiting_s(esc: Escalation, now: datetime) -> float:
    """Seconds the escalation has waited for a decision: from opening to its decision, or to
    `now` while undecided."""
    return ((esc.decided_at or now) - esc.created_at).total_seconds()


def deadline_left_s(esc: Escalation, now: datetime) -> float | None:
    """Seconds from `now` to the escalation's deadline, negative once it has passed; None when it
    is decided or has no deadline (decided before deadlines existed)."""
    if esc.status == "decided" or esc.deadline_at is None:
        return None
    return (esc.deadline_at - now).total_seconds()


def next_due(session: Session, *, now: datetime, skip: Iterable[int] = ()) -> Escalation | None:
    """The undecided escalation whose deadline passed longest before `now` and was not applied
    yet (ids in `skip` aside), locked `FOR UPDATE SKIP LOCKED`: a reviewer deciding it, or
    another beat, keeps it, and the beat moves on."""
    return session.exec(
        select(Escalation)
        .where(
            Escalation.status != "decided",
            col(Escalation.deadline_passed_at).is_(None),
            col(Escalation.deadline_at) <= now,
            col(Escalation.id).not_in(list(skip)),
        )
        .order_by(col(Escalation.deadline_at))
        .with_for_update(skip_locked=True)
        .limit(1)
    ).one_or_none()


def deadline_comment(esc: Escalation) -> str:
    """The comment of a rejection by the deadline: when it was opened and when the deadline
    passed, with the setting that decided."""
    opened = f"{esc.created_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    due = f"{esc.deadline_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if esc.deadline_at else "-"
    return (
        f"the review deadline passed with no decision (opened {opened}, deadline {due}); "
        "AGENTQ_ESCALATION_DEADLINE_ACTION is reject"
    )
