"""Security regression tests against `agentq up` with its default settings, over real HTTP and
from headless Chromium where a browser is what enforces the rule (framing).

Each test reproduces one finding of issue 9 (a submitter writing host files through a tool,
result amplification, one user starving the others, forget undone by runs in flight, reviewer
text planted in memory, an open embedded Redis, framing, replayed cookies, look-alike names,
spec conformance) and checks that it no longer holds. The fixtures are tests/browser's: this
directory gets its own `agentq up`.
"""

from tests.support.browser import browser, pytest_runtest_setup
from tests.support.console import console, make_token, sign_in

__all__ = ["browser", "console", "make_token", "pytest_runtest_setup", "sign_in"]
