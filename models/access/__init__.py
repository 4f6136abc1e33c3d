"""Access: who may call agentq, and how other machines reach its database.

Owns API tokens and their roles (`api_tokens`: submitter, reviewer, admin; revoking a token
releases what it claimed), the console's sessions (`ui_sessions`) and the login role a remote
worker uses (`remote_access`).

May use: the base, `models.plans`, `models.engine` and `models.review` (a revoked reviewer's
claimed escalations go back to the queue).
"""
