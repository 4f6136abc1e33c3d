"""Running steps: the execute-step task's body (`steps`), the fair-next item a message wakes
(`wakeups`) and how long one task may go on (`chains`), the attempt it holds (`attempts`,
`claims`), its lease kept alive (`heartbeats`) and taken back from a lost worker (`recovery`),
its time limit (`time_limits`), a model step's tool loop (`tool_use`) and typed answer
(`step_outputs`), what its end adds to the run's turns (`step_turns`), and what happens on a
crash, a rate limit or a database outage (`crashes`, `deferrals`, `outages`).
"""
