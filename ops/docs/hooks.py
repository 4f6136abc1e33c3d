"""The MkDocs hook (`mkdocs.yml`, `hooks:`) that adds the generated reference pages to the site
being built. Each page is rendered by its module in `ops.docs`; the pages exist only in the
build, never in the repository, so they cannot go stale.

Run `python -m mkdocs build --strict` (or `serve`) from the repository root: `-m` puts the root on
`sys.path`, so the pages describe this checkout's code. A hook rather than the mkdocs-gen-files
plugin: MkDocs' own `File.generated` does what that plugin did, and its 0.6 releases pull in
another distribution (properdocs) that prints a banner on every build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mkdocs.structure.files import File, Files

from ops.docs import api_reference, cli_reference, metrics_reference, settings_reference

PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": cli_reference.render,
    "reference/settings.md": settings_reference.render,
    "reference/http-api.md": api_reference.render,
    "reference/metrics.md": metrics_reference.render,
}
"""Each generated page: its path in the site and what renders it."""


def on_files(files: Files, config: Any) -> Files:
    """MkDocs' `on_files` event: add every page of `PAGES`, rendered now."""
    for page, render in PAGES.items():
        files.append(File.generated(config, page, content=render()))
    return files
