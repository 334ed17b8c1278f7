"""The connections the SQL fence is tested on, each behind one small adapter (``Db``): the
caller's own way to run SQL, commit and roll back, and the object ``fences.sql`` is given."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from fencelock_tools.servers.postgres import PostgresServer

SYNC_KINDS = (
    "sqlite3",
    "psycopg",
    "pgbouncer",
    "sqlalchemy-sqlite",
    "sqlalchemy-postgres",
    "session-postgres",
)
ASYNC_KINDS = ("psycopg", "pgbouncer", "sqlalchemy-aiosqlite", "sqlalchemy-postgres", "session")
POSTGRES = ("psycopg", "pgbouncer", "sqlalchemy-postgres", "session-postgres", "session")
ACCOUNTS = "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)"


def pg_reset(postgres: PostgresServer) -> None:
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS fencelock_fences, accounts, ledger")


def target(request: pytest.FixtureRequest, kind: str) -> tuple[str, str]:
    """(libpq DSN, SQLAlchemy URL) of the server ``kind`` uses (PgBouncer's, or PostgreSQL's),
    emptied once per test."""
    server = request.getfixturevalue("pgbouncer" if kind == "pgbouncer" else "postgres")
    if not hasattr(request.node, "fence_tables_dropped"):
        pg_reset(request.getfixturevalue("postgres"))
        request.node.fence_tables_dropped = True
    return server.dsn, server.url()


@dataclass
class Db:
    """A sync connection: ``conn`` is what the fence is given."""

    conn: Any
    pyformat: bool = False  # psycopg's %(name)s placeholders
    closers: list[Callable[[], object]] = field(default_factory=list)

    def run(self, sql: str, params: dict[str, object] | None = None) -> Any:
        if self.pyformat:
            return self.conn.execute(re.sub(r":(\w+)", r"%(\1)s", sql), params or {})
        if isinstance(self.conn, sqlite3.Connection):
            return self.conn.execute(sql, params or {})
        return self.conn.execute(sa.text(sql), params or {})

    def value(self, sql: str, params: dict[str, object] | None = None) -> Any:
        row = self.run(sql, params).fetchone()
        return None if row is None else row[0]

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        for close in reversed(self.closers):
            close()


def connect(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    if kind == "sqlite3":
        conn = sqlite3.connect(tmp_path / "fence.sqlite3", timeout=30)
        return Db(conn, closers=[conn.close])
    if kind in ("psycopg", "pgbouncer"):
        dsn, _ = target(request, kind)
        # PgBouncer in transaction mode: no server-side prepared statements (psycopg's docs)
        conn = psycopg.connect(dsn, prepare_threshold=None)
        return Db(conn, pyformat=True, closers=[conn.close])
    if kind == "sqlalchemy-sqlite":
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'fence.sqlite3'}")
    else:
        engine = sa.create_engine(target(request, "postgres")[1])
    if kind == "session-postgres":
        session = Session(engine)
        return Db(session, closers=[engine.dispose, session.close])
    connection = engine.connect()
    return Db(connection, closers=[engine.dispose, connection.close])


@dataclass
class AsyncDb:
    """An asyncio connection: ``conn`` is what the fence is given."""

    conn: Any
    pyformat: bool = False
    closers: list[Callable[[], Any]] = field(default_factory=list)

    async def run(self, sql: str, params: dict[str, object] | None = None) -> Any:
        if self.pyformat:
            return await self.conn.execute(re.sub(r":(\w+)", r"%(\1)s", sql), params or {})
        return await self.conn.execute(sa.text(sql), params or {})

    async def value(self, sql: str, params: dict[str, object] | None = None) -> Any:
        row = (await self.run(sql, params)).fetchone()
        if not isinstance(row, tuple | sa.Row) and row is not None:
            row = await row  # psycopg's cursor
        return None if row is None else row[0]

    async def commit(self) -> None:
        await self.conn.commit()

    async def rollback(self) -> None:
        await self.conn.rollback()

    async def close(self) -> None:
        for close in reversed(self.closers):
            await close()


async def async_connect(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncDb:
    if kind in ("psycopg", "pgbouncer"):
        dsn, _ = target(request, kind)
        conn = await psycopg.AsyncConnection.connect(dsn, prepare_threshold=None)
        return AsyncDb(conn, pyformat=True, closers=[conn.close])
    if kind == "sqlalchemy-aiosqlite":
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'fence.sqlite3'}")
    else:
        engine = create_async_engine(target(request, "postgres")[1])
    if kind == "session":
        session = AsyncSession(engine)
        return AsyncDb(session, closers=[engine.dispose, session.close])
    connection: AsyncConnection = await engine.connect()
    return AsyncDb(connection, closers=[engine.dispose, connection.close])
