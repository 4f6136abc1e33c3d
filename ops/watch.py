"""`agentq watch` and `submit --watch`, and the demo's runs: a run shown live until it settles."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live

from models.db import session_scope
from models.runs import get_run
from models.states import RUN_TERMINAL
from ops import views

WATCH_INTERVAL_S = 0.5


def watch_until_settled(console: Console, run_id: int) -> int:
    """Show the run live on `console` until it ends or waits for review; exit code 0 if it
    succeeded or waits for review, 1 if it failed or was cancelled. Raises `NotFound`."""
    with Live(console=console, auto_refresh=False) as live:
        while True:
            with session_scope() as session:
                run = get_run(session, run_id)
                live.update(views.run_panel(session, run), refresh=True)
                settled = run.status in RUN_TERMINAL or run.status == "waiting_review"
                final_status = run.status
            if settled:
                break
            time.sleep(WATCH_INTERVAL_S)
    if not console.is_terminal:  # Live ends a terminal render with a newline, but not a pipe's
        console.line()
    if final_status == "waiting_review":
        console.print("waiting for review: see `agentq review list`")
    return 1 if final_status in ("failed", "cancelled") else 0
