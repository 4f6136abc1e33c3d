"""The review console's fixtures: `agentq up` in a subprocess (tests/support/console.py)."""

from tests.support.browser import browser, page, pytest_runtest_setup
from tests.support.console import console, make_token, sign_in

__all__ = ["browser", "console", "make_token", "page", "pytest_runtest_setup", "sign_in"]
