"""The offline provider's memory purposes: plans informed by past runs, summaries, facts."""

from __future__ import annotations

import json

from models.plans.tools import DEFAULT_TOOL_MODULES, catalog, load_tool_modules
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.providers import ModelRequest

load_tool_modules(DEFAULT_TOOL_MODULES)
GOAL = "File my Lisbon trip expense report"


def ask(purpose: str, payload: dict[str, object]) -> str:
    request = ModelRequest(purpose=purpose, messages=[], payload=payload)  # type: ignore[arg-type]
    return OfflineProvider().complete(request).text


def test_a_past_failure_fixed_by_its_fallback_changes_the_first_plan() -> None:
    fresh = json.loads(ask("plan", {"goal": GOAL, "facts": {}, "tools": catalog()}))
    assert [s["tool"] for s in fresh["steps"]][1] == "live_rate"
    episode = {
        "goal": GOAL,
        "failures": [
            {"step": "rate", "tool": "live_rate", "error": "timed out", "fixed_by": "cached_rate"}
        ],
    }
    payload = {"goal": GOAL, "facts": {}, "tools": catalog(), "episodes": [episode]}
    learned = json.loads(ask("plan", payload))["steps"]
    assert learned[1]["tool"] == "cached_rate" and learned[1]["name"] == "rate"
    assert "failed in a past run" in learned[1]["instruction"]
    assert [s["tool"] for s in learned][2:] == [s["tool"] for s in fresh["steps"]][2:]


def test_a_failure_not_fixed_by_the_fallback_teaches_nothing() -> None:
    episode = {"failures": [{"tool": "live_rate", "error": "x", "fixed_by": "reviewer"}]}
    payload = {"goal": GOAL, "facts": {}, "tools": catalog(), "episodes": [episode]}
    assert json.loads(ask("plan", payload))["steps"][1]["tool"] == "live_rate"


def test_summary_is_extractive_and_bounded() -> None:
    turns = [f"turn {i} said something\nsecond line" for i in range(100)]
    text = ask("summarize", {"previous": "earlier: A", "turns": turns, "max_chars": 300})
    assert text.startswith("[offline] ") and len(text) <= 300 + len("[offline] ")
    assert "turn 99 said something" in text and "second line" not in text
    short = ask("summarize", {"previous": "earlier: A", "turns": ["b"], "max_chars": 300})
    assert short == "[offline] earlier: A\nb"


def test_facts_from_pinned_facts_and_fixed_failures() -> None:
    payload = {
        "goal": GOAL,
        # every pinned fact, run state: a reviewer's answer among them is not the user's word
        "facts": {"currency": "EUR", "cost_centre": "CC-4410", "reviewer_answer": '{"a": 1}'},
        "stated_facts": {"currency": "EUR", "cost_centre": "CC-4410"},  # the user's own
        "failures": [
            {"step": "rate", "tool": "live_rate", "error": "timed out", "fixed_by": "cached_rate"},
            {"step": "x", "tool": "flaky", "error": "boom", "fixed_by": None},
        ],
    }
    facts = json.loads(ask("extract_facts", payload))["facts"]
    assert {(f["subject"], f["attribute"]) for f in facts} == {
        ("user", "currency"),
        ("user", "cost_centre"),
        ("tool:live_rate", "reliability"),
    }
    assert "The user's cost centre is CC-4410" in [f["text"] for f in facts]
