"""ops/embedded_redis.py: the embedded Redis's config and broker URL (no server needed)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import redis
from kombu.utils.url import url_to_parts

from ops.embedded_redis import (
    BROKER_ACL,
    RENAMED_COMMANDS,
    RENAMED_SINCE_7,
    SCRIPT_LOADER,
    broker_url_for,
    redis_config,
)
from ops.stack_file import STACK_FILE_NAME, read_stack_file, write_stack_file

# The commands issue 9 (finding 6) names, and the ones like them.
MUST_BE_GONE = {"CONFIG", "MODULE", "DEBUG", "SAVE", "BGSAVE", "BGREWRITEAOF", "SHUTDOWN"}
MUST_BE_GONE |= {"SLAVEOF", "REPLICAOF", "MIGRATE", "ACL", "SYNC", "PSYNC", "RESTORE", "MONITOR"}
# What kombu's Redis transport and redis-py send (MONITOR during tests/integration/test_engine.py).
CELERY_NEEDS = {"BRPOP", "LPUSH", "ZADD", "EVALSHA", "SCRIPT", "PUBLISH", "HELLO", "AUTH", "CLIENT"}
# Lua as source, on any server (EVAL) and on 7.0 and newer: CVE-2025-49844 and the like.
LUA_SOURCE_62 = {"EVAL"}
LUA_SOURCE_7 = {"EVAL", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "FUNCTION"}


def _config(version: tuple[int, int, int], directory: Path) -> list[str]:
    text = redis_config(
        port=6400, directory=directory, password="pw-1", loader_password="ld-2", version=version
    )
    return text.splitlines()


def _renamed(lines: list[str]) -> set[str]:
    assert all(line.endswith(' ""') for line in lines if line.startswith("rename-command "))
    return {line.split()[1] for line in lines if line.startswith("rename-command ")}


def test_config_asks_for_the_password_and_renames_admin_commands_away(tmp_path: Path) -> None:
    lines = _config((6, 2, 14), tmp_path)
    assert {"port 6400", "bind 127.0.0.1", "protected-mode yes", 'save ""'} <= set(lines)
    renamed = _renamed(lines)
    assert renamed == set(RENAMED_COMMANDS)
    assert renamed >= MUST_BE_GONE | LUA_SOURCE_62
    assert not CELERY_NEEDS & renamed
    assert not set(RENAMED_SINCE_7) & renamed  # a 6.2 server would refuse to start


def test_a_7x_server_also_loses_its_own_lua_commands(tmp_path: Path) -> None:
    renamed = _renamed(_config((7, 0, 15), tmp_path))
    assert renamed >= MUST_BE_GONE | LUA_SOURCE_7
    assert not CELERY_NEEDS & renamed


def test_the_password_logs_in_as_a_user_that_may_run_only_loaded_scripts(tmp_path: Path) -> None:
    lines = _config((6, 2, 14), tmp_path)
    users = {line.split()[1]: line for line in lines if line.startswith("user ")}
    assert set(users) == {"default", SCRIPT_LOADER}
    broker = users["default"].split()
    assert broker[2:5] == ["reset", "on", "#" + hashlib.sha256(b"pw-1").hexdigest()]
    assert broker[5:] == BROKER_ACL.split()
    assert broker[-3:] == ["-@scripting", "+evalsha", "+script|exists"]  # no SCRIPT LOAD
    loader = users[SCRIPT_LOADER].split()
    assert loader[4:] == ["#" + hashlib.sha256(b"ld-2").hexdigest(), "-@all", "+script|load"]
    text = "\n".join(lines)
    assert "pw-1" not in text and "ld-2" not in text  # only their hashes
    assert not any(line.startswith("requirepass") for line in lines)


def test_config_quotes_the_dir(tmp_path: Path) -> None:
    odd = tmp_path / 'a "b" \\c'
    text = redis_config(port=1, directory=odd, password="p", loader_password="l", version=(6, 2, 0))
    assert f'dir "{tmp_path}/a \\"b\\" \\\\c"' in text


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
