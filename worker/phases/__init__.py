"""A run's paid phases, each a task of its own: planning and replanning (`planner`, with
recalled procedures adopted by reference: `adoption`, `procedure_context`), the should-replan
check after a step (`replan_checks`), and the final answer with its goal check (`synthesis`,
`goal_check`).

Each phase is claimed before it pays (`models.engine.phases`), so a message delivered twice asks
the model once.
"""
