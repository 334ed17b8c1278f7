"""The PostgreSQL harness (``fencelock_tools.servers.postgres``) on the binaries it can use:
the system's (the ``postgres`` fixture, when installed) and the ``pgserver`` wheel's, which is
what a machine without PostgreSQL and without root gets (the ``test`` extra installs it)."""

from __future__ import annotations

import psycopg
import pytest

import fencelock
from fencelock import fences
from fencelock_tools.servers.postgres import PostgresServer, pgserver_bindir


def test_the_pgserver_wheel_runs_a_server_the_fence_works_on() -> None:
    bindir = pgserver_bindir()
    if bindir is None:
        pytest.skip("pgserver is not installed (the test extra installs it on Linux)")
    with PostgresServer(bindir) as server, psycopg.connect(server.dsn) as conn:
        assert "PostgreSQL 16" in str(conn.execute("SELECT version()").fetchone())
        fences.sql.install(conn)
        with fences.sql.fenced(conn, "r", 2):
            pass
        conn.commit()
        with pytest.raises(fencelock.StaleToken), fences.sql.fenced(conn, "r", 1):
            pass
    assert not server.dir.exists()  # stopped by PID, its directory gone
