"""How many tokens real models' tokenizers count for each of o200k_base's: the source of the
calibration's band (`models.engine.token_calibrations.CALIBRATION_RATIO_MIN`, `..._MAX`).

`python -m ops.bench.tokenizer_ratios [--data PATH]`

The texts: each LoCoMo session of the development set (`../shared/data/locomo-dev.json`, its
turns as "speaker: text" lines), agentq's instructions (every `*_INSTRUCTIONS` and `REPLAN_NOTE`
of the planner, step, synthesis, extraction, summary and check calls) and the plan schema. Each
is counted by o200k_base (`models.memory.tokens`) and by the GGUF tokenizer of each local model
installed (`ops.llama_server.LOCAL_MODELS`: SmolLM2 with the `llama` extra, Gemma 3 with `gemma`;
llama.cpp's tokenizer, `vocab_only`, no BOS), and by cl100k_base. Prints, per tokenizer, the
ratio (theirs over o200k's) per text: mean, lowest, highest, and over all the texts together.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from models.memory.tokens import encoding_for
from ops.bench.locomo_recall import DEFAULT_DATA
from ops.llama_server import LOCAL_MODELS
from worker.model_calls import prompts
from worker.phases import goal_check, replan_checks

Counter = Callable[[str], int]


def texts(data: Path) -> list[str]:
    """The LoCoMo sessions of `data`, then agentq's instructions and plan schema."""
    found = []
    for conversation in json.loads(data.read_text()):
        for key, turns in conversation["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                found.append("\n".join(f"{t['speaker']}: {t['text']}" for t in turns))
    for module in (prompts, goal_check, replan_checks):
        found += [
            getattr(module, name)
            for name in sorted(dir(module))
            if name.endswith("_INSTRUCTIONS") or name == "REPLAN_NOTE"
        ]
    found.append(json.dumps(prompts.plan_schema(["fetch_receipts", "convert"]), indent=1))
    return found


def gguf_counters() -> Iterator[tuple[str, Counter]]:
    """(name, token counter) of each local model whose wheel is installed."""
    from llama_cpp import Llama  # the `llama` extra: only this benchmark needs it here

    for alias, model in LOCAL_MODELS.items():
        try:
            path = model.gguf()
        except FileNotFoundError as missing:
            print(f"{alias}: skipped ({missing})")
            continue
        yield alias, _counter(Llama(str(path), vocab_only=True, verbose=False))


def _counter(llm: Any) -> Counter:
    """The token count of a text by `llm`'s tokenizer (a `llama_cpp.Llama`), with no BOS."""
    return lambda text: len(llm.tokenize(text.encode(), add_bos=False))


def row(name: str, count: Counter, corpus: list[str], ours: list[int]) -> str:
    """One tokenizer's ratios over `corpus`, whose o200k counts are `ours`."""
    theirs = [count(text) for text in corpus]
    ratios = [t / o for t, o in zip(theirs, ours, strict=True)]
    total = sum(theirs) / sum(ours)
    mean, low, high = statistics.mean(ratios), min(ratios), max(ratios)
    return f"| {name} | {mean:.3f} | {low:.3f} | {high:.3f} | {total:.3f} |"


def main() -> None:
    """Count, print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a LoCoMo JSON file")
    corpus = texts(parser.parse_args().data)
    o200k = encoding_for(None)
    ours = [len(o200k.encode(text)) for text in corpus]
    cl100k = encoding_for("gpt-4")
    counters = [*gguf_counters(), ("cl100k_base", lambda text: len(cl100k.encode(text)))]
    print(f"{len(corpus)} texts, {sum(ours):,} o200k tokens; ratio = theirs / o200k's")
    print("| tokenizer | mean | lowest | highest | all texts |\n|---|---|---|---|---|")
    for name, count in counters:
        print(row(name, count, corpus, ours))


if __name__ == "__main__":
    main()
