"""The layout rules of issue 14, read from the source (no services): `api` imports nothing from
`ops` or `worker`, no module of `ops` is in an import cycle (imports inside functions counted),
no module reads an `AGENTQ_*` variable from the environment itself, and the queries the front
ends show live in `models`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = ("ops/bench/", "ops/chaos/")  # benchmarks and fault scripts, not the product


def _modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(SKIPPED) or "/migrations/" in relative:
            continue
        name = relative.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        found[name] = path
    return found


def _imported(path: Path) -> set[str]:
    """Every module `path` imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_api_imports_nothing_from_ops_or_worker() -> None:
    offending = {
        name: sorted(n for n in _imported(path) if n.split(".")[0] in ("ops", "worker"))
        for name, path in _modules("api").items()
    }
    assert {k: v for k, v in offending.items() if v} == {}


def test_no_import_cycle_in_ops() -> None:
    modules = _modules("ops")
    graph = {name: _imported(path) & set(modules) - {name} for name, path in modules.items()}
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            name, trail = stack.pop()
            for nxt in graph[name]:
                if nxt == start:
                    cycles.append(trail)
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert cycles == []


def test_no_module_reads_agentq_settings_from_the_environment() -> None:
    reads = re.compile(r"""(os\.environ\.get|os\.getenv|os\.environ\[)\(?\s*["']AGENTQ_""")
    found = []
    for package in ("models", "api", "ops", "worker", "scheduler"):
        for name, path in _modules(package).items():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if reads.search(line) and not re.search(r"os\.environ\[[^]]+\]\s*=", line):
                    found.append(f"{name}:{number}: {line.strip()}")
    assert found == []


def test_the_front_ends_write_no_query() -> None:
    found = [
        f"{name}:{number}"
        for package in ("api", "ops")
        for name, path in _modules(package).items()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "select(" in line
    ]
    assert found == []
