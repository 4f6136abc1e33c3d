"""The scheduler process: coordinator decisions, and the periodic reconciler on beat."""
