"""The state machines of runs, steps and escalations, as data.

`models.engine.guards.guarded` refuses any move that is not listed here before it touches the
database, and the guarded UPDATE refuses any move whose row is not in the expected state when it
runs.
"""

from __future__ import annotations

from typing import Final

RUN_STATUSES: Final = (
    "queued",
    "planning",
    "running",
    "replanning",
    "synthesizing",
    "waiting_review",
    "succeeded",
    "failed",
    "cancelled",
)
RUN_TERMINAL: Final = frozenset({"succeeded", "failed", "cancelled"})
RUN_ACTIVE: Final = frozenset(RUN_STATUSES) - RUN_TERMINAL

RUN_MOVES: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        ("queued", "planning"),
        ("queued", "running"),  # submitted with an explicit plan
        ("planning", "running"),
        ("planning", "waiting_review"),
        ("running", "replanning"),
        ("running", "synthesizing"),
        ("running", "waiting_review"),
        ("replanning", "running"),
        ("replanning", "waiting_review"),
        ("synthesizing", "succeeded"),
        ("synthesizing", "replanning"),  # its goal check found the goal not met (issue 12)
        ("synthesizing", "waiting_review"),
        ("waiting_review", "queued"),  # approved or answered before any plan: plan again
        ("waiting_review", "running"),
        ("waiting_review", "failed"),
        ("waiting_review", "waiting_review"),  # a reviewer grants a spent budget again
        # a rate-limited plan, replan or synthesis task is sent again later (`defer_run`)
        ("planning", "planning"),
        ("replanning", "replanning"),
        ("synthesizing", "synthesizing"),
    }
    | {(status, "cancelled") for status in RUN_ACTIVE}
)

# `ready`: its dependencies are done and it waits in Postgres for a dispatch slot of its user
# (`models.engine.dispatch`); only `queued` steps have a message in the broker.
STEP_STATUSES: Final = (
    "pending",
    "ready",
    "queued",
    "running",
    "waiting_approval",
    "waiting_child",
    "succeeded",
    "failed",
    "cancelled",
)
STEP_DONE: Final = frozenset({"succeeded", "failed", "cancelled"})
# What a cancel or edit drops; `waiting_approval`: stopped before a gated tool call, waiting for
# a reviewer's decision (`models.approvals`), holding no worker.
STEP_NOT_STARTED: Final = frozenset({"pending", "ready", "queued", "waiting_approval"})
# `waiting_child`: a step of kind `run` whose child run goes on (`models.engine.children`), holding
# no worker; it ends with its child. A cancel drops it (and cancels the child); an edit keeps it.
STEP_CANCELLABLE: Final = STEP_NOT_STARTED | {"waiting_child"}

STEP_MOVES: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        ("pending", "ready"),
        # the worker that ended its last dependency runs it next, in-process
        # (models.engine.decisions)
        ("pending", "running"),
        ("ready", "queued"),  # dispatched: a slot of its user is free
        ("queued", "running"),
        ("running", "succeeded"),
        ("running", "failed"),
        ("running", "queued"),  # a retry, or a lease that expired
        ("queued", "failed"),  # attempts spent while the message was lost
        ("running", "waiting_approval"),  # stopped before a gated tool call (issue 30)
        ("waiting_approval", "ready"),  # a reviewer decided the call: the step goes on
        ("waiting_approval", "cancelled"),
        ("running", "waiting_child"),  # a step of kind `run` submitted its child run (issue 32)
        ("waiting_child", "succeeded"),  # the child run ended: succeeded, or not
        ("waiting_child", "failed"),
        ("waiting_child", "cancelled"),
        ("pending", "cancelled"),
        ("ready", "cancelled"),
        ("queued", "cancelled"),
    }
)

ESCALATION_STATUSES: Final = ("open", "claimed", "decided")
ESCALATION_MOVES: Final[frozenset[tuple[str, str]]] = frozenset(
    {("open", "claimed"), ("claimed", "open"), ("open", "decided"), ("claimed", "decided")}
)
DECISIONS: Final = ("approve", "edit", "reject", "respond")  # a reviewer's
WITHDRAWN: Final = "withdrawn"  # the decision recorded when the run is cancelled while it waits

MOVES: Final = {"runs": RUN_MOVES, "steps": STEP_MOVES, "escalations": ESCALATION_MOVES}


def is_allowed(table: str, found: str, to: str) -> bool:
    """Whether `table` rows may move from status `found` to `to`."""
    return (found, to) in MOVES[table]
