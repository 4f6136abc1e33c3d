"""The fault suite's workload: runs that plan, take effect, pay for model calls, and remember.

Each run's goal carries a marker (`chaos-<n>`). The model provider is `ops.fake_provider` over
real HTTP; its `plans` function (`plan_for`) answers each run's planning call with `steps`
steps that alternate an effect on disk (the test-only tool `append_marker`, which appends the
step's marker, `chaos-<n>/step-<i>`, to `effects.log` in the data dir) and a model call (whose
instruction carries that marker). So every unit of work leaves a trace outside agentq's own
rows: a line in the effects log per tool run, a request at the provider per model call (plan,
step, synthesis, fact extraction), counted by `count_calls` and `count_effects`.

The tool lives in `tests/support/tools.py` (no served stack offers a tool that writes files):
the suite runs from a checkout, with the repository on the engine processes' `PYTHONPATH`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from models.engine.submissions import RunRequest, submit
from models.plans.tools import DEFAULT_TOOL_MODULES
from models.settings import Settings
from ops.fake_provider import FakeOpenAI, Received
from worker.model_calls import prompts

REPO_ROOT = Path(__file__).resolve().parents[2]
USER = "chaos"
MARKER = re.compile(r"\bchaos-\d+\b")
STEP_MARKER = re.compile(r"\bchaos-\d+/step-\d+\b")
STEPS = 5  # per run, as in the runs of issue 11's fault report

# A provider request's purpose: a structured answer's schema is named after it (`plan`,
# `replan`, `extract_facts`: worker.model_calls.providers._response_format); the others are told by
# their system message (worker/model_calls/prompts.py).
NAMED_PURPOSES = ("plan", "replan", "extract_facts")
SYSTEM_PURPOSES = {
    prompts.STEP_INSTRUCTIONS: "step",
    prompts.STEP_INSTRUCTIONS + prompts.STEP_TOOLS_INSTRUCTIONS: "step",
    prompts.SYNTHESIZE_INSTRUCTIONS: "synthesize",
}


def engine_env(provider: FakeOpenAI, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The engine's environment: default settings, but the model is the fake provider's, the
    embeddings `hash` (no model to load per worker), `append_marker` loaded, and the submit
    quotas off (the suite submits its whole workload as one user at once)."""
    return {
        "AGENTQ_PROVIDER": "openai",
        "AGENTQ_MODEL": "gpt-4o-mini",
        "AGENTQ_OPENAI_BASE_URL": provider.url,
        "OPENAI_API_KEY": "chaos",
        "AGENTQ_EMBEDDING_PROVIDER": "hash",
        "NO_PROXY": "127.0.0.1,localhost",
        "AGENTQ_USER_MAX_ACTIVE_RUNS": "0",
        "AGENTQ_USER_SUBMITS_PER_MINUTE": "0",
        "AGENTQ_TOOL_MODULES": json.dumps([*DEFAULT_TOOL_MODULES, "tests.support.tools"]),
        "PYTHONPATH": str(REPO_ROOT),
        **(extra or {}),
    }


def plan_for(effects: Path, steps: int = STEPS) -> Any:
    """The fake provider's `plans` function: for a planning request, the run's plan of `steps`
    steps, even ones `append_marker` to `effects`, odd ones a model call; each names its marker.
    A replan (a step's attempts were all killed) gets one `noop` step of a name of its own."""

    replacements = itertools.count()

    def plan(text: str) -> dict[str, Any]:
        found = MARKER.search(text)
        run = found.group(0) if found else "chaos-unknown"
        if prompts.REPLAN_NOTE in text:  # a step failed (its attempts killed): stand in
            name = f"replacement_{next(replacements)}"
            stand_in = {"name": name, "kind": "tool", "tool": "noop", "args": {}}
            return {"steps": [{**stand_in, "instruction": f"Stand in for a step of {run}."}]}
        planned: list[dict[str, Any]] = []
        for i in range(steps):
            marker = f"{run}/step-{i}"
            if i % 2 == 0:
                args = {"path": str(effects), "marker": marker}
                planned.append(
                    {
                        "name": f"effect_{i}",
                        "kind": "tool",
                        "tool": "append_marker",
                        "instruction": f"Record {marker}.",
                        "args": args,
                    }
                )
            else:
                planned.append(
                    {
                        "name": f"call_{i}",
                        "kind": "model",
                        "tool": None,
                        "args": {},
                        "instruction": f"Write one line for {marker}.",
                    }
                )
        return {"steps": planned}

    return plan


def submit_runs(count: int, settings: Settings, first: int = 0) -> dict[str, int]:
    """Submit `count` runs with no plan (each is planned by a model call); `{marker: run id}`."""
    runs = {}
    for n in range(first, first + count):
        marker = f"chaos-{n}"
        goal = f"{marker}: record the effects and write the lines of this run."
        runs[marker] = submit(RunRequest(user_id=USER, goal=goal), settings=settings).run_id
    return runs


def purpose_of(request: Received) -> str | None:
    """What a chat request was for (`PURPOSES`), or None for another (a summary)."""
    named = ((request.body.get("response_format") or {}).get("json_schema") or {}).get("name")
    if named is not None:
        return str(named) if named in NAMED_PURPOSES else None
    messages = request.body.get("messages") or [{}]
    return SYSTEM_PURPOSES.get(str(messages[0].get("content", "")))


def unit_of(request: Received) -> str | None:
    """The unit of work a request paid for: `chaos-<n>/step-<i>` for a step's call (its
    instruction, the last message, names it), `chaos-<n>/<purpose>` for a phase; None if not
    the suite's."""
    purpose = purpose_of(request)
    if purpose == "step":
        found = STEP_MARKER.search(str(request.body["messages"][-1].get("content", "")))
        return found.group(0) if found else None
    run = MARKER.search(request.text)
    return f"{run.group(0)}/{purpose}" if run and purpose else None


def count_calls(provider: FakeOpenAI) -> Counter[str]:
    """Answered (charged) chat requests per unit of work (`unit_of`); a 429 or a cut-off
    request costs nothing and is not counted."""
    return Counter(
        unit for r in provider.received() if r.reply == "ok" and (unit := unit_of(r)) is not None
    )


def count_effects(effects: Path) -> Counter[str]:
    """How many times each step's tool ran: its marker's lines in the effects log."""
    if not effects.exists():
        return Counter()
    return Counter(line for line in effects.read_text().splitlines() if line)
