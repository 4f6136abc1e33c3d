"""The observability path imports only what agentq declares (issue 28).

With `AGENTQ_OTLP_ENDPOINT` set, a process of `agentq up` starts tracing (`models.engine.tracing`:
the OTLP exporter and the Celery, SQLAlchemy, httpx and FastAPI instrumentations), records its
metrics (`models.operations.metrics_export`) and configures its logs
(`models.operations.logs`). A package one of them imports that no requirement brings in works
where it happens to be installed and breaks a plain `pip install agentq` (greenlet did: the
SQLAlchemy instrumentation imports `sqlalchemy.ext.asyncio`). This test runs that path in a fresh
interpreter where every installed distribution outside the closure of agentq's requirements (as
pyproject.toml declares them, not the installed metadata, which may be older) cannot be
imported, as on a plain install; optional imports a library guards (orjson, colorama, ...) find
nothing, as they would there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections import deque
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
# The extras the observability path needs, beyond the base requirements: none, as it stands.
OBSERVABILITY_EXTRAS: tuple[str, ...] = ()

# As a worker's pool process, the scheduler and the API start, with every installed distribution
# outside the declared closure made unimportable (argv[2]: their top-level modules), as on a plain
# install; prints the third-party top-level modules the path loaded.
PATH_SCRIPT = """
import json, sys
blocked = set(json.loads(sys.argv[2]))

class Undeclared:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not declared)", name=name)
        return None

sys.meta_path.insert(0, Undeclared())
before = set(sys.modules)
from pathlib import Path
from fastapi import FastAPI
from models.settings import Settings
from models.engine import tracing
from models.operations import logs, metrics_export
settings = Settings()
assert settings.otlp_endpoint, "AGENTQ_OTLP_ENDPOINT not set"
logs.configure_logging("json")
assert tracing.setup(settings, service="worker")
tracing.instrument_app(FastAPI())
metrics_export.record_in(Path(sys.argv[1]))
print(json.dumps(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
"""


def declared_closure(pyproject: dict[str, Any], extras: tuple[str, ...]) -> set[str]:
    """Canonical names of agentq's requirements (base plus `extras`, as `pyproject` declares
    them) and, transitively, of theirs as installed here (each with the extras it is asked for,
    markers evaluated for this interpreter)."""
    project = pyproject["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    seen: set[tuple[str, str]] = set()
    queue = deque(
        (canonicalize_name(r.name), e)
        for r in wanted
        if r.marker is None or r.marker.evaluate()
        for e in ("", *r.extras)
    )
    while queue:
        name, extra = queue.popleft()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # declared but not installed here: nothing of it can be loaded either
        for req in map(Requirement, requires):
            if req.marker is not None and not req.marker.evaluate({"extra": extra}):
                continue
            queue.extend((canonicalize_name(req.name), sub) for sub in ("", *req.extras))
    return {name for name, _ in seen}


def undeclared_modules(closure: set[str]) -> set[str]:
    """Top-level modules installed here that no distribution in `closure` provides (stdlib and
    agentq's own packages aside)."""
    ours = set(_our_packages())
    return {
        module
        for module, dists in metadata.packages_distributions().items()
        if module not in ours
        and module not in sys.stdlib_module_names
        and not {canonicalize_name(d) for d in dists} & closure
    }


def _our_packages() -> list[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[str] = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return [name.rstrip("*") for name in found]


def run_path(tmp_path: Path, blocked: set[str]) -> subprocess.CompletedProcess[str]:
    """The observability path in a fresh interpreter, with `AGENTQ_OTLP_ENDPOINT` set and the
    modules `blocked` unimportable."""
    return subprocess.run(
        [sys.executable, "-c", PATH_SCRIPT, str(tmp_path / "metrics"), json.dumps(sorted(blocked))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "HOME": str(tmp_path),
            "AGENTQ_HOME": str(tmp_path / "home"),
            "AGENTQ_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        },
    )


def test_the_observability_path_needs_only_declared_distributions(tmp_path: Path) -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    blocked = undeclared_modules(declared_closure(pyproject, OBSERVABILITY_EXTRAS))
    done = run_path(tmp_path, blocked)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    # The path was really taken: the exporter, SQLAlchemy's instrumentation and its asyncio.
    assert {"opentelemetry", "sqlalchemy", "greenlet", "prometheus_client"} <= loaded
    assert not loaded & blocked


def test_the_check_names_a_requirement_left_undeclared(tmp_path: Path) -> None:
    """greenlet struck from the requirements: the path fails on its import, as it did on a plain
    install before greenlet was declared."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    kept = [r for r in project["dependencies"] if Requirement(r).name != "greenlet"]
    assert len(kept) == len(project["dependencies"]) - 1, "greenlet is not declared"
    stripped = {**pyproject, "project": {**project, "dependencies": kept}}
    blocked = undeclared_modules(declared_closure(stripped, OBSERVABILITY_EXTRAS))
    assert "greenlet" in blocked
    done = run_path(tmp_path, blocked)
    assert done.returncode != 0
    assert "greenlet" in done.stderr, done.stderr[-2000:]
