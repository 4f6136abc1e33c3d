"""`agentq run submit`: a goal (or an explicit plan) as a new run, through
`models.front.commands.submit`, the function every front end submits with.

The run is held to the stack's limits (`models.engine.stack_limits`: its quotas, default budgets and
ceilings), not this shell's: when this shell's environment sets one otherwise, a line says so.
With `--idempotency-key`, running the same command again (a script retrying after a timeout)
answers with the run the first one made (`models.engine.idempotency`, scoped to the run's user).
Heavy modules are imported when it runs, not when `agentq --help` builds the command tree.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from models.bounds import PG_INT_MAX, REPLAN_CHECKS
from models.errors import InvalidInput
from ops.option_values import not_blank, replan_check_value

if TYPE_CHECKING:
    from models.engine.submissions import RunRequest, Submitted

WALL_TIME_MAX_S = 30 * 86_400  # 30 days: longer is a typo, and overflows a timedelta soon after
PIN_FROM_GOAL_HELP = (
    "Also pin the amounts, currencies, ISO dates and identifiers (CC-4410) the goal states; "
    "a --fact of the same key wins. Off by default: a pin binds every step and the goal check."
)
WALL_TIME_HELP = "Wall-time budget, s (at most AGENTQ_MAX_WALL_TIME_BUDGET_S: 7 days by default)."
IDEMPOTENCY_HELP = (
    "Submitting again with this key (within AGENTQ_IDEMPOTENCY_WINDOW_S, 24 h) answers with the "
    "run the first submit made; the same key with another request is refused."
)
SUBMIT_JSON_HELP = (
    "Print one JSON document, as POST /api/v1/runs answers: the run, `notified`, `from_goal`."
)
console = Console()
notes = Console(stderr=True)

DEFAULT_USER = "local"  # the user of `run submit` and `procedure add` without --user

# The options of a run request, shared by `run submit` and `schedule add` (`run_request`).
Facts = Annotated[list[str], typer.Option("--fact", help="Pinned fact KEY=VALUE; repeatable.")]
PinFromGoal = Annotated[bool, typer.Option(help=PIN_FROM_GOAL_HELP)]
PlanFile = Annotated[
    Path | None,
    typer.Option(help='JSON file with an explicit plan {"steps": [...]}; - reads it from stdin.'),
]
Criteria = Annotated[
    list[str],
    typer.Option(
        "--criterion",
        help="What must hold once it is done (${facts.KEY} allowed); repeatable.",
    ),
]
ReplanCheck = Annotated[
    str | None,
    typer.Option(
        callback=replan_check_value,
        help=f"{' or '.join(REPLAN_CHECKS)}: ask after each step whether the rest of the plan "
        "still makes sense (default AGENTQ_REPLAN_CHECK).",
    ),
]
Approvals = Annotated[
    str | None,
    typer.Option(
        metavar="JSON",
        help='Tighten the approval policy for the run: {"<tool>": "always" | {"when": '
        '[{"arg": "amount", "gt": 500}]}}; a gated call waits for a reviewer.',
    ),
]
Replans = Annotated[int | None, typer.Option(min=0, max=PG_INT_MAX, help="Replan budget.")]
Tokens = Annotated[int | None, typer.Option(min=1, max=PG_INT_MAX, help="Token budget.")]
WallTime = Annotated[float | None, typer.Option(min=1, max=WALL_TIME_MAX_S, help=WALL_TIME_HELP)]


def submit(
    goal: Annotated[str, typer.Argument(callback=not_blank, help="What the agent should achieve.")],
    user: Annotated[
        str, typer.Option(callback=not_blank, help="Who the run belongs to.")
    ] = DEFAULT_USER,
    fact: Facts = [],  # noqa: B006
    pin_from_goal: PinFromGoal = False,
    plan: PlanFile = None,
    criterion: Criteria = [],  # noqa: B006
    replan_check: ReplanCheck = None,
    approvals: Approvals = None,
    replans: Replans = None,
    tokens: Tokens = None,
    wall_time: WallTime = None,
    idempotency_key: Annotated[
        str | None, typer.Option(metavar="KEY", help=IDEMPOTENCY_HELP)
    ] = None,
    watch_run: Annotated[bool, typer.Option("--watch", help="Watch until it ends.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help=SUBMIT_JSON_HELP)] = False,
) -> None:
    """Submit a goal; prints the run id (with --json, the API's answer to the same submit)."""
    from models.front import commands
    from ops import views
    from ops.connection import connect
    from ops.watch import run_goes_on, watch_until_settled

    if as_json and watch_run:
        raise InvalidInput(
            "--json and --watch cannot be used together: --json prints the submitted run as "
            "JSON, --watch follows it; choose one"
        )
    connect()
    if notice := commands.limits_notice():
        notes.print(Text(notice, style="yellow"), soft_wrap=True)
    request = run_request(
        user=user,
        goal=goal,
        fact=fact,
        plan=plan,
        criterion=criterion,
        replan_check=replan_check,
        pin_from_goal=pin_from_goal,
        approvals=approvals,
        budgets=(replans, tokens, wall_time),
    )
    submitted = _submitted(request, idempotency_key)
    run_id = submitted.run_id
    if as_json:
        print_submitted(submitted)
        return
    with run_goes_on(console, run_id) if watch_run else nullcontext():
        if submitted.replayed:
            console.print(f"run {run_id} submitted (before, with this key; nothing new submitted)")
        else:
            console.print(views.said(submitted.notified, f"run {run_id} submitted"))
        if found := views.goal_values_text(submitted.from_goal, asked=pin_from_goal):
            console.print(found)
        if watch_run:
            raise typer.Exit(watch_until_settled(console, run_id))


def run_request(
    *,
    user: str,
    goal: str,
    fact: list[str],
    plan: Path | None,
    criterion: list[str],
    replan_check: str | None,
    pin_from_goal: bool,
    approvals: str | None,
    budgets: tuple[int | None, int | None, float | None],
) -> RunRequest:
    """The run the options ask for (`run submit`'s, `schedule add`'s): facts parsed, the plan
    read and checked against them, `budgets` (replans, tokens, wall time, s). Raises
    `InvalidInput`, `InvalidPlan` or `ConfigurationError` naming the option."""
    from models.engine.submissions import RunRequest
    from models.review.answers import json_object
    from ops.inputs import parse_facts, read_plan

    facts = parse_facts(fact)
    replans, tokens, wall_time = budgets
    return RunRequest(
        user_id=user,
        goal=goal,
        facts=facts,
        plan=read_plan(plan, facts) if plan else None,
        replans=replans,
        tokens=tokens,
        wall_time_s=wall_time,
        success_criteria=criterion,
        replan_check=replan_check,
        pin_from_goal=pin_from_goal,
        approvals=json_object(approvals, "--approvals") if approvals else {},
    )


def _submitted(request: RunRequest, key: str | None) -> Submitted[Any]:
    """`request` submitted (`models.front.commands.submit`), or under the idempotency key `key`,
    whose scope is the run's user (`models.front.commands.submit_once`)."""
    from models.engine.idempotency import Key
    from models.front import commands

    if key is None:
        return commands.submit(request)
    scoped = Key(f"user:{request.user_id}", key, field="--idempotency-key")
    return commands.submit_once(request, scoped, describe=lambda _, run: {"run_id": run.id})


def print_submitted(submitted: Submitted[Any]) -> None:
    """`submitted` as the API answers a submit or a fork (`api.run_views.submitted_out`), the run
    read now."""
    from api.run_views import run_detail, submitted_out  # FastAPI's models: loaded only for --json
    from models.db import session_scope
    from models.engine.runs import get_run
    from ops.json_output import print_json

    with session_scope() as session:
        detail = run_detail(session, get_run(session, submitted.run_id))
    print_json(submitted_out(detail, submitted))
