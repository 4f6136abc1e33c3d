"""The named reads the front ends show: runs listed, a run's plan versions, escalations, step
names and events, the review queue and its counts, and a page's version.

The CLI (`ops`), the HTTP API and the console (`api`) read rows through these only, so a query
has one definition whichever front end shows it (issue 14). Each reads, in the caller's session,
and changes nothing; the state-changing statements are in `models.engine.transitions` and its
callers.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy.orm import defer
from sqlmodel import Session, col, select

from models.tables import Escalation, PlanVersion, Run, RunEvent, Step

EscalationStatus = Literal["undecided", "open", "claimed", "decided", "all"]


def newest_runs(
    session: Session,
    *,
    limit: int,
    status: str | None = None,
    user_id: str | None = None,
    owner: str | None = None,
    before: int | None = None,
    with_answer: bool = True,
) -> list[Run]:
    """Runs newest first (by id), at most `limit`: in `status`, of `user_id`, with ids below
    `before`, and only `owner`'s when given (a submitter's own; None: everyone's). Without
    `with_answer`, `final_result` is not read (a listed run shows no answer)."""
    stmt = select(Run).order_by(col(Run.id).desc()).limit(limit)
    if not with_answer:
        stmt = stmt.options(defer(Run.final_result))  # type: ignore[arg-type]
    if owner is not None:
        stmt = stmt.where(col(Run.user_id) == owner)
    if status:
        stmt = stmt.where(col(Run.status) == status)
    if user_id:
        stmt = stmt.where(col(Run.user_id) == user_id)
    if before:
        stmt = stmt.where(col(Run.id) < before)
    return list(session.exec(stmt))


def run_ids_of(owner: str | None) -> Any:
    """A subquery of the ids of `owner`'s runs (None: every run's), for `IN (...)`."""
    stmt = select(Run.id)
    return stmt if owner is None else stmt.where(Run.user_id == owner)


def runs_by_id(session: Session, run_ids: Collection[int]) -> dict[int, Run]:
    """The runs of `run_ids` by id (missing ones left out)."""
    runs = session.exec(select(Run).where(col(Run.id).in_(run_ids)))
    return {r.id or 0: r for r in runs}


# plan_versions: a run's plan versions, oldest first; built once (a run's detail reads it).
PLAN_VERSIONS: Final = (
    select(PlanVersion)
    .where(PlanVersion.run_id == sa.bindparam("run_id"))
    .order_by(col(PlanVersion.version))
)


def plan_versions(session: Session, run_id: int) -> list[PlanVersion]:
    """Every plan version of the run, oldest first."""
    return list(session.exec(PLAN_VERSIONS, params={"run_id": run_id}))


def plan_versions_of_runs(session: Session, run_ids: Collection[int]) -> list[PlanVersion]:
    """Every plan version of each run of `run_ids`, in no particular order."""
    return list(session.exec(select(PlanVersion).where(col(PlanVersion.run_id).in_(run_ids))))


def step_statuses(session: Session, step_ids: Collection[int]) -> dict[int, str]:
    """The status of each step of `step_ids`, by id."""
    rows = session.exec(select(Step.id, Step.status).where(col(Step.id).in_(step_ids)))
    return {int(step_id or 0): status for step_id, status in rows.all()}


def step_names(session: Session, run_id: int) -> dict[int, str]:
    """The name of each step of the run, by id."""
    rows = session.exec(select(Step.id, Step.name).where(Step.run_id == run_id))
    return {int(step_id or 0): name for step_id, name in rows.all()}


def first_event(session: Session, run_id: int, kind: str) -> RunEvent | None:
    """The run's oldest event of `kind`, if any."""
    stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
    return session.exec(stmt.order_by(col(RunEvent.id))).first()


def last_event_id(session: Session, *, run_ids: Any = None, kind_prefix: str = "") -> int:
    """The newest event id (of `run_ids`, a list or a subquery; of kinds starting with
    `kind_prefix`): a page's version, which changes whenever anything it shows may have.

    A page reads it first, before any row it shows: each statement of a READ COMMITTED
    transaction sees what had committed when it began, so a version read after the rows can
    already count a change the page missed (a run page showing `running` with the version of the
    run's `run.succeeded`), and the page's poll (`static/console.js`) then sees nothing new and
    never reloads. Read first, it can only be older than the rows: the next poll reloads."""
    stmt = sa.select(sa.func.max(col(RunEvent.id)))
    if run_ids is not None:
        stmt = stmt.where(col(RunEvent.run_id).in_(run_ids))
    if kind_prefix:
        stmt = stmt.where(col(RunEvent.kind).startswith(kind_prefix))
    return int(session.scalar(stmt) or 0)


def run_escalations(session: Session, run_id: int) -> list[Escalation]:
    """Every escalation of the run, oldest first."""
    stmt = select(Escalation).where(Escalation.run_id == run_id)
    return list(session.exec(stmt.order_by(col(Escalation.id))))


def open_escalation(session: Session, run_id: int) -> Escalation | None:
    """The run's undecided escalation, if any."""
    return session.exec(
        select(Escalation).where(Escalation.run_id == run_id, Escalation.status != "decided")
    ).first()


def escalations(
    session: Session,
    *,
    which: EscalationStatus = "undecided",
    token_id: int | None = None,
    newest_first: bool = False,
    limit: int | None = None,
) -> list[Escalation]:
    """Escalations by age (oldest first unless `newest_first`, then by id), at most `limit`:
    `which` status (`undecided`: open or claimed; `all`), only those claimed through the API
    token `token_id` when given."""
    stmt = select(Escalation)
    if which == "undecided":
        stmt = stmt.where(col(Escalation.status) != "decided")
    elif which != "all":
        stmt = stmt.where(col(Escalation.status) == which)
    if token_id is not None:
        stmt = stmt.where(col(Escalation.claimed_by_token_id) == token_id)
    by_age = col(Escalation.created_at)
    stmt = stmt.order_by(by_age.desc() if newest_first else by_age, col(Escalation.id))
    return list(session.exec(stmt if limit is None else stmt.limit(limit)))


def review_queue(session: Session, include_decided: bool = False) -> list[Escalation]:
    """Escalations oldest first (by creation only, as `agentq review list` has always listed
    them); undecided only unless `include_decided`."""
    stmt = select(Escalation).order_by(col(Escalation.created_at))
    if not include_decided:
        stmt = stmt.where(Escalation.status != "decided")
    return list(session.exec(stmt))


def _inbox_filter(tab: str, me: int) -> list[Any]:
    if tab == "mine":  # claims belong to tokens, not names (issue 9)
        return [col(Escalation.status) == "claimed", col(Escalation.claimed_by_token_id) == me]
    return [col(Escalation.status) == tab]


def inbox(session: Session, *, tab: str, me: int, decided_limit: int) -> list[Escalation]:
    """The escalations of a console inbox tab (`open`, `claimed`, `decided`, or `mine`: those
    the token `me` has claimed), oldest first; the newest `decided_limit` for `decided`."""
    stmt = select(Escalation).where(*_inbox_filter(tab, me))
    if tab == "decided":
        stmt = stmt.order_by(col(Escalation.decided_at).desc()).limit(decided_limit)
    else:
        stmt = stmt.order_by(col(Escalation.created_at))
    return list(session.exec(stmt))


def inbox_counts(session: Session, *, me: int) -> dict[str, int]:
    """How many escalations are in each status, and `mine`: those claimed through token `me`."""
    by_status = session.exec(
        select(Escalation.status, sa.func.count()).group_by(col(Escalation.status))
    ).all()
    mine = session.scalar(
        sa.select(sa.func.count()).select_from(Escalation).where(*_inbox_filter("mine", me))
    )
    return {str(status): int(n) for status, n in by_status} | {"mine": int(mine or 0)}
