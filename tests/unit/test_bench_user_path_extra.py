"""`python -m ops.bench.user_path` where the `bench` extra (DBOS, LangGraph) is not installed:
`--help` works, and a run that needs the peers says in one line which extra to install.

"Not installed" is made as tests/acceptance/test_first_run.py makes it, without uninstalling
anything from the shared environment: `sys.modules[name] = None` makes `import name` raise
ImportError, as for a module that is not there."""

from __future__ import annotations

import subprocess
import sys

WITHOUT_BENCH = """import runpy, sys
for name in ("dbos", "langgraph"):
    sys.modules[name] = None
sys.argv = ["user_path", *sys.argv[1:]]
runpy.run_module("ops.bench.user_path", run_name="__main__")
"""


def user_path(*args: str) -> subprocess.CompletedProcess[str]:
    """The benchmark's command line with `args`, DBOS and LangGraph not importable."""
    argv = [sys.executable, "-c", WITHOUT_BENCH, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_help_works_without_the_bench_extra() -> None:
    done = user_path("--help")
    assert done.returncode == 0, done.stderr
    assert "--agentq-only" in done.stdout and "Traceback" not in done.stderr, done.stderr


def test_a_run_without_the_bench_extra_names_it_in_one_line() -> None:
    done = user_path("--rounds", "1")
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith("error: the DBOS and LangGraph peers need the bench extra ")
    assert "pip install -e '.[bench]'" in done.stderr and "--agentq-only" in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
