"""Operations: what people running agentq watch and keep.

Owns metrics (`metrics`: the definitions; `metric_gauges`, `metrics_export`), logs (`logs`),
webhooks (`webhooks`, `webhook_tables`, `deliveries`, `destinations`, `circuit_breakers`: the
sender's side of the outbox the engine writes), the event feed streams read (`event_feed`) and
retention (`retention`).

May use: the base, `models.plans`, `models.engine` and `models.memory`. No domain uses it.
"""
