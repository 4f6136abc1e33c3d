"""agentq for Python programs: `agentq.client` drives a running agentq over its HTTP API."""
