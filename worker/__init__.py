"""The worker process: plan, step, replan and synthesize tasks."""
