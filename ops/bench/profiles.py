"""py-spy profiles of a benchmark's Python processes, and what they show at a glance.

`recording(processes, directory)` runs `py-spy record` (sampling, `--nonblocking`: the process is
not paused) on each `(group, pid)` for the block, writing collapsed stacks (`--format raw`: one
line per distinct stack, `frame;frame;... count`) to `<directory>/<group>-<pid>.txt`, which
flamegraph tools and speedscope read. `summary(directory)` prints, per group, the share of samples
each of the heaviest frames was on the stack (inclusive), agentq's own frames and the libraries
they call alike. py-spy needs ptrace: root, or `kernel.yama.ptrace_scope=0`.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ops.bench.harness import BenchError

RATE_HZ = 250
FRAME = re.compile(r"^(?P<function>[^ ]+) \((?P<file>[^:]+)(?::\d+)?\)$")


@contextmanager
def recording(processes: Sequence[tuple[str, int]], directory: Path) -> Iterator[None]:
    """`py-spy record` on each `(group, pid)` for the block (see the module docstring). Raises
    `BenchError` if py-spy is not installed (`pip install py-spy`)."""
    spy = shutil.which("py-spy")
    if spy is None:
        raise BenchError("--py-spy needs py-spy: pip install py-spy")
    directory.mkdir(parents=True, exist_ok=True)
    recorders = [
        subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(RATE_HZ),
                "--nonblocking",
                "--format",
                "raw",
                "--output",
                str(directory / f"{group}-{pid}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for group, pid in processes
    ]
    try:
        yield
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
        for recorder in recorders:
            recorder.wait(timeout=30)


def frame_name(frame: str) -> str:
    """`"claim (worker/execution/steps.py:83)"` -> `"worker/execution/steps.py:claim"`; a frame
    of another shape as it is."""
    found = FRAME.match(frame.strip())
    if found is None:
        return frame.strip()
    path = found["file"]
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        path = path.split(marker)[-1]
    return f"{path}:{found['function']}"


OURS = ("models/", "worker/", "scheduler/", "api/", "agentq/")


def shares(lines: Sequence[str]) -> tuple[int, Counter[str], Counter[str]]:
    """Total samples; for each of agentq's own frames (`OURS`) the samples whose stack holds it
    (inclusive, once per stack); for each leaf frame its samples (self time)."""
    total, inclusive, leaves = 0, Counter[str](), Counter[str]()
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame_name(f) for f in stack.split(";")]
        total += int(count)
        leaves[frames[-1]] += int(count)
        for name in {f for f in frames if f.startswith(OURS)}:
            inclusive[name] += int(count)
    return total, inclusive, leaves


def summary(directory: Path, top: int = 20) -> list[str]:
    """Per group (every file of that group merged): its samples, its `top` own frames by
    inclusive share and its `top` leaf frames by self share, as lines to print."""
    by_group: dict[str, list[str]] = {}
    for path in sorted(directory.glob("*.txt")):
        by_group.setdefault(path.stem.rsplit("-", 1)[0], []).extend(path.read_text().splitlines())
    lines = []
    for group, stacks in by_group.items():
        total, inclusive, leaves = shares(stacks)
        lines.append(f"\n{group}: {total} samples; agentq's frames, inclusive:")
        lines += [
            f"  {100 * n / max(total, 1):5.1f}%  {name}" for name, n in inclusive.most_common(top)
        ]
        lines.append(f"{group}: leaf frames, self:")
        lines += [
            f"  {100 * n / max(total, 1):5.1f}%  {name}" for name, n in leaves.most_common(top)
        ]
    return lines
