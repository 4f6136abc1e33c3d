"""The tools `agentq mcp` serves (`ops.mcp_server`), each one call of `agentq.client.AsyncClient`
to agentq's HTTP API: its arguments typed (so its `inputSchema` names and bounds them), its
answer one of `ops.mcp_answers`' models, its annotations the MCP hints a client uses to ask a
person before a call (`readOnlyHint` for reads; `destructiveHint` for what runs tools or decides).

- whoami (`me`): any token;
- submit_goal, run_status, list_runs, cancel_run (`submit`, `get`, `list`, `cancel`): a
  submitter's own runs;
- list_reviews, show_review, claim_review, release_review (`reviews`, `review`, `claim`,
  `release`) and the decisions approve, reject, respond, edit_arguments, edit_plan (`approve`,
  `reject`, `respond`, `edit`): a reviewer;

An admin token may use them all. The API decides who may do what; a refusal is the tool's
`isError` result.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Any, Final, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, WithJsonSchema

from agentq.client import AsyncClient
from agentq.routes import ReviewStatus
from api.schemas import ANSWER_SCHEMA, Budgets, RunStatus
from ops import mcp_answers as answers

T = TypeVar("T")
MAX_PAGE: Final = 100  # the API's pages up to 100 are not costly (`api.token_limits`)
READ: Final = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
# What a person's tool call changes: a claim only marks who works on an escalation; a submit
# or a decision makes tools run (whose effects may not be undone), fails a run or replaces its
# plan, so clients ask before each one.
CLAIM: Final = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
ACTS: Final = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=True)
ENDS: Final = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)

RunId = Annotated[int, Field(ge=1, description="A run's id (submit_goal, list_runs).")]
EscalationId = Annotated[int, Field(ge=1, description="An escalation's id (list_reviews).")]
Comment = Annotated[str | None, Field(description="Why; recorded with the decision.")]
PLAN_TEXT: Final = (
    'A plan: {"steps": [{"name": "a", "kind": "tool", "tool": "noop", "args": {}}, ...]}; a '
    'step may wait for others with "after": ["a"] (docs/concepts/plans.md).'
)
Answer = Annotated[Any, WithJsonSchema(ANSWER_SCHEMA)]


class Api:
    """The API client one server acts through, and its URL (named when it does not answer)."""

    def __init__(self, client: AsyncClient, url: str) -> None:
        self.client, self.url = client, url

    async def ask(self, call: Awaitable[T]) -> T:
        """`call`'s answer; raises `ToolError` with `answers.refusal`'s one line when the API
        refused it, it was refused before it was sent, or the API did not answer."""
        try:
            return await call
        except Exception as exc:
            line = answers.refusal(exc, self.url)
            if line is None:
                raise
            raise ToolError(line) from exc


def register(server: MCPServer[Any], api: Api) -> None:
    """Add every tool of the table above to `server`, acting through `api`."""
    _runs(server, api)
    _queue(server, api)
    _decisions(server, api)


def _runs(server: MCPServer[Any], api: Api) -> None:
    @server.tool(title="Who am I", annotations=READ)
    async def whoami() -> answers.Principal:
        """The API token this server acts as: its name, role (submitter, reviewer, admin) and
        the agentq user a submitter token acts for."""
        me = await api.ask(api.client.me())
        return answers.Principal(token=me.name, role=me.role, user=me.user_id, api_url=api.url)

    @server.tool(title="Submit a goal", annotations=ACTS)
    async def submit_goal(
        goal: Annotated[str, Field(description="What the run should achieve, in words.")],
        facts: Annotated[
            dict[str, str] | None,
            Field(description="Pinned facts (key -> value) every step and the answer must keep."),
        ] = None,
        plan: Annotated[
            dict[str, Any] | None, Field(description=f"{PLAN_TEXT} Left out: agentq plans.")
        ] = None,
        approvals: Annotated[
            dict[str, Any] | None,
            Field(
                description="Tool calls of this run that wait for a reviewer first: tool name or "
                'pattern -> "always" or {"when": [{"arg": "amount", "gt": 500}]}.'
            ),
        ] = None,
        budgets: Budgets | None = None,
        success_criteria: Annotated[
            list[str] | None, Field(description="What must hold once the run is done.")
        ] = None,
        user: Annotated[
            str | None, Field(description="The agentq user (an admin token must name one).")
        ] = None,
        idempotency_key: Annotated[
            str | None, Field(description="Submitting again with the same key: the same run.")
        ] = None,
    ) -> answers.Submitted:
        """Submit a goal: agentq plans it (or runs `plan`) as steps on its workers. Answers the
        run's id and status; follow it with run_status. A submitter or admin token."""
        given = {
            "facts": facts,
            "plan": plan,
            "approvals": approvals,
            "budgets": None if budgets is None else budgets.model_dump(exclude_none=True),
            "success_criteria": success_criteria,
            "user": user,
        }
        fields = {name: value for name, value in given.items() if value is not None}
        done = await api.ask(api.client.submit(goal, idempotency_key=idempotency_key, **fields))
        run = done.run
        return answers.Submitted(
            run_id=run.id,
            status=run.status,
            user=run.user_id,
            pinned_facts=run.pinned_facts,
            notified=done.notified,
        )

    @server.tool(title="A run's status", annotations=READ)
    async def run_status(run_id: RunId) -> answers.RunState:
        """Where a run stands: its status, the steps of its current plan (name, status, error),
        the final answer once it succeeded or the error once it failed, and the escalation it
        waits on (status waiting_review)."""
        return answers.run_state(await api.ask(api.client.get(run_id, events_limit=1)))

    @server.tool(title="List runs", annotations=READ)
    async def list_runs(
        status: RunStatus | None = None,
        user: Annotated[str | None, Field(description="Only this user's (admin).")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 20,
    ) -> answers.Runs:
        """Recent runs, newest first: a submitter token's own user's, every user's for an
        admin."""
        runs = await api.ask(api.client.list(status=status, user=user, limit=limit))
        return answers.Runs(runs=[answers.run_listed(run) for run in runs])

    @server.tool(title="Cancel a run", annotations=ENDS)
    async def cancel_run(run_id: RunId) -> answers.RunState:
        """Cancel an active run (409 once it has ended); a step running now finishes first."""
        return answers.run_state(await api.ask(api.client.cancel(run_id)))


def _queue(server: MCPServer[Any], api: Api) -> None:
    @server.tool(title="The review queue", annotations=READ)
    async def list_reviews(
        status: ReviewStatus = "undecided",
        mine: Annotated[bool, Field(description="Only those this token claimed.")] = False,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 50,
    ) -> answers.Reviews:
        """The escalations waiting for a person, oldest first: reason, run, step, who claimed
        it, how long it has waited. A reviewer or admin token."""
        found = await api.ask(api.client.reviews(status=status, mine=mine, limit=limit))
        return answers.Reviews(reviews=[answers.review_listed(review) for review in found])

    @server.tool(title="Show an escalation", annotations=READ)
    async def show_review(escalation_id: EscalationId) -> answers.ReviewShown:
        """Why a run escalated: for approval_required, the tool call waiting (tool, arguments,
        the rule that gated it); otherwise the failed step and its error; the budget spent, the
        pinned facts, and the decision once made. A reviewer or admin token."""
        return answers.review_shown(await api.ask(api.client.review(escalation_id)))

    @server.tool(title="Claim an escalation", annotations=CLAIM)
    async def claim_review(
        escalation_id: Annotated[
            int | None, Field(ge=1, description="This one; left out: the oldest open one.")
        ] = None,
    ) -> answers.Claimed:
        """Claim an escalation for this token, so other reviewers leave it to you (deciding does
        not need a claim)."""
        review = await api.ask(api.client.claim(escalation_id))
        if review is None:
            return answers.Claimed(review=None, said="no open escalation to claim")
        listed = answers.review_listed(review)
        return answers.Claimed(review=listed, said=f"escalation {listed.escalation_id} claimed")

    @server.tool(title="Release a claim", annotations=CLAIM)
    async def release_review(escalation_id: EscalationId) -> answers.ReviewListed:
        """Give a claimed escalation back to the queue."""
        return answers.review_listed(await api.ask(api.client.release(escalation_id)))


def _decisions(server: MCPServer[Any], api: Api) -> None:
    @server.tool(title="Approve", annotations=ACTS)
    async def approve(
        escalation_id: EscalationId, comment: Comment = None, budget: Budgets | None = None
    ) -> answers.Decided:
        """Approve: an approval_required call runs once, as asked; a failed step is tried once
        more (or the run replans, or goes on); `budget` sets new limits for a spent budget."""
        fields: dict[str, Any] = {"comment": comment, "budget": budget}
        given = {name: value for name, value in fields.items() if value is not None}
        return answers.decided(await api.ask(api.client.approve(escalation_id, **given)))

    @server.tool(title="Reject", annotations=ENDS)
    async def reject(
        escalation_id: EscalationId,
        comment: Annotated[str, Field(description="Why; the run (or the model) is told.")],
    ) -> answers.Decided:
        """Reject: an approval_required call never runs (its step fails with your comment, or a
        model is told); any other escalation's run fails with your comment."""
        return answers.decided(await api.ask(api.client.reject(escalation_id, comment=comment)))

    @server.tool(title="Answer in a step's place", annotations=ACTS)
    async def respond(
        escalation_id: EscalationId,
        answer: Answer,
        comment: Comment = None,
        remember: Annotated[
            bool, Field(description="Also remember the answer as a fact of the run's user.")
        ] = False,
    ) -> answers.Decided:
        """Answer what the run could not find (or what a gated call would have returned): the
        answer becomes the step's result and the run goes on."""
        call = api.client.respond(escalation_id, answer, comment=comment, remember=remember)
        return answers.decided(await api.ask(call))

    @server.tool(title="Edit a gated call's arguments", annotations=ACTS)
    async def edit_arguments(
        escalation_id: EscalationId,
        arguments: Annotated[
            dict[str, Any], Field(description="The call's new arguments, checked by its tool.")
        ],
        comment: Comment = None,
    ) -> answers.Decided:
        """For an approval_required escalation: run the waiting call once with these arguments
        instead (show_review has the ones it asked for)."""
        call = api.client.edit(escalation_id, arguments=arguments, comment=comment)
        return answers.decided(await api.ask(call))

    @server.tool(title="Edit the plan", annotations=ACTS)
    async def edit_plan(
        escalation_id: EscalationId,
        plan: Annotated[dict[str, Any], Field(description=PLAN_TEXT)],
        comment: Comment = None,
    ) -> answers.Decided:
        """Replace every step of the run not run yet with `plan`'s steps (a step's `after` may
        name steps that ran); the run goes on with them."""
        call = api.client.edit(escalation_id, plan, comment=comment)
        return answers.decided(await api.ask(call))
