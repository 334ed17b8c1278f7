"""Fencing tokens carried into a real SQL database (stdlib ``sqlite3``), as in docs/leases.md.

The lock is fencelock on a real server; the resource is an SQLite file that checks the token in
the ``WHERE`` clause of every write. The SQL below is the SQL the guide shows (a test checks that
the guide still shows it), so what the guide promises is what runs here.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest
import redis

import fencelock
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import SyncCall

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "leases.md"
NAME = "account:1"
ACCOUNT = 1
OPENING_BALANCE = 100

# The guide's example: one fenced write per row per grant (strict <).
FENCED_UPDATE = (
    "UPDATE accounts SET balance = :balance, fence_token = :token"
    " WHERE id = :id AND fence_token < :token"
)
# The <= variant, for a grant that writes the row more than once: the claim recipe below.
FENCED_UPDATE_AGAIN = (
    "UPDATE accounts SET balance = :balance, fence_token = :token"
    " WHERE id = :id AND fence_token <= :token"
)
# Claim the row before reading it: from here on, writes with older tokens are refused.
CLAIM = "UPDATE accounts SET fence_token = :token WHERE id = :id AND fence_token <= :token"
READ = "SELECT balance FROM accounts WHERE id = :id"


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit: every statement is its own transaction unless the caller says BEGIN. Nothing
    # in SQLite serializes two read-modify-writes, so the lock is what must keep them apart.
    return sqlite3.connect(path, timeout=30, isolation_level=None)


def _create(tmp_path: Path) -> Path:
    path = tmp_path / "bank.sqlite3"
    with closing(_connect(path)) as db:
        db.execute(
            "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,"
            " fence_token INTEGER NOT NULL DEFAULT 0)"
        )
        db.execute("CREATE TABLE deposits (token INTEGER PRIMARY KEY, balance INTEGER NOT NULL)")
        db.execute(
            "INSERT INTO accounts (id, balance) VALUES (:id, :balance)",
            {"id": ACCOUNT, "balance": OPENING_BALANCE},
        )
    return path


def _write(db: sqlite3.Connection, sql: str, balance: int, token: int) -> int:
    """Run a fenced write; the affected row count is the resource's verdict (1 ok, 0 refused)."""
    return db.execute(sql, {"balance": balance, "token": token, "id": ACCOUNT}).rowcount


def _row(db: sqlite3.Connection) -> tuple[int, int]:
    row = db.execute(
        "SELECT balance, fence_token FROM accounts WHERE id = :id", {"id": ACCOUNT}
    ).fetchone()
    return int(row[0]), int(row[1])


def _balance(db: sqlite3.Connection) -> int:
    return int(db.execute(READ, {"id": ACCOUNT}).fetchone()[0])


def test_the_guide_shows_the_tested_sql() -> None:
    guide = " ".join(GUIDE.read_text().split())
    for sql in (FENCED_UPDATE, FENCED_UPDATE_AGAIN, CLAIM):
        assert sql in guide, sql


def test_late_write_of_expired_holder_affects_no_rows(
    sync_client: fencelock.LockClient,
    sync_client_b: fencelock.LockClient,
    raw: redis.Redis,
    tmp_path: Path,
) -> None:
    with closing(_connect(_create(tmp_path))) as db:
        a = sync_client.lock(NAME, ttl=10)
        b = sync_client_b.lock(NAME, ttl=10)
        assert a.acquire(timeout=0)
        token_a = a.token
        assert not b.acquire(timeout=0)  # mutual exclusion while A's lease lasts

        # A's lease ends while A is not looking (as after a pause): deterministic stand-in for
        # expiry. A's local deadline is still far away, so A itself has no idea yet.
        raw.delete(LockKeys.for_name(NAME).lock)
        assert not a.lost

        assert b.acquire(timeout=0)
        token_b = b.token
        assert token_b > token_a
        assert _write(db, FENCED_UPDATE, 150, token_b) == 1

        # A wakes up and writes without checking: the database refuses it.
        assert _write(db, FENCED_UPDATE, 110, token_a) == 0
        assert _row(db) == (150, token_b)

        # Asking the server tells A the truth; from then on check() raises.
        assert not a.held()
        assert a.lost
        with pytest.raises(fencelock.LockLost):
            a.check()
        with pytest.raises(fencelock.LockNotOwned):
            a.release()  # and A deletes nothing of B's
        assert b.held()
        b.release()


def test_paused_holder_learns_from_its_own_clock_and_is_fenced(
    fresh_server: EmbeddedServer, tmp_path: Path
) -> None:
    ttl = 0.5
    with (
        closing(_connect(_create(tmp_path))) as db,
        fencelock.LockClient.from_url(fresh_server.url) as client_a,
        fencelock.LockClient.from_url(fresh_server.url) as client_b,
    ):
        a = client_a.lock(NAME, ttl=ttl)
        assert a.acquire(timeout=0)
        token_a = a.token
        a.check()  # fresh lease: passes
        fresh_server.pause()  # Redis unreachable from here on
        try:
            time.sleep(ttl * 1.2)  # the holder is "paused" past its lease
            # No round trip: a request to the stopped server would end in
            # LockConnectionError after the socket timeout, not in LockLost.
            with pytest.raises(fencelock.LockLost):
                a.check()
        finally:
            fresh_server.resume()

        # Meanwhile the lease ran out on the server too: another client takes over.
        b = client_b.lock(NAME, ttl=10)
        assert b.acquire(timeout=5)
        assert b.token > token_a
        assert _write(db, FENCED_UPDATE, 150, b.token) == 1
        # The paused holder writes anyway, ignoring check(): refused.
        assert _write(db, FENCED_UPDATE, 110, token_a) == 0
        assert _row(db) == (150, b.token)
        with pytest.raises(fencelock.LockNotOwned):
            a.release()
        b.release()


def test_fencing_only_the_write_can_lose_a_read_modify_write(
    sync_client: fencelock.LockClient,
    sync_client_b: fencelock.LockClient,
    raw: redis.Redis,
    tmp_path: Path,
) -> None:
    """The limit the guide warns about: a stale write that lands *before* the new holder's first
    write is accepted, and the new holder, which read before it, overwrites it. Nobody is told."""
    with closing(_connect(_create(tmp_path))) as db:
        a = sync_client.lock(NAME, ttl=10)
        b = sync_client_b.lock(NAME, ttl=10)
        assert a.acquire(timeout=0)
        read_a = _balance(db)  # A will deposit 10
        raw.delete(LockKeys.for_name(NAME).lock)  # A's lease ends
        assert b.acquire(timeout=0)
        read_b = _balance(db)  # B will deposit 50; the row has not seen B's token yet
        assert _write(db, FENCED_UPDATE, read_a + 10, a.token) == 1  # accepted!
        assert _write(db, FENCED_UPDATE, read_b + 50, b.token) == 1
        assert _balance(db) == OPENING_BALANCE + 50  # A's deposit is silently gone
        b.release()


def test_claim_before_read_refuses_the_stale_read_modify_write(
    sync_client: fencelock.LockClient,
    sync_client_b: fencelock.LockClient,
    raw: redis.Redis,
    tmp_path: Path,
) -> None:
    """The fix: the new holder claims the row (stores its token) before reading it, so the stale
    write is refused and its writer learns it (0 rows). The claimed row needs <= afterwards."""
    with closing(_connect(_create(tmp_path))) as db:
        a = sync_client.lock(NAME, ttl=10)
        b = sync_client_b.lock(NAME, ttl=10)
        assert a.acquire(timeout=0)
        read_a = _balance(db)
        raw.delete(LockKeys.for_name(NAME).lock)
        assert b.acquire(timeout=0)
        assert db.execute(CLAIM, {"token": b.token, "id": ACCOUNT}).rowcount == 1
        read_b = _balance(db)
        assert _write(db, FENCED_UPDATE_AGAIN, read_a + 10, a.token) == 0  # A: refused, and told
        assert _write(db, FENCED_UPDATE, read_b + 50, b.token) == 0  # strict <: B's own claim
        assert _write(db, FENCED_UPDATE_AGAIN, read_b + 50, b.token) == 1  # <=: B writes
        assert _write(db, FENCED_UPDATE_AGAIN, read_b + 60, b.token) == 1  # and again
        assert _row(db) == (OPENING_BALANCE + 60, b.token)
        b.release()


def test_the_lock_comes_before_the_transaction(
    sync_client: fencelock.LockClient,
    sync_client_b: fencelock.LockClient,
    tmp_path: Path,
) -> None:
    """The guide's order: take the lock, then open the transaction, read and make the fenced
    write in it, commit, release. A transaction opened before the lock reads a snapshot that
    misses the previous holder's commit, and the lock cannot repair that."""
    # pitfall 8: the lock taken inside a database transaction instead of before it
    path = _create(tmp_path)
    with closing(_connect(path)) as db_a, closing(_connect(path)) as db_b:
        db_a.execute("PRAGMA journal_mode=WAL")  # a reader keeps its snapshot while others commit
        a, b = sync_client.lock(NAME, ttl=10), sync_client_b.lock(NAME, ttl=10)
        assert a.acquire(timeout=0)
        db_a.execute("BEGIN")
        assert _write(db_a, FENCED_UPDATE, _balance(db_a) + 10, a.token) == 1

        # Wrong: B opens its transaction and reads, then takes the lock once A is done.
        db_b.execute("BEGIN")
        stale = _balance(db_b)
        db_a.execute("COMMIT")
        a.release()
        assert b.acquire(timeout=0)
        assert _balance(db_b) == stale == OPENING_BALANCE  # A's deposit is not in B's snapshot
        # SQLite refuses a write from a stale snapshot; a database that takes it (MySQL's
        # REPEATABLE READ: the fenced WHERE sees the newest row, whose token is A's) loses A's 10.
        with pytest.raises(sqlite3.OperationalError):
            _write(db_b, FENCED_UPDATE, stale + 50, b.token)
        db_b.execute("ROLLBACK")
        b.release()

        # The recipe: the lock first, then the transaction, with the fenced write inside it.
        with b:
            db_b.execute("BEGIN")
            balance = _balance(db_b)
            assert balance == OPENING_BALANCE + 10  # A's commit is seen
            assert _write(db_b, FENCED_UPDATE, balance + 50, b.token) == 1
            b.check()
            db_b.execute("COMMIT")  # before the release
            token_b = b.token
        assert _row(db_a) == (OPENING_BALANCE + 60, token_b)


# -- concurrent fenced read-modify-write increments --------------------------------------------

WORKERS = 2
DEPOSITS = 40


def _deposit(client: fencelock.LockClient, path: Path, recipe: str, times: int) -> None:
    """``times`` deposits of 1, each under its own grant, in one transaction taken after the
    lock and committed before its release."""
    lock = client.lock(NAME, ttl=10, timeout=60)
    with closing(_connect(path)) as db:
        for _ in range(times):
            with lock:
                token = lock.token
                db.execute("BEGIN")  # deferred: SQLite itself does not keep writers apart here
                try:
                    if recipe == "claim":
                        assert db.execute(CLAIM, {"token": token, "id": ACCOUNT}).rowcount == 1
                    balance = _balance(db) + 1
                    sql = FENCED_UPDATE if recipe == "example" else FENCED_UPDATE_AGAIN
                    assert _write(db, sql, balance, token) == 1
                    db.execute(
                        "INSERT INTO deposits (token, balance) VALUES (:token, :balance)",
                        {"token": token, "balance": balance},
                    )
                    lock.check()  # conservative: a lost lease rolls this deposit back
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise


def _deposit_in_process(url: str, path: Path, recipe: str, times: int) -> None:
    with fencelock.LockClient.from_url(url) as client:
        _deposit(client, path, recipe, times)


@pytest.mark.parametrize("recipe", ["example", "claim"])
@pytest.mark.parametrize("workers", ["threads", "processes"])
def test_fenced_increments_reach_the_exact_count(
    server: EmbeddedServer,
    sync_client: fencelock.LockClient,
    raw: redis.Redis,
    tmp_path: Path,
    workers: str,
    recipe: str,
) -> None:
    path = _create(tmp_path)
    if workers == "threads":  # one client shared by the threads, one lock object each
        calls = [
            SyncCall(lambda: _deposit(sync_client, path, recipe, DEPOSITS)) for _ in range(WORKERS)
        ]
        for call in calls:
            call.result(timeout=120)
    else:  # one client per process
        ctx = multiprocessing.get_context("spawn")
        procs = [
            ctx.Process(target=_deposit_in_process, args=(server.url, path, recipe, DEPOSITS))
            for _ in range(WORKERS)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(120)
            assert proc.exitcode == 0
    total = WORKERS * DEPOSITS
    with closing(_connect(path)) as db:
        balance, fence = _row(db)
        assert balance == OPENING_BALANCE + total  # not one lost update
        history = db.execute("SELECT token, balance FROM deposits ORDER BY token").fetchall()
    # Every grant deposited exactly once, and in token order: the commits followed the grants.
    assert [b for _, b in history] == list(range(OPENING_BALANCE + 1, OPENING_BALANCE + total + 1))
    assert fence == history[-1][0]
    assert not raw.exists(LockKeys.for_name(NAME).lock)
