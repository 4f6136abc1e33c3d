"""Size caps (issue 9, finding 2): references never build arguments past the cap, tool results
and reviewer answers over it are refused naming it, and what is shown is a preview."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from models.engine.previews import PREVIEW_MAX_BYTES, shown
from models.errors import InvalidInput, StepDataTooLarge, ToolArgumentsError
from models.plans.references import resolve
from models.plans.step_data import check_step_data, fit_outputs, json_bytes
from models.plans.tools import DEFAULT_TOOL_MODULES, ToolContext, get_tool, load_tool_modules, tool
from models.review.answers import answer_from_text
from models.settings import get_settings
from models.tables import Step
from worker.execution.steps import failure_outcome
from worker.execution.tool_use import _within_cap

CAP = 256 * 1024  # the default AGENTQ_STEP_DATA_MAX_BYTES
VALUE = "v" * 60_000
RESULTS = {"s0": {"value": VALUE}}
CAP_NAMED = "AGENTQ_STEP_DATA_MAX_BYTES"

load_tool_modules(DEFAULT_TOOL_MODULES)


@tool("t_swells", description="Return `n` bytes of text.")
def _swells(ctx: ToolContext, n: int) -> dict[str, Any]:
    return {"text": "s" * n}


@pytest.fixture(autouse=True)
def default_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The default settings (the integration tests export their own)."""
    for key in list(os.environ):
        if key.startswith("AGENTQ_"):
            monkeypatch.delenv(key)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def peak_bytes(action: Any) -> int:
    """The peak memory Python allocated while `action()` ran (it may raise)."""
    tracemalloc.start()
    try:
        action()
    except StepDataTooLarge:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


# -- resolution ------------------------------------------------------------------------------


def test_issue_9s_amplification_stops_at_the_cap_naming_it() -> None:
    args = {"copies": ["${steps.s0.value}"] * 300}  # 18 MB as JSON, from a 6 KB plan
    with pytest.raises(StepDataTooLarge) as refused:
        resolve(args, results=RESULTS, facts={}, max_bytes=CAP)
    assert str(refused.value) == (
        f"the resolved arguments pass the cap of 262,144 bytes as JSON ({CAP_NAMED}) at "
        "${steps.s0.value}; refer to less data"
    )


def test_resolution_stops_before_building_more_than_about_the_cap() -> None:
    results = {"s0": {"rows": [{"n": i, "text": "x" * 50} for i in range(1000)]}}  # 70 KB
    args = {"copies": ["${steps.s0.rows}"] * 300}  # 21 MB as JSON, all of it copied data
    peak = peak_bytes(lambda: resolve(args, results=results, facts={}, max_bytes=CAP))
    assert peak < 4 * CAP  # a few referenced copies at most, never the 21 MB


def test_spliced_text_is_capped_too() -> None:
    args = {"text": "start " + " and ${steps.s0.value}" * 300}
    with pytest.raises(StepDataTooLarge, match=CAP_NAMED):
        resolve(args, results=RESULTS, facts={}, max_bytes=CAP)


def test_the_final_size_is_exact_even_when_escaping_grows_the_text() -> None:
    quotes = {"s0": {"q": '"' * 90_000}}  # 90 KB spliced, 180 KB once its quotes are escaped
    args = {"a": "${steps.s0.q}!", "b": "${steps.s0.q}!"}
    with pytest.raises(StepDataTooLarge, match=r"are 360,0\d\d bytes, over the cap"):
        resolve(args, results=quotes, facts={}, max_bytes=CAP)


def test_under_the_cap_or_without_one_it_resolves_as_before() -> None:
    args = {"one": "${steps.s0.value}", "two": "${steps.s0.value}"}
    assert resolve(args, results=RESULTS, facts={}, max_bytes=CAP) == {"one": VALUE, "two": VALUE}
    many = {"copies": ["${steps.s0.value}"] * 5}
    assert len(resolve(many, results=RESULTS, facts={})["copies"]) == 5
    with pytest.raises(ToolArgumentsError, match="no succeeded step 'nope'"):
        resolve({"x": "${steps.nope}"}, results=RESULTS, facts={}, max_bytes=CAP)


# -- results and answers ---------------------------------------------------------------------


def ctx() -> ToolContext:
    return ToolContext(run_id=1, step_id=2, step_name="s", attempt=1, tries_of_name=1, facts={})


def test_a_tool_result_over_the_cap_is_refused_and_the_step_fails_for_good() -> None:
    assert get_tool("t_swells").invoke(ctx(), {"n": CAP - 100}) == {"text": "s" * (CAP - 100)}
    with pytest.raises(StepDataTooLarge) as refused:
        get_tool("t_swells").invoke(ctx(), {"n": CAP})
    assert str(refused.value) == (
        f"the result of tool 't_swells': {CAP + 11:,} bytes as JSON, over the cap of 262,144 "
        f"bytes ({CAP_NAMED})"
    )
    step = Step(run_id=1, plan_version=1, position=0, name="s", kind="tool", attempt=1)
    assert failure_outcome(refused.value, step, max_deferrals=3).kind == "failed"


def test_tool_arguments_over_the_cap_are_refused_before_the_tool_runs() -> None:
    value = "w" * CAP
    with pytest.raises(StepDataTooLarge, match=r"^the arguments of tool 'echo': 262,156 bytes"):
        get_tool("echo").invoke(ctx(), {"value": value})


def test_check_step_data_names_what_and_passes_what_fits() -> None:
    check_step_data({"a": "x" * 100}, what="the result", max_bytes=200)
    with pytest.raises(StepDataTooLarge, match=r"^the result of step 'm': 1,008 bytes"):
        check_step_data({"a": "x" * 1000}, what="the result of step 'm'", max_bytes=1000)


def test_a_reviewer_answer_over_the_cap_is_bad_input() -> None:
    assert answer_from_text("0.95", returns=("rate",)) == {"rate": 0.95}
    with pytest.raises(InvalidInput, match=rf"^answer: 262,155 bytes as JSON, .* \({CAP_NAMED}\)$"):
        answer_from_text(json.dumps({"text": "y" * CAP}), returns=())


def test_a_final_result_keeps_its_outputs_within_the_cap_largest_first() -> None:
    outputs = {"small": {"v": 1}, "big": {"v": "b" * 5000}, "bigger": {"v": "c" * 9000}}
    fitted = fit_outputs(outputs, max_bytes=6000)
    assert fitted["small"] == {"v": 1} and fitted["big"] == outputs["big"]
    assert fitted["bigger"] == {"shortened": True, "bytes": json_bytes(outputs["bigger"])}
    assert json_bytes(fitted) <= 6000
    assert fit_outputs(outputs, max_bytes=CAP) == outputs


# -- previews --------------------------------------------------------------------------------


def test_a_value_over_the_preview_size_is_shown_as_a_preview() -> None:
    small = shown({"a": "x"})
    assert (small.shortened, small.out()) == (False, {"a": "x"})
    big = shown({"a": "é" * PREVIEW_MAX_BYTES})
    assert big.shortened and big.out() == {
        "shortened": True,
        "bytes": json_bytes({"a": "é" * PREVIEW_MAX_BYTES}),
        "preview": ('{"a":"' + "é" * PREVIEW_MAX_BYTES)[:PREVIEW_MAX_BYTES],
    }
    assert shown(None).out() is None


def test_a_tool_call_event_keeps_arguments_and_result_within_the_cap_together() -> None:
    half = "h" * (CAP // 2 + 10)  # each within the cap, together over it
    ran = {"tool": "echo", "arguments": {"value": half}, "result": {"value": half}}
    recorded = _within_cap(ran)
    assert recorded["arguments"] == ran["arguments"]
    assert recorded["result"] == {"shortened": True, "bytes": json_bytes(ran["result"])}
    assert json_bytes(recorded) <= CAP
    small = {"tool": "echo", "arguments": {"value": 1}, "result": {"value": 1}}
    assert _within_cap(small) == small
