"""The tools agentq ships: the built-ins (`builtin`) and the expense demo's (`expenses`).

Each module registers its tools with `models.plans.tools.tool` when imported; the registry, the
checks of a plan's tool calls and the catalog shown to planners are in `models.plans.tools`, so
every process (the API included) checks plans without importing the worker.
"""
