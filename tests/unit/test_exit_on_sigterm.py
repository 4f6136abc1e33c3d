"""`ops.processes.exit_on_sigterm`: a TERM unwinds the process, so its `finally` blocks run."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys, time
from ops import processes
processes.exit_on_sigterm()
try:
    print("ready", flush=True)
    time.sleep(30)
finally:
    open(sys.argv[1], "w").write("stopped")
"""


def test_a_term_runs_finally_and_exits_143(tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    child = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(marker)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=10) == 128 + signal.SIGTERM
    assert marker.read_text() == "stopped"
