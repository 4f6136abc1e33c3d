"""The login role other machines use to reach the embedded Postgres (`agentq up --listen`).

It gets what a worker or a scheduler needs and no more, table by table:
- SELECT, INSERT, UPDATE, DELETE on the engine's tables (runs, steps, their attempts and events,
  escalations, memory, the webhook outbox, ...), and their sequences: a worker machine runs
  every user's steps, so it is trusted with every user's data;
- SELECT alone on the views and on `READ_ONLY_TABLES`: `alembic_version` (migrations run on
  the machine of `agentq up`, over its Unix socket), `stack_limits` (the stack's quotas and
  caps, written by `agentq up` itself: `models.engine.stack_limits`) and `webhook_subscriptions` (an
  operator adds and removes them; the scheduler only reads them to fill the outbox, and the
  webhook sender, which writes their circuit state, runs on the machine of `agentq up`);
- nothing on `NO_ACCESS_TABLES`, the API's credentials (`api_tokens`, `console_sessions`): a
  holder of this password can neither mint an admin token or a console session, which would
  outlive a change of the password, nor read the tokens' hashes. So `agentq api` runs where
  `agentq up` runs (it does: `agentq up` serves it), not on a worker machine.
It is no superuser and holds no predefined role: it cannot run programs on the server
(`COPY ... TO PROGRAM` needs `pg_execute_server_program`), create objects, change roles or load
extensions. (It held `pg_read_all_data` and `pg_write_all_data` before; they are revoked from a
role an older version made.) The grants are set table by table at every `agentq up --listen`,
after the migrations, so a table a migration adds is read-write for it unless named here.
"""

from __future__ import annotations

from typing import Final

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

REMOTE_ROLE: Final = "agentq"
NO_ACCESS_TABLES: Final = frozenset({"api_tokens", "console_sessions"})
READ_ONLY_TABLES: Final = frozenset({"alembic_version", "stack_limits", "webhook_subscriptions"})
READ_WRITE: Final = "SELECT, INSERT, UPDATE, DELETE"
OLD_GRANTS: Final = ("pg_read_all_data", "pg_write_all_data")  # what older versions granted

# Named queries: create the role once, then set its password (scram-sha-256 by default since
# PostgreSQL 14: `password_encryption`) and its grants on every start.
ROLE_EXISTS: Final = "SELECT 1 FROM pg_roles WHERE rolname = %s"
CREATE_ROLE: Final = "CREATE ROLE {role} LOGIN PASSWORD {password}"
SET_PASSWORD: Final = "ALTER ROLE {role} WITH LOGIN NOSUPERUSER PASSWORD {password}"
# The role's membership in a predefined role (older versions granted two).
HAS_MEMBERSHIP: Final = "SELECT pg_has_role(%s, %s, 'MEMBER')"
REVOKE_ROLE: Final = "REVOKE {granted} FROM {role}"
# The tables and views of schema public, views (and materialized views) flagged.
RELATIONS: Final = """
SELECT c.relname, c.relkind IN ('v', 'm') FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm') ORDER BY c.relname"""
# One relation's grants, replaced whole.
REVOKE_TABLE: Final = "REVOKE ALL ON TABLE {relation} FROM {role}"
GRANT_TABLE: Final = "GRANT {privileges} ON TABLE {relation} TO {role}"
# The schema (to name its tables) and every sequence (nextval of a serial id).
GRANT_SCHEMA: Final = "GRANT USAGE ON SCHEMA public TO {role}"
GRANT_SEQUENCES: Final = "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}"


def privileges_for(relation: str, *, is_view: bool) -> str | None:
    """The privileges of the remote role on `relation`: None for `NO_ACCESS_TABLES`, `SELECT`
    for a view or one of `READ_ONLY_TABLES`, else `READ_WRITE`."""
    if relation in NO_ACCESS_TABLES:
        return None
    if is_view or relation in READ_ONLY_TABLES:
        return "SELECT"
    return READ_WRITE


def ensure_remote_role(conninfo: str, password: str, role: str = REMOTE_ROLE) -> None:
    """Create login role `role` on the server of `conninfo` (a libpq URL of a superuser), or set
    its password, and set its grants (`privileges_for` each table and view), in one
    transaction. Raises `psycopg.Error` if the server refuses."""
    names = {"role": sql.Identifier(role), "password": sql.Literal(password)}
    with psycopg.connect(conninfo) as connection, connection.transaction():
        exists = connection.execute(ROLE_EXISTS, (role,)).fetchone() is not None
        connection.execute(sql.SQL(SET_PASSWORD if exists else CREATE_ROLE).format(**names))
        for granted in OLD_GRANTS:
            member = connection.execute(HAS_MEMBERSHIP, (role, granted)).fetchone()
            if member is not None and member[0]:
                revoke = sql.SQL(REVOKE_ROLE).format(granted=sql.Identifier(granted), **names)
                connection.execute(revoke)
        _grant_tables(connection, sql.Identifier(role))


def _grant_tables(connection: psycopg.Connection[TupleRow], role: sql.Identifier) -> None:
    connection.execute(sql.SQL(GRANT_SCHEMA).format(role=role))
    for relation, is_view in connection.execute(RELATIONS).fetchall():
        names = {"relation": sql.Identifier(str(relation)), "role": role}
        connection.execute(sql.SQL(REVOKE_TABLE).format(**names))
        privileges = privileges_for(str(relation), is_view=bool(is_view))
        if privileges is not None:
            grant = sql.SQL(GRANT_TABLE).format(privileges=sql.SQL(privileges), **names)
            connection.execute(grant)
    connection.execute(sql.SQL(GRANT_SEQUENCES).format(role=role))
