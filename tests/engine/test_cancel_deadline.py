"""Cancellation returns at the caller's deadline, whatever the server does (issue 24).

The server is stopped (SIGSTOP) and every request's own bound is an hour: a call that waited
for the hung server would hang the test (pytest's timeout), so each call here returning at
all, while the server is still stopped, shows that control came back at the caller's deadline.
Then the server runs again, and whatever a request in flight granted must be given back (the
give-back waits for that request, in the background, bounded), with nothing left held and no
task left behind once the client is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import async_until
from tests.engine._async.test_late_grants import connected, held_keys

HOUR = 3600.0


@pytest.fixture
async def slow(fresh_server: EmbeddedServer) -> AsyncIterator[AsyncLockClient]:
    """A client whose requests may each take an hour."""
    client = AsyncLockClient.from_url(fresh_server.url, socket_timeout=HOUR)
    yield client
    fresh_server.resume()
    await client.close()


async def stopped_call(
    server: EmbeddedServer, call: Callable[[], Awaitable[Any]], how: str
) -> type[BaseException]:
    """``call()`` with the server stopped, given up by the caller after 0.2 s (``how``:
    wait_for, or asyncio.timeout); what it raised. It must return while the server is
    stopped."""
    server.pause()
    try:
        if how == "wait_for":
            with pytest.raises(TimeoutError) as caught:
                await asyncio.wait_for(call(), 0.2)
        else:
            with pytest.raises(TimeoutError) as caught:
                async with asyncio.timeout(0.2):
                    await call()
        return caught.type
    finally:
        server.resume()


HOW = ["wait_for", "timeout"]


@pytest.mark.parametrize("how", HOW)
async def test_an_acquire_returns_at_the_deadline_and_gives_back(
    slow: AsyncLockClient, fresh_server: EmbeddedServer, how: str
) -> None:
    await slow.lock("warm", ttl=30).acquire(timeout=0)  # (connected, script cached)
    lock = slow.lock("hung", ttl=30)
    await stopped_call(fresh_server, lambda: lock.acquire(timeout=None), how)
    # the request went on; once the server answered, what it granted was given back
    await async_until(lambda: held_keys(fresh_server) == [b"fencelock:{warm}:lock"])
    assert await slow.lock("hung", ttl=30).acquire(timeout=0)


@pytest.mark.parametrize("how", HOW)
async def test_a_release_returns_at_the_deadline_and_still_releases(
    slow: AsyncLockClient, fresh_server: EmbeddedServer, how: str
) -> None:
    lock = slow.lock("held", ttl=30)
    assert await lock.acquire(timeout=0)
    await stopped_call(fresh_server, lock.release, how)
    await async_until(lambda: held_keys(fresh_server) == [])
    with pytest.raises(fencelock.LockNotOwned):
        await lock.release()  # released as far as the object knows, too


@pytest.mark.parametrize(
    "call",
    ["extend", "held", "semaphore", "read", "write", "multi", "campaign", "latch", "barrier"],
)
async def test_every_call_returns_at_the_deadline(
    slow: AsyncLockClient, fresh_server: EmbeddedServer, call: str
) -> None:
    lock = slow.lock("held", ttl=30)
    assert await lock.acquire(timeout=0)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "extend": lock.extend,
        "held": lock.held,
        "semaphore": lambda: slow.semaphore("s", 2).acquire(timeout=None),
        "read": lambda: slow.rw_lock("rw").read().acquire(timeout=None),
        "write": lambda: slow.rw_lock("rw").write().acquire(timeout=None),
        "multi": lambda: slow.multi_lock(["m1", "m2"]).acquire(timeout=None),
        "campaign": lambda: slow.election("e").campaign(timeout=None),
        "latch": lambda: slow.latch("l", 1).count_down(),
        "barrier": lambda: slow.barrier("b", 1).enter(timeout=None),
    }
    await stopped_call(fresh_server, calls[call], "wait_for")
    await lock.release()
    await async_until(lambda: held_keys(fresh_server) == [])  # nothing granted stays held


async def test_a_waiter_cancelled_while_the_server_hangs_leaves_the_queue(
    slow: AsyncLockClient, fresh_server: EmbeddedServer
) -> None:
    # The holder is another client's: behind a holder of its own client the waiter would wait
    # in the local queue until that lease ran out (30 s), not in the queue in Redis.
    other = AsyncLockClient.from_url(fresh_server.url)
    holder = other.lock("busy", ttl=30)
    assert await holder.acquire(timeout=0)
    waiter = slow.lock("busy", ttl=30)
    task = asyncio.ensure_future(waiter.acquire(timeout=None))
    await async_until(lambda: slow.statistics().waiting == 1)
    fresh_server.pause()
    try:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # back at once, the server still stopped
    finally:
        fresh_server.resume()
    await holder.release()
    await other.close()
    await async_until(lambda: held_keys(fresh_server) == [])  # its entry left, nothing granted


async def test_a_cancelled_acquire_whose_request_then_times_out_is_given_back_late(
    fresh_server: EmbeddedServer,
) -> None:
    """The request in flight of a cancelled acquire outlives the caller and then its own bound
    (1 s), with the server still stopped: what the server grants when it runs again is given
    back by the client's watchdog (issue 29)."""
    client = AsyncLockClient.from_url(fresh_server.url, socket_timeout=1.0)
    try:
        lock = client.lock("hung", ttl=HOUR)
        given = await connected(client, lock)
        fresh_server.pause()
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(lock.acquire(timeout=None), 0.2)
            # the request, then the give-back after it, got no answer: it waits for one
            await async_until(lambda: client.statistics().giving_back == 1)
        finally:
            fresh_server.resume()
        await async_until(lambda: client.statistics().giving_back == 0)
        assert client.statistics().given_back == given + 1
        assert held_keys(fresh_server) == []
    finally:
        await client.close()


async def test_close_lets_the_give_backs_finish(fresh_server: EmbeddedServer) -> None:
    client = AsyncLockClient.from_url(fresh_server.url, socket_timeout=HOUR)
    await client.lock("warm", ttl=30).acquire(timeout=0)
    lock = client.lock("closing", ttl=30)
    fresh_server.pause()
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(lock.acquire(timeout=None), 0.2)
    finally:
        fresh_server.resume()
    await client.close()  # after the give-back, not in its middle
    assert held_keys(fresh_server) == [b"fencelock:{warm}:lock"]
    me = asyncio.current_task()
    assert [t for t in asyncio.all_tasks() if t is not me] == []


def test_asyncio_run_ends_within_one_request_timeout_with_the_server_stopped(
    fresh_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``asyncio.run`` cancels the waiter left running and waits for its clean-up (leaving the
    queue in Redis) before closing the loop; with the server stopped that wait ends at one
    request timeout (0.5 s here; an unbounded one would hang the test), the clean-up cancelled,
    not destroyed pending. (The entry left in the queue is skipped by a release, and expires.)"""
    clients: list[AsyncLockClient] = []

    async def main() -> None:
        holder = AsyncLockClient.from_url(fresh_server.url, socket_timeout=0.5)
        waiter = AsyncLockClient.from_url(fresh_server.url, socket_timeout=0.5, wake="one")
        clients[:] = [holder, waiter]
        assert await holder.lock("busy", ttl=30).acquire(timeout=0)
        task = asyncio.create_task(waiter.lock("busy", ttl=30).acquire(timeout=None))
        await async_until(lambda: waiter.statistics().waiting == 1)
        assert not task.done()
        fresh_server.pause()

    try:
        asyncio.run(main())  # returns, the server still stopped
    finally:
        fresh_server.resume()
    del clients[:]
    assert "Task was destroyed" not in caplog.text
