"""models/access/remote_access.py on the session engine's Postgres: role `agentq`'s grants, set
after the migrations, table by table, including on a role an older version made with
`pg_write_all_data` (which let any worker machine insert an admin token)."""

from __future__ import annotations

import psycopg
import pytest

from models.access.remote_access import ensure_remote_role
from models.settings import get_settings
from ops.stack import LocalStack

pytestmark = pytest.mark.integration
ROLE = "agentq_grants_test"  # not `agentq`: other tests may open the stack to other machines
DROP_ROLE = f"""DO $$ BEGIN
IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
    EXECUTE 'DROP OWNED BY {ROLE}'; EXECUTE 'DROP ROLE {ROLE}';
END IF; END $$"""


def _superuser() -> str:
    url = get_settings().database_url or ""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def _privileges(conninfo: str) -> tuple[object, ...]:
    with psycopg.connect(conninfo) as connection:
        row = connection.execute(
            "SELECT pg_has_role(%(r)s, 'pg_write_all_data', 'MEMBER'),"
            " pg_has_role(%(r)s, 'pg_read_all_data', 'MEMBER'),"
            " has_table_privilege(%(r)s, 'api_tokens', 'SELECT, INSERT, UPDATE, DELETE'),"
            " has_table_privilege(%(r)s, 'console_sessions', 'SELECT, INSERT, UPDATE, DELETE'),"
            " has_table_privilege(%(r)s, 'webhook_subscriptions', 'INSERT, UPDATE, DELETE'),"
            " has_table_privilege(%(r)s, 'webhook_subscriptions', 'SELECT'),"
            " has_table_privilege(%(r)s, 'steps', 'SELECT'),"
            " has_table_privilege(%(r)s, 'steps', 'INSERT'),"
            " has_table_privilege(%(r)s, 'facts', 'UPDATE'),"
            " has_table_privilege(%(r)s, 'run_progress', 'SELECT')",
            {"r": ROLE},
        ).fetchone()
    assert row is not None
    return tuple(row)


def test_an_older_roles_blanket_grants_are_replaced_by_per_table_ones(engine: LocalStack) -> None:
    conninfo = _superuser()
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(DROP_ROLE)
        connection.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD 'old'")
        connection.execute(f"GRANT pg_read_all_data, pg_write_all_data TO {ROLE}")
    assert _privileges(conninfo)[:4] == (True, True, True, True)  # what older versions left
    ensure_remote_role(conninfo, "new-password", role=ROLE)
    assert _privileges(conninfo) == (
        *(False, False),  # no predefined role
        *(False, False),  # the API's credentials: no access
        *(False, True),  # subscriptions: read only
        *(True, True, True, True),  # the engine's tables, and the views to read
    )
