"""The embedded Redis: a broker that asks for a password, has no admin commands and runs no Lua
but the scripts kombu sends.

- A password, 256 bits from `secrets`, generated once per data dir into `<data>/redis_password`
  (0600); the broker URL the stack returns, and writes to the 0600 `stack.json`, carries it
  (`redis://:<password>@127.0.0.1:<port>/0`). `redis.conf` holds only its SHA-256 (an ACL
  `#<hash>` rule).
- The server reads its settings from `<data>/redis/redis.conf` (0600, in the 0700 `redis/`),
  never from its command line, which `ps` shows every local user.
- The commands that reach beyond the data are renamed to nothing (`rename-command X ""`,
  Redis's documented way to disable a command: redis.conf, "SECURITY"), so not even a holder of
  the password can use them: the file system (CONFIG, SAVE, BGSAVE, BGREWRITEAOF, MODULE,
  DEBUG), the process (SHUTDOWN), other servers (SLAVEOF, REPLICAOF, SYNC, PSYNC, FAILOVER,
  MIGRATE), serialized payloads (RESTORE, RESTORE-ASKING), access control (ACL), other clients'
  traffic (MONITOR), debugging internals (PFDEBUG, PFSELFTEST), and Lua sent as source (EVAL;
  on 7.0 and newer also EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO, FUNCTION).
- Lua: the flaws fixed in 6.2.16 to 6.2.20 (CVE-2024-31449, CVE-2024-46981, CVE-2025-49844,
  ops/redis_server.py) need a client that runs a script of its own. kombu cannot do without
  scripts (below), so scripting is narrowed, not removed: the broker's user (`default`, the one
  the password logs in as) may run EVALSHA and SCRIPT EXISTS and no other command of ACL
  category `@scripting` (Redis docs, "ACL"), and the stack itself, as user `agentq-scripts`
  (a password made per start, held only in its memory, and allowed SCRIPT LOAD alone), loads
  `ALLOWED_SCRIPTS` once Redis answers. EVALSHA runs only a loaded script, so no client can run
  Lua of its own: these three take KEYS and ARGV only into `redis.call`, `tonumber` and string
  concatenation. Redis's advisory for CVE-2025-49844 (GHSA-4789-qfc9-5f9q) gives ACLs that
  restrict EVAL and EVALSHA as the workaround. A worker whose kombu or redis-py sends another
  script text gets NOSCRIPT, then NOPERM (`script|load`): run the same versions everywhere.
- `protected-mode yes`, bound to 127.0.0.1 unless `agentq up --listen`; nothing kept on disk
  (Postgres is the truth). The stack stops Redis with SIGTERM.

What Celery 5.7.0, kombu 5.7.0 and redis-py 8.2.0 sent, by MONITOR and INFO commandstats on
Redis 6.2.14 through tests/integration/test_engine.py (5 December 2026): BRPOP, LPUSH, LLEN,
HSET, HGET, HDEL, ZADD, ZREM, ZRANGE, SADD, SREM, SMEMBERS, SET, DEL, EXISTS, WATCH, MULTI,
EXEC, PUBLISH, PSUBSCRIBE, PUNSUBSCRIBE, PING, HELLO, CLIENT SETINFO, EVALSHA, SCRIPT EXISTS,
SCRIPT LOAD, and inside scripts SADD, ZADD, TIME, ZRANGEBYSCORE, GET, DEL. No EVAL. The
scripts: `REFRESH_BINDING` and `SWEEP_BINDINGS` (kombu/transport/redis.py: the binding table
of a queue with `x-expires`, which Celery's pidbox reply queues have, so a worker cannot start
without them) and redis-py's `Lock.LUA_RELEASE_SCRIPT` (kombu's `Mutex` around the restore of
unacknowledged messages: acquired by SET NX, released by this script). With EVALSHA renamed
away a worker exits at start (`unknown command EVALSHA`, binding `reply.celery.pidbox`).
"""

from __future__ import annotations

import hashlib
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import quote

import redis
from kombu.transport.redis import REFRESH_BINDING, SWEEP_BINDINGS
from redis.lock import Lock

from models.private_files import read_or_create_secret, write_private
from ops.redis_server import RedisServer, Version

PASSWORD_FILE_NAME: Final = "redis_password"
CONFIG_FILE_NAME: Final = "redis.conf"
HOST: Final = "127.0.0.1"
RENAMED_COMMANDS: Final = (
    *("CONFIG", "SAVE", "BGSAVE", "BGREWRITEAOF", "MODULE", "DEBUG", "SHUTDOWN"),  # files, process
    *("SLAVEOF", "REPLICAOF", "SYNC", "PSYNC", "FAILOVER", "MIGRATE"),  # other servers
    *("RESTORE", "RESTORE-ASKING", "ACL", "MONITOR", "PFDEBUG", "PFSELFTEST"),
    "EVAL",  # Lua as source
)
RENAMED_SINCE_7: Final = ("EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "FUNCTION")  # 7.0's Lua
SCRIPT_LOADER: Final = "agentq-scripts"
# ACL rules (applied left to right): the broker's user may do all but scripting, except
# EVALSHA and SCRIPT EXISTS (redis-py checks a pipeline's scripts with it); the loader may
# only load scripts.
BROKER_ACL: Final = "~* &* +@all -@scripting +evalsha +script|exists"
LOADER_ACL: Final = "-@all +script|load"
ALLOWED_SCRIPTS: Final = (REFRESH_BINDING, SWEEP_BINDINGS, Lock.LUA_RELEASE_SCRIPT)
PING_TIMEOUT_S: Final = 0.5


@dataclass(frozen=True)
class EmbeddedRedis:
    """One start of the embedded Redis: the server, its port, the broker's password and the
    script loader's (made per start, never written down), and its `redis.conf`."""

    server: RedisServer
    port: int
    password: str = field(repr=False)
    loader_password: str = field(repr=False)
    config: Path = field()

    @property
    def argv(self) -> list[str]:
        """`[redis-server, redis.conf]`: everything else is in the file."""
        return [self.server.path, str(self.config)]

    @property
    def url(self) -> str:
        """The broker URL (`broker_url_for`)."""
        return broker_url_for(self.port, self.password)


def prepare(data_dir: Path, server: RedisServer, *, port: int, bind: str) -> EmbeddedRedis:
    """Write `<data_dir>/redis/redis.conf` (0600) for `server` on `bind`:`port`, with the data
    dir's password (created on first use) and a new loader password. Raises `OSError` if the
    files cannot be written."""
    password = read_or_create_secret(data_dir / PASSWORD_FILE_NAME)
    config = data_dir / "redis" / CONFIG_FILE_NAME
    loader = secrets.token_urlsafe(32)
    text = redis_config(
        port=port,
        directory=config.parent,
        password=password,
        loader_password=loader,
        version=server.version,
        bind=bind,
    )
    write_private(config, text)
    return EmbeddedRedis(server, port, password, loader, config)


def redis_config(
    *,
    port: int,
    directory: Path,
    password: str,
    loader_password: str,
    version: Version,
    bind: str = HOST,
) -> str:
    """The text of `redis.conf` for a server of `version` on `bind` (addresses, space-separated;
    `HOST` unless `agentq up --listen`: ops/listen.py):`port`, working dir `directory`."""
    lines = [
        f"port {port}",
        f"bind {bind}",
        "protected-mode yes",
        'save ""',
        "appendonly no",
        f"dir {_quoted(str(directory))}",
        *(f'rename-command {command} ""' for command in renamed_commands(version)),
        _user("default", password, BROKER_ACL),
        _user(SCRIPT_LOADER, loader_password, LOADER_ACL),
    ]
    return "\n".join(lines) + "\n"


def renamed_commands(version: Version) -> tuple[str, ...]:
    """The commands renamed away on a server of `version`: one it does not know would stop it
    starting, so 7.0's scripting commands only from 7.0."""
    return RENAMED_COMMANDS + (RENAMED_SINCE_7 if version >= (7, 0, 0) else ())


def _user(name: str, password: str, rules: str) -> str:
    """An ACL user line: only the SHA-256 of `password` goes in the file."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    return f"user {name} reset on #{digest} {rules}"


def _quoted(text: str) -> str:
    """`text` as a double-quoted redis.conf argument (backslash escapes, as sdssplitargs reads)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def load_scripts(server: EmbeddedRedis) -> list[str]:
    """Load `ALLOWED_SCRIPTS` into the running `server` as `SCRIPT_LOADER`; their SHA-1s, which
    are what kombu's EVALSHA names. Raises `redis.RedisError` if it refuses."""
    client = redis.Redis(
        host=HOST,
        port=server.port,
        username=SCRIPT_LOADER,
        password=server.loader_password,
        socket_connect_timeout=PING_TIMEOUT_S,
    )
    try:
        return [str(client.script_load(script)) for script in ALLOWED_SCRIPTS]
    finally:
        client.close()


def broker_url_for(port: int, password: str) -> str:
    """`redis://:<password, URL-quoted>@127.0.0.1:<port>/0`."""
    return f"redis://:{quote(password, safe='')}@{HOST}:{port}/0"


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
