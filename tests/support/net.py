"""Network helpers for tests that start servers of their own."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; another process could still
    take it before the caller binds, which on a test machine does not happen in practice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
