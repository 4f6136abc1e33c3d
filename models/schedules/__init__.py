"""Goals on a schedule (issue 32, item 2): a goal submitted as its user at every due time of a
cron expression (in a time zone) or an interval.

Owns the schedules and their fires as rows (`schedules`: the `Schedule` and `ScheduleFire`
tables and their guarded writes: create, pause, resume, remove), when a schedule is due
(`due_times`, pure: croniter in an IANA zone, or an interval), the run a schedule asks for
(`requests`: a `RunRequest` kept as JSON and checked as a submit checks it), the pass that fires
due schedules (`fires`: one row per due time, claimed by its insert, and the run submitted in the
same transaction) and what a front end shows of them (`listing`).

May use: the base, `models.plans` (the plan a schedule carries) and `models.engine` (a fire
submits through `models.engine.submissions.insert_and_decide`, so quotas and the stack's limits
apply as to any submit). Nothing below uses this package; the front door (`models.front`) does.
"""
