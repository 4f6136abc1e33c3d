"""The layout's rules, read from the source with `ast` (no imports run, no services).

Every `.py` under models/, worker/, scheduler/, api/, ops/ and agentq/ (migrations aside) is
parsed, and every import in it counted: at module level, inside functions, and under
`TYPE_CHECKING`. A
type-only import is counted because it is still a dependency a reader has to follow, and a
cycle hidden behind `TYPE_CHECKING` is the same smell as one hidden inside a function (the house
style says to stop both: docs STYLE.md, "Stop"). The rules (README, "Architecture"; issue 14):

- `models` imports no other package of ours;
- `worker`, `scheduler` and `api` import only `models` among ours, besides themselves;
- `agentq` (the Python client, issue 15) imports only the API's request and response models
  (`api.schemas`, `api.responses`), so it is typed with them and runs no server code;
- inside `models`, each domain package imports only the domains below it (`DOMAIN_USES`: the
  engine uses plans, never memory or review; the base uses no domain; issue 28), and no domain
  imports a table class another domain defines (the front door aside);
- no import cycle between modules;
- every module is under `MAX_MODULE_LINES` lines.

Also (issue 14): no module reads an `AGENTQ_*` variable from the environment itself (`Settings`
is the one channel), the front ends (`api`, `ops`) write no query (`models` holds them), and
no module of `worker` or `scheduler` escalates a run itself
(`models.engine.run_transitions.escalate`): it reports what failed to
`models.engine.escalation_rules`, where escalation is decided.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGES: Final = ("models", "worker", "scheduler", "api", "ops", "agentq")
PROCESSES: Final = ("worker", "scheduler", "api")  # each may import only `models` among ours
CLIENT_IMPORTS: Final = frozenset({"api.schemas", "api.responses"})  # all `agentq` may import
MAX_MODULE_LINES: Final = 400
# models' domains (issue 28) -> the domains each may import; the base is the modules directly in
# `models/`. The front door (`models.front`) may import every domain, and no domain imports it.
DOMAIN_USES: Final[dict[str, frozenset[str]]] = {
    "base": frozenset(),
    "mcp": frozenset({"base"}),  # MCP servers' sessions and listings (issue 30)
    "plans": frozenset({"base", "mcp"}),
    "approvals": frozenset({"base"}),  # gated tool calls (issue 30)
    "engine": frozenset({"base", "plans", "approvals"}),
    "memory": frozenset({"base", "plans", "engine"}),
    "review": frozenset({"base", "plans", "approvals", "engine", "memory"}),
    "access": frozenset({"base", "plans", "engine", "review"}),
    "operations": frozenset({"base", "plans", "engine"}),
    "schedules": frozenset({"base", "plans", "engine"}),  # goals on a schedule (issue 32)
    "front": frozenset(
        {
            "base",
            "mcp",
            "plans",
            "approvals",
            "engine",
            "memory",
            "review",
            "access",
            "operations",
            "schedules",
        }
    ),
}


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every product module (a package is its `__init__`)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:
                continue
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES: Final = _modules()


def _targets(module: str, path: Path) -> Iterator[str]:
    """The names `module` imports, anywhere in its file: `from a import b` names `a.b` when that
    is a module, else `a`; a relative import is resolved against `module`'s package."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            submodules = [f"{source}.{a.name}" for a in node.names]
            yield from (name for name in submodules if name in MODULES)
            if any(name not in MODULES for name in submodules):
                yield source


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (itself excluded)."""
    return {
        module: {t for t in _targets(module, path) if t in MODULES and t != module}
        for module, path in MODULES.items()
    }


GRAPH: Final = _graph()


def _package(module: str) -> str:
    return module.split(".")[0]


def _layer_breaks() -> set[tuple[str, str]]:
    breaks = set()
    for importer, imported in ((a, b) for a, deps in GRAPH.items() for b in deps):
        mine, theirs = _package(importer), _package(imported)
        if mine == theirs:
            continue
        if mine == "agentq":
            if imported not in CLIENT_IMPORTS:
                breaks.add((importer, imported))
        elif mine == "models" or (mine in PROCESSES and theirs != "models"):
            breaks.add((importer, imported))
    return breaks


def _domain(module: str) -> str:
    """The domain of a module of `models`: its package's name, or "base" for a module directly
    in `models/` (and `models` itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or f"{module}.__init__" in _INITS else "base"


_INITS: Final = {
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in (ROOT / "models").glob("*/__init__.py")
}


def _domain_breaks() -> set[tuple[str, str]]:
    return {
        (importer, imported)
        for importer, deps in GRAPH.items()
        if _package(importer) == "models"
        for imported in deps
        if _domain(imported) != _domain(importer)
        and _domain(imported) not in DOMAIN_USES[_domain(importer)]
    }


def _table_classes() -> dict[str, str]:
    """Table class name -> the module of `models` that defines it (`class X(..., table=True)`)."""
    found = {}
    for module, path in MODULES.items():
        if _package(module) == "models":
            for node in ast.parse(path.read_text(), str(path)).body:
                if isinstance(node, ast.ClassDef) and any(k.arg == "table" for k in node.keywords):
                    found[node.name] = module
    return found


def _foreign_tables() -> set[tuple[str, str]]:
    """(importer, table class) where a module of one domain imports a table another domain
    defines; the base's tables are shared, and the front door may use every domain's."""
    tables = _table_classes()
    found = set()
    for module, path in MODULES.items():
        if _package(module) != "models" or _domain(module) == "front":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    owner = tables.get(alias.name)
                    if owner == node.module and _domain(owner) not in ("base", _domain(module)):
                        found.add((module, alias.name))
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, written
    without recursion), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _long_modules() -> set[str]:
    return {m for m, p in MODULES.items() if len(p.read_text().splitlines()) >= MAX_MODULE_LINES}


def test_the_scan_sees_the_packages_and_imports_inside_functions() -> None:
    """The checks below could pass by reading nothing; these imports are known to exist."""
    assert {
        "models.engine.guards",
        "worker.execution.steps",
        "scheduler.tasks",
        "api.app",
        "ops.cli",
    } <= set(MODULES)
    assert "models.engine.guards" in GRAPH["models.engine.transitions"]
    assert "ops.local" in GRAPH["ops.demo"]  # `from ops.local import ...` inside a function
    assert GRAPH["agentq.client"] | GRAPH["agentq.routes"] >= CLIENT_IMPORTS


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_models_imports_no_process_and_processes_import_only_models() -> None:
    assert _layer_breaks() == set()


def test_the_domain_scan_sees_every_domain() -> None:
    """Each domain package exists, holds modules, and its `__init__` says what it owns."""
    for domain in set(DOMAIN_USES) - {"base"}:
        members = [m for m in MODULES if m.startswith(f"models.{domain}.")]
        assert members, domain
        assert '"""' in MODULES[f"models.{domain}"].read_text()
    assert _domain("models.engine.guards") == "engine"
    assert _domain("models.db") == "base"
    assert _domain("models.engine") == "engine"
    assert _table_classes()["Fact"] == "models.memory.facts"
    assert "models.plans.plans" in GRAPH["models.engine.runs"]  # a domain importing one below


def test_each_domain_imports_only_the_domains_below_it() -> None:
    assert _domain_breaks() == set()


def test_no_domain_imports_another_domains_tables() -> None:
    assert _foreign_tables() == set()


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


def test_every_module_is_under_the_size_limit() -> None:
    assert _long_modules() == set()


def _lines(packages: tuple[str, ...]) -> Iterator[tuple[str, int, str]]:
    """(module, line number, line) of every product module in `packages`, benches and fault
    scripts (`ops.bench`, `ops.chaos`) aside."""
    for module, path in MODULES.items():
        if _package(module) in packages and not module.startswith(("ops.bench", "ops.chaos")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                yield module, number, line


def test_no_module_reads_agentq_settings_from_the_environment() -> None:
    """Writing a child's environment is allowed (that is how another process gets settings)."""
    reads = re.compile(r"""(os\.environ\.get|os\.getenv|os\.environ\[)\(?\s*["']AGENTQ_""")
    writes = re.compile(r"os\.environ\[[^]]+\]\s*=")
    found = [
        f"{module}:{number}: {line.strip()}"
        for module, number, line in _lines(PACKAGES)
        if reads.search(line) and not writes.search(line)
    ]
    assert found == []


def test_the_front_ends_write_no_query() -> None:
    found = [f"{m}:{n}" for m, n, line in _lines(("api", "ops")) if "select(" in line]
    assert found == []


def _escalations(path: Path) -> list[int]:
    """The lines where `path` calls `models.engine.run_transitions.escalate`, however it was
    imported: `from models.engine import run_transitions [as x]` then `x.escalate(...)`, `import
    models.engine.run_transitions` then `models.engine.run_transitions.escalate(...)`, or `from
    models.engine.run_transitions import escalate [as y]` then `y(...)`."""
    tree = ast.parse(path.read_text(), str(path))
    modules, functions = {"models.engine.run_transitions"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "models.engine":
            modules |= {a.asname or a.name for a in node.names if a.name == "run_transitions"}
        elif isinstance(node, ast.ImportFrom) and node.module == "models.engine.run_transitions":
            functions |= {a.asname or a.name for a in node.names if a.name == "escalate"}
        elif isinstance(node, ast.Import):
            modules |= {
                a.asname for a in node.names if a.name == "models.engine.run_transitions"
            } - {None}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = node.func
        if (isinstance(called, ast.Name) and called.id in functions) or (
            isinstance(called, ast.Attribute)
            and called.attr == "escalate"
            and ast.unparse(called.value) in modules
        ):
            found.append(node.lineno)
    return found


def test_the_escalation_finder_finds_the_coordinators_escalation() -> None:
    """`models.engine.decisions` (the coordinator's applier) escalates through the transition."""
    assert _escalations(MODULES["models.engine.decisions"]) != []


def test_processes_report_escalations_instead_of_making_them() -> None:
    """Escalation is decided in one place (issue 14): a worker or the scheduler reports what
    failed to `models.engine.escalation_rules`, never calls
    `models.engine.run_transitions.escalate`."""
    found = [
        f"{module}:{line}"
        for module, path in MODULES.items()
        if _package(module) in ("worker", "scheduler")
        for line in _escalations(path)
    ]
    assert found == []
