"""MCP: sessions with the servers of `AGENTQ_MCP_SERVERS`, their tools, calls and results.

Owns the process's event loop for the asyncio `mcp` SDK (`loop`), one session per server per
process (`sessions`), each server's listing (`catalogue`) and the names agentq gives its tools,
`mcp__<server>__<tool>` (`names`, which imports no SDK), and a call's answer as a step's result or
a `ToolError` (`calls`, `results`). May use: the base (`models.settings_mcp`, `models.errors`,
...). The plans' tool registry (`models.plans.tools`) offers these tools beside the Python ones,
importing this package only where MCP servers are configured or a plan names an MCP tool.
"""
