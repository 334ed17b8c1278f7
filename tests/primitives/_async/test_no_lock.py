"""Writes that need no lock (issue 15, part 4): versioned values written by compare-and-set,
and a fenced read-modify-write that closes the gap a fenced write alone leaves open.
Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._async.lock import AsyncLock
from fencelock._async.versioned import AsyncVersioned
from fencelock._keys import LockKeys, fence_key_for, version_key_for
from fencelock._sync.client import LockClient
from fencelock._transport import AsyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import AsyncCall, async_until

# -- versioned values ---------------------------------------------------------------------


async def test_set_writes_only_over_the_version_read(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    counter = async_client.versioned("counter")
    assert await counter.get() == (None, 0)
    assert await counter.set("a", 0)
    assert await counter.get() == (b"a", 1)
    assert not await counter.set("b", 0)  # another write came first: nothing written
    assert await counter.get() == (b"a", 1)
    assert await counter.set(5, 1)
    assert raw.get("counter") == "5"  # a plain string: anyone can GET it
    assert raw.get(version_key_for("counter")) == "2"
    raw.delete("counter")  # a DEL leaves the count: a version is never reused
    assert await counter.get() == (None, 2)
    assert not await counter.set("c", 0)


async def test_a_plain_value_already_there_is_version_zero(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    raw.set("legacy", "x")
    assert await async_client.versioned("legacy").get() == (b"x", 0)
    assert await async_client.versioned("legacy").update(lambda v: (v or b"") + b"y") == (b"xy", 1)


async def test_racing_updates_lose_no_increment(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    workers, each = 6, 15
    calls_of_fn = []

    def increment(value: bytes | None) -> int:
        calls_of_fn.append(1)
        return int(value or 0) + 1

    # two processes, as far as Redis can tell, each with one object shared by its tasks (threads)
    shared = [async_client.versioned("hits"), async_client_b.versioned("hits")]

    async def work(hits: AsyncVersioned) -> None:
        for _ in range(each):
            await hits.update(increment, retries=1000, max_backoff=0.01)

    calls = [AsyncCall(lambda h=h: work(h)) for h in shared * (workers // 2)]  # type: ignore[misc]
    for call in calls:
        await call.result()
    assert raw.get("hits") == str(workers * each)
    assert raw.get(version_key_for("hits")) == str(workers * each)
    assert len(calls_of_fn) >= workers * each


async def test_update_gives_up_after_its_last_try(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    raw.set("hits", "7")
    tries = []

    def racing(value: bytes | None) -> int:
        tries.append(value)
        raw.incr(version_key_for("hits"))  # another writer gets in before each write
        return int(value or 0) + 1

    with pytest.raises(fencelock.TooManyConflicts) as info:
        await async_client.versioned("hits").update(racing, retries=2, max_backoff=0.01)
    assert isinstance(info.value, fencelock.Conflict) and isinstance(
        info.value, fencelock.LockError
    )
    assert info.value.tries == 3 and info.value.key == "hits"
    assert len(tries) == 3
    assert raw.get("hits") == "7"  # nothing written


async def test_versioned_refuses_bad_input(async_client: AsyncLockClient, raw: redis.Redis) -> None:
    with pytest.raises(TypeError, match="key"):
        async_client.versioned(b"k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key"):
        async_client.versioned("")
    value = async_client.versioned("k")
    with pytest.raises(TypeError, match="value"):
        await value.set(True, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="version"):
        await value.set("v", "0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="version"):
        await value.set("v", -1)
    with pytest.raises(TypeError, match="fn"):
        await value.update("v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="the value fn returned"):
        await value.update(lambda v: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="retries"):
        await value.update(lambda v: 1, retries=-1)
    assert raw.keys("*") == []
    raw.hset("k", "field", "value")
    with pytest.raises(fencelock.LockError, match="another Redis type"):
        await value.get()
    with pytest.raises(fencelock.LockError, match="another Redis type"):
        await value.set("v", 0)
    raw.delete("k")
    raw.set(version_key_for("k"), "garbage")
    with pytest.raises(fencelock.LockError, match="holds no version"):
        await value.set("v", 0)
    assert raw.keys("*") == [version_key_for("k")]


async def test_a_decoding_client_reads_bytes(server: EmbeddedServer, raw: redis.Redis) -> None:
    user = AsyncRedis.from_url(server.url, decode_responses=True)
    client = AsyncLockClient(user)
    counter = client.versioned("counter")
    assert await counter.update(lambda v: int(v or 0) + 1) == (1, 1)
    assert await counter.get() == (b"1", 1)
    # the resource's server given as a decoding client of the caller's own
    direct = client.versioned("counter", redis=user)
    assert await direct.update(lambda v: int(v or 0) + 1) == (2, 2)
    assert await direct.get() == (b"2", 2)
    assert await client.fenced_update("counter", 5, lambda v: int(v or 0) + 1, redis=user) == 3
    assert await client.fenced_get("counter", 5, redis=user) == b"3"
    await client.close()
    await user.aclose()


# -- fenced read-modify-write -------------------------------------------------------------


async def run_out(lock: AsyncLock, raw: redis.Redis) -> None:
    """The holder of ``lock`` is paused (nothing renews it) until its lease has run out."""
    await async_until(lambda: raw.exists(LockKeys.for_name(lock.name).lock) == 0)


async def test_fencing_only_the_write_lets_a_stale_write_in_between(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    # The gap fenced_get closes, shown the old way (GET, compute, fenced_set): the stale
    # holder's write lands between the new holder's read and write, is accepted, and is lost.
    old = async_client.lock("job", ttl=0.2)
    assert await old.acquire(timeout=0)
    await async_client.fenced_set("stock", "10", old.token)
    await run_out(old, raw)
    new = async_client_b.lock("job", ttl=10)
    assert await new.acquire(timeout=0)
    read = raw.get("stock")
    await async_client.fenced_set("stock", "9", old.token)  # accepted: the resource knows only old
    await async_client_b.fenced_set("stock", str(int(read) - 1), new.token)
    assert raw.get("stock") == "9"  # two decrements, one left: the stale holder's is lost
    await new.release()


async def test_a_fenced_read_refuses_the_stale_write_in_between(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    old = async_client.lock("job", ttl=0.2)
    assert await old.acquire(timeout=0)
    await async_client.fenced_set("stock", "10", old.token)
    await run_out(old, raw)
    new = async_client_b.lock("job", ttl=10)
    assert await new.acquire(timeout=0)
    read = await async_client_b.fenced_get("stock", new.token)
    assert read == b"10"
    with pytest.raises(fencelock.StaleToken) as info:
        await async_client.fenced_set("stock", "9", old.token)  # the paused holder resumes
    assert info.value.seen == new.token
    await async_client_b.fenced_set("stock", str(int(read) - 1), new.token)
    assert raw.get("stock") == "9"  # the stale holder was told: its decrement did not land
    with pytest.raises(fencelock.StaleToken):
        await async_client.fenced_get("stock", old.token)  # nor may it read as a holder
    assert raw.get(fence_key_for("stock")) == str(new.token)
    await new.release()


async def test_fenced_update_with_a_stale_holder_writing_meanwhile(
    async_client: AsyncLockClient, server: EmbeddedServer, raw: redis.Redis
) -> None:
    stale = LockClient.from_url(server.url)  # another process, paused past its lease
    old = stale.lock("job", ttl=0.2)
    assert old.acquire(timeout=0)
    stale.fenced_set("stock", "10", old.token)
    await async_until(lambda: raw.exists(LockKeys.for_name("job").lock) == 0)
    new = async_client.lock("job", ttl=10)
    assert await new.acquire(timeout=0)
    refused = []

    def decrement(value: bytes | None) -> int:
        try:  # the stale holder wakes while the new one computes
            stale.fenced_set("stock", "9", old.token)
        except fencelock.StaleToken as exc:
            refused.append(exc)
        return int(value or 0) - 1

    assert await async_client.fenced_update("stock", new.token, decrement) == 9
    assert len(refused) == 1 and raw.get("stock") == "9"
    await new.release()
    stale.close()


async def test_fenced_update_refuses_a_value_changed_without_fencing(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    await async_client.fenced_set("stock", "10", 3)

    def decrement(value: bytes | None) -> int:
        raw.set("stock", "100")  # a write that bypasses fencing
        return int(value or 0) - 1

    with pytest.raises(fencelock.Conflict, match="changed since it was read") as info:
        await async_client.fenced_update("stock", 3, decrement)
    assert info.value.key == "stock"
    assert raw.get("stock") == "100"
    # unchanged, an empty value and no value are told apart
    raw.set("stock", "")
    assert await async_client.fenced_update("stock", 3, lambda v: (v or b"") + b"!") == b"!"
    raw.delete("stock")
    assert await async_client.fenced_update("stock", 4, lambda v: v or "none") == "none"
    assert raw.get("stock") == "none"


async def test_fenced_get_raises_the_token_and_refuses_older_ones(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    assert await async_client.fenced_get("stock", 5) is None
    assert raw.get(fence_key_for("stock")) == "5"
    await async_client.fenced_set("stock", "x", 5)
    assert await async_client.fenced_get("stock", 5) == b"x"  # the same holder, again
    with pytest.raises(fencelock.StaleToken) as info:
        await async_client.fenced_get("stock", 4)
    assert (info.value.token, info.value.seen) == (4, 5)
    assert raw.get(fence_key_for("stock")) == "5"
    with pytest.raises(ValueError, match="token"):
        await async_client.fenced_get("stock", 0)
    with pytest.raises(TypeError, match="fn"):
        await async_client.fenced_update("stock", 5, None)  # type: ignore[arg-type]
    raw.hset("hash", "f", "v")
    with pytest.raises(fencelock.LockError, match="another Redis type"):
        await async_client.fenced_get("hash", 9)
    assert raw.get(fence_key_for("hash")) is None
