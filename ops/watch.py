"""`agentq run watch` and `run submit --watch`, and the demo's runs: a run shown live until it
settles.

The run is redrawn when its timeline moves: the watch follows the run's events with the same
cursor as the API's event stream (`models.operations.event_feed`, read from Postgres directly, every
`AGENTQ_STREAM_POLL_INTERVAL_S`: one indexed query on `run_events`), and re-reads the run and
its plan only when a new event arrives, or every `IDLE_REDRAW_S` for the clocks it shows (time
left before a deadline). Every transition writes its event in the transaction that makes it, so
the event of the run's final status is never seen before the status itself.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from rich.console import Console
from rich.live import Live

from models.db import session_scope
from models.engine.runs import get_run
from models.front.queries import last_event_id
from models.operations.event_feed import EventFeed, events_after
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import utcnow
from ops import views

IDLE_REDRAW_S: Final = 5.0
"""How often (seconds) the run is redrawn with no new event: its deadline countdown moves."""
SETTLED: Final = frozenset({*RUN_TERMINAL, "waiting_review"})


def draw(live: Live, run_id: int) -> str:
    """Show the run's panel on `live`; the run's status. Raises `NotFound`."""
    with session_scope() as session:
        run = get_run(session, run_id)
        live.update(views.run_panel(session, run), refresh=True)
        return run.status


def moved(feed: EventFeed, run_id: int) -> bool:
    """Whether the run has events `feed` has not taken yet (and takes them)."""
    with session_scope() as session:
        rows = events_after(session, after=feed.after, run_id=run_id)
    return bool(feed.take(rows, utcnow()))


def follow(live: Live, run_id: int) -> str:
    """Redraw the run on `live` as its events arrive until it settles; its last status."""
    interval_s = get_settings().stream_poll_interval_s
    with session_scope() as session:  # the cursor first: an event after it is not missed
        feed = EventFeed(last_event_id(session, run_ids=[run_id]))
    status, drawn = draw(live, run_id), time.monotonic()
    while status not in SETTLED:
        time.sleep(interval_s)
        if moved(feed, run_id) or time.monotonic() - drawn >= IDLE_REDRAW_S:
            status, drawn = draw(live, run_id), time.monotonic()
    return status


@contextmanager
def run_goes_on(console: Console, run_id: int) -> Iterator[None]:
    """Around a command's watch of run `run_id` (`agentq run watch`, `run submit --watch`): on
    Ctrl-C, say that the run goes on without the watch, then let the `KeyboardInterrupt` end the
    command (exit status 130). A watch started with SIGINT ignored (`agentq run watch N &` from a
    script without job control, as `agentq up` may be) takes it back, so `kill -INT` stops it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt:
        if not console.is_terminal:  # a pipe's last render has no newline of its own
            console.line()
        console.print(
            f"stopped watching; run {run_id} goes on (`agentq run watch {run_id}`, "
            f"`agentq run cancel {run_id}`)"
        )
        raise


def watch_until_settled(console: Console, run_id: int) -> int:
    """Show the run live on `console` until it ends or waits for review; exit code 0 if it
    succeeded or waits for review, 1 if it failed or was cancelled. Raises `NotFound`."""
    with Live(console=console, auto_refresh=False) as live:
        final_status = follow(live, run_id)
    if not console.is_terminal:  # Live ends a terminal render with a newline, but not a pipe's
        console.line()
    if final_status == "waiting_review":
        console.print("waiting for review: see `agentq review list`")
    return 1 if final_status in ("failed", "cancelled") else 0
