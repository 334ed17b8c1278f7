"""compute_once where the two APIs differ: a cancelled builder task passes the build on at once,
``compute`` is an async callable under asyncio and a plain one with threads (the others:
tests/primitives/_async/test_compute_once.py)."""

from __future__ import annotations

import asyncio

import pytest
import redis

from fencelock._async.client import AsyncLockClient
from fencelock._core.compute import COMPUTE, ComputeKeys
from fencelock._sync.client import LockClient
from tests.concurrency import TIMEOUT, async_until


async def test_a_cancelled_builder_passes_the_build_on_at_once(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient, raw: redis.Redis
) -> None:
    started = asyncio.Event()

    async def forever() -> str:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def taken_over() -> str:
        return "taken over"

    ttl = 2 * TIMEOUT  # a waiter that waited for the lease to end would time out this test
    builder = asyncio.create_task(
        async_client.compute_once("ca-cancel", forever, fresh_for=60, ttl=ttl)
    )
    await asyncio.wait_for(started.wait(), TIMEOUT)
    waiter = asyncio.create_task(
        async_client_b.compute_once("ca-cancel", taken_over, fresh_for=60, ttl=ttl)
    )
    await async_until(lambda: async_client_b.statistics().waiting == 1)
    builder.cancel()
    with pytest.raises(asyncio.CancelledError):
        await builder
    assert await asyncio.wait_for(waiter, TIMEOUT) == "taken over"
    stats = async_client_b.statistics()
    assert (stats.compute_takeovers, stats.wakeups, stats.polls) == (1, 1, 0)
    failure = ComputeKeys.for_compute("ca-cancel", "fencelock:", COMPUTE).failure
    assert raw.exists(failure) == 0  # a cancellation is no failure to share


async def test_compute_must_be_an_async_callable(async_client: AsyncLockClient) -> None:
    def plain() -> int:
        return 1

    with pytest.raises(TypeError, match="not an awaitable"):
        await async_client.compute_once("ca-plain", plain, fresh_for=60)  # type: ignore[arg-type]


def test_a_thread_refuses_an_async_compute(sync_client: LockClient) -> None:
    async def coroutine() -> int:
        return 1

    with pytest.raises(TypeError, match="a thread cannot await"):
        sync_client.compute_once("ca-async", coroutine, fresh_for=60)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a thread cannot await"):
        sync_client.compute_once("ca-async", lambda: coroutine(), fresh_for=60)


async def test_a_follower_takes_over_from_a_first_caller_cancelled_while_waiting(
    async_client: AsyncLockClient, async_client_b: AsyncLockClient
) -> None:
    go = asyncio.Event()

    async def slow() -> str:
        await go.wait()
        return "built elsewhere"

    async def unused() -> str:
        raise AssertionError("the result is built by the other client")

    building = asyncio.create_task(async_client_b.compute_once("ca-first", slow, fresh_for=60))
    await async_until(lambda: async_client_b.statistics().compute_builds == 1)
    first = asyncio.create_task(async_client.compute_once("ca-first", unused, fresh_for=60))
    await async_until(lambda: async_client.statistics().waiting == 1)
    follower = asyncio.create_task(async_client.compute_once("ca-first", unused, fresh_for=60))
    await async_until(lambda: async_client.statistics().compute_queued == 1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await async_until(lambda: async_client.statistics().waiting == 1)  # the follower asks now
    go.set()
    assert await asyncio.wait_for(follower, TIMEOUT) == "built elsewhere"
    assert await asyncio.wait_for(building, TIMEOUT) == "built elsewhere"


async def test_the_callers_following_a_builder_are_let_go_before_it_releases_its_lease(
    async_client: AsyncLockClient,
) -> None:
    go = asyncio.Event()
    returned: list[str] = []

    async def build() -> str:
        await go.wait()
        return "built"

    async def call(who: str) -> str:
        result = await async_client.compute_once("ca-land", build, fresh_for=60)
        returned.append(who)
        return result

    builder = asyncio.create_task(call("builder"))
    await async_until(lambda: async_client.statistics().compute_builds == 1)
    followers = [asyncio.create_task(call("follower")) for _ in range(3)]
    await async_until(lambda: async_client.statistics().compute_queued == 3)
    go.set()
    assert await asyncio.wait_for(asyncio.gather(builder, *followers), TIMEOUT) == ["built"] * 4
    # they are woken once the result is stored; the builder's call returns after the release's
    # reply, which the event loop reads after running what was woken before it
    assert returned == ["follower"] * 3 + ["builder"]
