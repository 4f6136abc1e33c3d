"""The test MCP server (`tests/mcp_servers/reports.py`) as the tests configure and run it: over
stdio (agentq starts it) or streamable HTTP (`HttpServer`, a subprocess on a free port)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from models.mcp import catalogue, sessions
from models.settings import get_settings
from tests.support.net import free_port

REPORTS = Path(__file__).resolve().parents[1] / "mcp_servers" / "reports.py"


def server_env(effects: Path, crash_file: Path) -> dict[str, str]:
    """The test server's environment: where it counts its effects, and the file whose presence
    makes `file_report` crash the server after its effect."""
    return {"MCP_TEST_EFFECTS": str(effects), "MCP_TEST_CRASH_AFTER_EFFECT": str(crash_file)}


def stdio_server(effects: Path, crash_file: Path, **more: Any) -> dict[str, Any]:
    """`AGENTQ_MCP_SERVERS`' entry for the test server run over stdio."""
    env = server_env(effects, crash_file)
    return {"command": sys.executable, "args": [str(REPORTS)], "env": env, **more}


def effects_of(path: Path) -> list[str]:
    """The effects the test server recorded (one line each: key, title, amount)."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


class HttpServer:
    """The test server over streamable HTTP on 127.0.0.1 at a free port (`url`); `start` it
    again after a crash or `kill` (same port), `stop` at the end."""

    def __init__(self, effects: Path, crash_file: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.env = {**os.environ, **server_env(effects, crash_file)}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> None:
        argv = [sys.executable, str(REPORTS), "--http", str(self.port)]
        self.proc = subprocess.Popen(
            argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                assert self.proc.poll() is None, f"the MCP server exited: {self.proc.returncode}"
                assert time.monotonic() < deadline, "the MCP server did not start listening"
                time.sleep(0.05)

    def wait_exited(self, timeout_s: float = 10.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    stop = kill


def configure(monkeypatch: pytest.MonkeyPatch, servers: dict[str, Any]) -> None:
    """Make `servers` this process's `AGENTQ_MCP_SERVERS`, with no listing or session left from
    before (they are forgotten again by `forget_all` at the test's end)."""
    monkeypatch.setenv("AGENTQ_MCP_SERVERS", json.dumps(servers))
    forget_all()


def forget_all() -> None:
    """Close every MCP session of this process and forget every listing; read settings anew."""
    sessions.close_all()
    catalogue.forget()
    get_settings.cache_clear()
