"""``fencelock.fences.sql`` through the asyncio connections it takes (``async with fenced``,
``await update``): psycopg's AsyncConnection (PostgreSQL, and behind PgBouncer), SQLAlchemy's
AsyncConnection (aiosqlite, psycopg) and AsyncSession."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

import fencelock
from fencelock import fences
from fencelock_tools.servers.postgres import PostgresServer
from tests.concurrency import AsyncCall
from tests.fences.sqlkit import ACCOUNTS, ASYNC_KINDS, AsyncDb, async_connect, connect

RESOURCE = "account:1"


@pytest.fixture(params=ASYNC_KINDS)
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncDb]:
    sync = connect("sqlite3" if "sqlite" in request.param else "psycopg", request, tmp_path)
    fences.sql.install(sync.conn)  # (install takes a sync connection)
    sync.run(ACCOUNTS)
    sync.run("INSERT INTO accounts (id, balance) VALUES (1, 100)")
    sync.commit()
    sync.close()
    db = await async_connect(request.param, request, tmp_path)
    yield db
    await db.rollback()
    await db.close()


async def state(db: AsyncDb) -> tuple[int, int | None]:
    balance = await db.value("SELECT balance FROM accounts WHERE id = 1")
    token = await db.value(
        "SELECT token FROM fencelock_fences WHERE resource = :r", {"r": RESOURCE}
    )
    await db.rollback()
    return int(balance), token


async def deposit(db: AsyncDb, token: int, amount: int) -> None:
    async with fences.sql.fenced(db.conn, RESOURCE, token):
        await db.run("UPDATE accounts SET balance = balance + :a WHERE id = 1", {"a": amount})
    await db.commit()


async def test_the_newest_token_writes_and_an_older_one_is_refused_with_its_transaction(
    db: AsyncDb,
) -> None:
    await deposit(db, 7, 10)
    await deposit(db, 7, 5)
    assert await state(db) == (115, 7)
    await db.run("UPDATE accounts SET balance = 0 WHERE id = 1")
    with pytest.raises(fencelock.StaleToken) as refused:
        async with fences.sql.fenced(db.conn, RESOURCE, 6):
            pytest.fail("the block of a stale token ran")
    assert (refused.value.key, refused.value.token, refused.value.seen) == (RESOURCE, 6, 7)
    await db.commit()
    assert await state(db) == (115, 7)


async def test_bad_input_and_the_wrong_with_write_nothing(db: AsyncDb) -> None:
    for token, error in ((0, ValueError), (2**63, ValueError), ("1", TypeError)):
        with pytest.raises(error):
            async with fences.sql.fenced(db.conn, RESOURCE, token):
                pytest.fail("the block ran")
    with pytest.raises(TypeError, match="resource"):
        async with fences.sql.fenced(db.conn, b"account", 3):  # type: ignore[arg-type]
            pytest.fail("the block ran")
    with pytest.raises(TypeError, match="async with"), fences.sql.fenced(db.conn, RESOURCE, 3):
        pytest.fail("the block ran")
    with pytest.raises(TypeError, match="sync connection"):
        fences.sql.install(db.conn)
    assert await db.value("SELECT COUNT(*) FROM fencelock_fences") == 0


@pytest.mark.parametrize("db", ["psycopg", "pgbouncer"], indirect=True)
async def test_a_connection_outside_a_transaction_is_refused(db: AsyncDb) -> None:
    await db.conn.set_autocommit(True)
    with pytest.raises(ValueError, match="needs a transaction"):
        async with fences.sql.fenced(db.conn, RESOURCE, 5):
            pytest.fail("the block ran")
    assert await db.value("SELECT COUNT(*) FROM fencelock_fences") == 0


async def test_update_refuses_an_older_token(db: AsyncDb) -> None:
    await db.run("CREATE TABLE ledger (id INTEGER PRIMARY KEY, amount INTEGER,"
                 " fence_token BIGINT NOT NULL DEFAULT 0)")  # fmt: skip
    await db.run("INSERT INTO ledger (id, amount) VALUES (1, 0)")
    await db.commit()
    assert await fences.sql.update(db.conn, "ledger", {"amount": 5}, where={"id": 1}, token=4) == 1
    await db.commit()
    with pytest.raises(fencelock.StaleToken) as refused:
        await fences.sql.update(db.conn, "ledger", {"amount": 1}, where={"id": 1}, token=3)
    assert refused.value.seen == 4
    assert await fences.sql.update(db.conn, "ledger", {"amount": 1}, where={"id": 9}, token=9) == 0
    await db.rollback()
    assert await db.value("SELECT amount FROM ledger WHERE id = 1") == 5


async def waiting_on_a_lock(postgres: PostgresServer) -> bool:
    async with await psycopg.AsyncConnection.connect(postgres.dsn, autocommit=True) as admin:
        cursor = await admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        )
        row = await cursor.fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize("kind", ["psycopg", "pgbouncer", "sqlalchemy-postgres"])
async def test_the_older_token_waits_for_the_newer_and_fails(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, postgres: PostgresServer
) -> None:
    sync = connect("psycopg", request, tmp_path)
    fences.sql.install(sync.conn)
    sync.commit()
    sync.close()
    newer = await async_connect(kind, request, tmp_path)
    older = await async_connect(kind, request, tmp_path)
    try:

        async def second() -> None:
            async with fences.sql.fenced(older.conn, RESOURCE, 10):
                pytest.fail("the older token's block ran")

        async with fences.sql.fenced(newer.conn, RESOURCE, 20):
            call = AsyncCall(second)
            deadline = time.monotonic() + 30
            while not await waiting_on_a_lock(postgres):  # the older waits for the newer
                assert time.monotonic() < deadline, "the second transaction never waited"
        await newer.commit()
        with pytest.raises(fencelock.StaleToken) as refused:
            await call.result()
        assert refused.value.seen == 20
    finally:
        for db in (newer, older):
            await db.rollback()
            await db.close()
