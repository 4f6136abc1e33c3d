"""The login role other machines use to reach the embedded Postgres (`agentq up --listen`).

Not a superuser: a holder of its password reads and writes every table (PostgreSQL's predefined
roles `pg_read_all_data` and `pg_write_all_data`, PostgreSQL 14+: "Predefined Roles"), which is
what a worker, a scheduler or the API does, but cannot run programs on the server
(`COPY ... TO PROGRAM` needs `pg_execute_server_program`), change roles or load extensions.
Migrations run on the machine of `agentq up`, over its Unix socket.
"""

from __future__ import annotations

from typing import Final

import psycopg
from psycopg import sql

REMOTE_ROLE: Final = "agentq"
REMOTE_ROLE_GRANTS: Final = ("pg_read_all_data", "pg_write_all_data")

# Named queries: create the role once, then set its password (scram-sha-256 by default since
# PostgreSQL 14: `password_encryption`) and its grants on every start.
ROLE_EXISTS: Final = "SELECT 1 FROM pg_roles WHERE rolname = %s"
CREATE_ROLE: Final = "CREATE ROLE {role} LOGIN PASSWORD {password}"
SET_PASSWORD: Final = "ALTER ROLE {role} WITH LOGIN NOSUPERUSER PASSWORD {password}"
GRANT_ROLE: Final = "GRANT {granted} TO {role}"


def ensure_remote_role(conninfo: str, password: str, role: str = REMOTE_ROLE) -> None:
    """Create login role `role` on the server of `conninfo` (a libpq URL of a superuser), or set
    its password, and grant it `REMOTE_ROLE_GRANTS`. Raises `psycopg.Error` if the server
    refuses."""
    names = {"role": sql.Identifier(role), "password": sql.Literal(password)}
    with psycopg.connect(conninfo, autocommit=True) as connection:
        exists = connection.execute(ROLE_EXISTS, (role,)).fetchone() is not None
        statement = SET_PASSWORD if exists else CREATE_ROLE
        connection.execute(sql.SQL(statement).format(**names))
        for granted in REMOTE_ROLE_GRANTS:
            grant = sql.SQL(GRANT_ROLE).format(granted=sql.Identifier(granted), role=names["role"])
            connection.execute(grant)
