"""What `agentq up` and `agentq demo` check before they start anything, each failure one line.

Issue 15, part 10: a taken API port was reported after 25 s of starting Postgres, Redis and the
workers; an unwritable data directory and a missing `local` extra ended in 40-line tracebacks.
This module imports no database or broker library, so the checks answer in a fraction of a
second.
"""

from __future__ import annotations

import socket
from pathlib import Path

from models.embedding_choice import fallback_notice, provider_in_use, require_local
from models.errors import StackError
from models.settings import Settings
from ops.data_dir import check_writable


def check_port_free(host: str, port: int) -> None:
    """Raise `StackError` naming the settings when `host`:`port` cannot be listened on. `agentq
    up` asks before it starts anything, and `ops.local.start_api` again (the port may have been
    taken since)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise StackError(
                f"the API cannot listen on {host}:{port} ({exc.strerror}): set AGENTQ_API_PORT "
                "(or AGENTQ_API_HOST) to a free one"
            ) from exc


def check_embedder(settings: Settings) -> str | None:
    """The fallback's one line (`models.embedding_choice.fallback_notice`) to print before
    starting, if it applies. Raises `ConfigurationError` (one line, naming the extra) for the
    `local` provider chosen without its extra, before anything starts."""
    if provider_in_use(settings) == "local":
        require_local()
    return fallback_notice(settings)


def check_data_dir(data_dir: Path) -> None:
    """`ops.data_dir.check_writable` on `data_dir` (`~` expanded, made absolute)."""
    check_writable(data_dir.expanduser().resolve())
