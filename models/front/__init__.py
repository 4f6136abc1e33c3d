"""The front door: every command and query the CLI, the HTTP API and the console call.

One implementation of each command (`commands`: submit, cancel, review, forget, ...) and each
shared read (`queries`), so the three front ends cannot drift apart.

May use every domain; no domain uses it.
"""
