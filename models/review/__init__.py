"""Review: people deciding what the agent could not.

Owns escalations as a queue reviewers claim (`escalations`), the decisions on them: approve,
edit, reject, answer (`reviews`, `answers`, `drafts`: the plan a reviewer edits), and who wrote
what a run used (`authorship`: a reviewer's words are never the user's memory).

May use: the base, `models.plans`, `models.engine` (a decision moves its run) and
`models.memory` (a reviewer's answer joins the run's conversation). Neither the engine nor memory
uses review.
"""
