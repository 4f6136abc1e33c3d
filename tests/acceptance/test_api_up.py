"""`agentq up` serves the HTTP API: it prints the address, and tokens made with `agentq token`
open it. The CLI as a user runs it, in a subprocess, on the embedded default."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ops.stack_file import record_api_url, write_stack_file
from tests.acceptance.test_cli import AGENTQ, _env, agentq
from tests.integration.conftest import engine_dir
from tests.support.net import free_port

pytestmark = pytest.mark.acceptance
UP_TIMEOUT_S = 120


@pytest.fixture
def home() -> Iterator[Path]:
    yield from engine_dir()


def start_up(
    home: Path, port: int, env: dict[str, str] | None = None, *, args: list[str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """`agentq up` on `port` with `args`, `env` added to its environment; returns the process
    and what it printed until it was up (or until it exited)."""
    proc = subprocess.Popen(
        [AGENTQ, "up", *(args or [])],
        env={**_env(home), "AGENTQ_API_PORT": str(port), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    deadline, seen = time.monotonic() + UP_TIMEOUT_S, ""
    assert proc.stdout is not None
    while "Ctrl-C stops everything" not in seen:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"agentq up did not start:\n{seen}")
    return proc, seen


def test_up_serves_the_api_and_tokens_open_it(home: Path) -> None:
    port = free_port()
    proc, out = start_up(home, port)
    try:
        assert f"api       http://127.0.0.1:{port}/api/v1" in out, out
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/healthz", trust_env=False).json() == {
            "status": "ok",
            "checks": {},
        }
        ready = httpx.get(f"{base}/readyz", trust_env=False)
        assert ready.status_code == 200, ready.text
        again = subprocess.run(
            [AGENTQ, "up"],
            env={**_env(home), "AGENTQ_API_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        said = (  # refused, naming the one that runs: a script must not take it for its own
            f"error: agentq up is already running on {home} (pid {proc.pid}, API at {base}): "
            f"stop it first (Ctrl-C in its terminal, or `kill {proc.pid}`), or set AGENTQ_HOME "
            "to another data directory\n"
        )
        assert again.returncode == 2 and again.stderr == said, again.stderr
        assert again.stdout == "", again.stdout
        assert httpx.get(f"{base}/api/v1/runs", trust_env=False).status_code == 401

        created = agentq(home, "token", "create", "--name", "ci", "--role", "admin")
        assert created.returncode == 0, created.stdout + created.stderr
        assert "will not be shown again" in created.stdout
        assert "created: name 'ci', role admin" in created.stdout
        token = re.search(r"^(aq_\S+)$", created.stdout, re.MULTILINE)
        assert token, created.stdout
        auth = {"Authorization": f"Bearer {token.group(1)}"}
        me = httpx.get(f"{base}/api/v1/me", headers=auth, trust_env=False)
        assert me.status_code == 200 and me.json()["role"] == "admin"

        listed = agentq(home, "token", "list")
        assert "ci" in listed.stdout and "admin" in listed.stdout
        assert token.group(1) not in listed.stdout
        bobsub = agentq(
            home, "token", "create", "--name", "bobsub", "--role", "submitter", "--user", "bob"
        )
        assert "name 'bobsub', role submitter, acting for user 'bob'" in bobsub.stdout
        twice = agentq(home, "token", "create", "--name", "ci", "--role", "reviewer")
        assert twice.returncode == 2 and "name: token 1 is named 'ci' already" in twice.stderr
        no_user = agentq(home, "token", "create", "--name", "s", "--role", "submitter")
        assert no_user.returncode == 2 and "user" in no_user.stderr, no_user.stderr
        bad_role = agentq(home, "token", "create", "--name", "s", "--role", "root")
        assert bad_role.returncode == 2 and "submitter, reviewer, admin" in bad_role.stderr

        revoked = agentq(home, "token", "revoke", "1")
        assert revoked.returncode == 0, revoked.stdout + revoked.stderr
        assert httpx.get(f"{base}/api/v1/me", headers=auth, trust_env=False).status_code == 401
        again = agentq(home, "token", "revoke", "1")
        assert again.returncode == 2 and "revoked" in again.stderr
        assert token.group(1) not in (home / "logs" / "api.log").read_text()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_up_refuses_a_port_in_use_and_names_the_setting(home: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        proc, out = start_up(home, busy.getsockname()[1])
        code = proc.wait(timeout=60)
    assert code == 2, out
    assert "AGENTQ_API_PORT" in out and "agentq is up" not in out
    assert not (home / "stack.json").exists()  # everything that started was stopped


@pytest.mark.parametrize("api", ["dead", "not yet"])
def test_up_on_a_stack_whose_api_does_not_answer_is_refused_and_starts_nothing(
    tmp_path: Path, api: str
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    write_stack_file(home, "postgresql+psycopg://x@/x", "redis://127.0.0.1:1/0")  # pid: ours
    url = f"http://127.0.0.1:{free_port()}"
    if api == "dead":
        record_api_url(home, url)
    done = subprocess.run(
        [AGENTQ, "up"], env=_env(home), capture_output=True, text=True, timeout=60
    )
    expected = f"its API at {url} does not answer" if api == "dead" else "its API is not up yet"
    assert done.returncode == 2 and expected in done.stderr, done.stdout + done.stderr
    assert done.stderr.startswith(
        f"error: agentq up is already running on {home} (pid {os.getpid()})"
    )
    assert len(done.stderr.splitlines()) == 1 and done.stdout == "", done.stdout + done.stderr
    assert sorted(p.name for p in home.iterdir()) == ["stack.json"]  # nothing started
