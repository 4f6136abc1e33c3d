"""What `agentq up` and `agentq demo` check before they start anything, each failure one line.

Issue 15, part 10: a taken API port was reported after 25 s of starting Postgres, Redis and the
workers; an unwritable data directory and a missing `local` extra ended in 40-line tracebacks.
This module imports no database or broker library, so the checks answer in a fraction of a
second.
"""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path
from typing import Final

from models.errors import StackError
from models.memory.embedding_choice import fallback_notice, provider_in_use, require_local
from models.settings import Settings
from ops.data_dir import check_writable
from ops.stack_file import read_stack_file

API_PORT_REMEDY: Final = "set AGENTQ_API_PORT (or AGENTQ_API_HOST) to a free one"
HEALTH_TIMEOUT_S: Final = 2.0  # the running API's /healthz answers at once, or not at all


def check_not_running(home: Path) -> None:
    """Raise `StackError` when an `agentq up` runs on `home` already
    (`ops.stack_file.read_stack_file`), in one line naming its pid, its API (host and port) and
    the data directory, and how to stop it or start another elsewhere; when its API does not
    answer `/healthz` (still starting, or stuck), the line says so and names its log.

    A second `agentq up` used to start nothing and exit 0 (issue 28: before that, the API's
    port, taken by the running stack, was reported with the advice to choose another): a script
    that starts a stack took it for its own, which the first one's Ctrl-C then stopped."""
    state = read_stack_file(home)
    if state is None:
        return
    pid, api_url = state.get("pid"), state.get("api_url")
    running = f"agentq up is already running on {home} (pid {pid}"
    stop = f"stop it first (Ctrl-C in its terminal, or `kill {pid}`), or set AGENTQ_HOME to another"
    if isinstance(api_url, str) and answers(api_url + "/healthz"):
        raise StackError(f"{running}, API at {api_url}): {stop} data directory")
    api = f"its API at {api_url} does not answer" if api_url else "its API is not up yet"
    log = home / "logs" / "api.log"
    raise StackError(f"{running}), but {api} (see {log}): {stop} data directory")


def answers(url: str) -> bool:
    """Whether a GET of `url` gets a 2xx answer within `HEALTH_TIMEOUT_S` (straight, never
    through a proxy of the environment: the URL is this machine's stack)."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with direct.open(url, timeout=HEALTH_TIMEOUT_S) as response:
            return 200 <= int(response.status) < 300
    except (OSError, ValueError):
        return False


def check_port_free(
    host: str, port: int, *, what: str = "the API", remedy: str = API_PORT_REMEDY
) -> None:
    """Raise `StackError` naming `remedy` when `host`:`port` cannot be listened on for `what`.
    `agentq up` asks before it starts anything, and `ops.local.start_api` again (the port may
    have been taken since)."""
    probe_host = "0.0.0.0" if host == "*" else host  # Postgres's "every address"
    with socket.socket(socket.AF_INET6 if ":" in probe_host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((probe_host, port))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise StackError(f"{what} cannot listen on {host}:{port} ({reason}): {remedy}") from exc


def check_listen_ports(
    host: str, postgres_port: int, redis_port: int, *, postgres_running: bool
) -> None:
    """`agentq up --listen`: raise `StackError` when Postgres's or Redis's TCP port is taken on
    `host` (Redis binds 127.0.0.1 too: `ops.listen.Listen.redis_bind`). Without this check a
    taken Redis port let the stack's workers join whatever Redis answered there (a new user's
    tryout), and a taken Postgres port ended in pg_ctl's dump. `postgres_running`: this data
    directory's Postgres runs already (left by a crash) and is adopted, so its port is its own."""
    if not postgres_running:
        check_port_free(
            host, postgres_port, what="Postgres", remedy="choose a free one with --postgres-port"
        )
    for address in dict.fromkeys((host, "127.0.0.1")):
        check_port_free(
            address, redis_port, what="Redis", remedy="choose a free one with --redis-port"
        )


def check_embedder(settings: Settings) -> str | None:
    """The fallback's one line (`models.memory.embedding_choice.fallback_notice`) to print before
    starting, if it applies. Raises `ConfigurationError` (one line, naming the extra) for the
    `local` provider chosen without its extra, before anything starts."""
    if provider_in_use(settings) == "local":
        require_local()
    return fallback_notice(settings)


def check_data_dir(data_dir: Path) -> None:
    """`ops.data_dir.check_writable` on `data_dir` (`~` expanded, made absolute)."""
    check_writable(data_dir.expanduser().resolve())
