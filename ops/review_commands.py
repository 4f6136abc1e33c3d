"""`agentq review ...`: the human-review queue from the command line: list, show, claim,
release, and decide (approve, reject, respond, edit).

Each is a thin layer over `models.front.commands`, as the HTTP API's and the console's are. Claims
and decisions are recorded as `$AGENTQ_REVIEWER`, else the login name (`ops.inputs.reviewer_name`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, RenderableType
from rich.text import Text
from sqlmodel import Session

from api.reviews import review_out
from models.db import session_scope
from models.engine import budget_grants
from models.front import commands, queries
from models.review import drafts, escalations, reviews
from models.sql import PG_INT_MAX
from models.tables import Escalation
from ops import escalation_views, views
from ops.budget_views import queue_budgets
from ops.connection import connect
from ops.inputs import read_plan_text, reviewer_name
from ops.json_output import JsonFlag, print_json
from ops.option_values import not_blank

REVIEWER_HELP = "Decisions and claims are recorded as $AGENTQ_REVIEWER, else your login name."
review_app = typer.Typer(help=f"Work the human-review queue. {REVIEWER_HELP}", no_args_is_help=True)
console = Console()
EscalationId = Annotated[
    int, typer.Argument(min=1, max=PG_INT_MAX, help="Escalation id (see `agentq review list`).")
]
Comment = Annotated[
    str | None, typer.Option(callback=not_blank, help="Why; shown with the decision.")
]


@review_app.command("list")
def review_list(
    all_: Annotated[bool, typer.Option("--all", help="Include decided ones.")] = False,
    as_json: Annotated[bool, JsonFlag] = False,
) -> None:
    """The review queue, oldest first."""
    connect()
    with session_scope() as session:
        queue = queries.review_queue(session, all_)
        if as_json:
            print_json([review_out(session, e) for e in queue])
        else:
            console.print(
                escalation_views.escalations_table(queue, budgets=queue_budgets(session, queue))
            )


@review_app.command("show")
def review_show(escalation_id: EscalationId) -> None:
    """Why a run escalated: the failing step and its error, the budget used, the pinned facts,
    and the decision once there is one."""
    connect()
    with session_scope() as session:
        console.print(
            escalation_views.escalation_panel(
                session, escalations.get_escalation(session, escalation_id)
            )
        )


@review_app.command("plan")
def review_plan(escalation_id: EscalationId) -> None:
    """Print the plan an edit starts from, as the JSON `review edit --plan` takes: the failed
    step and every step not yet run, each with the steps it waits for (`after`), or the
    planner's output when there is no plan. Changes nothing; what it is goes to stderr, so
    `agentq review plan 3 > plan.json` holds the JSON alone."""
    connect()
    with session_scope() as session:
        start = drafts.draft(session, escalations.get_escalation(session, escalation_id))
    typer.echo(start.text)  # not Rich: no wrapping or markup in a file that is parsed back
    Console(stderr=True).print(Text(start.note, style="dim"))


@review_app.command("claim")
def review_claim() -> None:
    """Claim the oldest open escalation for yourself ($AGENTQ_REVIEWER, else your login name)."""
    connect()
    console.print(commands.claim_next(reviewer=reviewer_name(), describe=claimed_panel))


def claimed_panel(session: Session, esc: Escalation | None) -> RenderableType:
    """What `review claim` shows: the claimed escalation, or who holds the claims."""
    if esc is None:
        return escalation_views.nothing_to_claim(reviews.claims_by_reviewer(session))
    return escalation_views.escalation_panel(session, esc)


@review_app.command("release")
def review_release(
    escalation_id: EscalationId,
    force: Annotated[
        bool, typer.Option("--force", help="Release another reviewer's claim (they are gone).")
    ] = False,
) -> None:
    """Give a claimed escalation back to the queue: your own claim, or anyone's with --force.
    Recorded as $AGENTQ_REVIEWER, else your login name."""
    connect()
    commands.release(escalation_id, reviewer=reviewer_name(), force=force)
    console.print(f"escalation {escalation_id} released: open for any reviewer to claim")


NEW_LIMIT = (
    "New {} limit: at least what the run spent, at most {}; a spent budget not given gets "
    "spent + its original limit (see `review show`)."
)


@review_app.command("approve")
def review_approve(
    escalation_id: EscalationId,
    comment: Comment = None,
    tokens: Annotated[
        int | None,
        typer.Option(
            min=1, max=PG_INT_MAX, help=NEW_LIMIT.format("token", "AGENTQ_MAX_TOKEN_BUDGET")
        ),
    ] = None,
    cost_usd: Annotated[
        float | None,
        typer.Option(min=0, help=NEW_LIMIT.format("cost (USD)", "AGENTQ_MAX_COST_BUDGET_USD")),
    ] = None,
    wall_time: Annotated[
        float | None,
        typer.Option(
            min=1,
            help=NEW_LIMIT.format("wall-time (s since submit)", "AGENTQ_MAX_WALL_TIME_BUDGET_S"),
        ),
    ] = None,
    replans: Annotated[
        int | None,
        typer.Option(
            min=0, max=PG_INT_MAX, help=NEW_LIMIT.format("replan", "AGENTQ_MAX_REPLAN_BUDGET")
        ),
    ] = None,
) -> None:
    """Approve: retry the failed step once more (or re-plan, or carry on), with the budget
    limits given; says the limits it set. Recorded as $AGENTQ_REVIEWER, else your login name."""
    connect()
    chosen = {"tokens": tokens, "cost_usd": cost_usd, "wall_time_s": wall_time, "replans": replans}
    done = commands.approve(
        escalation_id,
        reviewer=reviewer_name(),
        comment=comment,
        budget={name: value for name, value in chosen.items() if value is not None},
        describe=lambda _session, esc, _run: budget_grants.describe(esc.granted or {}),
    )
    said = f"escalation decided: approved; run {done.run_id} resumes"
    console.print(views.said(done.notified, said + (f"; {done.seen}" if done.seen else "")))


@review_app.command("reject")
def review_reject(
    escalation_id: EscalationId,
    comment: Annotated[
        str, typer.Option(callback=not_blank, help="Why (required; the run fails with it).")
    ],
) -> None:
    """Reject: the run fails with your comment. Recorded as $AGENTQ_REVIEWER, else your login
    name."""
    connect()
    # its follow-up writes the failed run's episode
    done = commands.reject(escalation_id, reviewer=reviewer_name(), comment=comment)
    console.print(f"escalation decided: rejected; run {done.run_id} failed")


@review_app.command("respond")
def review_respond(
    escalation_id: EscalationId,
    answer: Annotated[
        str, typer.Option(callback=not_blank, help="The answer: JSON, or a plain value.")
    ],
    comment: Comment = None,
    remember: Annotated[
        bool,
        typer.Option(
            "--remember",
            help="Also remember the answer as a fact of the run's user, from you (source "
            "reviewer:<name>); otherwise it is this run's state only.",
        ),
    ] = False,
) -> None:
    """Answer what the run could not find; it becomes the failed step's result. Recorded as
    $AGENTQ_REVIEWER, else your login name."""
    connect()
    done = commands.respond(
        escalation_id, reviewer=reviewer_name(), answer=answer, comment=comment, remember=remember
    )
    console.print(
        views.said(done.notified, f"escalation decided: answered; run {done.run_id} resumes")
    )


@review_app.command("edit")
def review_edit(
    escalation_id: EscalationId,
    plan: Annotated[
        Path | None,
        typer.Option(
            help="JSON file: the steps that replace those not run (start from `review plan`); "
            "- reads it from stdin."
        ),
    ] = None,
    arguments: Annotated[
        str | None,
        typer.Option(
            help="For an approval_required escalation: the gated call's new arguments, a JSON "
            "object (checked against the tool's schema)."
        ),
    ] = None,
    comment: Comment = None,
) -> None:
    """Edit the plan: your steps replace every step that has not run yet; a step's `after`
    names the steps it waits for, which may be steps that ran or still run. For a tool call
    waiting for approval, give its new `--arguments` instead. Recorded as $AGENTQ_REVIEWER,
    else your login name."""
    if (plan is None) == (arguments is None):
        raise typer.BadParameter("give either --plan or --arguments")
    connect()
    done = commands.edit(
        escalation_id,
        reviewer=reviewer_name(),
        plan=None if plan is None else (lambda: read_plan_text(plan)),  # read once found
        arguments=arguments,
        comment=comment,
    )
    console.print(
        views.said(
            done.notified,
            f"escalation decided: {'plan' if plan else 'arguments'} edited; "
            f"run {done.run_id} resumes",
        )
    )
