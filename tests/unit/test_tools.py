"""The tool registry, the built-in tools and the expense-report demo tools."""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from models.errors import ConfigurationError, RetryableToolError, ToolArgumentsError, ToolError
from models.plans.playbooks import find_playbook, playbook
from models.plans.references import references, resolve
from models.plans.tools import (
    DEFAULT_TOOL_MODULES,
    Fallback,
    ToolContext,
    argument_problems,
    catalog,
    get_tool,
    load_tool_modules,
    tool,
)
from worker.tools.expenses import EXPENSE_PLAYBOOK

load_tool_modules([*DEFAULT_TOOL_MODULES, "tests.support.tools"])  # + append_marker

FACTS = {"currency": "EUR", "cost_centre": "CC-4410", "trip": "lisbon-2026-10"}
CALLS: list[dict[str, Any]] = []


@tool("t_recorder", description="Record the call.", returns=("n",))
def _recorder(ctx: ToolContext, n: Annotated[int, Field(ge=1)], label: str = "x") -> dict[str, Any]:
    CALLS.append({"n": n, "label": label})
    return {"n": n}


@tool("t_scaled", description="Record a float.", returns=("rate",))
def _scaled(ctx: ToolContext, rate: float, extra: Any = None) -> dict[str, Any]:
    CALLS.append({"rate": rate})
    return {"rate": rate}


@tool("t_returns_list", description="Return a list, which is not a result.")
def _returns_list(ctx: ToolContext) -> dict[str, Any]:
    return [1]  # type: ignore[return-value]


@tool("t_returns_set", description="Return a dict that JSON cannot encode.")
def _returns_set(ctx: ToolContext) -> dict[str, Any]:
    return {"s": {1, 2}}


@tool("t_forgets_key", description="Declare a key it does not return.", returns=("rate",))
def _forgets_key(ctx: ToolContext) -> dict[str, Any]:
    return {"price": 1}


@pytest.fixture
def make_ctx() -> Callable[..., ToolContext]:
    """A factory of contexts for step 7 of run 3, attempt 1, with the demo's facts."""

    def make(**overrides: Any) -> ToolContext:
        values: dict[str, Any] = {
            "run_id": 3,
            "step_id": 7,
            "step_name": "s",
            "attempt": 1,
            "tries_of_name": 1,
            "facts": FACTS,
        }
        return ToolContext(**{**values, **overrides})

    return make


def call(name: str, ctx: ToolContext, **args: Any) -> dict[str, Any]:
    return get_tool(name).invoke(ctx, args)


# -- the registry ---------------------------------------------------------------------------


def test_invoke_validates_strictly_and_takes_whole_floats_as_integers(
    make_ctx: Callable[..., ToolContext],
) -> None:
    """Arguments are never converted from another JSON type ("4" is not 4: the API's spec says
    what is accepted), but 4.0 is the integer 4, as JSON Schema's `integer` says."""
    CALLS.clear()
    assert call("t_recorder", make_ctx(), n=4.0) == {"n": 4}
    assert CALLS == [{"n": 4, "label": "x"}]
    for wrong in ("4", True, 4.5):
        with pytest.raises(ToolArgumentsError, match="n: Input should be a valid integer"):
            call("t_recorder", make_ctx(), n=wrong)


@pytest.mark.parametrize(
    ("args", "field", "allowed"),
    [
        ({"n": 0}, "n", "greater than or equal to 1"),
        ({"n": "many"}, "n", "valid integer"),
        ({}, "n", "required"),
        ({"n": 1, "colour": "red"}, "colour", "Extra inputs are not permitted"),
        ({"n": 1, "label": 5}, "label", "valid string"),
    ],
)
def test_bad_arguments_name_tool_and_field_and_never_run(
    make_ctx: Callable[..., ToolContext], args: dict[str, Any], field: str, allowed: str
) -> None:
    CALLS.clear()
    with pytest.raises(ToolArgumentsError) as caught:
        get_tool("t_recorder").invoke(make_ctx(), args)
    message = str(caught.value)
    assert "'t_recorder'" in message
    assert f"{field}: " in message
    assert allowed in message
    assert "Takes: n: integer, label: string (optional)" in message
    assert CALLS == []


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"rate": math.nan}, "rate"),
        ({"rate": math.inf}, "rate"),
        ({"rate": -math.inf}, "rate"),
        ({"rate": 1.0, "extra": {"items": [1, -math.inf]}}, "extra.items.1"),
    ],
)
def test_non_finite_numbers_are_invalid_arguments_and_never_run(
    make_ctx: Callable[..., ToolContext], args: dict[str, Any], field: str
) -> None:
    """Issue 11: Python's `json` reads `NaN` and `Infinity`, and pydantic passes them to a
    `float` (or `Any`) parameter; JSON has no such numbers, so they are invalid arguments."""
    CALLS.clear()
    with pytest.raises(ToolArgumentsError) as caught:
        get_tool("t_scaled").invoke(make_ctx(), args)
    message = str(caught.value)
    assert message.startswith(f"tool 't_scaled' rejected its arguments: {field}: ")
    assert "numbers must be finite" in message
    assert CALLS == []
    problems = argument_problems("t_scaled", args)  # the same check when a plan is written
    assert len(problems) == 1 and problems[0].startswith(f"tool 't_scaled': {field}: numbers")


def test_arguments_must_be_a_dict(make_ctx: Callable[..., ToolContext]) -> None:
    with pytest.raises(ToolArgumentsError, match="must be an object"):
        get_tool("noop").invoke(make_ctx(), [1])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("t_returns_list", "returned list, expected a dict"),
        ("t_returns_set", "not JSON"),
        ("t_forgets_key", "returned no rate"),
    ],
)
def test_results_must_be_json_dicts_with_declared_keys(
    make_ctx: Callable[..., ToolContext], name: str, problem: str
) -> None:
    with pytest.raises(ToolError, match=problem) as caught:
        call(name, make_ctx())
    assert not isinstance(caught.value, ToolArgumentsError)


def test_unknown_tool_lists_registered_names() -> None:
    with pytest.raises(ToolError, match=r"unknown tool 'nope'; registered: .*cached_rate, .*noop"):
        get_tool("nope")


def test_duplicate_and_malformed_registrations_are_refused() -> None:
    def no_ctx(trip: str) -> dict[str, Any]:
        return {}

    def untyped(ctx: ToolContext, trip) -> dict[str, Any]:  # type: ignore[no-untyped-def]
        return {}

    def star(ctx: ToolContext, **kwargs: Any) -> dict[str, Any]:
        return {}

    with pytest.raises(ValueError, match="'noop' is already registered"):
        tool("noop", description="again")(no_ctx)
    with pytest.raises(ValueError, match="first parameter must be 'ctx'"):
        tool("t_no_ctx", description="")(no_ctx)
    with pytest.raises(ValueError, match="needs a type hint"):
        tool("t_untyped", description="")(untyped)
    with pytest.raises(ValueError, match=r"\*\*kwargs"):
        tool("t_star", description="")(star)
    with pytest.raises(ValueError, match="are MCP servers' tools"):
        tool("mcp__files__read", description="")(star)
    with pytest.raises(ToolError):
        get_tool("t_no_ctx")


def test_catalog_is_sorted_and_describes_each_tool() -> None:
    entries = catalog()
    names = [entry["name"] for entry in entries]
    assert names == sorted(names)
    assert {"noop", "sleep", "echo", "flaky", "submit_report", "cached_rate"} <= set(names)
    live = next(entry for entry in entries if entry["name"] == "live_rate")
    assert set(live) == {"name", "description", "parameters", "returns", "fallback"}
    assert live["returns"] == ["rate"]
    assert live["fallback"] == {
        "tool": "cached_rate",
        "args": {
            "base": "${steps.receipts.currency}",
            "quote": "${facts.currency}",
            "month": "${steps.receipts.month}",
        },
    }
    assert live["parameters"]["required"] == ["base", "quote"]
    assert "ctx" not in live["parameters"]["properties"]


def test_load_tool_modules_is_idempotent() -> None:
    before = catalog()
    load_tool_modules(DEFAULT_TOOL_MODULES)
    assert catalog() == before


def test_idempotency_key_ignores_the_attempt(make_ctx: Callable[..., ToolContext]) -> None:
    assert make_ctx(attempt=1).idempotency_key == "run-3/step-7"
    assert make_ctx(attempt=3).idempotency_key == "run-3/step-7"
    assert make_ctx(step_id=8).idempotency_key == "run-3/step-8"


# -- built-in tools -------------------------------------------------------------------------


def test_noop_echo_and_sleep(make_ctx: Callable[..., ToolContext]) -> None:
    ctx = make_ctx()
    assert call("noop", ctx) == {"ok": True}
    value = {"a": [1, 2.5, None, True], "b": "x"}
    assert call("echo", ctx, value=value) == {"value": value}
    started = time.monotonic()
    assert call("sleep", ctx, seconds=0.05) == {"slept_s": 0.05}
    assert time.monotonic() - started >= 0.05


@pytest.mark.parametrize("seconds", [-1, 600.5])
def test_sleep_bounds(make_ctx: Callable[..., ToolContext], seconds: float) -> None:
    with pytest.raises(ToolArgumentsError, match="seconds"):
        call("sleep", make_ctx(), seconds=seconds)


def test_always_fails_has_a_noop_fallback(make_ctx: Callable[..., ToolContext]) -> None:
    with pytest.raises(ToolError, match="boom") as caught:
        call("always_fails", make_ctx(), message="boom")
    assert not isinstance(caught.value, RetryableToolError)
    assert get_tool("always_fails").fallback == Fallback("noop", {})


def test_flaky_fails_its_first_tries_then_succeeds(make_ctx: Callable[..., ToolContext]) -> None:
    for tries in (1, 2):
        with pytest.raises(ToolError, match=f"flaky: try {tries} of 2 failing tries"):
            call("flaky", make_ctx(tries_of_name=tries), fail_times=2)
    assert call("flaky", make_ctx(tries_of_name=3), fail_times=2) == {"ok": True, "tries": 3}
    assert get_tool("flaky").fallback is None


def test_append_marker_counts_lines(make_ctx: Callable[..., ToolContext], tmp_path: Path) -> None:
    path = tmp_path / "effects.txt"
    assert call("append_marker", make_ctx(), path=str(path), marker="a") == {"lines": 1}
    assert call("append_marker", make_ctx(), path=str(path), marker="b") == {"lines": 2}
    assert path.read_text() == "a\nb\n"


# -- expense-report tools -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trip", "month"), [("lisbon-2026-10", "2026-10"), ("lisbon-2026-11", "2026-11")]
)
def test_collect_receipts(make_ctx: Callable[..., ToolContext], trip: str, month: str) -> None:
    result = call("collect_receipts", make_ctx(), trip=trip)
    assert result["month"] == month
    assert result["currency"] == "USD"
    assert [(r["item"], r["amount"]) for r in result["receipts"]] == [
        ("hotel", 412.50),
        ("dinner", 38.00),
        ("dinner", 41.00),
        ("taxi", 23.10),
    ]
    assert all(
        r["date"].startswith(month + "-") and r["currency"] == "USD" for r in result["receipts"]
    )


def test_unknown_trip_lists_known_trips(make_ctx: Callable[..., ToolContext]) -> None:
    with pytest.raises(ToolError, match="known trips: lisbon-2026-10, lisbon-2026-11"):
        call("collect_receipts", make_ctx(), trip="porto-2026-10")


def test_live_rate_times_out_retryably(make_ctx: Callable[..., ToolContext]) -> None:
    started = time.monotonic()
    with pytest.raises(RetryableToolError, match=r"timed out after 0\.2 s"):
        call("live_rate", make_ctx(), base="USD", quote="EUR")
    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize(("month", "rate"), [("2026-10", 0.92), ("2026-09", 0.921)])
def test_cached_rate(make_ctx: Callable[..., ToolContext], month: str, rate: float) -> None:
    result = call("cached_rate", make_ctx(), base="USD", quote="EUR", month=month)
    assert result == {"rate": rate, "source": f"cached monthly table {month}"}


def test_cached_rate_without_table_or_pair(make_ctx: Callable[..., ToolContext]) -> None:
    expected = r"^no cached rate table for 2026-11 \(tables: 2026-09, 2026-10\)$"
    with pytest.raises(ToolError, match=expected):
        call("cached_rate", make_ctx(), base="USD", quote="EUR", month="2026-11")
    with pytest.raises(ToolError, match=r"no GBP/EUR rate in the 2026-10 table \(pairs: USD/EUR\)"):
        call("cached_rate", make_ctx(), base="GBP", quote="EUR", month="2026-10")
    with pytest.raises(ToolArgumentsError, match="month"):
        call("cached_rate", make_ctx(), base="USD", quote="EUR", month="October")


def test_convert_amounts_rounds_the_total_once(make_ctx: Callable[..., ToolContext]) -> None:
    receipts = call("collect_receipts", make_ctx(), trip="lisbon-2026-10")["receipts"]
    result = call("convert_amounts", make_ctx(), receipts=receipts, rate=0.92, currency="EUR")
    assert result["total"] == 473.43  # 514.60 * 0.92 = 473.432
    assert (result["currency"], result["rate"]) == ("EUR", 0.92)
    assert [line["amount"] for line in result["lines"]] == [379.5, 34.96, 37.72, 21.25]
    assert {line["currency"] for line in result["lines"]} == {"EUR"}
    half = [{"item": "x", "amount": 0.5, "currency": "USD", "date": "2026-10-01"}]
    assert (
        call("convert_amounts", make_ctx(), receipts=half, rate=0.01, currency="EUR")["total"]
        == 0.01
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [({"rate": 0}, "rate"), ({"rate": -1.0}, "rate"), ({"currency": "euro"}, "currency")],
)
def test_convert_amounts_checks_rate_and_currency(
    make_ctx: Callable[..., ToolContext], args: dict[str, Any], field: str
) -> None:
    receipts = [{"item": "x", "amount": 1.0, "currency": "USD", "date": "2026-10-01"}]
    full = {"receipts": receipts, "rate": 0.92, "currency": "EUR", **args}
    with pytest.raises(ToolArgumentsError, match=f"'convert_amounts'.*{field}: "):
        get_tool("convert_amounts").invoke(make_ctx(), full)


def test_convert_amounts_refuses_mixed_currencies(make_ctx: Callable[..., ToolContext]) -> None:
    receipts = [
        {"item": "x", "amount": 1.0, "currency": "USD", "date": "2026-10-01"},
        {"item": "y", "amount": 1.0, "currency": "GBP", "date": "2026-10-01"},
    ]
    with pytest.raises(ToolError, match="GBP, USD"):
        call("convert_amounts", make_ctx(), receipts=receipts, rate=0.92, currency="EUR")


def test_attach_receipts_is_deterministic(make_ctx: Callable[..., ToolContext]) -> None:
    receipts = call("collect_receipts", make_ctx(), trip="lisbon-2026-10")["receipts"]
    expected = ["att-1-hotel", "att-2-dinner", "att-3-dinner", "att-4-taxi"]
    assert call("attach_receipts", make_ctx(), receipts=receipts) == {"attachments": expected}


def test_submit_report_id_is_the_same_on_every_attempt(
    make_ctx: Callable[..., ToolContext],
) -> None:
    args = {"total": 473.43, "currency": "EUR", "cost_centre": "CC-4410", "attachments": ["a", "b"]}
    first = get_tool("submit_report").invoke(make_ctx(attempt=1), args)
    again = get_tool("submit_report").invoke(make_ctx(attempt=2, tries_of_name=2), args)
    other = get_tool("submit_report").invoke(make_ctx(step_id=8), args)
    digest = hashlib.sha256(b"run-3/step-7").hexdigest()[:8]
    assert (
        first
        == again
        == {
            "report_id": f"EXP-{digest}",
            "total": 473.43,
            "currency": "EUR",
            "cost_centre": "CC-4410",
            "attachments": 2,
        }
    )
    assert other["report_id"] != first["report_id"]


@pytest.mark.parametrize("cost_centre", ["CC-441", "cc-4410", "CC-44100", "4410"])
def test_submit_report_checks_the_cost_centre(
    make_ctx: Callable[..., ToolContext], cost_centre: str
) -> None:
    args = {"total": 1.0, "currency": "EUR", "cost_centre": cost_centre, "attachments": []}
    with pytest.raises(ToolArgumentsError, match=r"cost_centre: String should match pattern"):
        get_tool("submit_report").invoke(make_ctx(), args)


# -- the playbook ---------------------------------------------------------------------------


def test_playbook_matches_goals_case_insensitively_and_returns_copies() -> None:
    found = find_playbook("File my Lisbon trip EXPENSE REPORT")
    assert found == EXPENSE_PLAYBOOK
    assert found is not None
    found[0]["name"] = "changed"
    assert find_playbook("expense report")[0]["name"] == "receipts"  # type: ignore[index]
    assert find_playbook("write a poem about expenses") is None


def test_playbook_registration_is_checked() -> None:
    with pytest.raises(ValueError, match="already registered"):
        playbook(("Expense Report",), [])
    with pytest.raises(ValueError, match="at least one keyword"):
        playbook((), [])


def test_expense_playbook_is_well_formed() -> None:
    seen: set[str] = set()
    for step in EXPENSE_PLAYBOOK:
        assert set(step) == {"name", "instruction", "kind", "tool", "args", "after"}
        assert step["kind"] == "tool"
        parameters = get_tool(step["tool"]).parameters_schema()
        assert set(step["args"]) == set(parameters.get("required", []))
        # a step waits for exactly the steps whose results it uses, so it runs as soon as it can
        assert set(step["after"]) == references(step["args"]) <= seen
        seen.add(step["name"])
    assert [step["name"] for step in EXPENSE_PLAYBOOK] == [
        "receipts",
        "rate",
        "convert",
        "attach",
        "submit",
    ]


def test_expense_playbook_files_473_43_eur_with_the_fallback(
    make_ctx: Callable[..., ToolContext],
) -> None:
    results: dict[str, dict[str, Any]] = {}
    for position, step in enumerate(EXPENSE_PLAYBOOK, start=1):
        name, args = step["tool"], step["args"]
        if name == "live_rate":
            fallback = get_tool(name).fallback
            assert fallback is not None
            name, args = fallback.tool, fallback.args
        resolved = resolve(args, results=results, facts=FACTS)
        results[step["name"]] = get_tool(name).invoke(make_ctx(step_id=position), resolved)
    assert results["rate"]["rate"] == 0.92
    assert results["submit"]["total"] == 473.43
    assert results["submit"]["currency"] == "EUR"
    assert results["submit"]["cost_centre"] == "CC-4410"
    assert results["submit"]["attachments"] == 4


def test_a_tool_module_that_cannot_be_imported_names_the_setting() -> None:
    with pytest.raises(ConfigurationError, match=r"AGENTQ_TOOL_MODULES: cannot import 'no\.such'"):
        load_tool_modules(["no.such"])
