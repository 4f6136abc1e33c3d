"""The demo's first scenario on each local model, run after run: does it file the report?

`python -m ops.bench.local_demo [--models smollm2,gemma3] [--runs 5] [--home DIR]`

Each run is `agentq demo --model NAME --scenarios 1` as a user runs it (a subprocess: its own
llama.cpp server, embedded stack and seeded procedures, the demo user's memory forgotten first).
A run counts when it printed that it submitted 473.43 EUR to cost centre CC-4410 (issue 12,
item 7: at least 4 runs of 5). Prints, per model: runs that did, seconds per run, and the share
of prompt tokens the server read from its prompt cache (the demo's last line).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

EXPECTED: Final = re.compile(r"submitted report EXP-\w+: total 473\.43 EUR, cost centre CC-4410")
CACHE: Final = re.compile(r"model server: ([\d,]+) of ([\d,]+) prompt tokens from its cache")
RUN_TIMEOUT_S: Final = 900.0


@dataclass(frozen=True)
class Result:
    """One demo run: whether it filed the expected report, its seconds and prompt tokens."""

    filed: bool
    seconds: float
    cached: int
    prompt: int
    exit_code: int


def run_once(model: str, home: Path, log: Path) -> Result:
    """`agentq demo --model MODEL --scenarios 1` with `AGENTQ_HOME=home`; its output to `log`."""
    argv = [sys.executable, "-m", "ops.cli", "demo", "--model", model, "--scenarios", "1"]
    env = {**os.environ, "AGENTQ_HOME": str(home), "COLUMNS": "200"}
    started = time.monotonic()
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    seconds = time.monotonic() - started
    log.write_text(done.stdout + done.stderr)
    found = CACHE.search(done.stdout)
    cached, prompt = (int(g.replace(",", "")) for g in found.groups()) if found else (0, 0)
    filed = EXPECTED.search(done.stdout) is not None
    return Result(filed, seconds, cached, prompt, done.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--home", type=Path, default=None, help="AGENTQ_HOME (default: a temp dir)")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="agentq-local-demo-"))
    print("| model | runs | filed 473.43 EUR to CC-4410 | s/run (min-max) | prompt cache |")
    print("|---|---:|---:|---:|---:|")
    for model in args.models.split(","):
        results = []
        for n in range(1, args.runs + 1):
            log = home / f"{model}-run-{n}.log"
            result = run_once(model, home, log)
            results.append(result)
            mark = "filed" if result.filed else f"not filed (exit {result.exit_code})"
            print(f"# {model} run {n}: {mark} in {result.seconds:.0f} s ({log})", file=sys.stderr)
        filed = sum(r.filed for r in results)
        secs = [r.seconds for r in results]
        cached, prompt = sum(r.cached for r in results), sum(r.prompt for r in results)
        share = f"{cached / prompt:.0%} of {prompt:,}" if prompt else "-"
        print(
            f"| {model} | {len(results)} | {filed}/{len(results)} | "
            f"{sum(secs) / len(secs):.0f} ({min(secs):.0f}-{max(secs):.0f}) | {share} |"
        )


if __name__ == "__main__":
    main()
