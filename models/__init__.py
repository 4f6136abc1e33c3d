"""Shared by every agentq process: tables, the engine, the state transitions, and migrations."""
