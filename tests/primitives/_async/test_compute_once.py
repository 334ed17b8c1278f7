"""compute_once: one build across clients, the others woken by its store; fresh, stale and
old results; a build that raises; bad input; a dead builder replaced; a late store refused.

Sync twin generated into tests/primitives/_sync by tools/gen_sync.py."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._backend import AsyncEvent
from fencelock._core.compute import COMPUTE, TOLD_MAX, ComputeKeys
from fencelock._core.replies import lock_value
from fencelock._keys import DEFAULT_PREFIX
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import TIMEOUT, AsyncCall, async_together, async_until, evalsha_calls


class Build:
    """A ``compute`` that counts its calls and returns ``value`` (or raises ``error``); with
    ``hold``, it runs until ``go`` is set."""

    def __init__(
        self, value: Any = None, *, hold: bool = False, error: BaseException | None = None
    ):
        self.value, self.error = value, error
        self.calls = 0
        self.started, self.go = AsyncEvent(), AsyncEvent()
        if not hold:
            self.go.set()

    async def __call__(self) -> Any:
        self.calls += 1
        self.started.set()
        assert await self.go.wait(TIMEOUT)
        if self.error is not None:
            raise self.error
        return self.value


def keys(name: str) -> ComputeKeys:
    return ComputeKeys.for_compute(name, DEFAULT_PREFIX, COMPUTE)


def build_token(raw: redis.Redis, name: str) -> int | None:
    """The fencing token of the build of ``name`` under way: its lease's key holds it."""
    lease = raw.get(keys(name).lock)
    return None if lease is None else lock_value(lease)[1]


def age(raw: redis.Redis, name: str, seconds: float) -> None:
    """Make the stored result of ``name`` ``seconds`` older (its time of storing, moved back)."""
    assert raw.hincrby(keys(name).result, "t", -round(seconds * 1000)) > 0


def waiting(*clients: AsyncLockClient) -> int:
    return sum(client.statistics().waiting for client in clients)


def queued(client: AsyncLockClient) -> int:
    return client.statistics().compute_queued


async def test_concurrent_callers_of_two_clients_build_once(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    build = Build({"total": 42, "rows": [1, 2]}, hold=True)
    clients = (async_client, async_client_b) * 4
    calls = [lambda c=c: c.compute_once("c-once", build, fresh_for=60) for c in clients]
    running = AsyncCall(lambda: async_together(calls))  # type: ignore[arg-type]
    assert await build.started.wait(TIMEOUT)
    # one caller per client asks the server (the builder's, and one waiting on pub/sub); the
    # others follow it
    await async_until(lambda: waiting(async_client, async_client_b) == 1)
    await async_until(lambda: queued(async_client) == 3 and queued(async_client_b) == 3)
    build.go.set()
    assert await running.result() == [{"total": 42, "rows": [1, 2]}] * 8
    assert build.calls == 1
    a, b = async_client.statistics(), async_client_b.statistics()
    assert (a.compute_builds + b.compute_builds, a.compute_waits + b.compute_waits) == (1, 7)
    assert (a.wakeups + b.wakeups, a.polls + b.polls) == (1, 0)  # woken by the store
    assert a.compute_hits + b.compute_hits == 0
    # one client's: look, take the lease, look, store, release; the other's: look, try the
    # lease (busy), look once subscribed, look once woken; whatever the callers per client
    assert evalsha_calls(raw) <= 9
    assert raw.hget(keys("c-once").result, "v") == '{"total":42,"rows":[1,2]}'
    assert raw.exists(keys("c-once").lock) == 0  # the lease released


@pytest.mark.glide
@pytest.mark.parametrize("encoded", [TOLD_MAX, TOLD_MAX + 1], ids=["carried", "read"])
async def test_a_waiter_takes_a_small_result_from_its_stores_message(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis, encoded: int
) -> None:
    value = "x" * (encoded - 2)  # (JSON: two quotes)
    build = Build(value, hold=True)
    building = AsyncCall(lambda: async_client.compute_once("c-told", build, fresh_for=60))
    assert await build.started.wait(TIMEOUT)
    other = Build("unused")
    waiter = AsyncCall(lambda: async_client_b.compute_once("c-told", other, fresh_for=60))
    await async_until(lambda: waiting(async_client_b) == 1)
    before = evalsha_calls(raw)
    build.go.set()
    assert await building.result() == value
    assert await waiter.result() == value
    assert (other.calls, async_client_b.statistics().wakeups) == (0, 1)
    # the builder's store and release; a read by the waiter only when the message did not
    # carry the result (up to TOLD_MAX bytes encoded)
    assert evalsha_calls(raw) - before == (2 if encoded <= TOLD_MAX else 3)


async def test_a_fresh_result_is_returned_in_one_request(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    build = Build((1, "two"))
    assert await async_client.compute_once("c-fresh", build, fresh_for=60) == [1, "two"]  # JSON
    before = evalsha_calls(raw)
    assert await async_client.compute_once("c-fresh", build, fresh_for=60) == [1, "two"]
    assert evalsha_calls(raw) == before + 1
    assert build.calls == 1
    stats = async_client.statistics()
    assert (stats.compute_builds, stats.compute_hits) == (1, 1)
    assert 59_000 < raw.pttl(keys("c-fresh").result) <= 60_000  # kept fresh_for + stale_for


async def test_a_result_older_than_fresh_for_is_built_again(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    assert await async_client.compute_once("c-old", Build("first"), fresh_for=60) == "first"
    age(raw, "c-old", 61)
    # a caller content with older results takes it
    assert await async_client.compute_once("c-old", Build("unused"), fresh_for=120) == "first"
    assert await async_client.compute_once("c-old", Build("second"), fresh_for=60) == "second"
    assert async_client.statistics().compute_builds == 2


async def test_a_stale_result_is_returned_at_once_while_one_caller_refreshes_it(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    ask = {"fresh_for": 60, "stale_for": 600}
    assert await async_client.compute_once("c-stale", Build("old"), **ask) == "old"
    age(raw, "c-stale", 61)
    refresh = Build("new", hold=True)
    refreshing = AsyncCall(lambda: async_client.compute_once("c-stale", refresh, **ask))
    assert await refresh.started.wait(TIMEOUT)
    other = Build("unused")
    assert await async_client_b.compute_once("c-stale", other, **ask) == "old"  # at once
    assert other.calls == 0 and async_client_b.statistics().compute_stale_hits == 1
    refresh.go.set()
    assert await refreshing.result() == "new"
    assert await async_client_b.compute_once("c-stale", other, **ask) == "new"
    age(raw, "c-stale", 700)  # past stale_for too: built before it is returned
    assert await async_client_b.compute_once("c-stale", Build("newest"), **ask) == "newest"


async def test_a_stale_result_with_nobody_refreshing_is_refreshed_by_its_caller(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    ask = {"fresh_for": 60, "stale_for": 600}
    assert await async_client.compute_once("c-refresh", Build(1), **ask) == 1
    age(raw, "c-refresh", 61)
    assert await async_client.compute_once("c-refresh", Build(2), **ask) == 2
    assert async_client.statistics().compute_stale_hits == 0


async def test_the_waiters_of_a_build_that_raised_get_compute_failed(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    failing = Build(hold=True, error=KeyError("no such report"))
    building = AsyncCall(lambda: async_client.compute_once("c-fail", failing, fresh_for=60))
    assert await failing.started.wait(TIMEOUT)
    other = Build("unused")
    waiter = AsyncCall(lambda: async_client_b.compute_once("c-fail", other, fresh_for=60))
    await async_until(lambda: waiting(async_client_b) == 1)
    failing.go.set()
    with pytest.raises(KeyError, match="no such report"):  # its caller: the exception itself
        await building.result()
    with pytest.raises(fencelock.ComputeFailed, match="KeyError") as failed:
        await waiter.result()
    assert (failed.value.key, failed.value.type_name) == ("c-fail", "KeyError")
    assert failed.value.message == "'no such report'"
    assert other.calls == 0  # its waiters did not all build again
    # the next call builds afresh
    assert await async_client_b.compute_once("c-fail", Build("fixed"), fresh_for=60) == "fixed"
    assert raw.exists(keys("c-fail").failure) == 0


async def test_a_build_that_raises_with_nobody_waiting_stores_nothing(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    with pytest.raises(ZeroDivisionError):
        await async_client.compute_once("c-alone", Build(error=ZeroDivisionError()), fresh_for=1)
    assert raw.keys("*c-alone*result") == raw.keys("*c-alone*failure") == []
    assert raw.exists(keys("c-alone").lock) == 0


class Interrupted(BaseException):
    """What a KeyboardInterrupt is to a sync builder, or a cancellation to a task."""


async def interrupted_and_taken_over(
    key: str, builder: AsyncLockClient, taker: AsyncLockClient, waits: Callable[[], bool]
) -> None:
    """``builder``'s build is interrupted while a caller of ``taker`` waits for it (``waits``
    says when): that caller takes the build over at once (one that waited for the lease to end
    would time out this test)."""
    interrupted = Build(hold=True, error=Interrupted())
    ttl = 2 * TIMEOUT
    building = AsyncCall(lambda: builder.compute_once(key, interrupted, fresh_for=60, ttl=ttl))
    assert await interrupted.started.wait(TIMEOUT)
    takeover = Build("taken over")
    waiter = AsyncCall(lambda: taker.compute_once(key, takeover, fresh_for=60, ttl=ttl))
    await async_until(waits)
    interrupted.go.set()
    with pytest.raises(Interrupted):
        await building.result()
    assert await waiter.result() == "taken over"


async def test_a_builder_interrupted_passes_the_build_on_at_once(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    waits = lambda: waiting(async_client_b) == 1  # noqa: E731
    await interrupted_and_taken_over("c-pass", async_client, async_client_b, waits)
    stats = async_client_b.statistics()
    assert (stats.compute_builds, stats.compute_takeovers, stats.polls) == (1, 1, 0)


async def test_a_builder_that_died_is_replaced_when_its_lease_ends(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    # the lease of a builder that will never store nor release (killed), 0.3 s left
    raw.set(keys("c-dead").lock, "a-dead-builder", px=300)
    build = Build("mine")
    assert await async_client.compute_once("c-dead", build, fresh_for=60) == "mine"
    stats = async_client.statistics()
    assert (stats.compute_waits, stats.compute_takeovers, stats.compute_builds) == (1, 1, 1)
    assert stats.polls >= 1 and stats.wakeups == 0  # it looked again when the lease ended


async def test_a_store_older_than_the_stored_result_is_refused(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    late = Build("late", hold=True)
    building = AsyncCall(lambda: async_client.compute_once("c-late", late, fresh_for=60))
    assert await late.started.wait(TIMEOUT)
    token = build_token(raw, "c-late")
    assert token is not None
    now_ms = raw.time()[0] * 1000
    # meanwhile its lease ran out, and a newer build (a larger token) stored its result
    raw.hset(keys("c-late").result, mapping={"v": '"newer"', "f": token + 1, "t": now_ms})
    late.go.set()
    assert await building.result() == "newer"  # the caller gets the newer result
    assert raw.hget(keys("c-late").result, "v") == '"newer"'
    assert raw.hget(keys("c-late").result, "f") == str(token + 1)


async def test_a_waiter_gives_up_after_its_timeout(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    slow = Build("slow", hold=True)
    building = AsyncCall(lambda: async_client.compute_once("c-timeout", slow, fresh_for=60))
    assert await slow.started.wait(TIMEOUT)
    for timeout in (0, 0.05):
        with pytest.raises(fencelock.LockTimeout, match="c-timeout"):
            await async_client_b.compute_once("c-timeout", Build(), fresh_for=60, timeout=timeout)
    slow.go.set()
    assert await building.result() == "slow"


async def test_a_codec_given_stores_what_json_cannot(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    value = {"ids": {1, 2}, "pair": (3, 4)}
    got = await async_client.compute_once("c-pickle", Build(value), fresh_for=60, codec=pickle)
    assert got == value
    assert await async_client.compute_once("c-pickle", Build(), fresh_for=60, codec=pickle) == value
    with pytest.raises(fencelock.ResultError, match="cannot be read"):  # JSON cannot read it
        await async_client.compute_once("c-pickle", Build(), fresh_for=60)


async def test_bad_input_is_refused_and_stores_nothing(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    client = async_client
    for bad, error, match in [
        ({"compute": 42}, TypeError, "compute must be callable"),
        ({"fresh_for": -1}, ValueError, "fresh_for"),
        ({"fresh_for": 0}, ValueError, "fresh_for"),
        ({"stale_for": -1}, ValueError, "stale_for"),
        ({"stale_for": float("nan")}, ValueError, "stale_for"),
        ({"ttl": 0}, ValueError, "ttl"),
        ({"timeout": -1}, ValueError, "timeout"),
        ({"key": ""}, ValueError, "key"),
        ({"key": 7}, TypeError, "key"),
        ({"codec": object()}, TypeError, "codec"),
        ({"max_size": 0}, ValueError, "max_size"),
        ({"max_size": 1.5}, TypeError, "max_size"),
    ]:
        given: dict[str, Any] = {"key": "c-bad", "compute": Build(1), "fresh_for": 60, **bad}
        with pytest.raises(error, match=match):
            await client.compute_once(given.pop("key"), given.pop("compute"), **given)
    with pytest.raises(fencelock.ResultError, match="cannot be stored"):  # not JSON
        await client.compute_once("c-bad", Build(object()), fresh_for=60)
    with pytest.raises(fencelock.ResultError, match="over max_size"):
        await client.compute_once("c-bad", Build("x" * 100), fresh_for=60, max_size=64)
    # nothing stored, no lease left: no key at all
    assert raw.keys("*c-bad*") == []
    assert await client.compute_once("c-bad", Build("x" * 60), fresh_for=60, max_size=64)


async def test_a_decorated_function_is_computed_once_per_key_of_its_arguments(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    runs: list[tuple[int, str]] = []

    @async_client.computed("c-report:{user_id}:{period}", fresh_for=60)
    async def report(user_id: int, period: str = "day") -> dict[str, Any]:
        runs.append((user_id, period))
        return {"user": user_id, "period": period}

    assert await report(7) == {"user": 7, "period": "day"}
    assert await report(7, period="day") == {"user": 7, "period": "day"}  # the same key
    assert await report(user_id=8, period="week") == {"user": 8, "period": "week"}
    assert runs == [(7, "day"), (8, "week")]
    assert report.__name__ == "report"
    assert raw.exists(keys("c-report:7:day").result, keys("c-report:8:week").result) == 2

    @async_client_b.computed(
        lambda user_id, period="day": f"c-report:{user_id}:{period}", fresh_for=60
    )
    async def elsewhere(user_id: int, period: str = "day") -> dict[str, Any]:
        raise AssertionError("stored already, by the other client")

    assert await elsewhere(7) == {"user": 7, "period": "day"}


async def test_a_decorator_checks_its_key_and_options_when_it_is_applied(
    async_client: AsyncLockClient,
) -> None:
    async def report(user_id: int) -> int:
        return user_id

    with pytest.raises(ValueError, match=r"must name a parameter of .*report.*'user'"):
        async_client.computed("c-report:{user}", fresh_for=60)(report)
    with pytest.raises(ValueError, match="must name a parameter"):
        async_client.computed("c-report:{}", fresh_for=60)(report)
    with pytest.raises(TypeError, match="key must be a str template or a function"):
        async_client.computed(7, fresh_for=60)(report)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fresh_for"):
        async_client.computed("c-report:{user_id}", fresh_for=-1)
    with pytest.raises(TypeError, match="compute must be callable"):
        async_client.computed("c-report", fresh_for=60)(42)  # type: ignore[type-var]
    keyed = async_client.computed(lambda user_id: "", fresh_for=60)(report)
    with pytest.raises(ValueError, match="key must not be empty"):
        await keyed(1)


async def test_forget_drops_the_result_and_refuses_a_build_under_way(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    assert await async_client.compute_once("c-forget", Build("v1"), fresh_for=60) == "v1"
    assert await async_client.forget("c-forget") is True
    assert await async_client.forget("c-forget") is False  # nothing left to drop
    assert raw.exists(keys("c-forget").result) == 0
    assert await async_client.compute_once("c-forget", Build("v2"), fresh_for=60) == "v2"
    await async_client.forget("c-forget")
    # a build that read the data before a write, still under way when the writer forgets
    before = Build("read before the write", hold=True)
    building = AsyncCall(lambda: async_client.compute_once("c-forget", before, fresh_for=60))
    assert await before.started.wait(TIMEOUT)
    after = Build("read after the write")
    waiter = AsyncCall(lambda: async_client_b.compute_once("c-forget", after, fresh_for=60))
    await async_until(lambda: waiting(async_client_b) == 1)
    assert await async_client.forget("c-forget") is False  # (nothing stored yet)
    before.go.set()
    assert await building.result() == "read before the write"  # its own caller gets it...
    assert await waiter.result() == "read after the write"  # ...nobody else: it is not stored
    assert raw.hget(keys("c-forget").result, "v") == '"read after the write"'
    assert async_client_b.statistics().compute_takeovers == 1
    with pytest.raises(ValueError, match="key"):
        await async_client.forget("")


async def test_a_build_in_progress_and_its_builder_are_shown_to_operators(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    assert await async_client_b.inspect("c-view") is None
    slow = Build("done", hold=True)
    building = AsyncCall(lambda: async_client.compute_once("c-view", slow, fresh_for=60, ttl=20))
    assert await slow.started.wait(TIMEOUT)
    info = await async_client_b.inspect("c-view")
    assert info is not None and info.kind == "compute build"
    assert info.label is not None and info.label.split(":")[1] == str(os.getpid())  # host:pid
    assert info.token == build_token(raw, "c-view")
    assert info.ttl is not None and 0 < info.ttl <= 20
    assert [i.name async for i in async_client_b.locks("c-view*")] == ["c-view"]
    slow.go.set()
    assert await building.result() == "done"
    assert await async_client_b.inspect("c-view") is None  # a result stored is no build
    assert [i async for i in async_client_b.locks("c-view*")] == []


async def test_the_callers_of_one_client_follow_the_first_of_them(
    async_client: AsyncLockClient, raw: redis.Redis
) -> None:
    failing = Build(hold=True, error=ValueError("bad input"))
    first = AsyncCall(lambda: async_client.compute_once("c-local", failing, fresh_for=60))
    assert await failing.started.wait(TIMEOUT)
    unused = Build("unused")
    follower = AsyncCall(lambda: async_client.compute_once("c-local", unused, fresh_for=60))
    await async_until(lambda: queued(async_client) == 1)
    with pytest.raises(fencelock.LockTimeout):  # one that does not wait for the first
        await async_client.compute_once("c-local", unused, fresh_for=60, timeout=0)
    failing.go.set()
    with pytest.raises(ValueError, match="bad input"):
        await first.result()
    with pytest.raises(fencelock.ComputeFailed, match="ValueError: bad input"):
        await follower.result()  # the build it waited for raised
    # the first interrupted: a follower takes the build over at once
    follows = lambda: queued(async_client) == 1  # noqa: E731
    await interrupted_and_taken_over("c-local", async_client, async_client, follows)
    assert unused.calls == 0 and queued(async_client) == 0


async def test_compute_once_needs_scripts(server: EmbeddedServer) -> None:
    """The store and its fence are one script: a client that runs none refuses, sending
    nothing and running nothing."""
    async with AsyncLockClient.from_url(server.url, scripts="never") as client:
        build = Build(1)
        with pytest.raises(fencelock.ScriptsRequired, match="builder 'c-scripts'"):
            await client.compute_once("c-scripts", build, fresh_for=60)
        with pytest.raises(fencelock.ScriptsRequired):
            await client.forget("c-scripts")
        assert build.calls == 0
