"""The lock on one real server. Sync twin generated into tests/engine/_sync by tools/gen_sync.py."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._core.replies import lock_value
from fencelock._core.timing import drift
from fencelock._keys import LockKeys
from fencelock._transport import AsyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from fencelock_tools.servers.proxy import TcpProxy
from tests.concurrency import ASYNC_API, AsyncCall, async_until


def key(name: str) -> str:
    return LockKeys.for_name(name).lock


def calls(raw: redis.Redis, command: str) -> int:
    stats = raw.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


@pytest.mark.glide
async def test_acquire_release_roundtrip(async_client: AsyncLockClient, raw: redis.Redis) -> None:
    lock = async_client.lock("job", ttl=10)
    assert not await lock.held()
    assert await lock.acquire(timeout=0)
    assert await lock.held()
    assert lock.token >= 1
    assert raw.exists(key("job"))
    await lock.release()
    assert not raw.exists(key("job"))
    assert not await lock.held()
    with pytest.raises(fencelock.LockNotOwned):
        _ = lock.token


@pytest.mark.glide
async def test_tokens_increase_with_every_grant(async_client: AsyncLockClient) -> None:
    tokens = []
    for i in range(5):
        lock = async_client.lock("fenced", ttl=10) if i % 2 else async_client.lock("fenced", ttl=5)
        assert await lock.acquire(timeout=0)
        tokens.append(lock.token)
        await lock.release()
    assert tokens == sorted(tokens) and len(set(tokens)) == 5 and tokens[0] >= 1


@pytest.mark.glide
async def test_second_holder_is_refused_and_overwrites_nothing(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # pitfall 2: another client's value is never overwritten
    first, second = async_client.lock("x", ttl=10), async_client.lock("x", ttl=10)
    assert await first.acquire(timeout=0)
    before = raw.get(key("x"))
    assert not await second.acquire(timeout=0)
    assert raw.get(key("x")) == before
    with pytest.raises(fencelock.LockNotOwned):
        await second.release()
    assert raw.get(key("x")) == before and await first.held()


@pytest.mark.glide
async def test_acquire_sets_value_and_ttl_in_one_command(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # pitfalls 1 and 3: no SETNX-then-EXPIRE, never a lock without expiry
    lock = async_client.lock("ttl", ttl=7)
    await lock.acquire(timeout=0)
    assert 0 < raw.pttl(key("ttl")) <= 7000
    assert calls(raw, "setnx") == 0 and calls(raw, "expire") == 0 and calls(raw, "pexpire") == 0
    await lock.release()


@pytest.mark.glide
async def test_release_is_one_atomic_script(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # pitfall 6: compare-and-delete happens server-side in one EVALSHA
    lock = async_client.lock("atomic", ttl=10)
    await lock.acquire(timeout=0)
    before = calls(raw, "evalsha")
    await lock.release()
    assert calls(raw, "evalsha") == before + 1
    assert calls(raw, "del") == 1


@pytest.mark.glide
async def test_expired_holder_cannot_delete_successor(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    # pitfall 5: A's lease ends (simulated by deleting its key), B takes over; A's release fails
    a, b = async_client.lock("succ", ttl=10), async_client_b.lock("succ", ttl=10)
    await a.acquire(timeout=0)
    raw.delete(key("succ"))
    assert await b.acquire(timeout=0)
    successor = raw.get(key("succ"))
    with pytest.raises(fencelock.LockNotOwned):
        await a.release()
    assert raw.get(key("succ")) == successor
    assert await b.held() and b.token > 0
    await b.release()


@pytest.mark.glide
async def test_extend_keeps_work_alive_and_never_extends_another(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # pitfall 7: the work outlives the ttl unless extended
    lock = async_client.lock("long", ttl=2)
    await lock.acquire(timeout=0)
    await lock.extend(ttl=100)
    assert raw.pttl(key("long")) > 2000
    await lock.extend()
    assert raw.pttl(key("long")) <= 2000
    raw.set(key("long"), "someone-else", px=5000)
    with pytest.raises(fencelock.LockLost):
        await lock.extend(ttl=100)
    assert raw.pttl(key("long")) <= 5000 and raw.get(key("long")) == "someone-else"
    assert lock.lost
    with pytest.raises(fencelock.LockLost):
        lock.check()
    assert lock.token > 0  # still readable after the loss, until release
    with pytest.raises(fencelock.LockNotOwned):
        await lock.release()


@pytest.mark.glide
async def test_context_manager_releases_on_error(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # pitfall 4: leaving the block always releases
    with pytest.raises(RuntimeError):
        async with async_client.lock("ctx", ttl=10) as lock:
            assert raw.exists(key("ctx"))
            lock.check()
            raise RuntimeError("boom")
    assert not raw.exists(key("ctx"))


async def test_context_manager_times_out(async_client: AsyncLockClient) -> None:
    holder = async_client.lock("busy", ttl=10)
    await holder.acquire(timeout=0)
    with pytest.raises(fencelock.LockTimeout):
        async with async_client.lock("busy", ttl=10, timeout=0):
            pass
    await holder.release()


async def test_body_error_is_not_masked_by_loss(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    with pytest.raises(KeyError) as info:
        async with async_client.lock("masked", ttl=10):
            raw.delete(key("masked"))
            raise KeyError("body")
    assert any("fencelock" in note for note in info.value.__notes__)
    with pytest.raises(fencelock.LockLost):
        async with async_client.lock("masked", ttl=10):
            raw.delete(key("masked"))


async def test_not_reentrant_by_default(async_client: AsyncLockClient) -> None:
    lock = async_client.lock("self", ttl=10)
    await lock.acquire(timeout=0)
    with pytest.raises(fencelock.LockError):
        await lock.acquire(timeout=0)
    await lock.release()


@pytest.mark.glide
async def test_busy_wait_gives_up_at_timeout(async_client: AsyncLockClient) -> None:
    holder = async_client.lock("wait", ttl=30)
    await holder.acquire(timeout=0)
    assert not await async_client.lock("wait", ttl=5).acquire(timeout=0.2)
    await holder.release()


@pytest.mark.glide
async def test_waiter_is_woken_by_release_message(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    # The fallback re-try is an hour away: only the pub/sub message can hand the lock over.
    holder, waiter = async_client_b.lock("wake", ttl=3600), async_client.lock("wake", ttl=10)
    await holder.acquire(timeout=0)

    async def wait_then_release() -> int:
        assert await waiter.acquire(timeout=None)
        token = waiter.token
        await waiter.release()
        return token

    call = AsyncCall(wait_then_release)
    await async_until(lambda: async_client.statistics().waiting == 1)
    first = holder.token
    await holder.release()
    assert await call.result() > first
    assert async_client.statistics().wakeups == 1 and async_client.statistics().polls == 0


@pytest.mark.glide
async def test_fallback_retry_at_holder_ttl(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    # A lock that expires (no release, no message) is retaken by the fallback re-try. Its
    # holder renews it until the waiter waits (else it may expire first, under load), then
    # stops: its client is closed, which releases nothing.
    holder = async_client_b.lock("expire", ttl=1.0, auto_renew=True)
    assert await holder.acquire(timeout=0)
    token = holder.token
    waiter = async_client.lock("expire", ttl=10)
    call = AsyncCall(lambda: waiter.acquire(timeout=30))
    await async_until(lambda: async_client.statistics().waiting == 1)
    await async_client_b.close()
    assert await call.result()
    assert async_client.statistics().polls >= 1 and async_client.statistics().wakeups == 0
    assert waiter.token > token
    await waiter.release()


@pytest.mark.glide
async def test_an_idle_waiter_costs_the_server_nothing(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    """While the holder's lease is far from its end, a waiter sends no command at all: it waits
    for the release message. The one script call after it began waiting is its leaving the
    queue at its deadline."""
    async with async_client_b.lock("warm-up", ttl=30):
        pass  # the scripts are cached on the server: one call each from now on
    holder = async_client_b.lock("idle", ttl=30)
    assert await holder.acquire(timeout=0)

    def scripts() -> int:
        stats = raw.info("commandstats")
        return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval"))

    waiter = async_client.lock("idle", ttl=30)
    call = AsyncCall(lambda: waiter.acquire(timeout=2.5))
    await async_until(lambda: async_client.statistics().waiting == 1)
    before = scripts()
    assert await call.result() is False
    assert scripts() - before == 1
    await holder.release()


async def test_a_release_during_a_pubsub_break_is_not_missed(
    server: EmbeddedServer, async_client_b: AsyncLockClient
) -> None:
    """The waiter's pub/sub connection breaks while it waits. Its re-try comes only once the
    re-made connection is subscribed again: a release right after that re-try wakes it (the
    holder's lease is an hour: a lost message would leave it waiting until its deadline)."""
    holder = async_client_b.lock("break", ttl=3600)
    assert await holder.acquire(timeout=0)
    with TcpProxy(server.port) as proxy:
        client = AsyncLockClient.from_url(proxy.url)
        waiter = client.lock("break", ttl=30)
        call = AsyncCall(lambda: waiter.acquire(timeout=20))
        await async_until(lambda: client.statistics().waiting == 1)
        proxy.reset()  # every connection through the proxy is cut: the pub/sub one too
        proxy.normal()
        await async_until(lambda: client.statistics().wakeups == 1)  # woken to re-try once
        await async_until(lambda: client.statistics().waiting == 1)  # and waiting again
        await holder.release()
        assert await call.result() is True
        assert client.statistics().polls == 0
        await waiter.release()
        await client.close()


@pytest.mark.glide
async def test_script_flush_is_survived(async_client: AsyncLockClient, raw: redis.Redis) -> None:
    lock = async_client.lock("flush", ttl=10)
    await lock.acquire(timeout=0)
    raw.script_flush()
    await lock.extend()
    raw.script_flush()
    await lock.release()
    raw.script_flush()
    assert await lock.acquire(timeout=0)
    raw.script_flush()
    await async_client.fenced_set("flushed", "v", lock.token)
    await lock.release()


async def test_acquire_retry_with_same_holder_reextends(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # What the library does after a timed-out request: send it again with the same holder token.
    lock = async_client.lock("retry", ttl=10)
    first = await lock._lease.wiring.grants.try_acquire(
        lock._lease.spec, "holder-token-of-the-first-attempt"
    )
    raw.pexpire(key("retry"), 500)
    again = await lock._lease.wiring.grants.try_acquire(
        lock._lease.spec, "holder-token-of-the-first-attempt"
    )
    assert first == again  # the same grant, the same fencing token
    assert raw.pttl(key("retry")) > 500
    assert not isinstance(
        await lock._lease.wiring.grants.try_acquire(lock._lease.spec, "another-holder"),
        type(first),
    )


async def test_fenced_set(async_client: AsyncLockClient, raw: redis.Redis) -> None:
    await async_client.fenced_set("stock", "10", 5)
    await async_client.fenced_set("stock", "9", 5)  # the same holder may write again
    await async_client.fenced_set("stock", "8", 7)
    with pytest.raises(fencelock.StaleToken) as info:
        await async_client.fenced_set("stock", "999", 6)
    assert info.value.seen == 7 and info.value.token == 6
    assert raw.get("stock") == "8"
    big = 2**63 - 1  # the largest token: beyond what a Lua number holds exactly
    await async_client.fenced_set("stock", "7", big)
    with pytest.raises(fencelock.StaleToken):
        await async_client.fenced_set("stock", "x", big - 1)
    assert raw.get("stock") == "7"


async def test_fenced_set_refuses_wrong_type_and_touches_nothing(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    raw.hset("resource", "field", "value")
    with pytest.raises(fencelock.LockError, match="another Redis type"):
        await async_client.fenced_set("resource", "v", 1)
    assert raw.hgetall("resource") == {"field": "value"}


@pytest.mark.parametrize(
    ("token", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (2**63, ValueError),  # no grant has it: it would refuse every real holder for good
        (10**400, ValueError),
        ("1", TypeError),
        (True, TypeError),
        (1.5, TypeError),
    ],
)
async def test_fenced_set_validates_token(
    async_client: AsyncLockClient, raw: redis.Redis, token: object, error: type
) -> None:
    with pytest.raises(error, match="token"):
        await async_client.fenced_set("k", "v", token)  # type: ignore[arg-type]
    assert raw.keys("*") == []  # nothing written, nothing remembered


@pytest.mark.glide
async def test_lock_key_of_wrong_type(async_client: AsyncLockClient, raw: redis.Redis) -> None:
    raw.rpush(key("typed"), "a")  # neither kind of lock: not fencelock's
    for reentrant in (False, True):
        lock = async_client.lock("typed", ttl=5, reentrant=reentrant)
        with pytest.raises(fencelock.LockError, match="another Redis type"):
            await lock.acquire(timeout=0)
    assert raw.lrange(key("typed"), 0, -1) == ["a"]
    raw.hset(LockKeys.for_name("counter").fence, "a", "b")
    with pytest.raises(fencelock.LockError, match="another Redis type"):
        await async_client.lock("counter", ttl=5).acquire(timeout=0)
    assert not raw.exists(key("counter"))  # the SET was undone, no grant without a token


@pytest.mark.parametrize("reentrant", [False, True], ids=["simple", "reentrant"])
async def test_a_lease_retaken_by_the_other_kind_is_not_held(
    async_client: AsyncLockClient,
    async_client_b: AsyncLockClient,
    raw: redis.Redis,
    reentrant: bool,
) -> None:
    lock = async_client.lock("taken", ttl=10, reentrant=reentrant)
    assert await lock.acquire(timeout=0)
    raw.delete(key("taken"))  # its lease ends without its knowing
    other = async_client_b.lock("taken", ttl=10, reentrant=not reentrant)
    assert await other.acquire(timeout=0)
    assert not await lock.held() and lock.lost
    with pytest.raises(fencelock.LockLost):
        await lock.release()
    assert await other.held()
    await other.release()


@pytest.mark.parametrize(
    ("kwargs", "error", "arg"),
    [
        ({"ttl": 0}, ValueError, "ttl"),
        ({"ttl": -1}, ValueError, "ttl"),
        ({"ttl": math.nan}, ValueError, "ttl"),
        ({"ttl": math.inf}, ValueError, "ttl"),
        ({"ttl": "10"}, TypeError, "ttl"),
        ({"ttl": True}, TypeError, "ttl"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"timeout": math.nan}, ValueError, "timeout"),
        ({"timeout": "1"}, TypeError, "timeout"),
    ],
)
async def test_bad_arguments(
    async_client: AsyncLockClient, kwargs: dict[str, object], error: type, arg: str
) -> None:
    with pytest.raises(error, match=arg):
        async_client.lock("name", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "error"), [("", ValueError), (None, TypeError), (b"x", TypeError), (5, TypeError)]
)
async def test_bad_names(
    async_client: AsyncLockClient, raw: redis.Redis, name: object, error: type
) -> None:
    with pytest.raises(error, match="name"):
        async_client.lock(name, ttl=5)  # type: ignore[arg-type]
    assert raw.dbsize() == 0


async def test_bad_timeout_at_acquire(async_client: AsyncLockClient, raw: redis.Redis) -> None:
    lock = async_client.lock("t", ttl=5)
    with pytest.raises(ValueError, match="timeout"):
        await lock.acquire(timeout=-3)
    with pytest.raises(ValueError, match="ttl"):
        await lock.extend(ttl=0)
    assert raw.dbsize() == 0


async def test_names_with_braces_get_their_own_keys(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    names = ["a", "{a}", "a}", "%7Ba%7D", "ünï{}cødé"]
    locks = [async_client.lock(n, ttl=10) for n in names]
    for lock in locks:
        assert await lock.acquire(timeout=0)
    assert len(raw.keys("fencelock:*:lock")) == len(names)
    # each name has its own key, holding its own token
    assert [lock_value(raw.get(lk._lease.spec.keys.lock))[1] for lk in locks] == [
        lk.token for lk in locks
    ]
    for lock in locks:
        await lock.release()


async def test_server_down_gives_connection_error() -> None:
    from fencelock_tools.servers.embedded import free_port

    client = AsyncLockClient.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5)
    with pytest.raises(fencelock.LockConnectionError):
        await client.lock("down", ttl=5).acquire(timeout=0)
    await client.close()


async def test_hung_server_gives_connection_error(fresh_server: EmbeddedServer) -> None:
    client = AsyncLockClient.from_url(fresh_server.url, socket_timeout=0.3)
    lock = client.lock("hung", ttl=5)
    assert await lock.acquire(timeout=0)
    fresh_server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            await lock.extend()
        with pytest.raises(fencelock.LockConnectionError):
            await client.lock("other", ttl=5).acquire(timeout=0)
    finally:
        fresh_server.resume()
    await client.close()


async def test_user_client_without_timeouts_is_bounded(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    from fencelock._transport import AsyncRedis

    user = AsyncRedis(port=server.port, socket_timeout=None, socket_connect_timeout=None)
    client = AsyncLockClient(user, socket_timeout=2.0)
    assert (
        client._wiring.topology.route.redis.connection_pool.connection_kwargs["socket_timeout"]
        == 2.0
    )
    assert user.connection_pool.connection_kwargs.get("socket_timeout") is None  # untouched
    async with client.lock("bounded", ttl=5):
        pass
    await client.close()
    await user.aclose()


async def test_a_token_given_back_is_never_used_again(server: EmbeddedServer) -> None:
    # A late grant is given back, and acquire tries again: with a new holder token, since the
    # give-back (or a copy the client re-sent) can still reach the server later and would
    # delete a grant made to the same token meanwhile.
    with TcpProxy(server.port) as proxy:
        client = AsyncLockClient.from_url(proxy.url)
        await client.lock("warm-up", ttl=10).acquire(timeout=0)  # connected, scripts cached
        lock = client.lock("late", ttl=0.2)
        holders: list[str] = []
        grants = lock._lease.wiring.grants
        original = grants.try_acquire

        async def recording(spec: Any, holder: str, *args: Any, **kwargs: Any) -> Any:
            holders.append(holder)
            return await original(spec, holder, *args, **kwargs)

        grants.try_acquire = recording  # type: ignore[method-assign]
        proxy.delay(0.15)  # every grant comes back after its 0.2 s lease
        assert not await lock.acquire(timeout=2.0)
        proxy.normal()
        assert len(holders) >= 2
        assert len(set(holders)) == len(holders)  # one try per token: each was given back
        await client.close()


async def test_a_grant_that_comes_back_after_its_lease_is_given_back(
    server: EmbeddedServer, raw: redis.Redis
) -> None:
    # Every byte takes 0.15 s each way: the grant's reply arrives after its 0.2 s lease would
    # have ended. Such a grant is no grant: acquire must not hand out a lease already over.
    with TcpProxy(server.port) as proxy:
        client = AsyncLockClient.from_url(proxy.url)
        await client.lock("warm-up", ttl=10).acquire(timeout=0)  # connected, scripts cached
        proxy.delay(0.15)
        lock = client.lock("late", ttl=0.2)
        assert not await lock.acquire(timeout=0)
        proxy.normal()
        assert not await lock.held()
        await client.close()


async def test_acquire_is_keyword_only(async_client: AsyncLockClient) -> None:
    """``sem.acquire(5)`` took 5 permits, ``lock.acquire(5)`` waited 5 s: one meaning now, by
    keyword, and a positional call says which keywords there are."""
    calls: list[tuple[Any, str]] = [
        (async_client.lock("kw").acquire, "timeout="),
        (async_client.semaphore("kw-s", 5).acquire, "permits=, timeout="),
        (async_client.rw_lock("kw-rw").read().acquire, "timeout="),
        (async_client.rw_lock("kw-rw").write().acquire, "timeout="),
        (async_client.multi_lock(["a", "b"]).acquire, "timeout="),
        (async_client.election("kw-e").acquire, "timeout="),
        (async_client.election("kw-e").campaign, "timeout="),
        (async_client.latch("kw-l", 2).wait, "timeout="),
        (async_client.barrier("kw-b", 2).enter, "timeout="),
        (async_client.barrier("kw-b", 2).leave, "timeout="),
    ]
    for method, keywords in calls:
        with pytest.raises(TypeError, match=f"keyword arguments only \\({keywords}\\), got 5"):
            await method(5)
    assert await async_client.semaphore("kw-s", 5).acquire(permits=5, timeout=0)


async def test_a_mistyped_keyword_names_the_factory_called(
    server: EmbeddedServer, async_client: AsyncLockClient
) -> None:
    """``client.lock("x", timout=1)`` said "LeaseOptions.checked() got an unexpected keyword
    argument 'timout'": each factory names itself and the keyword meant (issue 29, item 3)."""
    client: Any = async_client  # (the calls below are mistyped on purpose)
    calls: list[tuple[str, Callable[[], object]]] = [
        ("lock", lambda: client.lock("kw", timout=1)),
        ("semaphore", lambda: client.semaphore("kw", 2, timout=1)),
        ("rw_lock", lambda: client.rw_lock("kw", timout=1)),
        ("multi_lock", lambda: client.multi_lock(["a", "b"], timout=1)),
        ("election", lambda: client.election("kw", timout=1)),
        ("latch", lambda: client.latch("kw", 2, timout=1)),
        ("barrier", lambda: client.barrier("kw", 2, timout=1)),
        ("at_most", lambda: client.at_most(2, "kw", timout=1)),
        ("once_per", lambda: client.once_per("kw", 60, timout=1)),
    ]
    for call, make in calls:
        with pytest.raises(TypeError) as refused:
            make()
        expected = f"{call}() got an unexpected keyword argument 'timout'; did you mean 'timeout'?"
        assert str(refused.value).startswith(expected), str(refused.value)
    with pytest.raises(TypeError, match=r"latch\(\) .*'participnt'; did you mean 'participant'\?"):
        client.latch("kw", 2, participnt="a")
    with pytest.raises(TypeError, match=r"its keywords: reentrant, fair, timeout, auto_renew,"):
        client.lock("kw", threads=True)  # (an argument of the function that checks them)
    made: Any = AsyncLockClient
    api = ASYNC_API  # (not inside the f-string: tools/gen_sync.py renames it in the twin)
    with pytest.raises(TypeError, match=r"^from_url\(\) .*'sockettimeout'; did you mean"):
        made.from_url(server.url, sockettimeout=1)
    with pytest.raises(TypeError, match=rf"^{api}LockClient\(\) .*'prefx'; did you mean"):
        made(AsyncRedis(port=server.port), prefx="app:")


async def test_reprs_and_messages_use_the_public_names(async_client: AsyncLockClient) -> None:
    """``fencelock.asyncio.Lock``, never ``AsyncLock``, a name the docs never use: in reprs,
    and in the error of a closed client (issue 29, item 4; the warning of an unclosed one:
    test_dropped_clients_leave_nothing_behind)."""
    client, api = async_client, ASYNC_API  # (api: see the test above)
    shown = {
        "LockClient": client,
        "Lock": client.lock("r"),
        "Semaphore": client.semaphore("r", 2),
        "ReadWriteLock": client.rw_lock("r"),
        "RWSide": client.rw_lock("r").read(),
        "MultiLock": client.multi_lock(["r", "s"]),
        "Election": client.election("r"),
        "Latch": client.latch("r", 2),
        "Barrier": client.barrier("r", 2),
        "OncePer": client.once_per("r", 60),
        "Versioned": client.versioned("r"),
    }
    for public, obj in shown.items():
        assert repr(obj).startswith(f"<{api}{public} "), repr(obj)
        assert "Async" not in repr(obj)
    await client.close()
    assert repr(client).endswith(" closed>")
    with pytest.raises(fencelock.ClientClosed, match=rf"^this {api}LockClient is closed"):
        client.lock("r")


async def lease_left_is_the_local_deadline(objects: Sequence[Any], ttl: float) -> None:
    """Each object's ``remaining()`` is its lease's local deadline (the one ``check()`` reads)
    less now: the lease counts from its acquire request, sent between the call and its return,
    less the drift allowance. 0 before the acquire and after the release."""
    for obj in objects:
        assert obj.remaining() == 0, obj
        asked = time.monotonic()
        assert await obj.acquire(timeout=0)
        returned = before = time.monotonic()
        left = obj.remaining()
        after = time.monotonic()
        # the deadline is left + an instant in [before, after], and in [asked, returned] + lease
        lease = ttl - drift(ttl)
        assert asked + lease <= after + left and before + left <= returned + lease, obj
        await obj.release()
        assert obj.remaining() == 0, obj


async def test_every_primitive_tells_its_lease_left_by_its_own_clock(
    async_client: AsyncLockClient,
) -> None:
    ttl = 20.0
    objects = [
        async_client.lock("left", ttl),
        async_client.lock("left-re", ttl, reentrant=True),
        async_client.semaphore("left-s", 2, ttl),
        async_client.rw_lock("left-r", ttl).read(),
        async_client.rw_lock("left-w", ttl).write(),
        async_client.multi_lock(["left-a", "left-b"], ttl),  # one script
        async_client.election("left-e", ttl),
    ]
    await lease_left_is_the_local_deadline(objects, ttl)


async def test_a_redlock_lock_and_a_composed_multi_lock_tell_their_lease_left(
    redlock: list[EmbeddedServer],
) -> None:
    client = AsyncLockClient.from_url([s.url for s in redlock])
    ttl = 20.0
    # (a multi-lock over Redlock is a lock per name: the first lease to end)
    objects = [client.lock("left", ttl), client.multi_lock(["left-a", "left-b"], ttl)]
    await lease_left_is_the_local_deadline(objects, ttl)
    await client.close()


async def test_a_closed_client_refuses_every_call(server: EmbeddedServer, raw: redis.Redis) -> None:
    """After close(), the client and every object it made raise ClientClosed, and start
    nothing: no watchdog, no connection (it used to acquire, write, and renew)."""
    client = AsyncLockClient.from_url(server.url)
    held = client.lock("closed-held", ttl=10, auto_renew=True)
    assert await held.acquire(timeout=0)
    made = client.lock("closed", ttl=10, auto_renew=True)
    semaphore, latch = client.semaphore("closed-s", 2), client.latch("closed-l", 2)
    user = AsyncRedis.from_url(server.url)
    # the resource side, made before the close: versioned values kept writing after it
    own, direct = client.versioned("closed-v"), client.versioned("closed-v", redis=user)
    guard = client.once_per("closed-o", 60)
    limited = client.at_most(1, "closed-a")(job)
    await client.close()
    assert client.closed
    connections = len(raw.client_list())
    refused: list[Any] = [
        lambda: made.acquire(timeout=0),
        lambda: semaphore.acquire(timeout=0),
        lambda: latch.count_down(),
        lambda: latch.wait(timeout=0),
        held.release,
        held.extend,
        held.held,
        lambda: client.fenced_set("resource", "value", 1),
        lambda: client.fenced_get("resource", 1, redis=user),
        lambda: client.fenced_update("resource", 1, lambda v: "value"),
        own.get,
        direct.get,
        lambda: own.set("value", 0),
        lambda: direct.set("value", 0),
        lambda: own.update(lambda v: "value"),
        lambda: direct.update(lambda v: "value"),
        lambda: guard.run(job),
        limited,
        lambda: client.inspect("closed"),
        lambda: client.force_release("closed"),
    ]
    for call in refused:
        with pytest.raises(fencelock.ClientClosed, match="closed"):
            await call()
    for make in (lambda: client.lock("x"), lambda: client.versioned("k"), held.check):
        with pytest.raises(fencelock.ClientClosed):
            make()
    with pytest.raises(fencelock.ClientClosed):
        _ = held.token
    with pytest.raises(fencelock.ClientClosed):
        [info async for info in client.locks()]
    assert len(client._wiring.watchdog) == 0 and not made.lost
    assert len(raw.client_list()) == connections  # nothing connected meanwhile
    assert not raw.exists("closed-v") and not await user.exists("closed-v")
    await user.aclose()


async def job() -> str:
    return "ran"
