"""Issue 9, finding 10, against `agentq up` with its default settings: the OpenAPI spec did not
state the constraints the server enforces. Schemathesis (all checks) found requests the spec
allows refused (NUL in strings, an admin without `user`, a tool step without `tool`,
`answer: null`), one it forbids accepted (`budgets.cost_usd: false` taken as 0), and `OPTIONS`
answered 405 without `Allow`. A user test added arrays nested 300 deep (500s, some after the
run was written) and budgets no operator would pay for (2^31 replans, $1M).

Each request below is checked against the spec the server serves (`jsonschema`), and the
server must agree: what the spec allows is not refused for its shape, what it forbids is
refused, and nothing is written. (tests/api/test_schema.py fuzzes every operation the same way.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator
from sqlmodel import func, select

from models.tables import Run
from tests.support.console import Console

pytestmark = pytest.mark.security
MakeToken = Callable[..., tuple[int, str]]


@pytest.fixture(scope="module")
def api(console: Console, make_token: MakeToken) -> Iterator[Callable[[str], httpx.Client]]:
    """`api(role)`: a client of the served API with a new token of that role."""
    opened: list[httpx.Client] = []
    base = console.ui_url.removesuffix("/ui")

    def make(role: str) -> httpx.Client:
        name = f"spec-{role}-{uuid.uuid4().hex[:6]}"
        _, raw = make_token(role, name, user=name if role == "submitter" else None)
        http = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {raw}"}, trust_env=False, timeout=60
        )
        opened.append(http)
        return http

    yield make
    for http in opened:
        http.close()


@pytest.fixture(scope="module")
def spec(console: Console) -> dict[str, Any]:
    served = httpx.get(console.ui_url.removesuffix("/ui") + "/openapi.json", trust_env=False)
    assert served.status_code == 200
    return dict(served.json())


def allows(spec: dict[str, Any], component: str, body: Any) -> bool:
    """Whether the served spec's `component` schema accepts `body`."""
    schema = {"$ref": f"#/components/schemas/{component}", "components": spec["components"]}
    return bool(Draft202012Validator(schema).is_valid(body))


def runs_written(console: Console) -> int:
    with console.db() as session:
        return int(session.exec(select(func.count()).select_from(Run)).one())


def nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def submit(**fields: Any) -> dict[str, Any]:
    """A submit body for user `u` with `fields`."""
    return {"goal": "g", "user": "u", **fields}


def one_step(**step: Any) -> dict[str, Any]:
    """A plan of the one step `step` (named `a`)."""
    return {"steps": [{"name": "a", **step}]}


NOOP_A = {"name": "a", "kind": "tool", "tool": "noop", "after": []}
FORBIDDEN_SUBMITS = {
    "a false cost": submit(budgets={"cost_usd": False}),
    "NUL in the goal": submit(goal="a\u0000b"),
    "a tool step without a tool": submit(plan=one_step(kind="tool")),
    "a model step naming a tool": submit(plan=one_step(kind="model", instruction="x", tool="noop")),
    "a tool argument of the wrong type": submit(
        plan=one_step(kind="tool", tool="sleep", args={"seconds": "1"})
    ),
    "a tool that is not enabled": submit(plan=one_step(kind="tool", tool="append_marker")),
    "a budget over the operator's ceiling": submit(budgets={"replans": 2**31 - 1}),
    "an after naming a step twice": submit(
        plan={"steps": [NOOP_A, {"name": "b", "kind": "tool", "tool": "noop", "after": ["a", "a"]}]}
    ),
    "an after naming no step": submit(plan=one_step(kind="tool", tool="noop", after=["No Step"])),
}


@pytest.mark.parametrize("case", sorted(FORBIDDEN_SUBMITS))
def test_what_the_spec_forbids_is_refused_and_writes_nothing(
    case: str, spec: dict[str, Any], api: Callable[[str], httpx.Client], console: Console
) -> None:
    body = FORBIDDEN_SUBMITS[case]
    assert not allows(spec, "RunSubmit", body), f"the spec allows {case}"
    before = runs_written(console)
    response = api("admin").post("/api/v1/runs", json=body)
    assert response.status_code in (400, 422), (case, response.status_code, response.text)
    assert runs_written(console) == before


def test_arrays_nested_300_deep_are_refused_whole(
    api: Callable[[str], httpx.Client], console: Console
) -> None:
    """Far under every size cap, they gave 500s, some after the run was written. JSON Schema
    cannot bound nesting; the spec's `JsonValue` says the limit (64 levels) in words."""
    before = runs_written(console)
    deep = submit(plan=one_step(kind="tool", tool="echo", args={"value": nested(300)}))
    response = api("admin").post("/api/v1/runs", json=deep)
    assert response.status_code == 422 and "deeper than 64" in response.text
    assert runs_written(console) == before


def test_what_the_spec_allows_is_not_refused_for_its_shape(
    spec: dict[str, Any], api: Callable[[str], httpx.Client]
) -> None:
    body = {
        "goal": "within the spec",
        "user": "spec-user",
        "budgets": {"tokens": 1000.0, "cost_usd": 0},  # 1000.0 is an integer in JSON Schema
        "plan": {"steps": [{"name": "a", "kind": "tool", "tool": "sleep", "args": {"seconds": 0}}]},
    }
    assert allows(spec, "RunSubmit", body)
    response = api("admin").post("/api/v1/runs", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["run"]["spend"]["tokens_limit"] == 1000


def test_a_graph_the_spec_allows_is_accepted_and_a_cycle_is_a_400_naming_the_step(
    spec: dict[str, Any], api: Callable[[str], httpx.Client], console: Console
) -> None:
    """`after` was no property of either step shape (`additionalProperties: false`), so the
    spec forbade every graph plan the server takes. A cycle is a rule across steps: the shape
    allows it, the server refuses it (400, as the spec's description says)."""
    b = {"name": "b", "kind": "tool", "tool": "noop", "after": []}
    join = {"name": "j", "kind": "model", "instruction": "join", "after": ["a", "b"]}
    graph = submit(plan={"steps": [NOOP_A, b, join]})
    assert allows(spec, "RunSubmit", graph)
    accepted = api("admin").post("/api/v1/runs", json=graph)
    assert accepted.status_code == 201, accepted.text
    waves = accepted.json()["run"]["plan_versions"][0]["waves"]
    assert [len(wave) for wave in waves] == [2, 1]
    cycle = submit(plan={"steps": [{**NOOP_A, "after": ["b"]}, {**b, "after": ["a"]}]})
    assert allows(spec, "RunSubmit", cycle)
    before = runs_written(console)
    refused = api("admin").post("/api/v1/runs", json=cycle)
    assert refused.status_code == 400 and "steps.0.after: a cycle" in refused.text, refused.text
    assert runs_written(console) == before


def test_whose_run_it_is_depends_on_the_token_and_says_so_with_403(
    api: Callable[[str], httpx.Client],
) -> None:
    """An admin acts for no user: a submit without `user` is the token's problem (403, as the
    spec's description says), not a malformed body (it was 400, which the spec's shape allows)."""
    response = api("admin").post("/api/v1/runs", json={"goal": "whose?"})
    assert response.status_code == 403 and response.json()["detail"].startswith("user:")


def test_a_null_answer_is_outside_the_spec(spec: dict[str, Any]) -> None:
    assert not allows(spec, "Respond", {"answer": None})
    assert not allows(spec, "Respond", {"answer": {}})
    assert allows(spec, "Respond", {"answer": 0.95})


def test_an_unsupported_method_is_405_with_allow(api: Callable[[str], httpx.Client]) -> None:
    http = api("admin")
    response = http.options("/api/v1/runs")
    assert response.status_code == 405
    assert response.headers["allow"] == "GET, POST"
    claim = http.get("/api/v1/reviews/claim")  # not an escalation id: the claim route's path
    assert claim.status_code == 405 and claim.headers["allow"] == "POST"


def test_query_parameters_are_taken_as_declared(api: Callable[[str], httpx.Client]) -> None:
    """`?user=a&user=b` was answered for `b`, and unknown parameters were ignored: both are
    requests the spec does not allow."""
    http = api("admin")
    twice = http.get("/api/v1/runs", params=[("user", "a"), ("user", "b")])
    assert twice.status_code == 422 and "more than once" in twice.text
    unknown = http.get("/api/v1/runs", params={"colour": "red"})
    assert unknown.status_code == 422 and "not a parameter" in unknown.text
