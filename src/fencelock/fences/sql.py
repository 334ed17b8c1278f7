"""Fencing in SQL, in the caller's own transaction (docs/fencing.md, "SQL").

A fence table keeps, per resource, the highest fencing token seen. ``fenced(conn, resource,
token)`` raises it to ``token`` with one conditional upsert, inside the transaction that then
does the caller's writes, so that the check and the writes commit or roll back together: a
larger token already there makes it roll the transaction back and raise ``StaleToken``. The
upsert takes the fence row's lock until the transaction ends, so two holders' transactions on
one resource run one after the other, and the older token fails whichever started first. No
session state and no advisory lock: it holds behind PgBouncer in transaction pooling mode.

``update(conn, table, values, where=..., token=...)`` is the row-level form, for a table that
carries its own fence column.

Connections: DB-API 2 (``sqlite3``, psycopg 3) and SQLAlchemy (``Connection``, ``Session``),
and their asyncio twins (psycopg's ``AsyncConnection``, SQLAlchemy's ``AsyncConnection`` and
``AsyncSession``: ``async with fenced(...)``, ``await update(...)``). SQL dialects: SQLite
(3.24 or later) and PostgreSQL. None of these libraries is imported here: the connection given
brings its own.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from .._fencing import fencing_token, refused, resource_name
from ..errors import StaleToken

__all__ = ["TABLE", "Fenced", "ddl", "fenced", "install", "update"]

TABLE = "fencelock_fences"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
_DIALECTS = ("sqlite", "postgresql")


def _identifier(what: str, name: object) -> str:
    """A table or column name, put into SQL as it is: so only plain identifiers (``schema.``
    allowed), never anything that could be SQL."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(
            f"{what} must be a plain SQL identifier (letters, digits, _), not {name!r}"
        )
    return name


def ddl(table: str = TABLE) -> str:
    """The fence table's DDL, for a migration tool (``install`` runs it)."""
    table = _identifier("table", table)
    return (
        f"CREATE TABLE IF NOT EXISTS {table} ("
        "resource TEXT PRIMARY KEY, token BIGINT NOT NULL CHECK (token > 0))"
    )


@dataclass(frozen=True, slots=True)
class _Driver:
    """How to run SQL on one connection: its dialect, its placeholder style, sync or asyncio,
    and the DB-API connection underneath (to ask whether a transaction is open)."""

    conn: Any
    kind: str  # "sqlite3", "psycopg" or "sqlalchemy"
    dialect: str
    is_async: bool

    def sql(self, text: str) -> Any:
        """``text`` (``:name`` placeholders) as this connection takes it."""
        if self.kind == "psycopg":
            return re.sub(r":(\w+)", r"%(\1)s", text)
        if self.kind == "sqlalchemy":
            return sys.modules["sqlalchemy"].text(text)
        return text

    def execute(self, text: str, params: Mapping[str, object]) -> Any:
        """The cursor or result (awaitable under asyncio)."""
        return self.conn.execute(self.sql(text), dict(params))


def _driver(conn: object) -> _Driver:
    # (a library that is not imported made no connection: nothing is imported here)
    sqlite3, psycopg = sys.modules.get("sqlite3"), sys.modules.get("psycopg")
    if sqlite3 is not None and isinstance(conn, sqlite3.Connection):
        return _Driver(conn, "sqlite3", "sqlite", False)
    if psycopg is not None and isinstance(conn, psycopg.Connection | psycopg.AsyncConnection):
        return _Driver(conn, "psycopg", "postgresql", isinstance(conn, psycopg.AsyncConnection))
    if "sqlalchemy" in sys.modules:
        from sqlalchemy.engine import Connection
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
        from sqlalchemy.orm import Session

        if isinstance(conn, Connection | Session | AsyncConnection | AsyncSession):
            is_async = isinstance(conn, AsyncConnection | AsyncSession)
            return _Driver(conn, "sqlalchemy", _dialect(conn), is_async)
    raise TypeError(
        "conn must be a sqlite3 or psycopg 3 connection, or a SQLAlchemy Connection or Session "
        f"(or their asyncio twins), not {type(conn).__module__}.{type(conn).__qualname__}"
    )


def _dialect(conn: Any) -> str:
    bind = conn.get_bind() if hasattr(conn, "get_bind") else conn
    name: str = bind.dialect.name
    if name not in _DIALECTS:
        raise TypeError(f"the fence's SQL is for SQLite and PostgreSQL, not {name}")
    return name


def _outside_transaction(dbapi: Any) -> bool:
    """Whether a statement on the DB-API connection ``dbapi`` would commit by itself."""
    status = getattr(getattr(dbapi, "info", None), "transaction_status", None)
    if status is not None:  # psycopg: 0 is IDLE
        return bool(dbapi.autocommit) and status == 0
    if hasattr(dbapi, "in_transaction") and hasattr(dbapi, "isolation_level"):  # sqlite3
        if dbapi.in_transaction:
            return False
        return dbapi.isolation_level is None or getattr(dbapi, "autocommit", False) is True
    return False


_OUTSIDE = (
    "fenced needs a transaction: conn is in autocommit mode and none is open, so the fence "
    "and the writes would each commit alone (BEGIN first, or use a connection that is not in "
    "autocommit mode)"
)

_UPSERT = (
    "INSERT INTO {table} (resource, token) VALUES (:resource, :token) "
    "ON CONFLICT (resource) DO UPDATE SET token = excluded.token "
    "WHERE {table}.token <= excluded.token"
)
_SEEN = "SELECT token FROM {table} WHERE resource = :resource"


def _stale(resource: str, token: int, seen: Any) -> StaleToken:
    stale = StaleToken(resource, token, int(seen) if seen is not None else 0)
    refused(stale)
    return stale


class Fenced:
    """``with fenced(conn, resource, token):`` (``async with`` on an asyncio connection): see
    ``fenced``."""

    def __init__(self, conn: object, resource: object, token: object, table: str) -> None:
        self.resource = resource_name(resource)
        self.token = fencing_token(token)
        self.table = _identifier("table", table)
        self._driver = _driver(conn)
        self._params = {"resource": self.resource, "token": self.token}

    def __enter__(self) -> Fenced:
        driver = self._driver
        if driver.is_async:
            raise TypeError("an asyncio connection: use `async with fenced(...)`")
        conn = driver.conn
        dbapi = conn if driver.kind != "sqlalchemy" else _sync_dbapi(conn)
        if _outside_transaction(dbapi):
            raise ValueError(_OUTSIDE)
        if driver.execute(_UPSERT.format(table=self.table), self._params).rowcount == 0:
            row = driver.execute(_SEEN.format(table=self.table), self._params).fetchone()
            stale = _stale(self.resource, self.token, row[0] if row else None)
            _rollback(conn)
            raise stale
        return self

    async def __aenter__(self) -> Fenced:
        driver = self._driver
        if not driver.is_async:
            raise TypeError("a sync connection: use `with fenced(...)`")
        conn = driver.conn
        dbapi = conn if driver.kind != "sqlalchemy" else await _async_dbapi(conn)
        if _outside_transaction(dbapi):
            raise ValueError(_OUTSIDE)
        if (await driver.execute(_UPSERT.format(table=self.table), self._params)).rowcount == 0:
            result = await driver.execute(_SEEN.format(table=self.table), self._params)
            row = result.fetchone()
            row = await row if isinstance(row, Awaitable) else row  # psycopg's cursor: awaited
            stale = _stale(self.resource, self.token, row[0] if row else None)
            await _async_rollback(conn)
            raise stale
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Nothing: the caller's transaction commits (or rolls back) the fence with its writes."""

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Nothing, as ``__exit__``."""


def fenced(conn: object, resource: str, token: int, *, table: str = TABLE) -> Fenced:
    """Fence the caller's transaction on ``conn`` for ``resource`` with ``token``.

    Entering the block raises the fence table's token for ``resource`` to ``token`` in the
    transaction (one upsert; ``install`` made the table): if a larger token was already seen,
    the transaction is rolled back and ``StaleToken`` raised, and the block does not run. The
    caller's writes go in the block, on the same connection; the caller commits, and the fence
    commits with them. ``with`` on a sync connection, ``async with`` on an asyncio one.

    A connection in autocommit mode with no transaction open raises ``ValueError`` (each
    statement would commit alone), and so do a bad ``resource`` (a non-empty ``str``) or token
    (an ``int`` from 1 to 2**63 - 1); nothing is written then. In a psycopg
    ``conn.transaction()`` block, the ``StaleToken`` leaving the block rolls it back.
    """
    return Fenced(conn, resource, token, table)


def _sync_dbapi(conn: Any) -> Any:
    """The DB-API connection under a SQLAlchemy ``Connection`` or ``Session``."""
    from sqlalchemy.orm import Session

    connection = conn.connection() if isinstance(conn, Session) else conn
    return connection.connection.driver_connection


async def _async_dbapi(conn: Any) -> Any:
    connection = await conn.connection() if hasattr(conn, "sync_session") else conn
    raw = await connection.get_raw_connection()
    return raw.driver_connection


def _rollback(conn: Any) -> None:
    """The caller's transaction, rolled back: the fence row's lock is let go at once. A psycopg
    ``conn.transaction()`` block refuses it; the ``StaleToken`` leaving that block does it."""
    try:
        conn.rollback()
    except Exception as exc:
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise


async def _async_rollback(conn: Any) -> None:
    try:
        await conn.rollback()
    except Exception as exc:
        if type(exc).__module__.split(".")[0] != "psycopg":
            raise


def install(conn: object, *, table: str = TABLE) -> None:
    """Create the fence table if it does not exist, on a sync connection (``ddl()`` is the same
    statement, for a migration tool). The caller commits, as for any DDL it runs."""
    driver = _driver(conn)
    if driver.is_async:
        raise TypeError("install takes a sync connection (or run ddl() through your own)")
    driver.execute(ddl(table), {})


_ROW_SEEN = "SELECT MAX({column}) FROM {table} WHERE {where}"


def update(
    conn: object,
    table: str,
    values: Mapping[str, object],
    *,
    where: Mapping[str, object],
    token: int,
    column: str = "fence_token",
) -> Any:
    """The row-level fence: ``UPDATE table SET values..., column = token WHERE where... AND
    column <= token``, on a table that carries its own fence column. Returns the number of rows
    written; when the rows ``where`` names all carry a larger token, ``StaleToken`` (the
    transaction is left as it is, and no row changed); no row at all: 0. On an asyncio
    connection, a coroutine (``await update(...)``). Column names and ``table`` must be plain
    identifiers; the values are parameters."""
    token = fencing_token(token)
    table = _identifier("table", table)
    column = _identifier("column", column)
    if not values or not where:
        raise ValueError("values and where must each name at least one column")
    params: dict[str, object] = {"fence_token": token}
    sets, tests = [], []
    for i, (name, value) in enumerate(values.items()):
        sets.append(f"{_identifier('a column of values', name)} = :v{i}")
        params[f"v{i}"] = value
    for i, (name, value) in enumerate(where.items()):
        tests.append(f"{_identifier('a column of where', name)} = :w{i}")
        params[f"w{i}"] = value
    condition = " AND ".join(tests)
    statement = (
        f"UPDATE {table} SET {', '.join(sets)}, {column} = :fence_token "
        f"WHERE {condition} AND {column} <= :fence_token"
    )
    seen_sql = _ROW_SEEN.format(column=column, table=table, where=condition)
    driver = _driver(conn)
    resource = f"{table} " + " ".join(f"{k}={v!r}" for k, v in where.items())
    if driver.is_async:
        return _async_update(driver, statement, seen_sql, params, resource, token)
    rows: int = driver.execute(statement, params).rowcount
    if rows == 0:
        seen = driver.execute(seen_sql, params).fetchone()
        if seen is not None and seen[0] is not None:
            raise _stale(resource, token, seen[0])
    return rows


async def _async_update(
    driver: _Driver,
    statement: str,
    seen_sql: str,
    params: dict[str, object],
    resource: str,
    token: int,
) -> int:
    rows: int = (await driver.execute(statement, params)).rowcount
    if rows == 0:
        result = await driver.execute(seen_sql, params)
        seen = result.fetchone()
        seen = await seen if isinstance(seen, Awaitable) else seen
        if seen is not None and seen[0] is not None:
            raise _stale(resource, token, seen[0])
    return rows
