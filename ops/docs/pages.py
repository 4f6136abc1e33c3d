"""The reference pages under docs/reference/: generated from the code, and committed.

Each page is rendered by its module in `ops.docs` (`PAGES`). They are files of the repository,
not only of the built site, so that the links to them work where the docs are read on GitHub as
well as on the site; `tests/unit/test_docs_site.py` fails while one differs from what the code
renders, so they cannot go stale unnoticed. After changing a command, a setting, an operation or
a metric:

    python -m ops.docs.pages            # writes the pages that changed
    python -m ops.docs.pages --check    # lists the stale pages, exit 1 if any

A page describes agentq's defaults, not the settings of whoever generates it (the HTTP API's
budget ceilings and enabled tools are settings): the pages are rendered by a child process
whose environment holds none of the settings' variables, in an empty directory (no `.env`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Final

from ops.docs import api_reference, cli_reference, metrics_reference, settings_reference

ROOT: Final = Path(__file__).resolve().parents[2]
DOCS: Final = ROOT / "docs"
RENDER_TIMEOUT_S: Final = 300.0


PAGES: Final[dict[str, Callable[[], str]]] = {
    "reference/cli.md": cli_reference.render,
    "reference/settings.md": settings_reference.render,
    "reference/http-api.md": api_reference.render,
    "reference/metrics.md": metrics_reference.render,
}
"""Each generated page: its path under docs/ and what renders it."""


def render_into(directory: Path) -> None:
    """Write every page of `PAGES` as this process renders it, under `directory`."""
    for page, render in PAGES.items():
        path = directory / page
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(), encoding="utf-8")


def rendered() -> dict[str, str]:
    """Each page of `PAGES` (path under docs/ -> Markdown) as agentq's defaults render it: by a
    child process with no `AGENTQ_*`, `DATABASE_URL`, `BROKER_URL` or `OPENAI_API_KEY` in its
    environment, run in an empty directory. Raises `subprocess.CalledProcessError` if it
    fails."""
    unset = {"DATABASE_URL", "BROKER_URL", "OPENAI_API_KEY", "COLUMNS"}
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.upper().startswith("AGENTQ_") and name.upper() not in unset
    }
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        argv = [sys.executable, "-m", "ops.docs.pages", "--render-into", str(out)]
        subprocess.run(
            argv, cwd=tmp, env=env, check=True, capture_output=True, timeout=RENDER_TIMEOUT_S
        )
        return {page: (out / page).read_text(encoding="utf-8") for page in PAGES}


def stale(pages: dict[str, str], docs: Path = DOCS) -> list[str]:
    """The pages of `pages` whose file under `docs` is missing or says something else."""
    return [
        page
        for page, text in pages.items()
        if not (docs / page).is_file() or (docs / page).read_text(encoding="utf-8") != text
    ]


def main(argv: list[str] | None = None) -> int:
    """`python -m ops.docs.pages [--check]`: write the stale pages (or only list them, exit 1
    if any). `--render-into DIR` is the child's part (`rendered`)."""
    parser = argparse.ArgumentParser(prog="python -m ops.docs.pages", description=__doc__)
    parser.add_argument("--check", action="store_true", help="list stale pages, write none")
    parser.add_argument("--render-into", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render_into:
        render_into(args.render_into)
        return 0
    pages = rendered()
    found = stale(pages)
    for page in found:
        print(f"docs/{page}: stale" if args.check else f"docs/{page}: written")
        if not args.check:
            (DOCS / page).parent.mkdir(parents=True, exist_ok=True)
            (DOCS / page).write_text(pages[page], encoding="utf-8")
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
