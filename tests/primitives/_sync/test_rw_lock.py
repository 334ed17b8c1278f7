# GENERATED from tests/primitives/_async/test_rw_lock.py by tools/gen_sync.py: edit that file instead.
"""The read-write lock: readers share, writers exclude, arrival order is kept (phase-fair).

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time

import pytest

import fencelock
from fencelock._sync.client import LockClient
from tests.concurrency import SyncCall, sync_until
from tests.exported import Exported


def test_readers_share_and_writers_exclude(sync_client: LockClient) -> None:
    rw = sync_client.rw_lock("rw-basic", ttl=10)
    r1, r2, w = rw.read(), rw.read(), rw.write()
    assert r1.acquire(timeout=0) and r2.acquire(timeout=0)
    assert not w.acquire(timeout=0)
    r1.release()
    r2.release()
    assert w.acquire(timeout=0)
    assert not rw.read().acquire(timeout=0)
    assert not rw.write().acquire(timeout=0)
    assert w.writer and not r1.writer
    w.release()


def test_a_write_grant_gets_a_larger_token_than_every_earlier_grant(
    sync_client: LockClient,
) -> None:
    rw = sync_client.rw_lock("rw-tokens", ttl=10)
    reader = rw.read()
    with reader:
        read_token = reader.token
    writer = rw.write()
    with writer:
        assert writer.token > read_token
        sync_client.fenced_set("rw-resource", "w", writer.token)
        with pytest.raises(fencelock.StaleToken):
            sync_client.fenced_set("rw-resource", "stale", read_token)


def test_phase_fair_order(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    """A reader arriving after a queued writer waits behind it; the readers queued behind a
    writer are admitted together when it releases, before the next writer."""
    rw, rw_b = sync_client.rw_lock("rw-phase", ttl=10), sync_client_b.rw_lock("rw-phase", ttl=10)
    first = rw.read()
    assert first.acquire(timeout=0)
    writer = rw_b.write()
    writing = SyncCall(lambda: writer.acquire(timeout=10))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)
    late_reader = rw.read()
    assert not late_reader.acquire(timeout=0)  # behind the queued writer
    readers = [rw.read(), rw.read()]
    reading = [SyncCall(lambda r=r: r.acquire(timeout=10)) for r in readers]  # type: ignore[misc]
    sync_until(lambda: sync_client.statistics().waiting == 2)
    second_writer = rw_b.write()
    writing_2 = SyncCall(lambda: second_writer.acquire(timeout=10))
    sync_until(lambda: sync_client_b.statistics().waiting == 2)
    first.release()
    assert writing.result()  # the writer first: it came first
    assert not second_writer.lost and all(not r.lost for r in readers)
    writer.release()
    for call in reading:  # then both readers, together, before the second writer
        assert call.result()
    for reader in readers:
        reader.release()
    assert writing_2.result()
    second_writer.release()


def test_a_dead_readers_lease_ends_alone(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    rw = sync_client.rw_lock("rw-dead", ttl=10)
    alive = rw.read()
    assert alive.acquire(timeout=0)
    dead = sync_client_b.rw_lock("rw-dead", ttl=0.2).read()  # never released, not renewed
    assert dead.acquire(timeout=0)
    writer = sync_client.rw_lock("rw-dead", ttl=10).write()
    assert not writer.acquire(timeout=0)
    alive.release()
    assert writer.acquire(timeout=5)  # once the dead reader's lease ended
    assert dead.lost
    writer.release()


def test_an_upgrade_is_refused(sync_client: LockClient) -> None:
    rw = sync_client.rw_lock("rw-upgrade", ttl=10)
    reader = rw.read()
    with reader:
        with pytest.raises(fencelock.LockError, match="already held"):
            reader.acquire(timeout=0)  # one object, one grant: no change of side
        assert not rw.write().acquire(timeout=0)  # a writer waits for the reader


def test_a_writer_downgrades_to_a_reader_with_no_writer_in_between(
    sync_client: LockClient, sync_client_b: LockClient
) -> None:
    """The readers queued behind the writer are let in at once; a writer queued after them
    still waits, and the downgraded holder keeps its lease and token."""
    rw, rw_b = sync_client.rw_lock("rw-down", ttl=10), sync_client_b.rw_lock("rw-down", ttl=10)
    writer = rw.write()
    assert writer.acquire(timeout=0)
    token = writer.token
    reader = rw_b.read()
    reading = SyncCall(lambda: reader.acquire(timeout=10))
    sync_until(lambda: sync_client_b.statistics().waiting == 1)
    next_writer = rw_b.write()
    writing = SyncCall(lambda: next_writer.acquire(timeout=10))
    sync_until(lambda: sync_client_b.statistics().waiting == 2)
    writer.downgrade()
    assert reading.result()  # granted by the downgrade itself
    assert writer.token == token and writer.held() and writer.writer
    assert not rw.read().acquire(timeout=0)  # a new reader queues behind next_writer
    with pytest.raises(TypeError, match="only a write grant"):
        writer.downgrade()
    writer.release()  # the read permit
    read_token = reader.token
    reader.release()
    assert writing.result()
    assert next_writer.token > read_token > token
    next_writer.release()
    assert writer.acquire(timeout=0)  # the write side again
    assert not rw.read().acquire(timeout=0)
    writer.release()


def test_a_downgrade_needs_a_write_grant_still_held(sync_client: LockClient) -> None:
    rw = sync_client.rw_lock("rw-down-bad", ttl=0.2)
    reader, writer = rw.read(), rw.write()
    with pytest.raises(fencelock.LockNotOwned):
        writer.downgrade()
    with reader:
        with pytest.raises(TypeError, match="only a write grant"):
            reader.downgrade()
    assert writer.acquire(timeout=0)
    ended = time.monotonic() + 0.3  # past the lease of 0.2 s, by the server's clock too
    sync_until(lambda: time.monotonic() > ended)
    with pytest.raises(fencelock.LockLost):
        writer.downgrade()
    assert writer.lost


def test_each_side_is_its_own_primitive_in_the_metrics(
    exported: Exported, sync_client: LockClient
) -> None:
    rw = sync_client.rw_lock("rw-metrics", ttl=10)
    with rw.read():
        pass
    with rw.write():
        pass
    with sync_client.semaphore("rw-metrics", 2, ttl=10):
        pass
    for primitive in ("read_lock", "write_lock", "semaphore"):
        labels = {"primitive": primitive, "name": "rw-metrics"}
        assert exported.count("grants", **labels) == 1
        assert exported.count("hold", **labels) == 1
