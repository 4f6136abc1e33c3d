"""A misbehaving OpenAI-compatible server: `/v1/chat/completions`, `/v1/embeddings`, and a
model's tokenizer when asked for (`FakeOpenAI.chars_per_token`).

A threaded stdlib HTTP server on 127.0.0.1 at a free port that plays a script of replies, one per
request, and records every request it receives with its arrival time. Scripts are keyed by a
marker (`when`): a request whose message text contains it takes the next reply of that script,
so concurrent runs of an engine test each meet only their own misbehaviour. A request no script
matches gets a normal answer for its purpose (a plan: `DEFAULT_PLAN`, or what the server's
`plans` function makes of the request's text; `{"facts": []}`; a goal check that passes; for
any other `response_format` json_schema of an object, such as a model step's declared output,
an object of its properties with a placeholder of each one's type, `PLACEHOLDERS`; or text, the
request's own messages with `echo_text` set),
with usage
`PROMPT_TOKENS` + `COMPLETION_TOKENS`.

The replies: `ok`, `rate_limited` (429 with `retry-after`), `quota_exhausted` (429
`insufficient_quota`), `context_too_long` (400: the prompt is longer than the context window, as
OpenAI, llama.cpp's server, vLLM or llama-cpp-python's server say it), `server_error` (500),
`never_answers` (sleeps past any client timeout),
`whitespace_until_length` (`finish_reason: "length"`), `truncated_json`, `wrong_shape_plan`,
`tool_calls` (calls with arguments as given, JSON or not), `slow` (a normal answer, late).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from ops.fake_endpoints import EMBEDDING_DIM, TOKENIZE_PATHS, embeddings_body, tokenize_body

PROMPT_TOKENS = 100
COMPLETION_TOKENS = 10
PLACEHOLDERS: dict[str, Any] = {"string": "fake", "number": 1.5, "integer": 1, "boolean": True}
DEFAULT_PLAN: dict[str, Any] = {
    "steps": [
        {"name": "answer", "kind": "model", "instruction": "Answer.", "tool": None, "args": {}}
    ]
}


@dataclass(frozen=True)
class Reply:
    """One scripted reply. `content` None means the default answer for the request's purpose;
    `body` set means that JSON body as it is (errors)."""

    kind: str
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    content: str | None = None
    finish_reason: str = "stop"
    delay_s: float = 0.0  # then hang up, unanswered
    answer_after_s: float = 0.0  # then answer
    prompt_tokens: int = PROMPT_TOKENS
    completion_tokens: int | None = COMPLETION_TOKENS  # None: the request's max tokens
    tool_calls: tuple[tuple[str, str], ...] = ()  # (tool name, raw arguments text)


def ok(
    content: str | None = None,
    *,
    finish_reason: str = "stop",
    prompt_tokens: int = PROMPT_TOKENS,
    completion_tokens: int = COMPLETION_TOKENS,
) -> Reply:
    """A normal answer with usage (`content` None: the default answer for the purpose)."""
    return Reply(
        "ok",
        content=content,
        finish_reason=finish_reason,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )


def _error(kind: str, status: int, error_type: str, message: str) -> Reply:
    body = {"error": {"message": message, "type": error_type, "code": error_type, "param": None}}
    return Reply(kind, status=status, body=body)


def rate_limited(retry_after: str = "90", *, header: str = "retry-after") -> Reply:
    """429 `rate_limit_exceeded` asking to wait `retry_after` (`header`: or `retry-after-ms`)."""
    reply = _error("rate_limited", 429, "rate_limit_exceeded", "Rate limit reached.")
    return replace(reply, headers={header: retry_after})


def quota_exhausted() -> Reply:
    """429 `insufficient_quota`: the account has no credit left."""
    return _error("quota_exhausted", 429, "insufficient_quota", "You exceeded your current quota.")


# Each server's refusal of a prompt longer than its window: (message, error type, code), with
# `{window}`, `{prompt}` and `{total}` (the prompt and a 1,024-token answer) filled in; the
# sources are cited in `worker.model_calls.providers`. `unsized` is a server that names no numbers.
CONTEXT_TOO_LONG: dict[str, tuple[str, str, str | int]] = {
    "openai": (
        "This model's maximum context length is {window} tokens. However, your messages "
        "resulted in {prompt} tokens. Please reduce the length of the messages.",
        "invalid_request_error",
        "context_length_exceeded",
    ),
    "llama.cpp": (
        "request ({prompt} tokens) exceeds the available context size ({window} tokens), try "
        "increasing it",
        "exceed_context_size_error",
        400,
    ),
    "vllm": (
        "This model's maximum context length is {window} tokens. However, your request has "
        "{prompt} input tokens. Please reduce the length of the input messages.",
        "BadRequestError",
        400,
    ),
    "vllm-output": (
        "This model's maximum context length is {window} tokens. However, you requested 1024 "
        "output tokens and your prompt contains at least {prompt} input tokens, for a total of "
        "at least {total} tokens. Please reduce the length of the input prompt or the number of "
        "requested output tokens.",
        "BadRequestError",
        400,
    ),
    "llama-cpp-python": (
        "This model's maximum context length is {window} tokens. However, you requested {total} "
        "tokens ({prompt} in the messages, 1024 in the completion). Please reduce the length of "
        "the messages or completion.",
        "invalid_request_error",
        "context_length_exceeded",
    ),
    "unsized": ("The prompt is too long.", "invalid_request_error", "context_length_exceeded"),
}


def context_too_long(
    server: str = "llama.cpp", *, context_tokens: int = 8192, prompt_tokens: int = 9000
) -> Reply:
    """400: the prompt (`prompt_tokens` long) does not fit the window of `context_tokens`, as
    `server` (a key of `CONTEXT_TOO_LONG`) says it; llama.cpp's adds `n_prompt_tokens` and
    `n_ctx`, and vLLM's come without the `error` wrapper, as its `ErrorResponse` used to."""
    template, error_type, code = CONTEXT_TOO_LONG[server]
    total = prompt_tokens + 1024
    message = template.format(window=context_tokens, prompt=prompt_tokens, total=total)
    error: dict[str, Any] = {"message": message, "type": error_type, "param": None, "code": code}
    if server == "llama.cpp":
        error |= {"n_prompt_tokens": prompt_tokens, "n_ctx": context_tokens}
    body = {"object": "error", **error} if server.startswith("vllm") else {"error": error}
    return Reply("context_too_long", status=400, body=body)


def server_error(status: int = 500) -> Reply:
    """A 5xx with an error body."""
    return _error("server_error", status, "server_error", "The server had an error.")


def never_answers(seconds: float = 30.0) -> Reply:
    """Sleeps `seconds` (longer than any client timeout of a test), then hangs up."""
    return Reply("never_answers", delay_s=seconds)


def slow(seconds: float, content: str | None = None) -> Reply:
    """A normal answer (`content` None: the default for the purpose) after `seconds`, within
    the client's timeout: a model call that takes long and succeeds."""
    return Reply("slow", content=content, answer_after_s=seconds)


def whitespace_until_length() -> Reply:
    """Whitespace up to the request's token limit, cut off: `finish_reason: "length"`."""
    return Reply(
        "whitespace_until_length",
        content=" \n" * 400,
        finish_reason="length",
        completion_tokens=None,
    )


def truncated_json() -> Reply:
    """JSON cut off mid-way, with `finish_reason: "stop"` (a server that lies about the end)."""
    return Reply("truncated_json", content='{"steps": [{"name": "a", "kind": "tool", "tool": "no')


def wrong_shape_plan() -> Reply:
    """Valid JSON that is not a plan: steps as an object, with unknown fields."""
    return Reply("wrong_shape_plan", content='{"steps": {"do": "everything"}, "confidence": 0.9}')


def tool_calls(*calls: tuple[str, str]) -> Reply:
    """An answer that calls tools: each `(name, arguments)` as the model wrote it, the arguments
    raw text (JSON or not), with `finish_reason: "tool_calls"` and no content."""
    return Reply("tool_calls", tool_calls=calls, finish_reason="tool_calls")


@dataclass(frozen=True)
class Received:
    """One request as the server saw it: `at` is wall-clock (`time.time()`) on arrival."""

    path: str
    body: dict[str, Any]
    at: float
    reply: str
    text: str

    @property
    def purpose(self) -> str | None:
        """The JSON schema's name (plan, replan, extract_facts), or None for a text answer."""
        schema = (self.body.get("response_format") or {}).get("json_schema") or {}
        name = schema.get("name")
        return str(name) if name else None


class FakeOpenAI:
    """The server; `url` is its base URL (`http://127.0.0.1:<port>/v1`). Use it as a context
    manager, or `start()` and `stop()`. `plans`, if given, answers a plan or replan request no
    script matches: it gets the request's message text (the goal is in it) and returns the plan
    (`{"steps": [...]}`)."""

    def __init__(self, plans: Callable[[str], dict[str, Any]] | None = None) -> None:
        self.plans = plans
        self._lock = threading.Lock()
        self._scripts: list[tuple[str | None, deque[Reply]]] = []
        self._stopping = threading.Event()
        self.requests: list[Received] = []
        self.embedding_dim = EMBEDDING_DIM  # of an embedding request that names no `dimensions`
        self.latency_s = 0.0  # how long each chat answer takes, as a model's would
        self.echo_text = False  # answer a text request with its messages, as an obedient model
        # a tokenizer of this many characters a token at `tokenize_path` (llama.cpp's
        # `/tokenize`, or llama-cpp-python's `/extras/tokenize/count`), or none (404) when
        # `chars_per_token` is None; tokenize requests take no scripted reply
        self.chars_per_token: float | None = None
        self.tokenize_path = "/tokenize"
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> Self:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; sleeping replies wake up and hang up."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def script(self, *replies: Reply, when: str | None = None) -> None:
        """Queue `replies` for the requests whose messages contain `when` (None: any request)."""
        with self._lock:
            self._scripts.append((when, deque(replies)))

    def reset(self) -> None:
        """Forget every script and recorded request."""
        with self._lock:
            self._scripts.clear()
            self.requests.clear()

    def received(
        self, when: str | None = None, path: str = "/v1/chat/completions"
    ) -> list[Received]:
        """The recorded requests to `path` whose messages contain `when`, oldest first."""
        with self._lock:
            found = [r for r in self.requests if r.path == path]
        return [r for r in found if when is None or when in r.text]

    def _take(self, path: str, body: dict[str, Any]) -> Reply:
        text = message_text(body)
        with self._lock:
            reply = ok()
            for when, queue in self._scripts:
                if queue and (when is None or when in text):
                    reply = queue.popleft()
                    break
            self.requests.append(Received(path, body, time.time(), reply.kind, text))
        return reply

    def _tokenize(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        text = str(body.get("content", body.get("input", "")))
        with self._lock:
            self.requests.append(Received(path, body, time.time(), "tokenize", text))
        offered = self.chars_per_token if path == self.tokenize_path else None
        return tokenize_body(path, body, offered)

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(seconds)


def completion_body(
    reply: Reply,
    request: dict[str, Any],
    plans: Callable[[str], dict[str, Any]] | None = None,
    echo: bool = False,
) -> dict[str, Any]:
    """The `chat.completion` object for an `ok`-like reply to `request` (`plans`, `echo`: see
    `FakeOpenAI`'s `plans` and `echo_text`)."""
    content = reply.content
    if content is None:
        content = _default_content(request, plans, echo)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reply.tool_calls:
        calls = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(reply.tool_calls)
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
    completion_tokens = reply.completion_tokens
    if completion_tokens is None:
        completion_tokens = int(request.get("max_completion_tokens") or 1024)
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": f"{request.get('model', 'fake')}-fake",
        "choices": [{"index": 0, "finish_reason": reply.finish_reason, "message": message}],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": reply.prompt_tokens + completion_tokens,
        },
    }


def _default_content(
    request: dict[str, Any], plans: Callable[[str], dict[str, Any]] | None, echo: bool
) -> str:
    schema = (request.get("response_format") or {}).get("json_schema") or {}
    if schema.get("name") in ("plan", "replan"):
        return json.dumps(plans(message_text(request)) if plans else DEFAULT_PLAN)
    if schema.get("name") == "extract_facts":
        return json.dumps({"facts": []})
    if schema.get("name") == "check_goal":
        return json.dumps({"met": True, "reason": "fake check", "missing": []})
    properties = (schema.get("schema") or {}).get("properties")
    if isinstance(properties, dict):
        return json.dumps({k: PLACEHOLDERS.get(v.get("type")) for k, v in properties.items()})
    return message_text(request) if echo and not schema else "fake answer"


def message_text(request: dict[str, Any]) -> str:
    """The text of a chat request's messages, one per line."""
    return "\n".join(str(m.get("content", "")) for m in request.get("messages", []))


def _handler(server: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(
                self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"
            )
            if self.path in TOKENIZE_PATHS:
                self._send(*server._tokenize(self.path, body), {})
                return
            reply = server._take(self.path, body)
            if reply.delay_s:
                server._sleep(reply.delay_s)
                return  # hang up without an answer: the client has long given up
            if not self.path.endswith("/embeddings") and server.latency_s:
                server._sleep(server.latency_s)
            if reply.answer_after_s:
                server._sleep(reply.answer_after_s)
            if self.path.endswith("/embeddings"):
                self._send(200, embeddings_body(body, server.embedding_dim), {})
            elif reply.body is not None:
                self._send(reply.status, reply.body, reply.headers)
            else:
                echo = server.echo_text
                self._send(200, completion_body(reply, body, server.plans, echo), reply.headers)

        def _send(self, status: int, data: dict[str, Any], headers: dict[str, str]) -> None:
            payload = json.dumps(data).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and left

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
