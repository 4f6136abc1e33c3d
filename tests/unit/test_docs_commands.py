"""The commands and settings the docs name exist (issue 28): every `agentq <command>
[<subcommand>]` written in README.md or a page under docs/ (in a shell or output block, or in
inline code) is a command of the CLI, every `--option` after it is one of that command's, and
every `AGENTQ_*` is a setting; the documented commands print their help."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from models.settings import Settings
from models.settings_variables import unknown_variables
from ops.cli import app
from ops.docs.cli_reference import Found, walk
from ops.docs.settings_reference import variables
from tests.support import doc_pages
from tests.support.doc_pages import Mention

TREE = {found.path: found for found in walk()}
SETTINGS = {v for name, field in Settings.model_fields.items() for v in variables(name, field)}
# `AGENTQ_*` names the docs may give that are no setting, each with what reads it.
NOT_SETTINGS = {
    "AGENTQ_TEST_AMQP_URL": "tests/support/brokers.py: the broker matrix's RabbitMQ",
    "AGENTQ_TEST_REDIS_URL": "tests/support/brokers.py: the broker matrix's external Redis",
    "AGENTQ_TOKEN": "the HTTP API examples' own shell variable (curl, the Python client)",
    "AGENTQ_REVIEWER_TOKEN": "the Python client example's reviewer token variable",
}
WORD = re.compile(r"[a-z][a-z0-9-]*")
OPTION = re.compile(r"--[a-z][a-z0-9-]*")


def takes_value(found: Found) -> dict[str, bool]:
    """Each option name of the command (`--help` included): whether it takes a value."""
    params = [*found.command.params, found.command.get_help_option(found.context)]
    return {
        name: not (getattr(p, "is_flag", False) or getattr(p, "count", False))
        for p in params
        if p is not None and p.param_type_name == "option"
        for name in [*p.opts, *p.secondary_opts]
    }


def problems(mention: Mention) -> list[str]:
    """What `mention` names that the CLI does not have, each as `page:line: why`."""
    where = f"{doc_pages.relative(mention.page)}:{mention.line}"
    path: tuple[str, ...] = ()
    skip = False
    for word in mention.words:
        token = word.strip("[]").rstrip(",.:;")
        option = OPTION.match(token)
        if skip or not token:
            skip = False
        elif option:
            known = takes_value(TREE[path])
            if option.group(0) not in known:
                name = " ".join(("agentq", *path))
                return [f"{where}: `{name}` has no option {option.group(0)}"]
            skip = known[option.group(0)] and "=" not in token
        elif (*path, token) in TREE:
            path = (*path, token)
        elif WORD.fullmatch(token) and _is_group(path):
            name = " ".join(("agentq", *path, token))
            return [f"{where}: `{name}` is no command (`{' '.join(mention.words)}`)"]
        # else an argument (or a placeholder): the options after it are still its command's
    return []


def _is_group(path: tuple[str, ...]) -> bool:
    return any(other[: len(path)] == path and len(other) > len(path) for other in TREE)


def all_problems(pages: dict[Path, str | None]) -> list[str]:
    """`problems` of every mention on `pages` (path -> its text, None: read it)."""
    return [
        p
        for page, text in pages.items()
        for m in doc_pages.mentions(page, text)
        for p in problems(m)
    ]


def test_the_cli_tree_has_the_lazy_sub_apps_commands() -> None:
    assert ("review", "list") in TREE and ("run", "purge") in TREE and ("up",) in TREE
    assert ("show",) not in TREE


def test_every_command_the_docs_name_exists() -> None:
    mentioned = [m for page in doc_pages.pages() for m in doc_pages.mentions(page)]
    assert len(mentioned) > 20, "the pages name commands: the scan found too few"
    found = all_problems({page: None for page in doc_pages.pages()})
    assert not found, "commands or options the CLI does not have:\n" + "\n".join(found)


def test_a_page_naming_a_missing_command_or_option_fails() -> None:
    page = doc_pages.ROOT / "docs" / "example.md"
    text = (
        "Then `agentq show 7` prints it.\n\n"
        "```bash\n"
        "$ agentq review list --all\n"
        "agentq review frobnicate 3   # no such subcommand\n"
        "agentq up && agentq run submit 'goal' --frobnicate 2\n"
        "agentq run list --status succeeded --limit 5\n"
        "```\n"
    )
    assert all_problems({page: text}) == [
        "docs/example.md:5: `agentq review frobnicate` is no command (`review frobnicate 3`)",
        "docs/example.md:6: `agentq run submit` has no option --frobnicate",
        "docs/example.md:1: `agentq show` is no command (`show 7`)",
    ]


def test_the_cli_page_names_each_command_that_prints_json_and_no_other() -> None:
    """docs/how-to/cli.md, "Output for scripts": it named `status` (the hidden old name of `run
    show`) among the commands taking `--json`, where no check reached it; each is now written in
    full with its `--json`, and the set is the CLI's."""
    takes_json = {path for path, found in TREE.items() if "--json" in takes_value(found)}
    page = doc_pages.ROOT / "docs" / "how-to" / "cli.md"
    named = {
        max((path for path in TREE if m.words[: len(path)] == path), key=len)
        for m in doc_pages.mentions(page)
        if "--json" in (w.strip("[]") for w in m.words)
    }
    assert ("run", "show") in takes_json, takes_json
    assert named == takes_json


def _setting_problems(page: Path) -> list[str]:
    found = []
    for line, name in doc_pages.setting_names(page):
        known = (
            any(fnmatch.fnmatchcase(s, name) for s in SETTINGS)
            if "*" in name
            else (name in SETTINGS or name in NOT_SETTINGS)
        )
        if not known:
            found.append(f"{doc_pages.relative(page)}:{line}: {name}")
    return found


def test_every_setting_the_docs_name_exists() -> None:
    found = [p for page in doc_pages.pages() for p in _setting_problems(page)]
    assert not found, "AGENTQ_* names that are no setting (models/settings.py):\n" + "\n".join(
        found
    )


def test_the_names_that_are_no_setting_are_read_where_they_say() -> None:
    for name, reader in NOT_SETTINGS.items():
        if reader.startswith("tests/"):
            source = reader.split(":")[0]
            assert name in (doc_pages.ROOT / source).read_text(), (name, source)
        assert name not in SETTINGS, f"{name} is a setting now: drop it from NOT_SETTINGS"
    # ... and none of them makes agentq warn of a setting it does not know.
    assert unknown_variables(NOT_SETTINGS, Settings.model_fields) == []


def _documented() -> list[tuple[str, ...]]:
    """The command paths the docs name, each once, in the CLI's order."""
    named = {
        path
        for page in doc_pages.pages()
        for m in doc_pages.mentions(page)
        for path in TREE
        if path and m.words[: len(path)] == path
    }
    return [path for path in TREE if path in named]


def test_every_documented_command_prints_its_help() -> None:
    documented = _documented()
    assert ("run", "submit") in documented and ("review", "list") in documented
    runner = CliRunner()
    for path in documented:
        result = runner.invoke(app, [*path, "--help"], prog_name="agentq")
        assert result.exit_code == 0, (path, result.output)
        assert f"agentq {' '.join(path)}" in " ".join(result.output.split()), (path, result.output)


@pytest.mark.parametrize("args", [["--help"], ["run", "submit", "--help"], ["tools"]])
def test_documented_commands_run_without_a_stack(args: list[str]) -> None:
    """As a user runs them: the installed `agentq` script, in a subprocess."""
    agentq = shutil.which("agentq")
    assert agentq, "the agentq script is not installed (pip install -e .)"
    env = {**os.environ, "PYTHONPATH": str(doc_pages.ROOT), "COLUMNS": "200"}
    done = subprocess.run(
        [agentq, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    expected = {"--help": "run", "run": "--pin-from-goal", "tools": "noop"}[args[0]]
    assert expected in done.stdout, done.stdout
