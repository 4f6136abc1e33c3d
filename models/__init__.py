"""Shared by every agentq process: the database's rows, and every rule about them.

A newcomer finds a domain by its folder; each package's `__init__` says what it owns and what
it may use:

- the base, the modules directly in `models/`: the database (`db`, `migrate`, `migrations/`),
  settings (`settings*`), the shared tables (`tables`: runs, steps, attempts, escalations,
  tokens, ...), errors, run and step states (`states`), SQL helpers (`sql`, `bounds`), what
  Postgres can store (`storable`), values as people read them (`formats`, `display`), advisory
  locks, private files and orphan-proof forks. The base uses no domain.
- `mcp/`: sessions with the MCP servers of `AGENTQ_MCP_SERVERS`, their tools' listings, calls
  and results; uses the base.
- `plans/`: a plan's shape, references, expectations and tools (Python ones and MCP servers');
  uses the base and `mcp`.
- `engine/`: runs, steps, transitions, the coordinator, the queue, leases, budgets; uses plans.
- `memory/`: facts, episodes, procedures, messages, recall, embeddings; uses the engine.
- `review/`: escalations and reviewers' decisions; uses the engine and memory.
- `access/`: API tokens, console sessions, remote database access; uses the engine and review.
- `operations/`: metrics, logs, webhooks, the event feed, retention; uses the engine.
- `front/`: the one implementation of each command the CLI, the API and the console call.

The rules between them are checked by tests/unit/test_architecture.py. `models` imports no
other package of ours; `worker`, `scheduler` and `api` import only `models`.
"""
