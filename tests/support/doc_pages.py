"""The documentation's pages as tests read them: README.md and every page under docs/, their
fenced blocks, and the `agentq` commands and `AGENTQ_*` names they mention.

A test that checks an example finds it by its content on whichever page holds it
(`block_matching`), so moving an example between pages does not break the test, and a test whose
example is on no page fails saying which example it looked for.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([\w+-]*)[^\n]*\n(.*?)^\1\2[ \t]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# Where a shell command starts on a line: at its start (after a prompt such as `$ ` or
# `host:~/dir$ `), or after `&&`, `||`, `;`, `|`, `(` or `$(`.
COMMAND = re.compile(r"(?:^|\$ |&&|\|\||[;|(])\s*(?:[A-Z_][A-Z0-9_]*=\S*\s+)*agentq[ \t]+")
# Languages whose blocks hold commands or their output; python, json, sql, yaml blocks do not.
SHELL_LANGUAGES = frozenset({"", "bash", "sh", "shell", "console", "text", "shell-session"})


def pages() -> list[Path]:
    """README.md, then every Markdown page under docs/, sorted."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def relative(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


@dataclass(frozen=True)
class Block:
    """One fenced block: its page, the line its body starts on (1-based), language, body."""

    page: Path
    line: int
    language: str
    body: str


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced blocks of `page` (or of `text`, as if it were that page's)."""
    text = page.read_text() if text is None else text
    return [
        Block(page, text.count("\n", 0, m.start(4)) + 1, m.group(3), m.group(4))
        for m in FENCE.finditer(text)
    ]


def block_matching(pattern: str, *, language: str | None = None) -> Block:
    """The first fenced block on any page whose body matches regex `pattern` (searched with
    re.S), of `language` if given. Fails the test naming the pattern when no page has one."""
    for page in pages():
        for block in blocks(page):
            if (language is None or block.language == language) and re.search(
                pattern, block.body, re.S
            ):
                return block
    raise AssertionError(f"no page of the docs has a block matching {pattern!r}")


def all_text() -> str:
    """Every page's text, joined."""
    return "\n".join(page.read_text() for page in pages())


@dataclass(frozen=True)
class Mention:
    """An `agentq ...` command written on a page: where, and the words after `agentq`."""

    page: Path
    line: int
    words: tuple[str, ...]


def _words(rest: str) -> tuple[str, ...]:
    """The words of one command, up to where the shell would end it or a comment starts."""
    rest = re.split(r"\s#|&&|\|\||;|\s\|\s|`|\)", rest, maxsplit=1)[0]
    return tuple(rest.split())


def mentions(page: Path, text: str | None = None) -> Iterator[Mention]:
    """Every `agentq` command on `page` (or in `text`, as that page): the lines of its shell and
    output blocks where a command starts, and its inline code spans that start with `agentq `."""
    text = page.read_text() if text is None else text
    fenced = set()
    for block in blocks(page, text):
        lines = block.body.splitlines()
        fenced.update(range(block.line, block.line + len(lines) + 1))
        if block.language in SHELL_LANGUAGES:
            for number, line in enumerate(lines, start=block.line):
                for found in COMMAND.finditer(line):
                    yield Mention(page, number, _words(line[found.end() :]))
    for number, line in enumerate(text.splitlines(), start=1):
        if number in fenced:
            continue
        for span in CODE_SPAN.finditer(line):
            found = re.match(r"(?:\$ )?agentq[ \t]+(.*)", span.group(2).strip())
            if found:
                yield Mention(page, number, _words(found.group(1)))


SETTING_NAME = re.compile(r"AGENTQ_[A-Z0-9_*]*[A-Z0-9*]")


def setting_names(page: Path) -> Iterator[tuple[int, str]]:
    """`(line, name)` of every `AGENTQ_*` name on `page`, globs such as `AGENTQ_USER_*`
    included; `AGENTQ_<NAME>` (a name ending in `_`) is no name."""
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        for found in SETTING_NAME.finditer(line):
            yield number, found.group(0)
