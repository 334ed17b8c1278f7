"""Multi-locks: several names, all or none, in canonical order (no deadlock).

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py; cancellation is in
tests/engine/test_asyncio_only.py."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._backend import async_sleep
from fencelock._keys import LockKeys
from fencelock._scripts import MULTI_ACQUIRE
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import RENEWED_TTL, AsyncCall, async_together, async_until, evalsha_calls

# Redlock's node timeout here: the default (at most 50 ms, connecting too) is shorter than a
# loaded machine's stalls, and these tests are not about it
NODE_TIMEOUT = 0.5


def held_keys(raw: redis.Redis, names: list[str]) -> list[str]:
    return [n for n in names if raw.exists(LockKeys.for_name(n).lock)]


def queued(raw: redis.Redis, name: str) -> int:
    return int(raw.zcard(LockKeys.for_name(name).queue))


@pytest.fixture
async def woken(server: EmbeddedServer, raw: redis.Redis) -> AsyncIterator[AsyncLockClient]:
    """A client whose fallback re-try is an hour away: only a release ends its waits."""
    client = AsyncLockClient.from_url(server.url, max_poll=3600.0)
    try:
        yield client
    finally:
        await client.close()


async def test_an_on_lost_policy_is_refused_not_ignored(async_client: AsyncLockClient) -> None:
    """Its block ends by the policy of none of its names (docs/multilock.md): asked for one,
    the multi-lock says so, with the keywords it takes, rather than ignoring it."""
    with pytest.raises(TypeError, match=r"multi_lock\(\) got an unexpected keyword .*on_lost_poli"):
        async_client.multi_lock(["a", "b"], on_lost_policy="cancel")  # type: ignore[call-arg]
    assert async_client.multi_lock(["a", "b"], label="worker").names == ("a", "b")


async def test_names_are_taken_sorted_and_deduplicated(async_client: AsyncLockClient) -> None:
    multi = async_client.multi_lock(["m-c", "m-a", "m-b", "m-a"], ttl=10)
    assert multi.names == ("m-a", "m-b", "m-c")
    async with multi:
        assert list(multi.tokens) == ["m-a", "m-b", "m-c"]
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
        for name, token in tokens.items():  # each name's own counter, as inspect shows it
            info = await async_client.inspect(name)
            assert info is not None and info.token == token
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
    multi = async_client.multi_lock(names, ttl=RENEWED_TTL, auto_renew=True)
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
    client = AsyncLockClient.from_url([s.url for s in redlock], node_timeout=NODE_TIMEOUT)
    other = AsyncLockClient.from_url([s.url for s in redlock], node_timeout=NODE_TIMEOUT)
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


# -- one script on one server (AllOf) -----------------------------------------------------------


async def test_one_round_trip_each_way_on_one_server(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    names = ["m-rt-c", "m-rt-a", "m-rt-b"]
    multi = async_client.multi_lock(names, ttl=10)
    async with multi:  # (the first acquire of a client also reads the eviction policy: not timed)
        pass
    before = evalsha_calls(raw)
    assert await multi.acquire(timeout=0)
    assert evalsha_calls(raw) == before + 1
    assert held_keys(raw, names) == names
    await multi.release()
    assert evalsha_calls(raw) == before + 2
    assert held_keys(raw, names) == []


async def test_a_plain_lock_of_the_same_client_and_a_multi_lock_exclude_each_other(
    woken: AsyncLockClient, raw: redis.Redis
) -> None:
    """Neither takes a turn in the other's local queue: the server decides, and each one's
    release wakes (or grants) the other."""
    plain = woken.lock("m-pl-b", ttl=10)
    multi = woken.multi_lock(["m-pl-a", "m-pl-b"], ttl=10)
    assert await plain.acquire()
    assert not await multi.acquire(timeout=0)
    assert held_keys(raw, ["m-pl-a", "m-pl-b"]) == ["m-pl-b"]
    waiting = AsyncCall(lambda: multi.acquire(timeout=30))
    await async_until(lambda: queued(raw, "m-pl-b") == 1)
    await plain.release()
    assert await waiting.result()
    other = woken.lock("m-pl-a", ttl=10)
    assert not await other.acquire(timeout=0)
    waiting = AsyncCall(lambda: other.acquire(timeout=30))
    await async_until(lambda: queued(raw, "m-pl-a") == 1)
    token = multi.tokens["m-pl-a"]
    await multi.release()
    assert await waiting.result()  # granted by the release, a larger token
    assert other.token > token
    await other.release()


async def test_a_waiter_follows_the_busy_name_and_leaves_no_entry_behind(
    woken: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    names = ["m-f-a", "m-f-b", "m-f-c"]
    first, last = async_client_b.lock("m-f-a", ttl=10), async_client_b.lock("m-f-c", ttl=10)
    assert await first.acquire() and await last.acquire()
    multi = woken.multi_lock(names, ttl=10)
    waiting = AsyncCall(lambda: multi.acquire(timeout=30))
    await async_until(lambda: queued(raw, "m-f-a") == 1)  # queued on the first busy name only
    assert queued(raw, "m-f-c") == 0
    await first.release()  # woken: m-f-c is busy still, so it queues there
    await async_until(lambda: queued(raw, "m-f-c") == 1)
    assert queued(raw, "m-f-a") == 0 and held_keys(raw, names) == ["m-f-c"]  # none taken
    await last.release()
    assert await waiting.result()
    assert held_keys(raw, names) == names
    assert [queued(raw, n) for n in names] == [0, 0, 0]
    await multi.release()
    late = woken.multi_lock(names, ttl=10)
    assert await last.acquire()
    assert not await late.acquire(timeout=0.1)  # queued, then gave up: its entry is gone
    assert [queued(raw, n) for n in names] == [0, 0, 0]
    await last.release()


async def test_a_wake_up_the_multi_lock_cannot_use_goes_to_the_next_waiter(
    woken: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    """Woken by the release of one of its names while another is still busy, the multi-lock
    passes that name's turn on: the waiter queued behind it there is granted the name at once
    (it would otherwise wait for its hour-long fallback re-try)."""
    holder_a, holder_b = async_client_b.lock("m-p-a", ttl=10), async_client_b.lock("m-p-b", ttl=10)
    assert await holder_a.acquire() and await holder_b.acquire()
    multi = woken.multi_lock(["m-p-a", "m-p-b"], ttl=10)
    waiting = AsyncCall(lambda: multi.acquire(timeout=30))
    await async_until(lambda: queued(raw, "m-p-a") == 1)
    behind = woken.lock("m-p-a", ttl=10)
    behind_call = AsyncCall(lambda: behind.acquire(timeout=30))
    await async_until(lambda: queued(raw, "m-p-a") == 2)
    await holder_a.release()  # wakes the multi-lock, first in line on m-p-a
    assert await behind_call.result()
    await holder_b.release()
    await behind.release()
    assert await waiting.result()
    await multi.release()


async def test_a_re_sent_acquire_gets_its_own_tokens_again(raw: redis.Redis) -> None:
    """The script recognises its holder (a request sent again after a lost reply): each name's
    lease starts again, and the tokens are that grant's."""
    names = ["m-rs-a", "m-rs-b"]
    members = [LockKeys.for_name(n) for n in names]
    keys = [k for m in members for k in (m.lock, m.fence, m.queue)]
    args = ["holder-1", 10_000, "", "PUBLISH", *(m.channel for m in members)]
    raw.script_load(MULTI_ACQUIRE.source)
    first = raw.evalsha(MULTI_ACQUIRE.sha, len(keys), *keys, *args)
    assert first[0] == 1 and len(first) == 3
    for member in members:
        raw.pexpire(member.lock, 1000)
    again = raw.evalsha(MULTI_ACQUIRE.sha, len(keys), *keys, *args)
    assert again == first
    assert all(raw.pttl(m.lock) > 1000 for m in members)
    busy = raw.evalsha(MULTI_ACQUIRE.sha, len(keys), *keys, "holder-2", *args[1:])
    assert busy[0] == 0
    raw.delete(*(m.lock for m in members))
    # part of a grant lost, the other part held by another: nothing is left taken
    raw.set(members[0].lock, "holder-1")
    raw.set(members[1].lock, "someone")
    assert raw.evalsha(MULTI_ACQUIRE.sha, len(keys), *keys, *args)[0] == 0
    assert held_keys(raw, names) == ["m-rs-b"]
    raw.delete(members[1].lock)


async def test_one_multi_lock_acquired_by_two_callers_at_once(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    """The acquire that came second waits behind the first, then takes the names itself, each
    with its own token from the name's counter (none reserved for a hand-off it cannot have)."""
    names = ["m-two-a", "m-two-b"]
    blocker = async_client_b.lock("m-two-b", ttl=10)
    assert await blocker.acquire()
    multi = async_client.multi_lock(names, ttl=10)
    calls = [AsyncCall(lambda: multi.acquire(timeout=10)) for _ in range(2)]
    # one waits in Redis, the other behind it in this client
    await async_until(lambda: queued(raw, "m-two-b") == 1 and async_client.statistics().queued == 1)
    await blocker.release()
    for _ in calls:
        await async_until(lambda: async_client.statistics().held == 1)
        for name, token in multi.tokens.items():
            info = await async_client.inspect(name)
            assert info is not None and info.token == token
        await multi.release()
    assert [await call.result() for call in calls] == [True, True]


async def test_the_watchdog_declares_a_multi_lock_lost_when_one_name_is(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    """Renewed key by key with its one holder: the renewal that finds one name gone declares the
    whole grant lost, once, and calls on_lost with the multi-lock."""
    told: list[object] = []
    names = ["m-w-a", "m-w-b", "m-w-c"]
    multi = async_client.multi_lock(names, ttl=0.6, auto_renew=True, on_lost=told.append)
    assert await multi.acquire()
    await async_until(lambda: async_client.statistics().renewals >= 1)
    raw.delete(LockKeys.for_name("m-w-b").lock)  # as if an operator had forced it out
    await async_until(lambda: bool(told))  # (lost is set before on_lost is called)
    assert told == [multi] and multi.lost and async_client.statistics().losses == 1
    with pytest.raises(fencelock.LockLost):
        await multi.release()
    assert held_keys(raw, names) == []  # the others released all the same


async def test_a_composed_multi_lock_calls_on_lost_with_itself(
    redlock: list[EmbeddedServer],
) -> None:
    client = AsyncLockClient.from_url([s.url for s in redlock], node_timeout=NODE_TIMEOUT)
    told: list[object] = []
    multi = client.multi_lock(["m-cl-a", "m-cl-b"], ttl=3, auto_renew=True, on_lost=told.append)
    probes = [srv.client() for srv in redlock]
    try:
        assert await multi.acquire()
        for probe in probes:
            probe.delete(LockKeys.for_name("m-cl-b").lock)
        await async_until(lambda: bool(told))
        assert told == [multi] and multi.lost
        with pytest.raises(fencelock.LockLost):
            await multi.release()
    finally:
        for probe in probes:
            probe.close()
        await client.close()
