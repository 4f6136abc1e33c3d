"""`agentq up` as a user meets it: the stack, API and web UI in a subprocess with its own
AGENTQ_HOME, driven over HTTP and from headless Chromium (Debian's `/usr/bin/chromium`).

Shared by tests/browser and tests/security: each directory's conftest imports the fixtures, so
each gets its own `agentq up` (security tests change state the console tests do not expect).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import Session, select

from models.access import api_tokens
from models.db import normalize_url, session_scope
from models.memory.memory_admin import memory_ended
from models.tables import Escalation, Run, RunEvent
from tests.integration.conftest import TESTS_IMPORTABLE, engine_dir
from tests.support.net import free_port

AGENTQ = shutil.which("agentq") or "agentq"
UP_TIMEOUT_S = 180
RUN_TIMEOUT_S = 120
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass(frozen=True)
class Console:
    """A running `agentq up`: its home, the web UI's base URL, and its database URL."""

    home: Path
    ui_url: str
    database_url: str
    env: dict[str, str]

    def agentq(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """Run the CLI against this stack; fails the test on a non-zero exit."""
        done = subprocess.run(
            [AGENTQ, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def db(self) -> Any:
        """A session on this stack's database (commits on success)."""
        return session_scope(normalize_url(self.database_url))


def _env(home: Path) -> dict[str, str]:
    # The session's engine fixture puts its shortened ladder into os.environ: drop it all.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENTQ_", "DATABASE", "BROKER"))
    }
    return {
        **env,
        "AGENTQ_HOME": str(home),
        "AGENTQ_API_PORT": str(free_port()),
        "AGENTQ_EMBEDDING_PROVIDER": "hash",  # the UI is under test, not the embedding model
        "COLUMNS": "200",
        "NO_PROXY": "127.0.0.1,localhost",
        **TESTS_IMPORTABLE,  # for a test that enables `tests.support.tools`
    }


def _wait_for_address(log: Path, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + UP_TIMEOUT_S
    while True:
        text = log.read_text(errors="replace")
        found = re.search(r"web UI (http://\S+/ui)", text)
        if found and "agentq is up" in text:
            return found.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"agentq up did not print the web UI's address:\n{text}")
        time.sleep(0.2)


@contextmanager
def running_console(extra_env: dict[str, str] | None = None) -> Iterator[Console]:
    """`agentq up` on a fresh home, with `extra_env` over its default settings; stopped at the
    end of the block as Ctrl-C stops it."""
    for home in engine_dir():
        env = {**_env(home), **(extra_env or {})}
        log = home / "up.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([AGENTQ, "up"], env=env, stdout=out, stderr=subprocess.STDOUT)
        ui_url = _wait_for_address(log, proc)
        stack = json.loads((home / "stack.json").read_text())
        try:
            yield Console(home, ui_url, stack["database_url"], env)
        finally:
            proc.send_signal(signal.SIGTERM)  # like Ctrl-C; SIGINT may be ignored in a CI job
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def console() -> Iterator[Console]:
    """`agentq up` with its default settings on a fresh home, one per test directory."""
    with running_console() as running:
        yield running


@pytest.fixture(scope="session")
def make_token(console: Console) -> Callable[..., tuple[int, str]]:
    """`make_token(role, name, user=None)`: (token id, raw token)."""

    def make(role: str, name: str, user: str | None = None) -> tuple[int, str]:
        with console.db() as session:
            row, raw = api_tokens.create_token(session, name=name, role=role, user_id=user)
            return row.id or 0, raw

    return make


def submitted_id(output: str) -> int:
    """The run id in `agentq run submit`'s output."""
    found = re.search(r"run (\d+) submitted", output)
    assert found, output
    return int(found.group(1))


def wait_for_status(console: Console, run_id: int, statuses: tuple[str, ...]) -> Run:
    """Poll the run's row until it is in one of `statuses`."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        with console.db() as session:
            run = _run(session, run_id)
        if run.status in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run.status}"
        time.sleep(0.3)


def escalate_run(
    console: Console, user: str = "forms", goal: str = "forms test"
) -> tuple[int, int]:
    """Submit a run whose second step always fails, with no replans: (run id, escalation id)."""
    plan = Path(console.home) / f"plan-{user}.json"
    steps = [
        {"name": "a", "kind": "tool", "tool": "noop"},
        {"name": "x", "kind": "tool", "tool": "always_fails"},
    ]
    plan.write_text(json.dumps({"steps": steps}))
    out = console.agentq(
        "run", "submit", goal, "--user", user, "--plan", str(plan), "--replans", "0"
    )
    run_id = submitted_id(out.stdout)
    wait_for_status(console, run_id, ("waiting_review",))
    with console.db() as session:
        esc = session.exec(select(Escalation).where(Escalation.run_id == run_id)).one()
        return run_id, esc.id or 0


def wait_for_event(console: Console, run_id: int, kind: str, timeout_s: float = 60) -> None:
    """Poll until the run has an event of `kind`."""
    deadline = time.monotonic() + timeout_s
    while True:
        with console.db() as session:
            stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
            if session.exec(stmt).first() is not None:
                return
        assert time.monotonic() < deadline, f"run {run_id}: no {kind} event in {timeout_s} s"
        time.sleep(0.3)


def wait_for_memory(console: Console, run_id: int, timeout_s: float = 60) -> RunEvent:
    """Poll until the run's memory task has ended (`models.memory.memory_admin.memory_ended`); its
    event. A run is `succeeded` before its episode and facts are written (on the `memory` queue)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with console.db() as session:
            event = memory_ended(session, run_id)
        if event is not None:
            return event
        assert time.monotonic() < deadline, f"run {run_id}: memory not written in {timeout_s} s"
        time.sleep(0.3)


def _run(session: Session, run_id: int) -> Run:
    run = session.get(Run, run_id)
    assert run is not None
    return run


def csrf_of(page: str) -> str:
    """The CSRF token in a rendered form."""
    found = CSRF_INPUT.search(page)
    assert found, page
    return found.group(1)


@pytest.fixture(scope="session")
def sign_in(console: Console) -> Iterator[Callable[[str], httpx.Client]]:
    """`sign_in(raw_token)`: an HTTP client holding a console session for that token."""
    opened: list[httpx.Client] = []

    def make(raw: str) -> httpx.Client:
        http = httpx.Client(base_url=console.ui_url.removesuffix("/ui"), trust_env=False)
        opened.append(http)
        form = http.get("/ui/login")
        signed = http.post("/ui/login", data={"token": raw, "csrf_token": csrf_of(form.text)})
        assert signed.status_code == 303, signed.text
        return http

    yield make
    for http in opened:
        http.close()
