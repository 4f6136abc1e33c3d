"""The HTTP API of agentq (FastAPI): runs, reviews, memory, tokens; see `api.app.create_app`."""
