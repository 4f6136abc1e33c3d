"""A Typer command group whose sub-apps are imported only when one of them runs.

`agentq --help` lists every subcommand with its one-line help; building the sub-apps for that
imported SQLAlchemy, Celery, FastAPI and the rest, 2.7-15 s (issue 15, part 10). Here a sub-app
is named with its help and a function that imports it: the help shows a placeholder group, and
`resolve_command` (the path of `agentq review list`, not of `agentq --help`) swaps the real
one in. The pattern is click's own "lazily loading subcommands" (click docs, "Advanced
Patterns").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:  # typer 0.2x vendors click: its methods take these, not the `click` package's
    from typer._click import Command, Context


@dataclass(frozen=True)
class LazyApp:
    """A sub-app by its one-line help and a function that imports and returns it."""

    help: str
    load: Callable[[], typer.Typer]


class LazyGroup(TyperGroup):
    """A `TyperGroup` with the sub-apps of `lazy` (name -> `LazyApp`, set by a subclass) after
    its own commands: each is a placeholder group carrying its help (all `--help` lists, and
    what "did you mean" suggests from) until it runs."""

    lazy: ClassVar[dict[str, LazyApp]] = {}

    def __init__(self, **attrs: Any) -> None:
        """As `TyperGroup`, plus a placeholder for each lazy sub-app."""
        super().__init__(**attrs)
        self.loaded: set[str] = set()
        for name, app in self.lazy.items():
            self.commands.setdefault(name, TyperGroup(name=name, help=app.help))

    def resolve_command(
        self, ctx: Context, args: list[str]
    ) -> tuple[str | None, Command | None, list[str]]:
        """Import the sub-app about to run (`args[0]`), then resolve as click does."""
        if args and args[0] in self.lazy:
            self.load(args[0])
        return super().resolve_command(ctx, args)

    def load(self, name: str) -> Command:
        """The real command of lazy sub-app `name`, imported in place of its placeholder on
        first use."""
        if name not in self.loaded:
            self.add_command(typer.main.get_group(self.lazy[name].load()), name)
            self.loaded.add(name)
        return self.commands[name]


def lazy_group(apps: dict[str, LazyApp]) -> type[LazyGroup]:
    """A `LazyGroup` class with `apps` (for `typer.Typer(cls=...)`, which builds the group)."""
    attributes: dict[str, Any] = {"lazy": apps}
    return type("AgentqGroup", (LazyGroup,), attributes)
