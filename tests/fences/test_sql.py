"""``fencelock.fences.sql`` on real databases (SQLite files, PostgreSQL, PostgreSQL behind
PgBouncer in transaction pooling mode), through every sync connection it takes: sqlite3,
psycopg 3, SQLAlchemy's Connection and Session."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

import fencelock
from fencelock import fences
from fencelock_tools.servers.postgres import PostgresServer
from tests.concurrency import SyncCall, sync_until
from tests.fences.sqlkit import ACCOUNTS, POSTGRES, SYNC_KINDS, Db, connect

RESOURCE = "account:1"


@pytest.fixture(params=SYNC_KINDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    db = connect(request.param, request, tmp_path)
    fences.sql.install(db.conn)
    db.run(ACCOUNTS)
    db.run("INSERT INTO accounts (id, balance) VALUES (1, 100)")
    db.commit()
    yield db
    db.rollback()
    db.close()


def balance(db: Db) -> int:
    value = db.value("SELECT balance FROM accounts WHERE id = 1")
    db.rollback()  # (end the read's transaction)
    return int(value)


def fence(db: Db) -> int | None:
    value = db.value("SELECT token FROM fencelock_fences WHERE resource = :r", {"r": RESOURCE})
    db.rollback()
    return None if value is None else int(value)


def deposit(db: Db, token: int, amount: int) -> None:
    with fences.sql.fenced(db.conn, RESOURCE, token):
        db.run("UPDATE accounts SET balance = balance + :a WHERE id = 1", {"a": amount})
    db.commit()


def test_the_newest_token_writes_and_an_older_one_is_refused_with_its_transaction(db: Db) -> None:
    deposit(db, 7, 10)
    assert (balance(db), fence(db)) == (110, 7)
    deposit(db, 7, 5)  # the same holder again: <=
    assert balance(db) == 115

    db.run("UPDATE accounts SET balance = 0 WHERE id = 1")  # earlier in the same transaction
    with (
        pytest.raises(fencelock.StaleToken) as refused,
        fences.sql.fenced(db.conn, RESOURCE, 6),
    ):
        pytest.fail("the block of a stale token ran")
    assert (refused.value.key, refused.value.token, refused.value.seen) == (RESOURCE, 6, 7)
    db.commit()  # nothing left to commit: the transaction was rolled back
    assert (balance(db), fence(db)) == (115, 7)
    deposit(db, 8, 1)
    assert (balance(db), fence(db)) == (116, 8)


def test_a_write_that_fails_rolls_the_fence_back_with_it(db: Db) -> None:
    deposit(db, 3, 1)
    with pytest.raises(ZeroDivisionError), fences.sql.fenced(db.conn, RESOURCE, 9):
        db.run("UPDATE accounts SET balance = 0 WHERE id = 1")
        1 / 0  # noqa: B018
    db.rollback()  # the caller's transaction handling
    assert (balance(db), fence(db)) == (101, 3)
    deposit(db, 4, 1)  # 9 never committed: 4 is still the newest


@pytest.mark.parametrize(
    ("resource", "token", "error"),
    [
        (RESOURCE, 0, ValueError),
        (RESOURCE, -1, ValueError),
        (RESOURCE, 2**63, ValueError),
        (RESOURCE, "5", TypeError),
        (RESOURCE, True, TypeError),
        (RESOURCE, 5.0, TypeError),
        (5, 5, TypeError),
        ("", 5, ValueError),
        (None, 5, TypeError),
    ],
)
def test_bad_input_raises_a_typed_error_and_writes_nothing(
    db: Db, resource: Any, token: Any, error: type[Exception]
) -> None:
    with pytest.raises(error), fences.sql.fenced(db.conn, resource, token):
        pytest.fail("the block ran")
    db.commit()
    assert db.value("SELECT COUNT(*) FROM fencelock_fences") == 0


def test_not_a_connection_and_a_bad_table_name_are_refused(db: Db) -> None:
    with pytest.raises(TypeError, match="conn must be"):
        fences.sql.fenced(object(), RESOURCE, 1)
    with pytest.raises(ValueError, match="identifier"):
        fences.sql.fenced(db.conn, RESOURCE, 1, table="fences; DROP TABLE accounts")
    with pytest.raises(TypeError, match="a sync connection"):
        asyncio.run(enter_async(fences.sql.fenced(db.conn, RESOURCE, 1)))


async def enter_async(fence: fences.sql.Fenced) -> None:
    async with fence:
        pytest.fail("the block ran")


def autocommit(kind: str, db: Db) -> None:
    """Put ``db`` in autocommit mode, outside any transaction."""
    conn = db.conn
    db.rollback()
    if isinstance(conn, sqlite3.Connection):
        conn.isolation_level = None
    elif isinstance(conn, psycopg.Connection):
        conn.autocommit = True
    elif isinstance(conn, sa.Connection):
        conn.execution_options(isolation_level="AUTOCOMMIT")
    else:
        pytest.skip("a Session is always in a transaction")


@pytest.mark.parametrize("db", [k for k in SYNC_KINDS if k != "session-postgres"], indirect=True)
def test_a_connection_outside_a_transaction_is_refused_and_writes_nothing(
    db: Db, request: pytest.FixtureRequest
) -> None:
    autocommit(request.node.callspec.params["db"], db)
    with (
        pytest.raises(ValueError, match="needs a transaction"),
        fences.sql.fenced(db.conn, RESOURCE, 5),
    ):
        pytest.fail("the block ran")
    assert db.value("SELECT COUNT(*) FROM fencelock_fences") == 0
    if isinstance(db.conn, sqlite3.Connection):  # BEGIN: then it is in one
        db.run("BEGIN")
        deposit(db, 5, 1)
        assert fence(db) == 5


def test_install_is_idempotent_and_ddl_is_what_it_runs(db: Db) -> None:
    fences.sql.install(db.conn)
    db.commit()
    assert fences.sql.ddl().startswith("CREATE TABLE IF NOT EXISTS fencelock_fences (")
    fences.sql.install(db.conn, table="other_fences")
    db.commit()
    with fences.sql.fenced(db.conn, RESOURCE, 2, table="other_fences"):
        pass
    db.commit()
    assert fence(db) is None  # the default table saw nothing
    assert db.value("SELECT token FROM other_fences") == 2


# -- the row-level form: a table with its own fence column ---------------------------------------


def test_update_writes_the_row_with_its_token_and_refuses_an_older_one(db: Db) -> None:
    db.run("CREATE TABLE ledger (id INTEGER PRIMARY KEY, amount INTEGER, fence_token BIGINT"
           " NOT NULL DEFAULT 0)")  # fmt: skip
    db.run("INSERT INTO ledger (id, amount) VALUES (1, 0)")
    db.commit()
    assert fences.sql.update(db.conn, "ledger", {"amount": 5}, where={"id": 1}, token=4) == 1
    assert fences.sql.update(db.conn, "ledger", {"amount": 6}, where={"id": 1}, token=4) == 1
    db.commit()
    with pytest.raises(fencelock.StaleToken) as refused:
        fences.sql.update(db.conn, "ledger", {"amount": 1}, where={"id": 1}, token=3)
    assert (refused.value.token, refused.value.seen) == (3, 4)
    assert fences.sql.update(db.conn, "ledger", {"amount": 1}, where={"id": 2}, token=9) == 0
    db.commit()
    assert db.value("SELECT amount FROM ledger WHERE id = 1") == 6
    db.rollback()
    with pytest.raises(ValueError, match="identifier"):
        fences.sql.update(db.conn, "ledger", {"amount = 0 --": 1}, where={"id": 1}, token=9)
    with pytest.raises(ValueError):
        fences.sql.update(db.conn, "ledger", {"amount": 1}, where={"id": 1}, token=0)
    with pytest.raises(ValueError, match="at least one"):
        fences.sql.update(db.conn, "ledger", {}, where={"id": 1}, token=9)


# -- two holders' transactions on one resource (PostgreSQL, and behind PgBouncer) ----------------


def waiting_on_a_lock(postgres: PostgresServer) -> bool:
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize("first", ["newer", "older"])
@pytest.mark.parametrize("kind", [k for k in POSTGRES if k in SYNC_KINDS])
def test_two_holders_serialise_on_the_fence_row_and_the_older_fails(
    kind: str, first: str, request: pytest.FixtureRequest, tmp_path: Path, postgres: PostgresServer
) -> None:
    dbs = [connect(kind, request, tmp_path), connect(kind, request, tmp_path)]
    try:
        setup = dbs[0]
        fences.sql.install(setup.conn)
        setup.run(ACCOUNTS)
        setup.run("INSERT INTO accounts (id, balance) VALUES (1, 0)")
        setup.commit()
        newer, older = dbs
        tokens = {id(newer): 20, id(older): 10}
        one, two = (newer, older) if first == "newer" else (older, newer)

        def second() -> object:
            try:
                with fences.sql.fenced(two.conn, RESOURCE, tokens[id(two)]):
                    two.run("UPDATE accounts SET balance = balance * 10 + 2 WHERE id = 1")
                two.commit()
            except fencelock.StaleToken as exc:
                return exc
            return "committed"

        with fences.sql.fenced(one.conn, RESOURCE, tokens[id(one)]):
            one.run("UPDATE accounts SET balance = balance * 10 + 1 WHERE id = 1")
        call = SyncCall(second)
        sync_until(lambda: waiting_on_a_lock(postgres))  # the second waits for the first
        one.commit()
        outcome = call.result()
        if first == "newer":  # the older token fails, though it started while the newer ran
            assert isinstance(outcome, fencelock.StaleToken)
            assert outcome.seen == 20
            assert balance(setup) == 1
        else:  # the older wrote first, and the newer after it
            assert outcome == "committed"
            assert balance(setup) == 12
        assert fence(setup) == 20
    finally:
        for db in dbs:
            db.rollback()
            db.close()


def test_in_a_psycopg_transaction_block_the_stale_token_rolls_the_block_back(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    db = connect("psycopg", request, tmp_path)
    try:
        fences.sql.install(db.conn)
        db.run(ACCOUNTS)
        db.run("INSERT INTO accounts (id, balance) VALUES (1, 100)")
        db.commit()
        deposit(db, 7, 1)
        with pytest.raises(fencelock.StaleToken), db.conn.transaction():
            db.run("UPDATE accounts SET balance = 0 WHERE id = 1")
            with fences.sql.fenced(db.conn, RESOURCE, 6):
                pytest.fail("the block of a stale token ran")
        assert (balance(db), fence(db)) == (101, 7)
    finally:
        db.close()
