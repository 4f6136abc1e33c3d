"""Headless Chromium for the console's tests (tests/browser, tests/security): Debian's package,
driven by Playwright; `playwright install` is never run (it downloads a browser build, which this
project's machines cannot).

Without Chromium at `CHROMIUM`, every test that asks for `browser` fails at once, before its
other fixtures start `agentq up`, with the one line `MISSING` (`pytest_runtest_setup`, imported
by the conftests that use `browser`): a test needing a service fails when it is missing, quickly
and saying what to install."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
MISSING = (
    f"Chromium not found at {CHROMIUM}: install it with `apt-get install chromium` "
    "(Debian/Ubuntu; the browser tests never download one with `playwright install`)"
)
# Without the background-networking flags Chromium's own connections are refused by a closed
# network, many at a time, and it looks up Google's hosts at every start.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test that drives the browser at once, in one line, when Chromium is missing."""
    if "browser" in getattr(item, "fixturenames", ()) and not os.access(CHROMIUM, os.X_OK):
        pytest.fail(MISSING, pytrace=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium for a test module."""
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page of a fresh browser context (its own cookies), 1360 x 900, British English."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, locale="en-GB")
    opened = context.new_page()
    yield opened
    context.close()
