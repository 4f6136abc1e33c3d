"""The commands every front end calls: the CLI (`ops.cli`), the HTTP API (`api/`) and the
console (`api/ui/`) are thin adapters over these (issue 14).

Each command opens its transaction (`session_scope`), checks what it is given, changes the rows
with the model layer's functions (`models.engine.submissions`, `models.engine.transitions`,
`models.review.reviews`, `models.memory.memory_admin`, `models.access.api_tokens`), commits, and
only then sends its messages (`models.engine.queue.follow_up`: a broker that is down is not an
error, `notified` says so). It reads the settings and the registered tools itself, so no front end
passes them.

What a front end shows of the rows is read by its `describe(session, ...)`, called in the
command's transaction after the change (as `models.engine.submissions.submit` does); its value comes
back as `seen`. An error leaves the transaction rolled back whole, and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic

from sqlmodel import Session
from typing_extensions import TypeVar

from models.access import api_tokens
from models.approvals.calls import APPROVAL_REQUIRED
from models.db import session_scope
from models.engine import children, idempotency, queue, stack_limits, submissions, transitions
from models.engine.runs import get_run
from models.engine.submissions import RunRequest, Submitted
from models.errors import ClaimedByAnother, InvalidInput
from models.memory import memory_admin
from models.operations import destinations, retention, webhooks
from models.operations.webhook_tables import WebhookSubscription
from models.plans.plans import PlanSpec, parse_plan
from models.plans.tools import argument_problems, configured_tool_names, declared_returns
from models.review import answers, escalations, reviews
from models.settings import get_settings
from models.tables import Escalation, Run, utcnow

T = TypeVar("T", default=None)  # what `describe` reads; None without one
RunCheck = Callable[[Session, int], object]  # raises when the caller may not act on the run
EscalationView = Callable[[Session, Escalation], T]  # what a front end reads of an escalation
DecisionView = Callable[[Session, Escalation, Run], T]  # ... of a decided escalation and its run


@dataclass(frozen=True)
class Done(Generic[T]):
    """A committed command on a run: the run's id and status after it, whether its follow-up
    messages were sent (`notified`; False: the broker could not be reached, the reconciler
    sends them later), and what the caller's `describe` read (`seen`)."""

    run_id: int
    status: str
    notified: bool
    seen: T


def _nothing(*_: object) -> None:
    return None


def checked_plan(plan: Any, *, facts: Collection[str]) -> PlanSpec:
    """An explicit plan (JSON text or a dict, `{"steps": [...]}`) checked against the
    registered tools (`AGENTQ_TOOL_MODULES`), their arguments and the pinned fact keys `facts`;
    raises `InvalidPlan` naming the step and field, or `ConfigurationError` for bad tools."""
    return parse_plan(
        plan, tools=configured_tool_names(), facts=set(facts), check_args=argument_problems
    )


def submit(
    request: RunRequest,
    *,
    describe: Callable[[Session, Run], T] = _nothing,  # type: ignore[assignment]
) -> Submitted[T]:
    """Submit `request` under the process's settings (`models.engine.submissions.submit`: one
    transaction, then its messages); raises `InvalidInput`, `InvalidPlan`,
    `UserQuotaExceeded`, and then nothing is written."""
    return submissions.submit(request, settings=get_settings(), describe=describe)


def submit_once(
    request: RunRequest,
    key: idempotency.Key,
    *,
    describe: Callable[[Session, Run], dict[str, Any]],
) -> Submitted[dict[str, Any]]:
    """`submit` under an idempotency key (`models.engine.submissions.submit_once`): the run the same
    request made with `key` within `AGENTQ_IDEMPOTENCY_WINDOW_S` (`replayed`), else a new one
    whose `describe(session, run)` (JSON) is kept as the key's answer. Raises as `submit`, and
    `IdempotencyKeyReused` when another request made the key."""
    return submissions.submit_once(request, key, settings=get_settings(), describe=describe)


def limits_notice() -> str | None:
    """One line when this process's environment sets a limit of the stack otherwise than the
    stack holds it (`models.engine.stack_limits.notice`: the stack's apply); None when none does."""
    with session_scope() as session:
        return stack_limits.notice(session, get_settings())


def publish_limits(*, by: str) -> list[tuple[str, Any, Any]]:
    """Write the limits this process's environment sets as the stack's, and the defaults of
    those it holds none of (`models.engine.stack_limits.publish`, as a deployment's migration step);
    `(variable, old, new)` for each that changed."""
    with session_scope() as session:
        return stack_limits.publish(session, get_settings(), by=by, only_set=True)


def cancel(
    run_id: int,
    *,
    check: RunCheck = get_run,
    describe: Callable[[Session, Run], T] = _nothing,  # type: ignore[assignment]
) -> Done[T]:
    """Cancel the active run `run_id` and its active child runs, theirs too (`models.engine.
    children`), each under its lock (`transitions.cancel_run`: steps not yet running are
    cancelled, a waiting escalation is withdrawn), then send their follow-ups (episodes are
    written). `check(session, run_id)` first (default: `NotFound` for a missing run). Raises
    `NotFound`, or `IllegalTransition` for a run that has ended (nothing changes)."""
    with session_scope() as session:
        check(session, run_id)
        transitions.lock_run(session, run_id)
        below = children.cancel_below(session, run_id)  # charged to their parents first
        run = transitions.cancel_run(session, run_id)
        seen, status = describe(session, run), run.status
    for child_id in below:
        queue.follow_up(child_id, "cancelled")
    return Done(run_id, status, queue.follow_up(run_id, status), seen)


def claim_next(
    *,
    reviewer: str,
    token_id: int | None = None,
    describe: Callable[[Session, Escalation | None], T] = _nothing,  # type: ignore[assignment]
) -> T:
    """Claim the oldest open escalation no other reviewer holds (`reviews.claim_next`, `FOR
    UPDATE SKIP LOCKED`) for `reviewer` through the API token `token_id` (None: the CLI);
    returns `describe(session, escalation)`, with None when the queue has none open."""
    with session_scope() as session:
        esc = reviews.claim_next(session, reviewer=reviewer, token_id=token_id)
        return describe(session, esc)


def claim(
    escalation_id: int,
    *,
    reviewer: str,
    token_id: int | None = None,
    describe: EscalationView[T] = _nothing,  # type: ignore[assignment]
) -> T:
    """Claim escalation `escalation_id` (open -> claimed); returns `describe(session, it)`.
    Raises `NotFound`, or `IllegalTransition` when it is claimed or decided already."""
    with session_scope() as session:
        escalations.get_escalation(session, escalation_id)
        esc = transitions.claim_escalation(
            session, escalation_id, reviewer=reviewer, token_id=token_id
        )
        return describe(session, esc)


def release(
    escalation_id: int,
    *,
    reviewer: str,
    force: bool = False,
    token_id: int | None = None,
    describe: EscalationView[T] = _nothing,  # type: ignore[assignment]
) -> T:
    """Give a claimed escalation back to the queue (`reviews.release`); returns
    `describe(session, it)`. Raises `NotFound`, `IllegalTransition` (not claimed), or
    `ClaimedByAnother` (another's claim, no `force`) with `holder` naming who holds it."""
    with session_scope() as session:
        try:
            esc = reviews.release(
                session, escalation_id, reviewer=reviewer, force=force, token_id=token_id
            )
        except ClaimedByAnother as exc:
            exc.holder = escalations.get_escalation(session, escalation_id).claimed_by
            raise
        return describe(session, esc)


def _decide(
    escalation_id: int,
    apply: Callable[[Session, Escalation], Run],
    describe: DecisionView[T],
) -> Done[T]:
    """Apply one decision in one transaction, then send what comes next for the run
    (`queue.follow_up`: coordinate it, or remember it when the decision ended it)."""
    with session_scope() as session:
        esc = escalations.get_escalation(session, escalation_id)  # NotFound first
        run = apply(session, esc)
        seen = describe(session, esc, run)
        run_id, status = run.id or 0, run.status
    return Done(run_id, status, queue.follow_up(run_id, status), seen)


def approve(
    escalation_id: int,
    *,
    reviewer: str,
    comment: str | None = None,
    budget: Mapping[str, float] | None = None,
    token_id: int | None = None,
    describe: DecisionView[T] = _nothing,  # type: ignore[assignment]
) -> Done[T]:
    """Approve (`reviews.approve`, with `AGENTQ_STEP_MAX_ATTEMPTS`): the run resumes with the
    budgets the reviewer chose (`budget`: `{"tokens": N, "cost_usd", "wall_time_s", "replans"}`,
    the new limits), a spent one not chosen with its default (`models.engine.budget_grants`; the
    escalation's `granted` says which). Raises `InvalidInput` naming `budget.<name>`,
    `NotFound`, `IllegalTransition` (decided already), `ClaimedByAnother`."""
    settings = get_settings()
    return _decide(
        escalation_id,
        lambda session, _esc: reviews.approve(
            session,
            escalation_id,
            reviewer=reviewer,
            comment=comment,
            max_attempts=settings.step_max_attempts,
            token_id=token_id,
            budget=dict(budget or {}),
            settings=settings,
        ),
        describe,
    )


def reject(
    escalation_id: int,
    *,
    reviewer: str,
    comment: str,
    token_id: int | None = None,
    describe: DecisionView[T] = _nothing,  # type: ignore[assignment]
) -> Done[T]:
    """Reject (`reviews.reject`): the run fails with `comment`. Raises `InvalidInput` for a
    blank comment, and as `approve`."""
    return _decide(
        escalation_id,
        lambda session, _esc: reviews.reject(
            session, escalation_id, reviewer=reviewer, comment=comment, token_id=token_id
        ),
        describe,
    )


def respond(
    escalation_id: int,
    *,
    reviewer: str,
    answer: str,
    comment: str | None = None,
    remember: bool = False,
    token_id: int | None = None,
    describe: DecisionView[T] = _nothing,  # type: ignore[assignment]
) -> Done[T]:
    """Answer for the run (`reviews.respond`): `answer` is JSON text or a plain value, read
    against the failed tool's declared result keys (`answers.answer_from_text`). Raises
    `InvalidInput` naming `answer`, and as `approve`."""

    def apply(session: Session, esc: Escalation) -> Run:
        returns = declared_returns(esc.detail.get("tool"))
        return reviews.respond(
            session,
            escalation_id,
            reviewer=reviewer,
            comment=comment,
            answer=answers.answer_from_text(answer, returns=returns),
            token_id=token_id,
            remember=remember,
        )

    return _decide(escalation_id, apply, describe)


def edit(
    escalation_id: int,
    *,
    reviewer: str,
    plan: Any = None,
    arguments: Any = None,
    comment: str | None = None,
    token_id: int | None = None,
    describe: DecisionView[T] = _nothing,  # type: ignore[assignment]
) -> Done[T]:
    """Edit the plan (`reviews.edit`): `plan` (JSON text or a dict) replaces the steps not yet
    run, checked against the registered tools and their arguments. An `approval_required`
    escalation is edited with `arguments` instead (JSON text or a dict): the gated call's new
    arguments, checked against the tool's schema. Either may be a function that reads it (a
    file), called once the escalation is found, so a missing escalation is what is said first.
    Raises `InvalidPlan` naming the step and field, `InvalidInput` naming `arguments`, what the
    function raises, and as `approve`."""

    def apply(session: Session, esc: Escalation) -> Run:
        settings = get_settings()
        given = arguments() if callable(arguments) else arguments
        if given is not None or esc.reason == APPROVAL_REQUIRED:
            return reviews.edit(
                session,
                escalation_id,
                reviewer=reviewer,
                plan=None,
                tools=(),
                max_attempts=settings.step_max_attempts,
                comment=comment,
                token_id=token_id,
                arguments=None if given is None else answers.json_object(given, "arguments"),
            )
        return reviews.edit(
            session,
            escalation_id,
            reviewer=reviewer,
            plan=plan() if callable(plan) else plan,
            tools=configured_tool_names(),
            check_args=argument_problems,
            comment=comment,
            max_attempts=settings.step_max_attempts,
            token_id=token_id,
        )

    return _decide(escalation_id, apply, describe)


def forget_fact(fact_id: int, *, user_id: str | None = None) -> memory_admin.Deleted:
    """Delete one fact with its history, in one transaction (`memory.forget_fact`; `user_id`:
    only that user's). Raises `NotFound`."""
    with session_scope() as session:
        return memory_admin.forget_fact(session, fact_id=fact_id, user_id=user_id)


def forget_episode(episode_id: int, *, user_id: str | None = None) -> memory_admin.Deleted:
    """Delete one episode, in one transaction (`memory.forget_episode`). Raises `NotFound`."""
    with session_scope() as session:
        return memory_admin.forget_episode(session, episode_id=episode_id, user_id=user_id)


def create_token(*, name: str, role: str, user_id: str | None = None) -> tuple[int, str]:
    """Create an API token (`api_tokens.create_token`); `(token id, the raw token)`, the raw
    token shown once. Raises `InvalidInput` naming the field."""
    with session_scope() as session:
        row, raw = api_tokens.create_token(session, name=name, role=role, user_id=user_id)
        token_id = row.id or 0
    return token_id, raw


def revoke_token(token_id: int) -> api_tokens.Revocation:
    """Revoke an API token (`api_tokens.revoke_token`: its sessions end, its claims go back to
    the queue). Raises `NotFound`, or `IllegalTransition` when revoked already."""
    with session_scope() as session:
        return api_tokens.revoke_token(session, token_id)


def purge_runs(before: datetime) -> dict[str, int]:
    """Delete the runs that ended before `before` (timezone-aware) with all their rows, as beat
    does with `AGENTQ_RUN_RETENTION_DAYS` (`models.operations.retention.purge`: episodes and facts
    stay; `AGENTQ_RUN_RETENTION_BATCH` runs per transaction); the rows deleted per table. Raises
    `InvalidInput` for a naive or future `before`."""
    if before.tzinfo is None:
        raise InvalidInput("before: must carry a time zone (UTC: 2026-11-30T00:00:00+00:00)")
    if before > utcnow():
        raise InvalidInput(f"before: {before.isoformat()} is in the future; give a past time")
    return retention.purge(before=before, batch=get_settings().run_retention_batch)


def add_webhook(
    *, url: str, events: Collection[str], user_id: str | None = None
) -> WebhookSubscription:
    """Subscribe `url` to `events` of `user_id`'s runs (None: every user's), with a secret of
    its own (`webhooks.add_subscription`; the row holds it: show it once). The URL's host is
    resolved first, outside the transaction, and refused when it is not public, unless
    `AGENTQ_WEBHOOK_ALLOW_PRIVATE_NETWORKS` (`destinations.resolve`). Raises `InvalidInput`
    naming the field."""
    settings = get_settings()
    webhooks.check_url(url)
    destinations.resolve(url, allow_private=settings.webhook_allow_private_networks)
    with session_scope() as session:
        return webhooks.add_subscription(session, url=url, events=list(events), user_id=user_id)


def rotate_webhook(subscription_id: int) -> WebhookSubscription:
    """Give a subscription a new secret of its own (`webhooks.rotate_secret`; the row holds
    it: show it once). Raises `NotFound`."""
    with session_scope() as session:
        return webhooks.rotate_secret(session, subscription_id)


def remove_webhook(subscription_id: int) -> WebhookSubscription:
    """Remove a subscription with its deliveries and their log. Raises `NotFound`."""
    with session_scope() as session:
        return webhooks.remove_subscription(session, subscription_id)
