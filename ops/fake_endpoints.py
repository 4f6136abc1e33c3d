"""The fake server's answers besides chat completions (`ops.fake_provider`): `/v1/embeddings`,
and llama.cpp's `/tokenize`."""

from __future__ import annotations

import hashlib
import math
from typing import Any

EMBEDDING_DIM = 384


def embeddings_body(request: dict[str, Any], default_dim: int = EMBEDDING_DIM) -> dict[str, Any]:
    """Deterministic unit vectors (from a hash of each text) of `dimensions` or `default_dim`
    floats."""
    texts = request.get("input", [])
    texts = [texts] if isinstance(texts, str) else texts
    dim = int(request.get("dimensions") or default_dim)
    data = [
        {"object": "embedding", "index": i, "embedding": _vector(t, dim)}
        for i, t in enumerate(texts)
    ]
    tokens = sum(math.ceil(len(str(t)) / 4) for t in texts)
    return {
        "object": "list",
        "data": data,
        "model": request.get("model", "fake-embedding"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _vector(text: str, dim: int) -> list[float]:
    digest = hashlib.sha256(str(text).encode()).digest()
    raw = [digest[i % len(digest)] - 127.5 + i % 7 for i in range(dim)]
    norm = math.sqrt(sum(x * x for x in raw))
    return [x / norm for x in raw]


TOKENIZE_PATHS = ("/tokenize", "/extras/tokenize/count")  # llama.cpp's, llama-cpp-python's


def tokenize_body(
    path: str, body: dict[str, Any], chars_per_token: float | None
) -> tuple[int, dict[str, Any]]:
    """The answer (status, body) to a tokenize request at `path` (one of `TOKENIZE_PATHS`):
    llama.cpp's token ids of `content`, or llama-cpp-python's count of `input`, as many as a
    tokenizer of `chars_per_token` characters a token makes; 404 when that is None (a server
    with no such endpoint)."""
    if chars_per_token is None:
        return 404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
    if path == "/tokenize":
        return 200, {
            "tokens": list(range(math.ceil(len(str(body.get("content", ""))) / chars_per_token)))
        }
    return 200, {"count": math.ceil(len(str(body.get("input", ""))) / chars_per_token)}
