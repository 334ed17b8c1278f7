"""The read-write lock: readers share, writers exclude, arrival order is kept (phase-fair).

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import time

import pytest

import fencelock
from fencelock._async.client import AsyncLockClient
from tests.concurrency import AsyncCall, async_until
from tests.exported import Exported


async def test_readers_share_and_writers_exclude(async_client: AsyncLockClient) -> None:
    rw = async_client.rw_lock("rw-basic", ttl=10)
    r1, r2, w = rw.read(), rw.read(), rw.write()
    assert await r1.acquire(timeout=0) and await r2.acquire(timeout=0)
    assert not await w.acquire(timeout=0)
    await r1.release()
    await r2.release()
    assert await w.acquire(timeout=0)
    assert not await rw.read().acquire(timeout=0)
    assert not await rw.write().acquire(timeout=0)
    assert w.writer and not r1.writer
    await w.release()


async def test_a_write_grant_gets_a_larger_token_than_every_earlier_grant(
    async_client: AsyncLockClient,
) -> None:
    rw = async_client.rw_lock("rw-tokens", ttl=10)
    reader = rw.read()
    async with reader:
        read_token = reader.token
    writer = rw.write()
    async with writer:
        assert writer.token > read_token
        await async_client.fenced_set("rw-resource", "w", writer.token)
        with pytest.raises(fencelock.StaleToken):
            await async_client.fenced_set("rw-resource", "stale", read_token)


async def test_phase_fair_order(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    """A reader arriving after a queued writer waits behind it; the readers queued behind a
    writer are admitted together when it releases, before the next writer."""
    rw, rw_b = async_client.rw_lock("rw-phase", ttl=10), async_client_b.rw_lock("rw-phase", ttl=10)
    first = rw.read()
    assert await first.acquire(timeout=0)
    writer = rw_b.write()
    writing = AsyncCall(lambda: writer.acquire(timeout=10))
    await async_until(lambda: async_client_b.statistics().waiting == 1)
    late_reader = rw.read()
    assert not await late_reader.acquire(timeout=0)  # behind the queued writer
    readers = [rw.read(), rw.read()]
    reading = [AsyncCall(lambda r=r: r.acquire(timeout=10)) for r in readers]  # type: ignore[misc]
    await async_until(lambda: async_client.statistics().waiting == 2)
    second_writer = rw_b.write()
    writing_2 = AsyncCall(lambda: second_writer.acquire(timeout=10))
    await async_until(lambda: async_client_b.statistics().waiting == 2)
    await first.release()
    assert await writing.result()  # the writer first: it came first
    assert not second_writer.lost and all(not r.lost for r in readers)
    await writer.release()
    for call in reading:  # then both readers, together, before the second writer
        assert await call.result()
    for reader in readers:
        await reader.release()
    assert await writing_2.result()
    await second_writer.release()


async def test_a_dead_readers_lease_ends_alone(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    rw = async_client.rw_lock("rw-dead", ttl=10)
    alive = rw.read()
    assert await alive.acquire(timeout=0)
    dead = async_client_b.rw_lock("rw-dead", ttl=0.2).read()  # never released, not renewed
    assert await dead.acquire(timeout=0)
    writer = async_client.rw_lock("rw-dead", ttl=10).write()
    assert not await writer.acquire(timeout=0)
    await alive.release()
    assert await writer.acquire(timeout=5)  # once the dead reader's lease ended
    assert dead.lost
    await writer.release()


async def test_an_upgrade_is_refused(async_client: AsyncLockClient) -> None:
    rw = async_client.rw_lock("rw-upgrade", ttl=10)
    reader = rw.read()
    async with reader:
        with pytest.raises(fencelock.LockError, match="already held"):
            await reader.acquire(timeout=0)  # one object, one grant: no change of side
        assert not await rw.write().acquire(timeout=0)  # a writer waits for the reader


async def test_a_writer_downgrades_to_a_reader_with_no_writer_in_between(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    """The readers queued behind the writer are let in at once; a writer queued after them
    still waits, and the downgraded holder keeps its lease and token."""
    rw, rw_b = async_client.rw_lock("rw-down", ttl=10), async_client_b.rw_lock("rw-down", ttl=10)
    writer = rw.write()
    assert await writer.acquire(timeout=0)
    token = writer.token
    reader = rw_b.read()
    reading = AsyncCall(lambda: reader.acquire(timeout=10))
    await async_until(lambda: async_client_b.statistics().waiting == 1)
    next_writer = rw_b.write()
    writing = AsyncCall(lambda: next_writer.acquire(timeout=10))
    await async_until(lambda: async_client_b.statistics().waiting == 2)
    await writer.downgrade()
    assert await reading.result()  # granted by the downgrade itself
    assert writer.token == token and await writer.held() and writer.writer
    assert not await rw.read().acquire(timeout=0)  # a new reader queues behind next_writer
    with pytest.raises(TypeError, match="only a write grant"):
        await writer.downgrade()
    await writer.release()  # the read permit
    read_token = reader.token
    await reader.release()
    assert await writing.result()
    assert next_writer.token > read_token > token
    await next_writer.release()
    assert await writer.acquire(timeout=0)  # the write side again
    assert not await rw.read().acquire(timeout=0)
    await writer.release()


async def test_a_downgrade_needs_a_write_grant_still_held(async_client: AsyncLockClient) -> None:
    rw = async_client.rw_lock("rw-down-bad", ttl=0.2)
    reader, writer = rw.read(), rw.write()
    with pytest.raises(fencelock.LockNotOwned):
        await writer.downgrade()
    async with reader:
        with pytest.raises(TypeError, match="only a write grant"):
            await reader.downgrade()
    assert await writer.acquire(timeout=0)
    ended = time.monotonic() + 0.3  # past the lease of 0.2 s, by the server's clock too
    await async_until(lambda: time.monotonic() > ended)
    with pytest.raises(fencelock.LockLost):
        await writer.downgrade()
    assert writer.lost


async def test_each_side_is_its_own_primitive_in_the_metrics(
    exported: Exported, async_client: AsyncLockClient
) -> None:
    rw = async_client.rw_lock("rw-metrics", ttl=10)
    async with rw.read():
        pass
    async with rw.write():
        pass
    async with async_client.semaphore("rw-metrics", 2, ttl=10):
        pass
    for primitive in ("read_lock", "write_lock", "semaphore"):
        labels = {"primitive": primitive, "name": "rw-metrics"}
        assert exported.count("grants", **labels) == 1
        assert exported.count("hold", **labels) == 1
