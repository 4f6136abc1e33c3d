"""No network call inside a database transaction (DESIGN.md, invariant 11; issue 11, item 8), on
real Postgres: with a remote embedder, a model call's recall query (a plan's goal, a model step's
instruction) is embedded while this process holds no connection (`worker.memory.working_memory.
with_query_vector`), not while its context is read."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from models.db import get_engine, session_scope
from models.engine import run_transitions
from models.memory import memory_admin
from models.memory.embeddings import HashEmbedder
from models.plans.tools import load_tool_modules
from models.settings import get_settings
from models.tables import Run
from worker.model_calls import calls
from worker.model_calls.providers import Completion, ModelRequest
from worker.phases import planner

pytestmark = pytest.mark.integration

PLAN = '{"steps": [{"name": "only", "kind": "tool", "tool": "noop", "args": {}}]}'


class RemoteEmbedder:
    """Stands for an embeddings server (it is not one of the in-process embedders), noting how
    many of this process's pooled connections were checked out at each call."""

    def __init__(self) -> None:
        inner = HashEmbedder()
        self.model, self.dim, self._inner = inner.model, inner.dim, inner
        self.checked_out: list[int] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.checked_out.append(get_engine().pool.checkedout())  # type: ignore[attr-defined]
        return self._inner.embed(texts)


class Answers:
    name = "scripted"

    def complete(self, request: ModelRequest) -> Completion:
        return Completion(PLAN, "scripted", 100, 10, "stop", offline=False)


def test_a_plan_embeds_its_recall_query_outside_any_transaction(
    engine: object, make_run: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    load_tool_modules(get_settings().tool_modules)
    remote = RemoteEmbedder()
    monkeypatch.setattr(memory_admin, "embedder", lambda: remote)
    monkeypatch.setattr(calls, "provider", lambda: Answers())
    run_id = make_run(None, user="remote-embedder", start=False)
    with session_scope() as session:
        run_transitions.start_planning(session, run_id)
    assert memory_admin.embeds_remotely()
    assert planner.plan(run_id)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and (run.status, run.plan_version) == ("running", 1)
    assert remote.checked_out, "the recall query was never embedded"
    assert set(remote.checked_out) == {0}  # no connection held, so no transaction open
