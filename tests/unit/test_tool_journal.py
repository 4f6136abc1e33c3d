"""The keys of the tool journal (`models.engine.tool_journal`): what stays the same when a model
step's loop runs again, and what tells two identical calls of one loop apart (no database here; the
replay on the engine is in tests/integration/test_model_faults.py)."""

from __future__ import annotations

from models.engine.tool_journal import CallKeys, arguments_digest


def test_a_call_asked_again_in_a_new_loop_has_the_same_key() -> None:
    first, again = CallKeys(), CallKeys()
    arguments = {"path": "/tmp/m.txt", "marker": "receipt"}
    reordered = {"marker": "receipt", "path": "/tmp/m.txt"}  # the model may write keys in any order
    assert first.next("append_marker", arguments) == again.next("append_marker", reordered)


def test_the_same_call_twice_in_one_loop_is_two_calls() -> None:
    keys = CallKeys()
    one, two = keys.next("noop", {}), keys.next("noop", {})
    assert (one, two) == (f"noop#1:{arguments_digest({})}", f"noop#2:{arguments_digest({})}")


def test_other_arguments_or_another_tool_are_another_call() -> None:
    keys = CallKeys()
    assert keys.next("echo", {"value": 1}) != keys.next("echo", {"value": 2})
    assert keys.next("echo", {"value": 1}).startswith("echo#2:")
    assert keys.next("noop", {"value": 1}).startswith("noop#1:")
    assert len(keys.next("x" * 100, {"big": "y" * 10_000})) <= 200  # the column's length
