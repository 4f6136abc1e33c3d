"""Network helpers for tests that start servers of their own."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; another process could still
    take it before the caller binds, which on a test machine does not happen in practice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Wait until the API process `proc` answers `url`/healthz with 200; fails when it exits
    first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/healthz", trust_env=False).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, (
            f"the API at {url} did not start"
        )
        time.sleep(0.2)
