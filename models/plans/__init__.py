"""Plans: what a run is asked to do, before and apart from running it.

Owns the plan's shape (`plans`: steps, their arguments and outputs, versions of a run's plan;
`plan_writes`: a version's steps and row written; `graph` and `layout`: the dependency graph,
its order and its waves), what a step's arguments may refer to (`references`: `${steps.X}`,
`${facts.K}`), what a step's result must look like (`expectations`, `step_outputs`,
`goal_values`), the tool catalogue (`tools`: Python tools and MCP servers' tools alike, and
`tool_arguments`: their arguments' checks), the offline planner's canned plans (`playbooks`),
step data as JSON (`step_data`), a stored step as a plan step again (`step_specs`) and the
checks of a plan before it is adopted (`plan_checks`).

May use: the base (`models.db`, `models.tables`, `models.errors`, ...) and `models.mcp` (the MCP
servers' sessions and listings, which the tool catalogue offers). Nothing here runs a step or
changes a run's state: that is `models.engine`, which uses this package.
"""
