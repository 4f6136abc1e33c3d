"""One asyncio event loop per process, in a daemon thread, for the `mcp` SDK (which is asyncio)
from synchronous code: a Celery prefork pool process, the CLI, the API's request threads.

Every session with an MCP server lives on this loop (`models.mcp.sessions`): the SDK's client
must be entered and left by one task of one loop, and a session outlives the call that opened
it. A caller submits a coroutine (`asyncio.run_coroutine_threadsafe`) and waits for it with a
timeout; anything raised in the waiting thread meanwhile (the step's time limit, raised by its
`SIGALRM` handler in the main thread: `worker.execution.time_limits`) cancels the coroutine and
goes on up. The loop is the process's: a forked child (Celery's pool) starts its own on first
use, as the parent's thread does not exist there (`os.register_at_fork`, and the pid is checked).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class _Loop:
    pid: int
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread


_current: _Loop | None = None
_lock = threading.Lock()


def event_loop() -> asyncio.AbstractEventLoop:
    """This process's loop, started in a daemon thread (`agentq-mcp-loop`) on first use."""
    global _current
    with _lock:
        found = _current
        if found is None or found.pid != os.getpid() or not found.thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="agentq-mcp-loop", daemon=True)
            thread.start()
            found = _current = _Loop(os.getpid(), loop, thread)
        return found.loop


def run(coro: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
    """Run `coro` on this process's loop and wait for it, at most `timeout_s` seconds (None:
    no limit). Returns what it returns; raises what it raises, `TimeoutError` when the wait ran
    out (`coro` is cancelled), and whatever interrupts the wait (the coroutine is cancelled).
    Never call it from the loop's own thread (it would wait for itself)."""
    future = asyncio.run_coroutine_threadsafe(coro, event_loop())
    try:
        return future.result(timeout_s)
    except concurrent.futures.TimeoutError:
        if future.done():  # the coroutine's own TimeoutError
            raise
        future.cancel()
        raise TimeoutError(f"no answer within {timeout_s:g} s") from None
    except BaseException:
        future.cancel()
        raise


def stop() -> None:
    """Stop this process's loop and forget it (its thread ends); the next `run` starts one."""
    global _current
    with _lock:
        found, _current = _current, None
    if found is not None and found.pid == os.getpid() and found.thread.is_alive():
        found.loop.call_soon_threadsafe(found.loop.stop)
        found.thread.join(timeout=5)


def _forget_after_fork() -> None:
    """In a forked child: the parent's loop thread does not exist here; start afresh."""
    global _current, _lock
    _current = None
    _lock = threading.Lock()  # the parent's may have been held by another thread at the fork


os.register_at_fork(after_in_child=_forget_after_fork)
