"""`--json` on `agentq run list`, `run show`, `review list`, `memory facts` and `token list`: the
CLI as a subprocess (talking to the session's engine) prints one JSON document that parses into the
API's own response models, and nothing else on stdout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import TypeAdapter

from api.responses import FactOut, ReviewOut, RunDetail, RunOut, TokenOut
from tests.api.conftest import Client, noop
from tests.api.test_memory import store
from tests.integration.conftest import wait_for_run

pytestmark = [pytest.mark.integration, pytest.mark.acceptance]
AGENTQ = shutil.which("agentq") or "agentq"


def agentq_json(*args: str) -> Any:
    """The parsed stdout of `agentq ARGS --json` (it must exit 0)."""
    done = subprocess.run(
        [AGENTQ, *args, "--json"],
        env=dict(os.environ),  # the session engine's AGENTQ_DATABASE_URL and AGENTQ_BROKER_URL
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # one document: anything else on stdout fails to parse


def test_runs_and_status_print_the_apis_shapes(client: Client) -> None:
    body = {"goal": "json me", "user": "json-user", "plan": {"steps": [noop("a")]}}
    run_id = client("admin").post("/api/v1/runs", json=body).json()["run"]["id"]
    assert wait_for_run(run_id).status == "succeeded"
    listed = TypeAdapter(list[RunOut]).validate_python(
        agentq_json("run", "list", "--user", "json-user")
    )
    assert run_id in [r.id for r in listed] and {r.user_id for r in listed} == {"json-user"}
    shown = RunDetail.model_validate(agentq_json("run", "show", str(run_id)))
    api = client("admin").get(f"/api/v1/runs/{run_id}").json()
    assert shown.model_dump(mode="json") == api  # the same document as the API's


def test_review_list_memory_facts_and_token_list_parse(
    client: Client, escalated: Callable[..., tuple[int, int]]
) -> None:
    _, esc_id = escalated()
    queue = TypeAdapter(list[ReviewOut]).validate_python(agentq_json("review", "list"))
    assert esc_id in [r.escalation.id for r in queue]
    user = f"json-{uuid.uuid4().hex[:8]}"
    store(user, "Reports are in EUR", "currency")
    facts = TypeAdapter(list[FactOut]).validate_python(
        agentq_json("memory", "facts", "--user", user)
    )
    assert [(f.user_id, f.text) for f in facts] == [(user, "Reports are in EUR")]
    tokens = TypeAdapter(list[TokenOut]).validate_python(agentq_json("token", "list"))
    assert {"ada", "rita"} <= {t.name for t in tokens}
    assert not any("aq_" in json.dumps(t.model_dump(mode="json")) for t in tokens)
