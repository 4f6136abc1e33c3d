"""`agentq up` as its users start it, for the benchmarks of the user's path.

`UpStack` runs the real command (`agentq up --workers N`, a subprocess of this one, with its own
`AGENTQ_HOME` in a temp dir and the API on a free port) with default settings but for the
additions a benchmark names, waits until its API answers, and stops it with Ctrl-C (SIGINT) as
its users do. Its database and broker URLs come from the stack file the command writes
(`ops.stack_file`), so this process and the peers use the same Postgres.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

from ops.bench.harness import BenchError
from ops.stack_file import read_stack_file

START_TIMEOUT_S = 240.0  # the `local` embedder's model loads in every worker process first
STOP_TIMEOUT_S = 60.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class UpStack:
    """`agentq up --workers workers` on a fresh `AGENTQ_HOME`; `env` is added to its environment
    (nothing by default: a user's defaults). Attributes once entered: `home`, `api_url`,
    `database_url`, `broker_url`, `pgdata`, `process` (the `agentq up` process). Raises
    `BenchError` with the end of its output when it does not answer within `START_TIMEOUT_S`."""

    def __init__(self, workers: int, env: dict[str, str] | None = None) -> None:
        self.workers = workers
        self.env = dict(env or {})
        self.home = Path(tempfile.mkdtemp(prefix="agentq-up-bench-"))
        self.log = self.home.parent / f"{self.home.name}.log"
        self.api_url = ""
        self.database_url = ""
        self.broker_url = ""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pgdata(self) -> Path:
        """The embedded Postgres's data dir under `home` (`ops.embedded_postgres`)."""
        return self.home / "pgdata"

    def __enter__(self) -> Self:
        port = free_port()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")},
            "AGENTQ_HOME": str(self.home),
            "AGENTQ_API_PORT": str(port),
            **self.env,
        }
        argv = [sys.executable, "-m", "ops.cli", "up", "--workers", str(self.workers)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            self._wait_until_up(f"http://127.0.0.1:{port}")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
        self.log.unlink(missing_ok=True)

    def _wait_until_up(self, api_url: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise BenchError(f"agentq up exited ({self.process.returncode}):\n{self._tail()}")
            state = read_stack_file(self.home)
            if state is not None and state.get("api_url") and _answers(api_url):
                self.api_url = api_url
                self.database_url = str(state["database_url"])
                self.broker_url = str(state["broker_url"])
                return
            time.sleep(0.5)
        raise BenchError(f"agentq up did not answer in {START_TIMEOUT_S:g} s:\n{self._tail()}")

    def stop(self) -> None:
        """Ctrl-C, as a user stops it; kill if it has not stopped after `STOP_TIMEOUT_S`."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no output)"


def _answers(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/healthz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
