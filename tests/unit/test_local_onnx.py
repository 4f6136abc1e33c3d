"""The local embedder on ONNX Runtime (`models.memory.local_onnx`): the same vectors as torch,
an export made once per cache and checked before it is kept, and torch when it cannot be used.

Needs the `local` extra (torch, sentence-transformers, onnxruntime, onnx); without it these
tests fail, they do not skip. Each test exports into its own cache directory (about 2 s)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from models.memory import embedders, local_onnx
from models.memory.embedders import LocalEmbedder
from models.settings import get_settings

CACHE_DIR_ENV = "AGENTQ_ONNX_CACHE_DIR"

TEXTS = [
    "Goal: file the Lisbon travel report\nOutcome: succeeded",
    "The user prefers EUR for expenses",
    "Zürich café, naïve résumé, 日本語のテキスト",
    "",
    " ".join(["Receipts for the Berlin offsite were attached on the 3rd of May."] * 30),
]


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache directory of the test's own, and a process with no model loaded yet."""
    yield from cache_at(tmp_path / "onnx", monkeypatch)


def cache_at(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(CACHE_DIR_ENV, str(path))
    monkeypatch.setattr(embedders, "_local_models", {})
    get_settings.cache_clear()
    yield path
    get_settings.cache_clear()


def torch_vectors(texts: list[str]) -> np.ndarray:
    model = embedders._load_torch(None)
    return np.asarray(model.encode(texts, normalize_embeddings=True, show_progress_bar=False))


def test_onnx_gives_torchs_vectors_in_order_whatever_the_batch(cache: Path) -> None:
    expected = torch_vectors(TEXTS)
    for batch_size in (1, 2, 64):
        got = np.asarray(LocalEmbedder(batch_size=batch_size).embed(TEXTS))
        assert isinstance(embedders.load_local_model(), local_onnx.OnnxModel)
        assert got.shape == (len(TEXTS), 384)
        assert np.abs(got - expected).max() < 1e-5, batch_size
    # the long text is cut at 256 word pieces, as sentence-transformers cuts it
    assert (
        np.abs(got[4] - torch_vectors([TEXTS[4] + " and more words after the cut"])[0]).max() < 1e-5
    )
    assert [p.suffix for p in cache.iterdir() if p.suffix == ".onnx"] == [".onnx"]


def test_a_second_process_loads_the_export_without_exporting(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = np.asarray(LocalEmbedder().embed(TEXTS[:2]))
    (exported,) = cache.glob("*.onnx")
    stamp = exported.stat().st_mtime_ns
    monkeypatch.setattr(embedders, "_local_models", {})
    monkeypatch.setattr(local_onnx, "_export", lambda *_: pytest.fail("exported again"))
    again = np.asarray(LocalEmbedder().embed(TEXTS[:2]))
    assert np.array_equal(first, again)
    assert exported.stat().st_mtime_ns == stamp


def test_an_export_that_differs_from_torch_is_not_kept(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_onnx, "MAX_EXPORT_DIFF", -1.0)  # no export can pass
    loads: list[str | None] = []
    load_torch = embedders._load_torch

    def counted(device: str | None) -> Any:
        loads.append(device)
        return load_torch(device)

    monkeypatch.setattr(embedders, "_load_torch", counted)
    vectors = np.asarray(LocalEmbedder().embed(TEXTS[:2]))
    assert not isinstance(embedders.load_local_model(), local_onnx.OnnxModel)
    assert loads == [None]  # the model the export was checked with is the one kept
    assert list(cache.glob("*.onnx*")) == []  # neither the export nor its temporary file
    assert np.abs(vectors - torch_vectors(TEXTS[:2])).max() < 1e-6


def test_a_cache_that_cannot_be_written_leaves_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    for _ in cache_at(blocker / "onnx", monkeypatch):
        vectors = LocalEmbedder().embed(TEXTS[:1])
        assert not isinstance(embedders.load_local_model(), local_onnx.OnnxModel)
    assert len(vectors[0]) == 384


def test_a_damaged_export_leaves_torch(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    LocalEmbedder().embed(TEXTS[:1])
    (exported,) = cache.glob("*.onnx")
    exported.write_bytes(b"not a model")
    monkeypatch.setattr(embedders, "_local_models", {})
    vectors = np.asarray(LocalEmbedder().embed(TEXTS[:2]))
    assert not isinstance(embedders.load_local_model(), local_onnx.OnnxModel)
    assert np.abs(vectors - torch_vectors(TEXTS[:2])).max() < 1e-6


def test_the_runtime_takes_the_processs_thread_count(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, "OMP_NUM_THREADS", "1")
    LocalEmbedder().embed(TEXTS[:1])
    model = embedders.load_local_model()
    assert isinstance(model, local_onnx.OnnxModel)
    assert model._session.get_session_options().intra_op_num_threads == 1


def test_a_worker_preloads_no_torch_once_the_machine_has_the_export(cache: Path) -> None:
    """A worker's main process imports what its pool will run (`embedders.preload`): with the
    export on the machine, onnxruntime, and not torch (4 s of CPU to import)."""
    LocalEmbedder().embed(TEXTS[:1])  # exports
    script = (
        "import sys\n"
        "from models.memory import embedders\n"
        "assert embedders.preload(embedders.LocalEmbedder())\n"
        "print(sorted(m for m in ('torch', 'onnxruntime') if m in sys.modules))\n"
    )
    env = {**os.environ, CACHE_DIR_ENV: str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['onnxruntime']"
    empty = {**env, CACHE_DIR_ENV: str(cache.parent / "empty")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=empty, check=False
    )
    assert done.stdout.strip() == "['onnxruntime', 'torch']", done.stderr
