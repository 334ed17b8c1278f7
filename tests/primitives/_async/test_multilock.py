"""Multi-locks: several names, all or none, in canonical order (no deadlock).

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py; cancellation is in
tests/engine/test_asyncio_only.py."""

from __future__ import annotations

import time

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._backend import async_sleep
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import async_together, async_until


def held_keys(raw: redis.Redis, names: list[str]) -> list[str]:
    return [n for n in names if raw.exists(LockKeys.for_name(n).lock)]


async def test_names_are_taken_sorted_and_deduplicated(async_client: AsyncLockClient) -> None:
    multi = async_client.multi_lock(["m-c", "m-a", "m-b", "m-a"], ttl=10)
    assert multi.names == ("m-a", "m-b", "m-c")
    assert [lock.name for lock in multi.locks] == ["m-a", "m-b", "m-c"]
    with pytest.raises(TypeError, match="names"):
        async_client.multi_lock("m-a")
    with pytest.raises(ValueError, match="names"):
        async_client.multi_lock([])
    with pytest.raises(TypeError):
        async_client.multi_lock([1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="ttl"):
        async_client.multi_lock(["m-a"], ttl=-1)


async def test_opposite_orders_never_deadlock_nor_overlap(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    """Taken in the callers' orders, [a, b] and [b, a] would each hold one name and wait for the
    other's forever (here: LockTimeout after 10 s)."""
    inside: list[str] = []
    overlaps = 0

    async def worker(client: AsyncLockClient, names: list[str], who: str) -> int:
        nonlocal overlaps
        multi = client.multi_lock(names, ttl=10, timeout=10)
        for _ in range(25):
            async with multi:
                inside.append(who)
                overlaps += len(inside) > 1
                await async_sleep(0.001)
                inside.remove(who)
        return 25

    done = await async_together(
        [
            lambda: worker(async_client, ["m-x", "m-y"], "one"),
            lambda: worker(async_client_b, ["m-y", "m-x"], "two"),
        ]
    )
    assert done == [25, 25] and overlaps == 0


async def test_all_or_none_when_one_name_is_busy(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    names = ["m-1", "m-2", "m-3"]
    busy = async_client_b.lock("m-3", ttl=10)
    assert await busy.acquire()
    multi = async_client.multi_lock(names, ttl=10)
    assert not await multi.acquire(timeout=0)
    assert held_keys(raw, names) == ["m-3"]  # m-1 and m-2 were given back
    assert not multi.lost
    with pytest.raises(fencelock.LockNotOwned):
        await multi.release()
    others = [async_client_b.lock(n, ttl=10) for n in ["m-1", "m-2"]]
    for lock in others:
        assert await lock.acquire(timeout=0)
        await lock.release()
    await busy.release()
    assert await multi.acquire(timeout=0)  # now all are free
    assert held_keys(raw, names) == names
    await multi.release()
    assert held_keys(raw, names) == []


async def test_the_timeout_is_one_deadline_for_all_names(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    busy = async_client_b.lock("m-t2", ttl=10)
    assert await busy.acquire()
    multi = async_client.multi_lock(["m-t1", "m-t2"], ttl=10, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(fencelock.LockTimeout):
        async with multi:
            pass
    # bounded: the deadline plus a generous margin for a request
    assert time.monotonic() - started < 0.3 + 2
    assert held_keys(raw, ["m-t1", "m-t2"]) == ["m-t2"]
    await busy.release()


async def test_one_fencing_token_per_name(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    first = async_client.lock("m-tok-b", ttl=10)
    assert await first.acquire()
    before = first.token
    await first.release()
    multi = async_client_b.multi_lock(["m-tok-b", "m-tok-a"], ttl=10)
    async with multi:
        tokens = multi.tokens
        assert set(tokens) == {"m-tok-a", "m-tok-b"}
        assert tokens["m-tok-b"] > before
        assert tokens == {lock.name: lock.token for lock in multi.locks}
        multi.check()
        assert await multi.held()
    with pytest.raises(fencelock.LockNotOwned):
        multi.tokens  # noqa: B018 (the property raises)
    later = async_client.lock("m-tok-a", ttl=10)
    assert await later.acquire(timeout=0)
    assert later.token > tokens["m-tok-a"]
    await later.release()


async def test_auto_renew_keeps_every_name(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    names = ["m-r1", "m-r2", "m-r3"]
    multi = async_client.multi_lock(names, ttl=0.3, auto_renew=True)
    async with multi:
        await async_until(lambda: async_client.statistics().renewals >= 3 * len(names))
        assert await multi.held() and not multi.lost
        for name in names:
            assert not await async_client_b.lock(name).acquire(timeout=0)


async def test_a_lost_member_makes_the_multi_lock_lost(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    multi = async_client.multi_lock(["m-l1", "m-l2"], ttl=10)
    with pytest.raises(fencelock.LockLost):
        async with multi:
            raw.delete(LockKeys.for_name("m-l2").lock)  # as if the lease had ended
            assert not await multi.held()
            assert multi.lost
            with pytest.raises(fencelock.LockLost):
                multi.check()
    # the other name was released all the same
    assert held_keys(raw, ["m-l1", "m-l2"]) == []
    assert await multi.acquire(timeout=0)  # and the object can take them afresh
    await multi.release()


async def test_redlock_members_compose_the_same_way(redlock: list[EmbeddedServer]) -> None:
    client = AsyncLockClient.from_url([s.url for s in redlock])
    other = AsyncLockClient.from_url([s.url for s in redlock])
    busy = other.lock("m-rl-b", ttl=10)
    assert await busy.acquire()
    multi = client.multi_lock(["m-rl-b", "m-rl-a"], ttl=10)
    assert not await multi.acquire(timeout=0)
    probes = [srv.client() for srv in redlock]
    assert not any(p.exists(LockKeys.for_name("m-rl-a").lock) for p in probes)
    await busy.release()
    async with multi:
        assert set(multi.tokens) == {"m-rl-a", "m-rl-b"}
    for probe in probes:
        probe.close()
    await client.close()
    await other.close()
