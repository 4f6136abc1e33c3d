"""Markdown pieces the reference pages share: table cells, tables, code spans."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# A code span (`...`, or ``...`` around a backtick): left as written, since Markdown shows it
# literally; only the text between spans is escaped.
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def _escape_text(text: str) -> str:
    """`text` outside code spans: `<` would open an HTML tag, `|` end a table cell."""
    return text.replace("<", "&lt;").replace("|", "\\|")


def cell(text: str) -> str:
    """`text` as one table cell: one line, `<` and `|` escaped outside code spans."""
    flat = " ".join(text.split())
    parts, end = [], 0
    for span in CODE_SPAN.finditer(flat):
        parts += [_escape_text(flat[end : span.start()]), span.group(0)]
        end = span.end()
    return "".join([*parts, _escape_text(flat[end:])])


def code(text: str) -> str:
    """`text` as a code span, with enough backticks around it to hold those inside."""
    ticks = "`" * (max((len(t) for t in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; each row's cells are given as Markdown already (see `cell`)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def prose(text: str) -> str:
    """Help text or a docstring as a paragraph of Markdown, `<` escaped outside code spans."""
    return "\n\n".join(cell(p) for p in re.split(r"\n\s*\n", text.strip()) if p.strip())
