"""The worker's side of memory: each model call's working memory, assembled under a token budget
(`context`, `working_memory`, `ledger`: the plan and what each done step found, `folds`: older
turns folded into the run's summary), what of a user's memory a call may hold once a reviewer's
words are in it (`withholding`), and remembering a run once it has ended (`remembering`,
`run_memory`, `extraction`: its episode and the facts it taught). The rows and recall are
`models.memory`.
"""
