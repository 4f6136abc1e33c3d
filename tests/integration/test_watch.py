"""`agentq run watch` follows the run's event feed (`ops.watch`): it redraws when an event arrives,
not on a clock, and stops at the run's final status; over the real database."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console
from rich.live import Live

from models.db import session_scope
from models.engine import transitions
from models.engine.events import record_event
from ops import watch

pytestmark = pytest.mark.integration
QUIET_S = 1.5  # no event: the old watch redrew three times in this, the feed's watch not once
REDRAWN_WITHIN_S = 1.0


class CountingLive(Live):
    """A real `Live` that counts its updates (each one a redraw of the run)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.updates = 0

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.updates += 1
        super().update(*args, **kwargs)


def _wait_until(check: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until `check()` held; fails after `timeout_s`."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, "not within the time allowed"
        time.sleep(0.02)
    return time.monotonic() - started


def test_the_watch_redraws_on_events_and_stops_at_the_end(make_run: Callable[..., int]) -> None:
    run_id = make_run([{"name": "only", "kind": "tool", "tool": "noop"}], start=False)
    console = Console(file=io.StringIO(), width=120)
    live = CountingLive(console=console, auto_refresh=False)
    ended: list[str] = []
    with live:
        follower = threading.Thread(target=lambda: ended.append(watch.follow(live, run_id)))
        follower.start()
        _wait_until(lambda: live.updates == 1, 5)
        time.sleep(QUIET_S)
        assert live.updates == 1, "redrawn with nothing new"
        with session_scope() as session:
            record_event(session, run_id, "note.operator", text="look")
        took = _wait_until(lambda: live.updates == 2, REDRAWN_WITHIN_S)
        with session_scope() as session:
            transitions.cancel_run(session, run_id)
        follower.join(timeout=REDRAWN_WITHIN_S + 1)
    assert ended == ["cancelled"] and live.updates == 3
    print(f"redrawn {took:.2f} s after the event's commit")
    assert "cancelled" in console.file.getvalue()  # type: ignore[attr-defined]
