"""Fuzzing the inputs against a real server (issue 6, item 4). Sync twin generated into
tests/engine/_sync by tools/gen_sync.py; the strategies and helpers are in tests/fuzzing.py.

Names (any ``str``: unicode, empty, very long, braces and percent signs that look like hash tags
or like escapes), ttls, timeouts, client options, fencing tokens, values, resource keys, and keys
that hold a value of another Redis type. The properties:

* only the documented errors: ``ValueError``/``TypeError`` naming the argument, or a
  ``fencelock.LockError`` (never a raw redis-py exception);
* nothing of another lock or key is touched: every example starts from the same set of sentinel
  keys (among them keys that look like another lock's keys), and a snapshot of every key, its
  value (``DUMP``) and whether it has an expiry is compared before and after;
* a lock leaves nothing behind but its fencing counter;
* two different names never share a key (tests/core/test_fuzz.py: no server, no API).

Both APIs check the same properties; the asyncio pass on fewer examples (``ASYNC_FUZZ``).

Tests at the end pin what this pass found (and what was fixed): lone surrogates in names, keys
and values; ``socket_timeout`` validated; a companion key of ``fenced_set`` holding garbage;
fencing counters beyond 2**53.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
from hypothesis import assume, event, given
from hypothesis import strategies as st

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._core.replies import lock_value
from fencelock._keys import MAX_NAME_LENGTH, MAX_TTL, MIN_TTL, LockKeys, fence_key_for, ttl_to_ms
from fencelock._transport import AsyncRedis
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.fuzzing import (
    ASYNC_FUZZ,
    CLIENT_OPTIONS,
    HOLDER,
    LOCK_KEY_KINDS,
    SENTINEL_KEYS,
    SMALL,
    SURROGATE_NAME,
    anything,
    changed,
    counter_value,
    expected_acquire,
    fence_states,
    fenced_set_problems,
    fresh_name,
    is_seconds,
    names,
    payload_for,
    put,
    reset,
    resource_keys,
    snapshot,
    stored_form,
    writes,
)


async def async_release_quietly(*locks: Any) -> None:
    """Leave every hold of ``locks`` (after a failed check: so the next example starts clean)."""
    for lock in locks:
        with contextlib.suppress(Exception):
            for _ in range(10):
                await lock.release()


@contextlib.asynccontextmanager
async def async_cleanup(*locks: Any) -> AsyncIterator[None]:
    try:
        yield
    except BaseException:
        await async_release_quietly(*locks)
        raise


@pytest.fixture(scope="module")
def store(server: EmbeddedServer) -> Iterator[redis.Redis]:
    """Raw access (bytes) for setting up and inspecting the server."""
    client = server.client()
    yield client
    client.flushall()
    client.close()


# -- names ---------------------------------------------------------------------------------


@ASYNC_FUZZ
@given(name=names, reentrant=st.booleans(), depth=st.integers(1, 3), ttl=st.floats(1, 60))
async def test_any_name_round_trip_touches_only_its_own_keys(
    store: redis.Redis,
    async_client: AsyncLockClient,
    async_client_b: AsyncLockClient,
    name: str,
    reentrant: bool,
    depth: int,
    ttl: float,
) -> None:
    reset(store)
    before = snapshot(store)
    if not name or len(name) > MAX_NAME_LENGTH:
        with pytest.raises(ValueError, match=r"^name "):
            async_client.lock(name, ttl)
        assert snapshot(store) == before
        return
    keys = LockKeys.for_name(name)
    assume(not {keys.lock, keys.fence} & SENTINEL_KEYS)
    holds = depth if reentrant else 1
    lock = async_client.lock(name, ttl, reentrant=reentrant)
    async with async_cleanup(lock):
        for _ in range(holds):
            assert await lock.acquire(timeout=0)
        token = lock.token
        if reentrant:  # (its hash holds hold counts: the token is the counter's)
            stored, shown = store.hkeys(keys.lock), int(store.get(keys.fence))
            own = {keys.lock.encode(), keys.fence.encode()}
        else:  # one key: the holder token and the fencing token
            holder, shown = lock_value(store.get(keys.lock))
            stored, own = [holder.encode()], {keys.lock.encode()}
        assert token == shown
        assert len(stored) == 1
        assert stored[0] is not None and HOLDER.fullmatch(stored[0])
        assert 0 < store.pttl(keys.lock) <= ttl_to_ms(ttl)
        assert await lock.held()
        assert not await async_client_b.lock(name, ttl, reentrant=reentrant).acquire(timeout=0)
        assert changed(before, snapshot(store)) == own
        for _ in range(holds):
            await lock.release()
    if reentrant:
        # the counter: the last token, kept for the lease and until the server's clock passed it
        assert changed(before, snapshot(store)) <= {keys.fence.encode()}
        assert store.get(keys.fence) in (str(token).encode(), None)
    else:  # a free name leaves nothing
        assert changed(before, snapshot(store)) == set()


# -- ttls and timeouts ------------------------------------------------------------------------


@ASYNC_FUZZ
@given(ttl=anything)
async def test_any_ttl_is_used_or_refused_naming_it(
    store: redis.Redis, async_client: AsyncLockClient, ttl: Any
) -> None:
    reset(store)
    before = snapshot(store)
    name = fresh_name("ttl")
    keys = LockKeys.for_name(name)
    try:
        lock = async_client.lock(name, ttl)
    except (ValueError, TypeError) as exc:
        assert str(exc).startswith("ttl ")
        wrong_type = isinstance(ttl, bool) or not isinstance(ttl, int | float)
        assert isinstance(exc, TypeError) == wrong_type
        assert snapshot(store) == before
        return
    assert is_seconds(ttl) and MIN_TTL <= ttl <= MAX_TTL  # only sane leases get this far
    async with async_cleanup(lock):
        assert await lock.acquire(timeout=0)
        pttl = store.pttl(keys.lock)
        assert pttl <= ttl_to_ms(ttl) and (pttl > 0 or ttl < 1)  # (a short lease may be gone)
        try:
            await lock.release()
        except fencelock.LockNotOwned:
            assert ttl < 1  # a lease of a few milliseconds can run out before the release
    assert changed(before, snapshot(store)) == set()  # released or expired: nothing left


@ASYNC_FUZZ
@given(ttl=anything)
async def test_extend_with_any_ttl(
    store: redis.Redis, async_client: AsyncLockClient, ttl: Any
) -> None:
    reset(store)
    before = snapshot(store)
    name = fresh_name("extend")
    keys = LockKeys.for_name(name)
    lock = async_client.lock(name, 600)
    async with async_cleanup(lock):
        assert await lock.acquire(timeout=0)
        try:
            await lock.extend(ttl)
        except (ValueError, TypeError) as exc:
            assert str(exc).startswith("ttl ")
            assert store.pttl(keys.lock) > 590_000  # the lease was left alone
        else:
            if ttl is None:  # documented: the lock's own ttl
                ttl = lock.ttl
            assert is_seconds(ttl) and MIN_TTL <= ttl <= MAX_TTL
            assert store.pttl(keys.lock) <= ttl_to_ms(ttl)
        with contextlib.suppress(fencelock.LockNotOwned):  # a lease extended to 1 ms
            await lock.release()
    assert changed(before, snapshot(store)) == set()


@ASYNC_FUZZ
@given(timeout=anything, where=st.sampled_from(["lock", "acquire"]))
async def test_any_timeout_is_used_or_refused_naming_it(
    store: redis.Redis, async_client: AsyncLockClient, timeout: Any, where: str
) -> None:
    reset(store)
    before = snapshot(store)
    name = fresh_name("timeout")
    try:
        if where == "lock":
            lock = async_client.lock(name, 30, timeout=timeout)
            got = await lock.acquire()
        else:
            lock = async_client.lock(name, 30)
            got = await lock.acquire(timeout=timeout)
    except (ValueError, TypeError) as exc:
        assert str(exc).startswith("timeout ")
        assert snapshot(store) == before
        return
    assert timeout is None or (is_seconds(timeout) and timeout >= 0)
    assert got is True  # uncontended: granted at once, whatever the wait allowed
    await lock.release()
    assert changed(before, snapshot(store)) == set()


@SMALL
@given(timeout=st.one_of(st.just(0), st.just(5e-324), st.floats(0, 0.05)))
async def test_a_busy_lock_is_given_up_in_time(
    store: redis.Redis,
    async_client: AsyncLockClient,
    async_client_b: AsyncLockClient,
    timeout: float,
) -> None:
    reset(store)
    name = fresh_name("busy")
    holder = async_client_b.lock(name, 30)
    assert await holder.acquire(timeout=0)
    async with async_cleanup(holder):
        before = snapshot(store)
        started = time.monotonic()
        assert await async_client.lock(name, 30).acquire(timeout=timeout) is False
        assert time.monotonic() - started < timeout + 1
        assert snapshot(store) == before
        await holder.release()


@ASYNC_FUZZ
@given(option=st.sampled_from([*CLIENT_OPTIONS, "prefix"]), value=st.one_of(anything, st.text()))
async def test_client_options_are_used_or_refused_naming_them(
    server: EmbeddedServer, store: redis.Redis, option: str, value: Any
) -> None:
    reset(store)
    before = snapshot(store)
    extra: dict[str, Any] = {"replica_timeout": 0.01} if option == "min_replicas" else {}
    async with AsyncRedis(port=server.port, socket_timeout=5, socket_connect_timeout=5) as r:
        try:
            client = AsyncLockClient(r, **{option: value, **extra})
        except (ValueError, TypeError) as exc:
            assert str(exc).startswith(option)
            return
        async with client:
            if option == "prefix":
                assert isinstance(value, str) and "{" not in value and "}" not in value
            elif not (option in ("node_timeout", "max_poll") and value is None):
                # None: node_timeout derived per lock; max_poll: no polling (the default)
                assert is_seconds(value)
            lock = client.lock("options", 30)
            try:
                got = await lock.acquire(timeout=0)
            except fencelock.LockError:  # NotReplicated, or WAIT refusing a huge count
                assert option == "min_replicas" and value > 0
            else:
                assert got
                assert store.exists(f"{client.prefix}{{options}}:lock")
                await lock.release()
    keys = LockKeys.for_name("options", client.prefix)
    assert changed(before, snapshot(store)) <= {keys.fence.encode()}


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, "5"], ids=repr)
async def test_socket_timeout_is_refused_naming_it(server: EmbeddedServer, value: Any) -> None:
    client = None
    try:
        with pytest.raises((ValueError, TypeError), match="socket_timeout"):
            client = AsyncLockClient.from_url(server.url, socket_timeout=value)
            await client.lock(fresh_name("socket-timeout"), 5).acquire(timeout=0)
    finally:
        if client is not None:
            await client.close()


# -- names that cannot be sent: lone surrogates ----------------------------------------------


async def test_a_name_that_cannot_be_encoded_is_refused_naming_it(
    async_client: AsyncLockClient,
) -> None:
    with pytest.raises(ValueError, match="name"):
        await async_client.lock(SURROGATE_NAME, 5).acquire(timeout=0)


async def test_a_name_that_cannot_be_encoded_fails_fast_every_time(
    async_client: AsyncLockClient,
) -> None:
    for _ in range(3):
        started = time.monotonic()
        with pytest.raises(ValueError):
            await async_client.lock(SURROGATE_NAME, 5).acquire(timeout=0.3)
        assert time.monotonic() - started < 0.25


@pytest.mark.parametrize("argument", ["key", "value"])
async def test_fenced_set_refuses_unencodable_text_naming_it(
    async_client: AsyncLockClient, argument: str
) -> None:
    key, value = ("res-\udcff", "v") if argument == "key" else ("res", "v-\udcff")
    with pytest.raises(ValueError, match=f"^{argument} "):
        await async_client.fenced_set(key, value, 1)


# -- fenced writes ----------------------------------------------------------------------------


@ASYNC_FUZZ
@given(key=resource_keys, sequence=st.lists(writes, min_size=1, max_size=6))
async def test_fenced_set_writes_iff_the_token_is_not_stale(
    store: redis.Redis, async_client: AsyncLockClient, key: Any, sequence: list[tuple[Any, Any]]
) -> None:
    reset(store)
    companion = fence_key_for(key) if isinstance(key, str) and key else None
    assume(key not in SENTINEL_KEYS and companion not in SENTINEL_KEYS)
    before = snapshot(store)
    highest, current = 0, None
    for value, token in sequence:
        problems = fenced_set_problems(key, value, token)
        try:
            await async_client.fenced_set(key, value, token)
        except (ValueError, TypeError) as exc:
            assert str(exc).split()[0] in problems, (exc, problems)
            event("refused")
            continue
        except fencelock.StaleToken as exc:
            assert not problems and token < highest
            assert (exc.key, exc.token, exc.seen) == (key, token, highest)
            event("stale")
            continue
        assert not problems and token >= highest
        event("written")
        assert isinstance(key, str) and companion is not None
        highest, current = token, stored_form(value)
        assert store.get(key) == current
        assert store.get(companion) == str(token).encode()
    touched = changed(before, snapshot(store))
    assert touched <= ({key.encode(), companion.encode()} if companion else set())
    if current is not None:
        assert store.get(key) == current


# -- keys of the wrong type -------------------------------------------------------------------


@ASYNC_FUZZ
@given(
    lock_kind=st.sampled_from(LOCK_KEY_KINDS),
    fence=fence_states,
    blob=st.binary(max_size=16),
    reentrant=st.booleans(),
    timeout=st.sampled_from([0, 0.02]),
)
async def test_keys_of_the_wrong_type_give_a_lock_error_and_stay_as_they_were(
    store: redis.Redis,
    async_client: AsyncLockClient,
    lock_kind: str,
    fence: tuple[str, bytes],
    blob: bytes,
    reentrant: bool,
    timeout: float,
) -> None:
    reset(store)
    name = fresh_name("wrong")
    keys = LockKeys.for_name(name)
    pipe = store.pipeline(transaction=False)
    if lock_kind != "none":
        put(pipe, keys.lock, lock_kind, payload_for(lock_kind, blob))
    if fence[0] != "none":
        put(pipe, keys.fence, fence[0], payload_for(fence[0], fence[1]))
    pipe.execute()
    before = snapshot(store)
    lock = async_client.lock(name, 30, reentrant=reentrant)
    outcome = "busy"
    async with async_cleanup(lock):
        try:
            if await lock.acquire(timeout=timeout):
                outcome = "granted"
        except fencelock.LockError as exc:
            assert type(exc) is fencelock.LockError  # not a timeout, not a connection error
            assert isinstance(exc.__cause__, redis.exceptions.ResponseError)
            # the message names the lock, never a Redis key (issue 24)
            assert repr(name) in str(exc) and "fencelock:" not in str(exc)
            outcome = "error"
        assert outcome == expected_acquire(lock_kind, fence, reentrant)
        event(outcome)
        if outcome == "granted":
            counter = counter_value(fence[1]) if fence[0] == "string" else 0
            assert counter is not None
            token, (seconds, micros) = lock.token, store.time()
            clock = seconds * 10**6 + micros
            # counted on from the counter, or the server's clock in microseconds when ahead
            assert token == counter + 1 or counter < token <= clock
            await lock.release()
            assert changed(before, snapshot(store)) <= {keys.fence.encode()}
            kept = store.get(keys.fence)
            # a reentrant lock's counter is kept for its lease; any counter until the server's
            # clock has passed it (a simple lock's, once its key is gone, only until then)
            if reentrant or token > clock + 10**9:
                assert kept == str(token).encode()
            else:
                assert kept in (str(token).encode(), None)
        else:
            # (a reentrant waiter that gave up leaves '*' in the queue, which stands for every
            # waiter of the lock's channel: the next release takes it)
            waiting = snapshot(store).get(keys.queue.encode())
            assert not waiting or (reentrant and store.zrange(keys.queue, 0, -1) == [b"*"])
            assert changed(before, snapshot(store)) <= {keys.queue.encode()}


@pytest.mark.parametrize("reentrant", [False, True], ids=["simple", "reentrant"])
async def test_tokens_stay_exact_beyond_2_to_the_53(
    store: redis.Redis, async_client: AsyncLockClient, reentrant: bool
) -> None:
    reset(store)
    name = fresh_name("big-counter")
    keys = LockKeys.for_name(name)
    store.set(keys.fence, 2**53)
    tokens = []
    for _ in range(2):
        lock = async_client.lock(name, 30, reentrant=reentrant)
        assert await lock.acquire(timeout=0)
        tokens.append(lock.token)
        await lock.release()
    assert store.get(keys.fence) == str(2**53 + 2).encode()
    assert tokens == [2**53 + 1, 2**53 + 2]


@ASYNC_FUZZ
@given(
    kind=st.sampled_from([k for k in LOCK_KEY_KINDS if k != "none"] + ["deleted"]),
    reentrant=st.booleans(),
    operation=st.sampled_from(["release", "extend", "held", "acquire-again"]),
)
async def test_a_lock_key_replaced_by_another_type_while_held(
    store: redis.Redis, async_client: AsyncLockClient, kind: str, reentrant: bool, operation: str
) -> None:
    """Somebody overwrote the lock key while it was held: every operation reports it as a
    LockError (``LockNotOwned``/``LockLost`` included) or as not held, and leaves the foreign
    value alone."""
    reset(store)
    name = fresh_name("replaced")
    keys = LockKeys.for_name(name)
    lock = async_client.lock(name, 30, reentrant=reentrant)
    assert await lock.acquire(timeout=0)
    async with async_cleanup(lock):
        store.delete(keys.lock)
        if kind != "deleted":
            pipe = store.pipeline(transaction=False)
            put(pipe, keys.lock, kind, payload_for(kind, b"foreign"))
            pipe.execute()
        before = snapshot(store)
        try:
            if operation == "release":
                await lock.release()
            elif operation == "extend":
                await lock.extend()
            elif operation == "held":
                assert await lock.held() is False
            elif reentrant:
                await lock.acquire(timeout=0)  # a re-entry that finds the count gone
            else:
                with pytest.raises(fencelock.LockError, match="already held"):
                    await lock.acquire(timeout=0)
        except fencelock.LockError:
            pass
        await async_release_quietly(lock)
        assert snapshot(store) == before


@pytest.mark.parametrize("token", [1, 12345])
async def test_fenced_set_with_a_garbage_companion_key(
    store: redis.Redis, async_client: AsyncLockClient, token: int
) -> None:
    reset(store)
    companion = fence_key_for("res")
    store.set(companion, b"abc")
    before = snapshot(store)
    with pytest.raises(fencelock.LockError):
        await async_client.fenced_set("res", "value", token)
    assert snapshot(store) == before


@ASYNC_FUZZ
@given(
    what=st.sampled_from(["resource", "companion"]),
    kind=st.sampled_from(["list", "hash", "set", "zset", "stream"]),
    token=st.integers(1, 2**63 - 1),
)
async def test_fenced_set_on_keys_of_the_wrong_type(
    store: redis.Redis, async_client: AsyncLockClient, what: str, kind: str, token: int
) -> None:
    reset(store)
    key = fresh_name("res")
    pipe = store.pipeline(transaction=False)
    put(pipe, key if what == "resource" else fence_key_for(key), kind, payload_for(kind, b"x"))
    pipe.execute()
    before = snapshot(store)
    with pytest.raises(fencelock.LockError, match=re.escape(repr(key))) as caught:
        await async_client.fenced_set(key, "value", token)
    assert type(caught.value) is fencelock.LockError
    assert snapshot(store) == before
