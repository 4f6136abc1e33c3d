"""`agentq up` has one broker, its own Redis, for every process, and prints it (issue 11).

Celery reads `CELERY_BROKER_URL` (and `CELERY_RESULT_BACKEND`) from the environment over an
app's configuration, and its command line turns `BROKER_URL` into it: with either set, the
workers and the scheduler joined that broker while the CLI and the API sent to the embedded
Redis, and runs moved only when the reconciler re-sent their steps (60 s later). Here the
environment names a second Redis, a decoy, to every process; nothing may connect to it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ops.redis_server import find_redis_server
from tests.acceptance.test_api_up import start_up
from tests.acceptance.test_cli import agentq
from tests.integration.conftest import engine_dir
from tests.support.net import free_port

pytestmark = pytest.mark.acceptance
QUEUED_STALE_S = 60.0  # AGENTQ_QUEUED_STALE_S's default: the reconciler re-sends a queued step
# (or a run's task, after AGENTQ_PHASE_STALE_S, 120 s) no sooner, so a run done within this went
# through one broker. (A 10 s bound, the reconcile interval, failed on a loaded machine: 12.1 s.)


@pytest.fixture
def home() -> Iterator[Path]:
    yield from engine_dir()


@pytest.fixture
def decoy() -> Iterator[redis.Redis]:
    """A Redis of its own (no password) on a free port: the broker the environment names."""
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        server = find_redis_server(None).path
        argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        server = subprocess.Popen(argv, cwd=scratch, stdout=subprocess.DEVNULL)
        client = redis.Redis(port=port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while not _answers(client):
            assert time.monotonic() < deadline, "the decoy Redis did not start"
            time.sleep(0.05)
        try:
            yield client
        finally:
            client.close()
            server.terminate()
            server.wait(timeout=10)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _connections(client: redis.Redis) -> int:
    return int(client.info("stats")["total_connections_received"])


def test_every_process_uses_the_printed_broker_whatever_the_environment_says(
    home: Path, decoy: redis.Redis
) -> None:
    port = decoy.connection_pool.connection_kwargs["port"]
    other = f"redis://127.0.0.1:{port}/0"
    env = {"BROKER_URL": other, "CELERY_BROKER_URL": other, "CELERY_RESULT_BACKEND": other}
    seen_before = _connections(decoy)  # this fixture's own (its client keeps the one)
    proc, out = start_up(home, free_port(), env=env)
    try:
        printed = re.search(r"broker    (redis://:\*\*@127\.0\.0\.1:(\d+)/0)", out)
        assert printed, out
        stack = json.loads((home / "stack.json").read_text())
        assert stack["broker_url"].endswith(f"@127.0.0.1:{printed.group(2)}/0")
        assert printed.group(2) != str(port)
        for name in ("worker", "scheduler"):  # Celery's banner: what each one connected to
            banner = (home / "logs" / f"{name}.log").read_text()
            assert f"transport:   {printed.group(1)}" in banner, banner
            assert re.search(r"results:\s+disabled", banner), banner

        plan = home / "plan.json"
        plan.write_text(json.dumps({"steps": [{"name": "a", "kind": "tool", "tool": "noop"}]}))
        for submit_env in ({}, env):  # a clean terminal, and one with the same variables
            started = time.monotonic()
            done = agentq(
                home, "run", "submit", "one broker", "--plan", str(plan), "--watch", env=submit_env
            )
            took_s = time.monotonic() - started
            assert done.returncode == 0 and "succeeded" in done.stdout, done.stdout + done.stderr
            assert took_s < QUEUED_STALE_S, f"took {took_s:.1f} s: the reconciler moved it"
        assert _connections(decoy) == seen_before  # no agentq process connected to it
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
