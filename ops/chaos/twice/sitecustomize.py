"""Every task message published twice: the fault `ops.chaos` injects in its `duplicates` scenario.

Python imports `sitecustomize` at start-up from the first `sys.path` entry that has one; the
scenario puts this directory first on the engine processes' `PYTHONPATH`, so each of them (the
worker, the scheduler and beat) publishes every Celery task message twice, as a broker that
redelivers would deliver it twice. Control and event messages (no `task` header) go once.
"""

from ops.chaos.duplicates import publish_twice

publish_twice()
