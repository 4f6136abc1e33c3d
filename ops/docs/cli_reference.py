"""The CLI reference page (`docs/reference/cli.md`): every command of the Typer app in `ops.cli`,
with its help, usage and parameters, as `agentq <command> --help` prints them.

The lazy sub-apps (`ops.lazy_group`) are loaded first, so their commands are listed as well.
`walk` is also what tests/unit/test_docs_commands.py checks the commands named in the docs
against.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer.main
from typer.core import TyperGroup

from ops.cli import app
from ops.docs.markdown import cell, code, prose, table
from ops.lazy_group import LazyGroup

if TYPE_CHECKING:
    from typer._click import Command, Context

PROGRAM = "agentq"
# Columns the help is wrapped to (click's default without a terminal), whatever the terminal of
# whoever renders the page: the page is committed and compared (`ops.docs.pages`).
HELP_WIDTH = 80


@dataclass(frozen=True)
class Found:
    """One command of the tree: its words after `agentq` (`("review", "list")`; `()` for the
    root), the command, and a context to render its help in."""

    path: tuple[str, ...]
    command: Command
    context: Context


def walk() -> Iterator[Found]:
    """Every command of `agentq`, root first, each group before its subcommands, in the order
    `--help` lists them; lazy sub-apps are loaded."""
    root = typer.main.get_command(app)
    context = root.make_context(PROGRAM, [], resilient_parsing=True, terminal_width=HELP_WIDTH)
    yield from _walk(root, context, ())


def _walk(command: Command, context: Context, path: tuple[str, ...]) -> Iterator[Found]:
    yield Found(path, command, context)
    if not isinstance(command, TyperGroup):
        return
    for name in command.list_commands(context):
        if isinstance(command, LazyGroup) and name in command.lazy:
            child: Command | None = command.load(name)
        else:
            child = command.get_command(context, name)
        if child is not None and not child.hidden:
            inner = child.make_context(name, [], parent=context, resilient_parsing=True)
            yield from _walk(child, inner, (*path, name))


def options(found: Found) -> set[str]:
    """The option names (`--json`, `--no-watch`) the command accepts, `--help` included."""
    params = [*found.command.params, found.command.get_help_option(found.context)]
    return {o for p in params if p is not None for o in [*p.opts, *p.secondary_opts]}


def _section(found: Found) -> str:
    """One command's part of the page: heading, help, usage, parameters, subcommands."""
    name = " ".join((PROGRAM, *found.path))
    level = "#" * min(2 + len(found.path), 4) if found.path else "##"
    parts = [f"{level} {name}\n", prose(found.command.help or "") + "\n"]
    parts.append(f"```text\n{found.context.get_usage()}\n```\n")
    records = [p.get_help_record(found.context) for p in found.command.params]
    rows = [[code(names), cell(text)] for names, text in filter(None, records)]
    if rows:
        parts.append(table(["parameter", "meaning"], rows))
    return "\n".join(parts)


def render() -> str:
    """The whole page, Markdown."""
    found = list(walk())
    index = [
        [f"`{' '.join((PROGRAM, *f.path))}`", cell(f.command.get_short_help_str(limit=200))]
        for f in found[1:]
    ]
    head = (
        "# CLI reference\n\n"
        "Generated from the Typer app in `ops/cli.py` by `python -m ops.docs.pages` "
        "(`ops/docs/cli_reference.py`): it is what `agentq <command> --help` prints. "
        "Options such as `--json` are listed with the command they belong to.\n\n"
        + table(["command", "what it does"], index)
    )
    return "\n".join([head, *(_section(f) for f in found)])
