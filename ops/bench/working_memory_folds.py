"""What working memory costs a long run in a small window: summarize calls and tokens.

`python -m ops.bench.working_memory_folds [--steps 41] [--model-every 4] [--window 4096]`

Starts an embedded engine (one worker process, the offline provider, hash embeddings) with
`AGENTQ_CONTEXT_WINDOW_TOKENS` at `--window` and `AGENTQ_RESERVED_OUTPUT_TOKENS` at 512 (the local
model's setting, `ops.local_model`), then:

1. runs a plan of `--steps` steps: `echo` tool steps whose results are ~400 tokens each (a
   day's taxi receipts; its turn holds the arguments and the result, ~850 tokens), and a model
   step every `--model-every` steps that asks for the running total; each model call (steps and
   the synthesis) assembles its context from rows and folds older turns into the rolling summary
   when one is due (`worker.memory.folds`);
2. submits the same goal with no plan, so the planner is asked for one in the same window.

Prints, from the runs' `model.call` events (the memory task's fact extraction aside, which runs
after the run ends): the summarize calls and their tokens, and all model calls and theirs; and
whether the plan call fitted: its prompt against its budget, or the run's escalation. Figures:
docs/concepts/memory.md (issue 31, item 5).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sqlmodel import col, select

from models.db import session_scope
from models.engine import submissions
from models.engine.runs import get_run
from models.engine.submissions import RunRequest
from models.plans.plans import parse_plan
from models.plans.tools import catalog, configured_tool_names
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Escalation, Run, RunEvent
from ops.bench.harness import BenchError, engine, engine_env
from worker.memory.working_memory import budget, schema_tokens
from worker.model_calls.prompts import plan_prompt

GOAL: Final = "Total my taxi receipts of the Lyon trip in EUR"
FACTS: Final = {"currency": "EUR", "cost_centre": "CC-4410"}
RESERVED_OUTPUT_TOKENS: Final = 512  # `ops.local_model`'s setting for a small local model
RUN_TIMEOUT_S: Final = 600.0
POLL_S: Final = 0.2


def receipts(day: int) -> str:
    """A ~400-token tool result: one day's 21 taxi receipts."""
    return " ".join(
        f"receipt {day}.{j}: taxi fare {j}.40 EUR, Lyon to the airport;" for j in range(21)
    )


def plan(steps: int, model_every: int) -> dict[str, Any]:
    """`steps` steps in a line: `echo` tool steps with `receipts`, and every `model_every`-th
    a model step that totals what came before."""
    found: list[dict[str, Any]] = []
    for i in range(steps):
        if model_every and i % model_every == model_every - 1:
            instruction = f"Give the running total of the receipts so far (step {i})."
            found.append({"name": f"total_{i}", "kind": "model", "instruction": instruction})
        else:
            found.append(
                {"name": f"day_{i}", "kind": "tool", "tool": "echo", "args": {"value": receipts(i)}}
            )
    return {"steps": found}


@dataclass(frozen=True)
class Calls:
    """A run's answered model calls as its `model.call` events say (the memory task's fact
    extraction aside): summarize calls and their tokens, every call and their tokens, the run's
    status, its first escalation, and our estimate of its plan call's prompt."""

    status: str
    summarize_calls: int
    summarize_tokens: int
    calls: int
    call_tokens: int
    escalation: str | None
    plan_prompt_tokens: int | None  # our estimate of the plan call's prompt, schema included


def submit(goal: str, plan_spec: dict[str, Any] | None) -> int:
    """Submit `goal` with `plan_spec` (None: the planner writes one); the run id."""
    parsed = parse_plan(plan_spec, tools=configured_tool_names()) if plan_spec else None
    request = RunRequest(user_id="bench-folds", goal=goal, facts=dict(FACTS), plan=parsed)
    submitted = submissions.submit(request, settings=get_settings())
    if not submitted.notified:
        raise BenchError(f"run {submitted.run_id}: the broker did not take its first messages")
    return submitted.run_id


def wait(run_id: int) -> None:
    """Poll until run `run_id` is terminal or waits for review; `BenchError` after the timeout."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        with session_scope() as session:
            if get_run(session, run_id).status in (*RUN_TERMINAL, "waiting_review"):
                return
        time.sleep(POLL_S)
    raise BenchError(f"run {run_id} did not end in {RUN_TIMEOUT_S:g} s")


def calls_of(run_id: int) -> Calls:
    """Run `run_id`'s model calls, from its events."""
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        details = session.exec(
            select(RunEvent.detail).where(
                RunEvent.run_id == run_id, col(RunEvent.kind) == "model.call"
            )
        ).all()
        escalation = session.exec(
            select(Escalation).where(Escalation.run_id == run_id).order_by(col(Escalation.id))
        ).first()
    # the memory task's extraction comes after the run's end, whenever it runs: left out
    done = [d for d in details if d.get("outcome") == "ok" and d.get("purpose") != "extract_facts"]
    summaries = [d for d in done if d.get("purpose") == "summarize"]
    return Calls(
        status=run.status,
        summarize_calls=len(summaries),
        summarize_tokens=sum(_tokens(d) for d in summaries),
        calls=len(done),
        call_tokens=sum(_tokens(d) for d in done),
        escalation=f"{escalation.reason}: {escalation.detail}" if escalation else None,
        plan_prompt_tokens=next(
            (d.get("estimated_prompt_tokens") for d in done if d.get("purpose") == "plan"), None
        ),
    )


def _tokens(detail: Mapping[str, Any]) -> int:
    return int(detail.get("prompt_tokens") or 0) + int(detail.get("completion_tokens") or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=41)
    parser.add_argument("--model-every", type=int, default=4)
    parser.add_argument("--window", type=int, default=4096)
    args = parser.parse_args()
    env = {
        **engine_env("hash", None),
        "AGENTQ_CONTEXT_WINDOW_TOKENS": str(args.window),
        "AGENTQ_RESERVED_OUTPUT_TOKENS": str(RESERVED_OUTPUT_TOKENS),
    }
    with engine(None, workers=1, extra_env=env):
        long_run = submit(GOAL, plan(args.steps, args.model_every))
        wait(long_run)
        ran = calls_of(long_run)
        planned = submit(GOAL, None)
        wait(planned)
        plain = calls_of(planned)
        plan_budget = budget(plan_prompt(GOAL, catalog()))
    print(f"window {args.window} tokens, reserved output {RESERVED_OUTPUT_TOKENS}, offline")
    print(f"{args.steps}-step run: {ran.status}; escalation: {ran.escalation or 'none'}")
    print(f"  summarize calls: {ran.summarize_calls}, their tokens: {ran.summarize_tokens:,}")
    print(f"  model calls: {ran.calls}, their tokens: {ran.call_tokens:,}")
    print(f"plan call: run {plain.status}; escalation: {plain.escalation or 'none'}")
    if plain.plan_prompt_tokens is not None:
        schema = schema_tokens(plan_prompt(GOAL, catalog()))
        print(
            f"  plan prompt: {plain.plan_prompt_tokens - schema:,} tokens of a "
            f"{plan_budget:,}-token budget (+ {schema:,} of answer schema)"
        )
    print(f"  model calls: {plain.calls}, their tokens: {plain.call_tokens:,}")


if __name__ == "__main__":
    main()
