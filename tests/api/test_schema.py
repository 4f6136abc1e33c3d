"""Property-based fuzzing of the OpenAPI spec (schemathesis): every operation under /api/v1 and
the health endpoints, with valid and invalid inputs, as an admin; the server never answers 5xx,
and answers only as the spec documents.

Runs last in tests/api (file order): it submits, claims and decides whatever it likes. The runs it
submits are cancelled afterwards so the workers are free for what comes next.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlmodel import col, select

from api.app import create_api
from models import transitions
from models.db import session_scope
from models.states import RUN_ACTIVE
from models.tables import Run
from tests.api.conftest import MakeToken

pytestmark = pytest.mark.integration
SEEN: Counter[tuple[str, int]] = Counter()  # (operation, status) -> responses
EXAMPLES_PER_OPERATION = 25  # about 20 operations x 25 examples: under a minute on 2 cores
# No 5xx, and every answer is one the spec documents, in its documented shape. (Schemathesis's
# "schema-valid request rejected" is left out: a well-formed body can still be refused with a
# 400, such as a plan naming an unknown tool.)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def fuzz_token(make_token: MakeToken) -> Iterator[str]:
    """An admin token named `fuzzer`; afterwards, the runs the fuzzing left active are
    cancelled."""
    with session_scope() as session:
        newest = session.scalar(select(col(Run.id)).order_by(col(Run.id).desc()).limit(1)) or 0
    yield make_token("admin", name="fuzzer")
    with session_scope() as session:
        active = select(Run).where(col(Run.id) > newest, col(Run.status).in_(RUN_ACTIVE))
        for run in session.exec(active):
            transitions.cancel_run(session, run.id or 0)


# The spec the server serves (checked below), built at collection time so pytest can list one
# test per operation before the server is up; without the web UI, whose sessions need a secret
# in AGENTQ_HOME, and which adds nothing to the spec.
SPEC = create_api().openapi()
schema = schemathesis.openapi.from_dict(SPEC).include(path_regex=r"^/(api/v1/|healthz$|readyz$)")


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
    headers = {"Authorization": f"Bearer {fuzz_token}"}
    response = case.call(base_url=api_url, headers=headers, timeout=60)
    SEEN[(f"{case.method} {case.path}", response.status_code)] += 1
    case.validate_response(response, checks=CHECKS, headers=headers)


def test_fuzzing_reached_past_validation() -> None:
    """The fuzzing above did more than bounce off 422s: submits and reads succeeded."""
    assert SEEN[("POST /api/v1/runs", 201)] > 0
    assert SEEN[("GET /api/v1/runs", 200)] > 0
