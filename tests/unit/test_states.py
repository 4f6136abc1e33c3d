"""The state machines as data: terminal states are final, every status is reachable."""

from __future__ import annotations

from api.ui.templating import STATUS_TONE
from models.states import (
    RUN_MOVES,
    RUN_STATUSES,
    RUN_TERMINAL,
    STEP_DONE,
    STEP_MOVES,
    STEP_STATUSES,
    is_allowed,
)
from ops.views import STATUS_STYLE


def test_terminal_run_statuses_have_no_way_out() -> None:
    assert not [(a, b) for a, b in RUN_MOVES if a in RUN_TERMINAL]


def test_done_steps_have_no_way_out() -> None:
    assert not [(a, b) for a, b in STEP_MOVES if a in STEP_DONE]


def test_every_status_is_reachable_from_the_start() -> None:
    for moves, statuses, start in (
        (RUN_MOVES, RUN_STATUSES, "queued"),
        (STEP_MOVES, STEP_STATUSES, "pending"),
    ):
        seen, frontier = {start}, [start]
        while frontier:
            here = frontier.pop()
            for a, b in moves:
                if a == here and b not in seen:
                    seen.add(b)
                    frontier.append(b)
        assert seen == set(statuses)


def test_moves_only_name_known_statuses() -> None:
    assert {s for move in RUN_MOVES for s in move} <= set(RUN_STATUSES)
    assert {s for move in STEP_MOVES for s in move} <= set(STEP_STATUSES)


def test_is_allowed() -> None:
    assert is_allowed("steps", "queued", "running")
    assert not is_allowed("steps", "succeeded", "running")
    assert not is_allowed("runs", "succeeded", "running")


def test_every_status_has_a_look_in_the_cli_and_the_console() -> None:
    statuses = {*RUN_STATUSES, *STEP_STATUSES}
    assert statuses - STATUS_STYLE.keys() == set()
    assert statuses - STATUS_TONE.keys() == set()
