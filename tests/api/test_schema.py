"""Property-based fuzzing of the OpenAPI spec (schemathesis): every operation under /api/v1 and
the health endpoints, with valid and invalid inputs, as an admin, under every check schemathesis
has: the server never answers 5xx, answers only as the spec documents, accepts every request the
spec allows and refuses every request it forbids (`api.openapi` states the rules), and answers an
unsupported method with 405 and an `Allow` naming exactly the path's methods.

Bodies that break the rules across fields that JSON Schema cannot state, and the spec's
descriptions do, are not sent (`breaks_stated_rules`): a plan's step names are unique; `after`
names other steps of the plan and makes no cycle; a reference names a step the referring
step waits for, or a pinned fact (so no body with a `${...}` is sent); an expectation's `min`
is at most its `max`; and a new procedure has a how-to that is not blank or a plan template (a
procedure's template follows the plan rules above); a schedule's timing is one the schedule rules
allow (`breaks_timing`).

Runs last in tests/api (file order): it submits, claims and decides whatever it likes. The runs it
submits are cancelled afterwards so the workers are free for what comes next.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import httpx
import pytest
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from sqlmodel import col, select

from api.app import create_api
from models.db import session_scope
from models.engine import transitions
from models.errors import InvalidInput
from models.memory.procedures import Procedure
from models.schedules import due_times
from models.schedules.schedules import Schedule
from models.settings import get_settings
from models.states import RUN_ACTIVE
from models.tables import Run, utcnow
from tests.api.conftest import MakeToken
from tests.integration.conftest import TEST_ENV

pytestmark = pytest.mark.integration
SEEN: Counter[tuple[str, int]] = Counter()  # (operation, status) -> responses
EXAMPLES_PER_OPERATION = 25  # about 20 operations x 25 examples: under a minute on 2 cores


@pytest.fixture(scope="module")
def fuzz_token(make_token: MakeToken) -> Iterator[str]:
    """An admin token named `fuzzer`; afterwards, the schedules it made are removed (before
    they submit runs into the tests that follow), the runs the fuzzing left active are
    cancelled, and the procedures it added deleted (everyone's would be recalled into the
    plans of the tests that follow, which the offline planner follows)."""
    with session_scope() as session:
        newest = session.scalar(select(col(Run.id)).order_by(col(Run.id).desc()).limit(1)) or 0
        last = session.scalar(select(sa.func.max(col(Procedure.id)))) or 0
        last_schedule = session.scalar(select(sa.func.max(col(Schedule.id)))) or 0
    yield make_token("admin", name="fuzzer")
    with session_scope() as session:
        session.execute(sa.delete(Schedule).where(col(Schedule.id) > last_schedule))
    with session_scope() as session:
        active = select(Run).where(col(Run.id) > newest, col(Run.status).in_(RUN_ACTIVE))
        for run in session.exec(active):
            transitions.cancel_run(session, run.id or 0)
        session.execute(sa.delete(Procedure).where(col(Procedure.id) > last))


# The spec the server serves (checked below), built at collection time so pytest can list one
# test per operation before the server is up; without the web UI, whose sessions need a secret
# in AGENTQ_HOME, and which adds nothing to the spec.
def _served_spec() -> dict[str, Any]:
    """The spec as the session engine's API serves it: its plan steps are the tools of
    TEST_ENV's `AGENTQ_TOOL_MODULES`, which this process's settings do not have yet."""
    with patch.dict(os.environ, {"AGENTQ_TOOL_MODULES": TEST_ENV["AGENTQ_TOOL_MODULES"]}):
        get_settings.cache_clear()
        spec = create_api().openapi()
    get_settings.cache_clear()
    return spec


SPEC = _served_spec()
# The event streams (`/stream`) stay open by design, so a fuzzed call would never end; their
# refusals and deliveries are tested in tests/api/test_streams.py.
schema = (
    schemathesis.openapi.from_dict(SPEC)
    .include(path_regex=r"^/(api/v1/|healthz$|readyz$)")
    .exclude(path_regex=r"/stream$")
)


def breaks_authorization(case: Any) -> bool:
    """Whether `case` is a negative case made by breaking (among others) its Authorization
    header."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_negative:
        return False
    data = meta.phase.data
    broken = {getattr(data, "parameter", None)}
    broken |= {mutation.parameter for mutation in getattr(data, "mutations", ())}
    return "Authorization" in broken


def sent_as_described(case: Any) -> None:
    """A query parameter generated as an empty list would not be sent at all (httpx sends one
    `key=value` per item), so the request would not be the one the case describes: send it
    empty instead (`?key=`), which breaks the same rule."""
    if case.query:
        case.query = {key: "" if value == [] else value for key, value in case.query.items()}


def breaks_stated_rules(body: Any) -> bool:
    """Whether `body` breaks a rule across fields that the spec states in words: a `${...}`
    reference (whether it names a step it waits for or a pinned fact depends on the rest of the
    body), a step name used twice in a plan, an `after` that names a step the plan does not
    have, the step itself, or closes a cycle, or an expectation whose `min` is more than its
    `max`. Such bodies are not sent."""
    if "${" in json.dumps(body, default=repr):
        return True
    if isinstance(body, dict) and {"name", "goal"} <= body.keys() and breaks_timing(body):
        return True  # a schedule's (issue 32, item 2)
    if isinstance(body, dict) and body.get("scope") and "when_to_use" in body:  # a procedure
        if not str(body.get("body") or "").strip() and body.get("plan_template") is None:
            return True
        body = {"plan": body.get("plan_template")}
    plan = body.get("plan") if isinstance(body, dict) else None
    steps = plan.get("steps") if isinstance(plan, dict) else None
    if isinstance(steps, list):
        named = [step for step in steps if isinstance(step, dict)]
        names = [str(step.get("name")) for step in named]
        crossed = any(crossed_bounds(step.get("expect")) for step in named)
        return crossed or len(names) != len(set(names)) or breaks_graph_rules(named, names)
    return False


def breaks_timing(schedule: dict[str, Any]) -> bool:
    """Whether a schedule's body, its timing fields of the right types, breaks the timing rules
    its spec states in words (`models.schedules.due_times.timing`): exactly one of `cron` and
    `every_s`, a cron expression croniter reads that is ever due, an IANA `timezone` only with
    `cron`, an interval of at least AGENTQ_SCHEDULE_MIN_INTERVAL_S."""
    fields = {"cron": str, "timezone": str, "every_s": int}
    asked = {name: schedule.get(name) for name in fields}
    if not all(v is None or isinstance(v, fields[k]) for k, v in asked.items()):
        return False  # a wrong type: the schema refuses it
    try:
        due_times.timing(
            **asked, anchor=utcnow(), min_interval_s=get_settings().schedule_min_interval_s
        )
    except InvalidInput:
        return True
    return False


def crossed_bounds(expect: Any) -> bool:
    """Whether `expect` holds an expectation whose numbers `min` and `max` are the wrong way
    round (anything else wrong in it breaks the schema instead)."""
    expectations = expect if isinstance(expect, list) else []
    return any(_crossed(e) for e in expectations if isinstance(e, dict))


def _crossed(expectation: dict[str, Any]) -> bool:
    low, high = expectation.get("min"), expectation.get("max")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high))
    return bool(numbers and low > high)


def breaks_graph_rules(steps: list[dict[str, Any]], names: list[str]) -> bool:
    """Whether the steps' `after` (a list of names; left out or null: the step before it) names
    a step not among `names` (unique), the step itself, or makes a cycle. An `after` that is no
    list of strings breaks the schema instead (refused for its shape), so it counts as none."""
    waits: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        after = step.get("after")
        if after is None:
            waits[i] = [i - 1] if i else []
        elif isinstance(after, list) and all(isinstance(name, str) for name in after):
            if any(name not in names or name == names[i] for name in after):
                return True
            waits[i] = [names.index(name) for name in after]
        else:
            waits[i] = []
    done: set[int] = set()
    while len(done) < len(waits):  # take every step whose dependencies are taken; none: a cycle
        free = {i for i, deps in waits.items() if i not in done and done.issuperset(deps)}
        if not free:
            return True
        done |= free
    return False


def test_the_fuzzed_spec_is_the_served_one(api_url: str) -> None:
    served = httpx.get(f"{api_url}/openapi.json", trust_env=False)
    assert served.status_code == 200
    assert served.json() == json.loads(json.dumps(SPEC))


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,  # the same examples every run: a failure here is reproducible
)
def test_no_server_errors(case: Any, api_url: str, fuzz_token: str) -> None:
    if breaks_stated_rules(case.body):
        return
    # The fuzzer's token, except in a case whose broken part is the Authorization header itself
    # (sent as generated, so the check sees what the server makes of it).
    headers = {} if breaks_authorization(case) else {"Authorization": f"Bearer {fuzz_token}"}
    sent_as_described(case)
    response = case.call(base_url=api_url, headers=headers, timeout=60)
    SEEN[(f"{case.method} {case.path}", response.status_code)] += 1
    case.validate_response(response, headers=headers)  # every check


def test_fuzzing_reached_past_validation() -> None:
    """The fuzzing above did more than bounce off 422s: submits and reads succeeded."""
    assert SEEN[("POST /api/v1/runs", 201)] > 0
    assert SEEN[("GET /api/v1/runs", 200)] > 0
