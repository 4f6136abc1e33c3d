"""Plan graphs: what each step of a plan version waits for (DESIGN.md, invariant 12). Pure.

A plan version is a directed acyclic graph over its steps: `after[s]` are the steps `s` waits
for, and every step whose dependencies all succeeded may run at once. Written plans name the
steps (`StepSpec.after`: a list of names; `[]` starts at once; left out, the previous step of
the list, so a plan written as a list keeps its meaning); versions store ids
(`plan_versions.after`).

A new version is built by `splice`: the steps kept from the previous version with their
dependencies, and new steps put in the place of a replaced step (a failed step that was
replanned, retried or answered), so that what waited for the replaced step now waits for the
new steps that nothing else among them waits for (their sinks: in a list, the last one). The
built version is checked whole (`problems`): unknown names, cycles, names used twice, and
references (`${steps.x...}`) to a step that the referring step does not wait for, directly or
through others. This module knows nothing of the database; `models.plans.plans` writes what it
builds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# A step of these statuses holds no result and never will in this version: its name is free.
NO_RESULT = frozenset({"failed", "cancelled"})


@dataclass(frozen=True)
class Node:
    """A step kept from the previous version: its id, name, status, the ids it waits for, and
    the step names its arguments refer to."""

    id: int
    name: str
    status: str = "pending"
    after: tuple[int, ...] = ()
    refs: frozenset[str] = frozenset()


@dataclass(frozen=True)
class NewStep:
    """A step to add: `key` stands for its id until it has one (any int no kept step has);
    `after` the names it waits for (None: the previous new step; for the first, what the
    replaced step waited for, or nothing)."""

    key: int
    name: str
    after: tuple[str, ...] | None = None
    refs: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Version:
    """A built version: its steps in order (`order`, ids or `NewStep.key`s), what each waits for
    (`after`), and the problems found, each naming the step (`steps.I.field: ...` for new step
    I, or the kept step by name)."""

    order: tuple[int, ...]
    after: Mapping[int, tuple[int, ...]]
    problems: tuple[str, ...] = ()
    names: Mapping[int, str] = field(default_factory=dict)


def linear(ids: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """Each step of `ids` waits for the one before it: a plan written as a plain list."""
    return {step: (ids[i - 1],) if i else () for i, step in enumerate(ids)}


def remaining(kept: Sequence[Node], replaced: int | None) -> list[Node]:
    """`kept` without `replaced` when that step succeeded: a deliverable whose result did not
    meet the run's goal (`models.engine.goal_checks`) leaves the version it is replaced in, and its
    name is free for the new steps; a failed step replaced stays, as the record of the failure."""
    return [n for n in kept if not (n.id == replaced and n.status == "succeeded")]


def splice(kept: Sequence[Node], new: Sequence[NewStep], *, replaced: int | None = None) -> Version:
    """The version of `kept` (in order) with `new` inserted right after `replaced` (or at the
    end; in its place when it succeeded: `remaining`), rewired so that whatever waited for
    `replaced` waits for the sinks of `new`."""
    by_id = {node.id: node for node in kept}
    default_first = by_id[replaced].after if replaced in by_id else ()
    cut = [n.id for n in kept].index(replaced) + 1 if replaced in by_id else len(kept)
    left = remaining(kept, replaced)
    cut -= len(kept) - len(left)  # the replaced step left: the new steps take its place
    kept = left
    new_after, problems = _new_dependencies(kept, new, default_first)
    sinks = [s.key for s in new if not any(s.key in new_after[o.key] for o in new)]
    after: dict[int, tuple[int, ...]] = {}
    for node in kept:
        deps = node.after
        if replaced is not None and sinks and replaced in deps:
            deps = _unique(x for d in deps for x in (sinks if d == replaced else [d]))
        after[node.id] = deps
    after.update(new_after)
    ids = [node.id for node in kept]
    order = (*ids[:cut], *(s.key for s in new), *ids[cut:])
    names = {**{n.id: n.name for n in kept}, **{s.key: s.name for s in new}}
    version = Version(order, after, (), names)
    problems += _clashes(kept, new)
    problems += cycle_problems(version, new)
    if not problems:  # references are checked on an acyclic graph only
        problems += reference_problems(version, kept, new)
    return Version(order, after, tuple(problems), names)


def _new_dependencies(
    kept: Sequence[Node], new: Sequence[NewStep], default_first: tuple[int, ...]
) -> tuple[dict[int, tuple[int, ...]], list[str]]:
    names = {s.name: s.key for s in new}
    for node in kept:
        if node.status not in NO_RESULT:
            names.setdefault(node.name, node.id)
    after: dict[int, tuple[int, ...]] = {}
    problems: list[str] = []
    for i, step in enumerate(new):
        if step.after is None:
            after[step.key] = default_first if i == 0 else (new[i - 1].key,)
            continue
        for name in dict.fromkeys(step.after):  # each name once: a repeat is its own problem
            if name == step.name:
                problems.append(f"steps.{i}.after: step {step.name!r} cannot wait for itself")
            elif name not in names:
                known = ", ".join(sorted(set(names) - {step.name})) or "none"
                problems.append(f"steps.{i}.after: no step named {name!r} (steps: {known})")
        twice = sorted({n for n in step.after if step.after.count(n) > 1})
        if twice:
            problems.append(f"steps.{i}.after: names {', '.join(map(repr, twice))} more than once")
        after[step.key] = _unique(names[n] for n in step.after if n in names and n != step.name)
    return after, problems


def _clashes(kept: Sequence[Node], new: Sequence[NewStep]) -> list[str]:
    """A new step's name is free: no other new step and no kept step that has (or will have)
    a result has it, so a `${steps.NAME...}` reference means one step."""
    problems, seen = [], set()
    taken = {n.name: n.status for n in kept if n.status not in NO_RESULT}
    for i, step in enumerate(new):
        if step.name in seen:
            problems.append(f"steps.{i}.name: {step.name!r} is used twice; names must be unique")
        elif step.name in taken and taken[step.name] != "succeeded":
            problems.append(f"steps.{i}.name: {step.name!r} is taken by another step of the plan")
        seen.add(step.name)
    return problems


def succeeded_clashes(kept: Sequence[Node], new: Sequence[NewStep]) -> list[str]:
    """The new steps that take the name of a kept step that already succeeded (a conflict with
    the run's state rather than a fault of the plan: `models.errors.PlanConflict`)."""
    done = {n.name for n in kept if n.status == "succeeded"}
    return [
        f"steps.{i}.name: {s.name!r} is the name of a step that already succeeded; choose another"
        for i, s in enumerate(new)
        if s.name in done
    ]


def cycle_problems(version: Version, new: Sequence[NewStep] = ()) -> list[str]:
    """One problem per cycle found (depth-first search), naming its steps in order."""
    index = {s.key: i for i, s in enumerate(new)}
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    problems: list[str] = []

    def visit(node: int, path: list[int]) -> None:
        state[node] = 1
        for dep in version.after.get(node, ()):
            if state.get(dep) == 1:
                loop = [*path[path.index(dep) :], dep] if dep in path else [node, dep]
                where = next((index[k] for k in loop if k in index), None)
                named = " -> ".join(repr(version.names.get(k, k)) for k in reversed(loop))
                prefix = f"steps.{where}.after" if where is not None else "after"
                problems.append(f"{prefix}: a cycle: {named}")
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for node in version.order:
        if node not in state:
            visit(node, [node])
    return problems


def ancestors(after: Mapping[int, Iterable[int]], node: int) -> set[int]:
    """Every step `node` waits for, directly or through others (`after` must be acyclic)."""
    seen: set[int] = set()
    todo = list(after.get(node, ()))
    while todo:
        step = todo.pop()
        if step not in seen:
            seen.add(step)
            todo.extend(after.get(step, ()))
    return seen


def reference_problems(version: Version, kept: Sequence[Node], new: Sequence[NewStep]) -> list[str]:
    """References of new steps, and of kept steps that have not run, to steps they do not wait
    for (a step with no result in this version does not count)."""
    status = {n.id: n.status for n in kept}
    named = {s.name for s in new} | {n.name for n in kept if n.status not in NO_RESULT}
    problems = []
    for i, s in enumerate(new):
        for missing in sorted(s.refs - _upstream_names(version, s.key, status)):
            if missing == s.name:
                why = "its own result; a step can use only the results of steps it waits for"
            elif missing not in named:
                why = f"step {missing!r}, and the plan has no step of that name"
            else:
                why = (
                    f"step {missing!r}, which step {s.name!r} does not wait for (directly or "
                    "through other steps); name it in 'after'"
                )
            problems.append(f"steps.{i}.args: refers to {why}")
    for n in kept:
        if n.status != "pending":
            continue
        for missing in sorted(n.refs - _upstream_names(version, n.id, status)):
            problems.append(
                f"step {n.name!r} of the plan refers to step {missing!r}, which it would no longer "
                f"wait for; a new step in the failed step's place must be named {missing!r}"
            )
    return problems


def _upstream_names(version: Version, key: int, status: Mapping[int, str]) -> set[str]:
    """Names of the steps `key` waits for that have (or will have) a result."""
    return {
        version.names[a]
        for a in ancestors(version.after, key)
        if status.get(a, "pending") not in NO_RESULT
    }


def waves(order: Sequence[int], after: Mapping[int, Iterable[int]]) -> dict[int, int]:
    """Each step's wave, 1-based: 1 for a step that waits for nothing, else one more than the
    latest wave it waits for. Steps of one wave can run together (for display)."""
    wave: dict[int, int] = {}

    def of(step: int) -> int:
        if step not in wave:
            wave[step] = 1 + max((of(d) for d in after.get(step, ()) if d in order_set), default=0)
        return wave[step]

    order_set = set(order)
    for step in order:
        of(step)
    return wave


def _unique(items: Iterable[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(items))
