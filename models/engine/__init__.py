"""The engine: runs, their steps and every state change, durable in Postgres.

Owns submitting a run (`submissions`, `idempotency`, `quotas`, `stack_limits`), the
coordinator's decision after each step (`coordinator`, a pure function of rows) and applying it
(`decisions`), the guarded transitions of runs and steps (`guards`, `transitions`,
`run_transitions`, `step_transitions`: hand-written SQL that moves a row only from the state it
was read in), who runs what (`queue`, `dispatch`, `fair_queue`, `leases`, `phases`, `held`,
`reconciliation`, `ended_runs`), what a run may spend (`budgets`, `budget_grants`,
`token_calibrations`, `storage`), the journal of tool calls (`tool_journal`), goal checks
(`goal_checks`, told in words by `goal_reports`), when a failure escalates
(`escalation_rules`), each run's timeline (`events`),
the outbox of its notifications (`notifications`), its trace (`tracing`), its steps as shown
(`previews`) and its content erased when its user is forgotten (`erased_runs`).

May use: the base and `models.plans`. Never memory, review, access or operations: they use the
engine, not the reverse (tests/unit/test_architecture.py).
"""
