"""The review console's fixtures: `agentq up` in a subprocess (tests/support/console.py)."""

from tests.support.console import console, make_token, sign_in

__all__ = ["console", "make_token", "sign_in"]
