"""The tool journal: each tool call a model step made, and what its tool returned.

DESIGN.md, invariant 9: a tool call inside a model step is journaled, and a replayed step reuses
its recorded result. A model step that is deferred (a 429), retried, or claimed again after a
lost lease asks the model again from the start; the model may ask for the same calls again, each
with a new provider id. So a call is known by what stays the same (`call_key`): its tool, its
arguments as canonical JSON, and how many times the loop has asked for that tool with those
arguments (`CallKeys`: the same call asked twice on purpose is two calls).
`worker.execution.tool_use` looks a call up before its tool runs (`find`) and records it right
after, in a transaction of its own (`record`), never holding one open across the tool (invariant
11).

Only calls whose tool ran are journaled: a result, or an error the model was told (a crash, a
result over the cap). A call refused before its tool ran, or a `RetryableToolError` (which fails
the attempt so the tool runs again), is not.

A journaled call is step data (`models.engine.storage`): its arguments and its result (or error) are
stored only with their charge to the run's step-data budget and its user's total. A call that
does not fit is journaled without them, its error saying so, and `record` raises the refusal
(the run escalates): a replay answers that error rather than run the tool again.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.engine import storage
from models.errors import BudgetExhausted
from models.plans.step_data import json_bytes
from models.settings import get_settings

# run_of_step: the run of step :step_id.
RUN_OF_STEP: Final = "SELECT run_id FROM steps WHERE id = :step_id"
# find_call: the journaled call `:call_key` of step `:step_id`, if its tool ran.
FIND_CALL: Final = """
SELECT result, error, attempt FROM tool_journal WHERE step_id = :step_id AND call_key = :call_key"""

# record_call: journal a call whose tool returned; a call already journaled (by an attempt that
# ran alongside after its lease expired) keeps its first row.
RECORD_CALL: Final = """
INSERT INTO tool_journal (step_id, call_key, tool, arguments, result, error, attempt)
VALUES (:step_id, :call_key, :tool, CAST(:arguments AS jsonb), CAST(:result AS jsonb), :error,
    :attempt)
ON CONFLICT (step_id, call_key) DO NOTHING"""
# record_charged_call: the same, only with :bytes charged to the step's run and its user
# (`models.engine.storage.charging`); says whether they were charged and whether the row was stored.
RECORD_CHARGED_CALL: Final = (
    storage.charging("SELECT run_id FROM steps WHERE id = :step_id")
    + """, journaled AS (
    INSERT INTO tool_journal (step_id, call_key, tool, arguments, result, error, attempt)
    SELECT :step_id, :call_key, :tool, CAST(:arguments AS jsonb), CAST(:result AS jsonb), :error,
        :attempt
    FROM run_charged
    ON CONFLICT (step_id, call_key) DO NOTHING
    RETURNING step_id
)
SELECT EXISTS (SELECT 1 FROM run_charged) AS charged, EXISTS (SELECT 1 FROM journaled) AS stored"""
)


@dataclass(frozen=True)
class Recorded:
    """What a journaled call's tool returned: `result`, or `error` (the text the model got),
    in the step's attempt `attempt`."""

    result: dict[str, Any] | None
    error: str | None
    attempt: int


class CallKeys:
    """The keys of one run of a model step's loop, call by call: `next` counts the calls for
    each tool and arguments, so the n-th identical call gets occurrence n."""

    def __init__(self, seen: Mapping[str, int] | None = None) -> None:
        """`seen`: the counts so far (`snapshot`), for a loop that goes on where it stopped."""
        self._seen: Counter[str] = Counter(seen or {})

    def snapshot(self) -> dict[str, int]:
        """The counts so far, as JSON."""
        return dict(self._seen)

    def next(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """The key of this call (`call_key`), counting it."""
        digest = arguments_digest(arguments)
        self._seen[f"{tool}:{digest}"] += 1
        return call_key(tool, digest, occurrence=self._seen[f"{tool}:{digest}"])


def call_key(tool: str, digest: str, *, occurrence: int) -> str:
    """`<tool>#<occurrence>:<digest>`: at most 100 + 12 + 64 characters, the same for the same
    call on every attempt of the step."""
    return f"{tool}#{occurrence}:{digest}"


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The sha256 (hex) of `arguments` as canonical JSON: sorted keys, no spaces, UTF-8."""
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def find(session: Session, *, step_id: int, key: str) -> Recorded | None:
    """The journaled call `key` of step `step_id`, or None when no attempt has run it."""
    row = sql.one(session, FIND_CALL, {"step_id": step_id, "call_key": key})
    if row is None:
        return None
    return Recorded(row.result, row.error, int(row.attempt))


def record(
    session: Session,
    *,
    step_id: int,
    key: str,
    tool: str,
    arguments: Mapping[str, Any],
    recorded: Recorded,
) -> BudgetExhausted | None:
    """Journal call `key` of step `step_id` (`tool` on `arguments`, JSON objects within
    `AGENTQ_STEP_DATA_MAX_BYTES`) as `recorded`, charged to its run's step data and its user's
    (`models.engine.storage`); a call already journaled is left as it is. When the charge does not
    fit, the call is journaled without its arguments and result, its error saying why (a replay
    answers that), and the refusal is returned (`StepDataBudgetSpent` or `UserStepDataSpent`,
    for the caller to raise once this is committed); else None."""
    charge = storage.Charge(
        f"the call of tool {tool!r} (its arguments and result)",
        json_bytes(dict(arguments)) + _recorded_bytes(recorded),
        get_settings().user_step_data_max_bytes,
    )
    params = {
        "step_id": step_id,
        "call_key": key,
        "tool": tool,
        "arguments": json.dumps(dict(arguments), ensure_ascii=False),
        "result": None if recorded.result is None else json.dumps(recorded.result),
        "error": recorded.error,
        "attempt": recorded.attempt,
    }
    journaled = sql.one(session, RECORD_CHARGED_CALL, params | charge.params())
    if journaled.stored:
        return None
    run_id = int(sql.scalar(session, RUN_OF_STEP, {"step_id": step_id}))
    if journaled.charged:  # journaled by another attempt first: its charge stands, not this one
        storage.refund(session, run_id, charge)
        return None
    refused = storage.refusal(session, run_id, charge)
    kept = {"arguments": "{}", "result": None, "error": f"not kept: {refused}"}
    sql.execute(session, RECORD_CALL, params | kept)
    return refused


def _recorded_bytes(recorded: Recorded) -> int:
    """The size of what a call's tool returned: its result as compact JSON, or its error text."""
    if recorded.result is not None:
        return json_bytes(recorded.result)
    return len((recorded.error or "").encode("utf-8"))
