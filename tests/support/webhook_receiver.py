"""A real local HTTP receiver of webhooks, for tests: an `http.server` in a thread that answers
by a script and keeps every request it got."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Self

HANG = "hang"  # a scripted answer: hold the request until `release()` (or HANG_MAX_S)
HANG_MAX_S = 60.0


@dataclass(frozen=True)
class Received:
    """One request: its headers (lower-case names), raw body and when it came."""

    headers: dict[str, str]
    body: bytes
    at: float


class Receiver:
    """`with Receiver([500, 500]) as r:` answers 500, 500, then 200 to everything after, at
    `r.url`; `HANG` in the script holds that request open; `refusing` (a status), while set,
    answers every request with it instead. `r.requests` lists what came."""

    def __init__(self, script: list[int | str] | None = None, refusing: int | None = None) -> None:
        self.script = list(script or [])
        self.refusing = refusing
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}/hook"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer = receiver._answer(Received(headers, body, time.monotonic()))
                if answer == HANG:
                    receiver._released.wait(HANG_MAX_S)
                    return  # the sender gave up, or died, long ago
                self.send_response(int(answer))
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok" if int(answer) < 300 else b"no")

            def log_message(self, *_: object) -> None:
                pass

        return Handler

    def _answer(self, request: Received) -> int | str:
        with self._lock:
            self.requests.append(request)
            if self.refusing is not None:
                return self.refusing
            return self.script.pop(0) if self.script else 200

    def wait_for(self, count: int, timeout_s: float) -> list[Received]:
        """The requests once at least `count` came; AssertionError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while len(self.requests) < count:
            assert time.monotonic() < deadline, f"{len(self.requests)} of {count} requests came"
            time.sleep(0.05)
        return list(self.requests)

    def release(self) -> None:
        """Let held (`HANG`) requests end."""
        self._released.set()

    def __enter__(self) -> Self:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
