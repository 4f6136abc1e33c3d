"""Tooling: the CLI, the embedded local stack, container files, benchmark scripts."""
