"""Run commands have one name each, `agentq run VERB` (issue 28): the names before are hidden
aliases of the same commands, absent from `agentq --help`."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from ops.cli import app
from ops.run_commands import run_app, runs_app

CLI = typer.main.get_command(app)
OLD_TO_NEW = {"submit": "submit", "status": "show", "watch": "watch", "cancel": "cancel"}


def test_run_has_every_verb_and_help_lists_only_the_new_names() -> None:
    run = CLI.commands["run"]  # type: ignore[attr-defined]
    assert list(run.commands) == ["submit", "list", "show", "watch", "fork", "cancel", "purge"]
    listed = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    names = {line.split()[1] for line in listed.splitlines() if line.startswith("│ ")}
    assert "run" in names and not names & {*OLD_TO_NEW, "runs"}, listed


def test_each_old_name_is_a_hidden_alias_of_its_run_command() -> None:
    top = {c.name: c for c in app.registered_commands}
    run = {c.name: c.callback for c in run_app.registered_commands}
    for old, new in OLD_TO_NEW.items():
        assert top[old].hidden and top[old].callback is run[new], old
    (runs,) = [g for g in app.registered_groups if g.name == "runs"]
    assert runs.hidden and runs.typer_instance is runs_app
    assert [c.callback for c in runs_app.registered_commands] == [run["purge"]]
    assert CLI.commands["runs"].hidden  # type: ignore[attr-defined]


def test_the_old_names_still_parse_their_arguments() -> None:
    for args in (["status", "--help"], ["runs", "--help"], ["runs", "purge", "--help"]):
        assert CliRunner().invoke(app, args).exit_code == 0, args
    refused = CliRunner().invoke(app, ["status", "0"])
    assert refused.exit_code == 2 and "greater than or equal to 1" in refused.output
