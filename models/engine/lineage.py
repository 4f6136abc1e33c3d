"""A run's relatives in one read: the run it was forked from, at which step and with which steps
copied (`models.engine.forks`), the runs forked from it, its parent run and step, and its child
runs with their statuses (`models.engine.children`); and the same in words (`Lineage.text`).

One statement, because the answer to every submit shows it (`api.run_views.run_detail`: the run
read back, issue 29's profile of the API) as do the run pages and `agentq run show`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from sqlmodel import Session

from models import sql

# lineage: run :run_id's fork row, the runs forked from it, its parent link (with the parent
# step's name) and its children with their statuses; each NULL or [] when it has none.
LINEAGE: Final = """
SELECT
    (SELECT jsonb_build_object('run_id', f.from_run_id, 'step', f.from_step,
        'step_id', f.from_step_id, 'copied', f.copied)
     FROM run_forks f WHERE f.run_id = :run_id) AS forked_from,
    (SELECT coalesce(jsonb_agg(f.run_id ORDER BY f.run_id), '[]'::jsonb)
     FROM run_forks f WHERE f.from_run_id = :run_id) AS forks,
    (SELECT jsonb_build_object('run_id', c.parent_run_id, 'step_id', c.parent_step_id,
        'step', s.name)
     FROM run_children c LEFT JOIN steps s ON s.id = c.parent_step_id
     WHERE c.run_id = :run_id) AS parent,
    (SELECT coalesce(jsonb_agg(jsonb_build_array(c.run_id, r.status) ORDER BY c.run_id),
        '[]'::jsonb)
     FROM run_children c JOIN runs r ON r.id = c.run_id
     WHERE c.parent_run_id = :run_id) AS children"""


@dataclass(frozen=True)
class ForkedFrom:
    """The run a fork came from and the step it was forked at; `copied`: the fork's step id (as
    text, a JSON key) -> the source's step id it copies."""

    run_id: int
    step: str
    step_id: int
    copied: dict[str, int]


@dataclass(frozen=True)
class Parent:
    """A child run's parent run and the step of kind `run` that submitted it (`step`: its name;
    None once that run is purged)."""

    run_id: int
    step_id: int
    step: str | None


@dataclass(frozen=True)
class Lineage:
    """A run's relatives (see the module); empty for a run submitted by a user and never forked
    or delegating."""

    forked_from: ForkedFrom | None = None
    forks: list[int] = field(default_factory=list)
    parent: Parent | None = None
    children: list[tuple[int, str]] = field(default_factory=list)  # (id, status), oldest first

    def copied_steps(self) -> set[int]:
        """The ids of the run's steps copied from the run it was forked from."""
        return {int(new) for new in self.forked_from.copied} if self.forked_from else set()

    def text(self) -> str | None:
        """In words, for `agentq run show`, `review show` and the console; None for none."""
        said = []
        if (fork := self.forked_from) is not None:
            n = len(fork.copied)
            copied = f"{n} step{'s' * (n != 1)} copied"
            said.append(f"forked from run {fork.run_id} at step {fork.step!r} ({copied})")
        if self.forks:
            runs = "s" * (len(self.forks) > 1) + " " + ", ".join(map(str, self.forks))
            said.append("forked as run" + runs)
        if (parent := self.parent) is not None:
            step = f"step {parent.step!r}" if parent.step else f"step {parent.step_id}"
            said.append(f"child run of run {parent.run_id} ({step})")
        if self.children:
            kids = ", ".join(f"{i} ({status})" for i, status in self.children)
            said.append(f"child runs {kids}")
        return "; ".join(said) or None


def read(session: Session, run_id: int) -> Lineage:
    """Run `run_id`'s relatives (`LINEAGE`, one statement)."""
    row = sql.one(session, LINEAGE, {"run_id": run_id})
    if row is None:
        return Lineage()
    return Lineage(
        forked_from=ForkedFrom(**row.forked_from) if row.forked_from else None,
        forks=list(row.forks),
        parent=Parent(**row.parent) if row.parent else None,
        children=[(int(i), str(status)) for i, status in row.children],
    )
