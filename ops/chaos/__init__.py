"""The fault-injection suite (issue 11): the engine under kill -9, broker and database restarts,
duplicate messages, a killed scheduler with two beats, and a provider's long retry-after.

`python -m ops.chaos` runs every scenario (`scenarios.SCENARIOS`) on a fresh embedded engine
and prints its checks and figures; tests/integration/test_chaos.py runs each in a small form.
"""
