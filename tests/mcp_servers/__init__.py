"""MCP servers for the tests, written with the `mcp` SDK and run as real subprocesses (stdio or
streamable HTTP): `reports` (`python tests/mcp_servers/reports.py [--http PORT]`)."""
