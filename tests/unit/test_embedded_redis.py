"""ops/embedded_redis.py: the embedded Redis's config and broker URL (no server needed)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import redis
from kombu.utils.url import url_to_parts

from ops.embedded_redis import RENAMED_COMMANDS, broker_url_for, redis_config
from ops.stack_file import STACK_FILE_NAME, read_stack_file, write_stack_file

# The commands issue 9 (finding 6) names, and the ones like them.
MUST_BE_GONE = {"CONFIG", "MODULE", "DEBUG", "SAVE", "BGSAVE", "BGREWRITEAOF", "SHUTDOWN"}
MUST_BE_GONE |= {"SLAVEOF", "REPLICAOF", "MIGRATE", "ACL", "SYNC", "PSYNC", "RESTORE", "MONITOR"}
# What kombu's Redis transport and redis-py send (kombu/transport/redis.py; redis-py's connect).
CELERY_NEEDS = {"BRPOP", "LPUSH", "ZADD", "EVALSHA", "SCRIPT", "PUBLISH", "HELLO", "AUTH", "CLIENT"}


def test_config_asks_for_the_password_and_renames_admin_commands_away(tmp_path: Path) -> None:
    lines = redis_config(port=6400, directory=tmp_path, password="pw-1").splitlines()
    assert "requirepass pw-1" in lines
    assert {"port 6400", "bind 127.0.0.1", "protected-mode yes", 'save ""'} <= set(lines)
    renamed = {line.split()[1] for line in lines if line.startswith("rename-command ")}
    assert renamed == set(RENAMED_COMMANDS)
    assert all(line.endswith(' ""') for line in lines if line.startswith("rename-command "))
    assert renamed >= MUST_BE_GONE
    assert not CELERY_NEEDS & renamed


def test_config_quotes_the_dir(tmp_path: Path) -> None:
    odd = tmp_path / 'a "b" \\c'
    assert f'dir "{tmp_path}/a \\"b\\" \\\\c"' in redis_config(port=1, directory=odd, password="p")


def test_broker_url_carries_the_password_quoted() -> None:
    url = broker_url_for(6400, "a/b+c@d")
    assert url == "redis://:a%2Fb%2Bc%40d@127.0.0.1:6400/0"
    assert redis.Redis.from_url(url).connection_pool.connection_kwargs["password"] == "a/b+c@d"
    assert url_to_parts(url).password == "a/b+c@d"  # what kombu, so Celery, connects with


def test_stack_file_is_written_0600_from_the_start(tmp_path: Path) -> None:
    old = os.umask(0)  # a file created without an explicit mode would be 0666
    try:
        write_stack_file(tmp_path, "postgresql+psycopg://x", broker_url_for(6400, "pw"))
    finally:
        os.umask(old)
    path = tmp_path / STACK_FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    state = read_stack_file(tmp_path)
    assert state is not None and state["broker_url"] == "redis://:pw@127.0.0.1:6400/0"
    assert json.loads(path.read_text())["pid"] == os.getpid()
    assert os.listdir(tmp_path) == [STACK_FILE_NAME]
