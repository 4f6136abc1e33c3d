"""The documentation site (issue 28): `mkdocs build --strict` passes with every page of the nav,
and the reference pages generated from the code (ops/docs/) name everything they describe."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from api.app import create_api
from models.operations.metric_gauges import GAUGES
from models.operations.metrics import ALL
from models.settings import Settings
from ops.docs import api_reference, cli_reference, metrics_reference, settings_reference
from ops.docs.pages import PAGES, rendered, stale
from ops.docs.settings_reference import variables
from tests.support.doc_pages import ROOT

# The build on this 2-core machine: about 3 s quiet (most of it importing what the reference
# pages describe); the bound leaves room for a loaded machine.
BUILD_BOUND_S = 120


def _nav_pages(nav: Any) -> list[str]:
    """The page paths of mkdocs.yml's `nav`, in order."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return [p for item in nav for p in _nav_pages(item)]


NAV = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])


def _built(site: Path, page: str) -> Path:
    """Where the build writes `page` (`how-to/cli.md` -> `how-to/cli/index.html`)."""
    stem = page.removesuffix(".md")
    return site / ("index.html" if stem == "index" else f"{stem}/index.html")


def test_the_nav_has_every_generated_page_and_no_page_twice() -> None:
    assert set(PAGES) <= set(NAV)
    assert len(NAV) == len(set(NAV))


def test_the_committed_reference_pages_are_what_the_code_renders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pages are files of the repository, so that links to them work on GitHub too; they
    describe the defaults, whatever the settings and terminal of whoever renders them."""
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("AGENTQ_MAX_TOKEN_BUDGET", "5")
    monkeypatch.setenv("AGENTQ_TOOL_MODULES", '["worker.tools.builtin"]')
    found = stale(rendered())
    assert not found, f"stale: {found}; run `python -m ops.docs.pages` and commit them"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it: `python -m mkdocs build --strict` (not `--quiet`, which
    drops the warnings before `--strict` counts them)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    took = time.monotonic() - started
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert done.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(warnings)
    assert took < BUILD_BOUND_S, f"the build took {took:.1f} s"
    return out


def test_the_site_builds_strictly_with_every_page_of_the_nav(site: Path) -> None:
    missing = [page for page in NAV if not _built(site, page).is_file()]
    assert not missing, f"pages of the nav the build did not write: {missing}"
    built = sorted(site.rglob("index.html"))
    assert len(built) == len(NAV), [str(p.relative_to(site)) for p in built]
    assert (site / "search" / "search_index.json").is_file()


def test_the_built_settings_page_names_every_setting(site: Path) -> None:
    html = _built(site, "reference/settings.md").read_text()
    missing = [name for name in Settings.model_fields if f"AGENTQ_{name.upper()}" not in html]
    assert not missing, f"settings missing from the settings reference: {missing}"


def test_the_built_reference_pages_are_not_trivial(site: Path) -> None:
    for page in PAGES:
        assert _built(site, page).stat().st_size > 10_000, page


def test_the_settings_page_gives_each_settings_default_and_range() -> None:
    text = settings_reference.render()
    fields = Settings.model_fields
    for name, field in fields.items():
        (row,) = [r for r in text.splitlines() if r.startswith(f"| `{variables(name, field)[0]}`")]
        assert settings_reference.default(field) in row, row
    row = next(r for r in text.splitlines() if r.startswith("| `AGENTQ_API_PORT`"))
    assert "`8765`" in row and "≥ 1, ≤ 65535" in row
    row = next(r for r in text.splitlines() if r.startswith("| `AGENTQ_PROVIDER`"))
    assert "`offline`, `openai`" in row
    assert f"{len(fields)} settings" in text


def test_the_cli_page_has_every_command_and_option() -> None:
    text = cli_reference.render()
    found = list(cli_reference.walk())
    assert len(found) > 40  # the lazy sub-apps' commands are there
    for command in found:
        assert f"{' '.join(('agentq', *command.path))}\n" in text, command.path
        for option in cli_reference.options(command) - {"--help"}:
            assert f"`{option}" in text or f"/ {option}" in text, (command.path, option)


def test_the_http_api_page_has_every_operation() -> None:
    text = api_reference.render()
    spec = create_api().openapi()
    for path, item in spec["paths"].items():
        for method in item:
            assert f"### {method.upper()} {path} " in text, (method, path)
    assert "`/docs`" in text and "RunSubmit" in text


def test_the_metrics_page_has_every_metric_with_its_labels() -> None:
    text = metrics_reference.render()
    for metric in ALL:
        assert f"`{metric._name}" in text
        row = next(r for r in text.splitlines() if f"`{metric._name}" in r)
        assert all(f"`{label}`" in row for label in metric._labelnames), row
    for name, (_, labels) in GAUGES.items():
        row = next(r for r in text.splitlines() if r.startswith(f"| `{name}`"))
        assert all(f"`{label}`" in row for label in labels), row


def test_every_setting_has_a_description() -> None:
    """The settings reference shows each field's `description`: none may be left out."""
    missing = [name for name, field in Settings.model_fields.items() if not field.description]
    assert not missing, f"settings without a description (Field(description=...)): {missing}"
