"""A grant the server makes after its request went unanswered is given back once the server
answers again (issue 29), and so is one whose release got no answer. Sync twin generated into
tests/engine/_sync by tools/gen_sync.py.

The server is stopped (SIGSTOP) with an acquire in its socket: the acquire times out, and when
the server runs again it grants it, to nobody. The client's watchdog gives it back by the
holder token as soon as the server answers (``_core/giveback.py``); the tests wait for that on
the client's statistics, never on the clock.
"""

from __future__ import annotations

import gc
import threading
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.concurrency import async_until

REQUEST = 1.0  # the clients' request timeout: how long the stopped server keeps them waiting
TTL = 300.0  # a grant left to nobody would outlast the test by far

PRIMITIVES = ["lock", "semaphore", "read", "write", "multi", "election"]


def held_keys(server: EmbeddedServer) -> list[bytes]:
    """The keys of grants held and waiters queued (not counters, a latch's state...)."""
    with redis.Redis(port=server.port) as raw:
        return sorted(k for k in raw.keys("fencelock:*") if k.endswith((b":lock", b":waiters")))


def taker(client: AsyncLockClient, primitive: str) -> Any:
    """An object of ``primitive`` (each excludes the next one of its kind on the same name;
    a reader excludes a writer)."""
    makers = {
        "lock": lambda: client.lock("l", ttl=TTL),
        "semaphore": lambda: client.semaphore("s", 1, ttl=TTL),
        "read": lambda: client.rw_lock("rw", ttl=TTL).read(),
        "write": lambda: client.rw_lock("rw", ttl=TTL).write(),
        "multi": lambda: client.multi_lock(["m1", "m2"], ttl=TTL),
        "election": lambda: client.election("e", ttl=TTL),
    }
    return makers[primitive]()


@pytest.fixture
async def clients(fresh_server: EmbeddedServer) -> AsyncIterator[list[AsyncLockClient]]:
    made = [AsyncLockClient.from_url(fresh_server.url, socket_timeout=REQUEST) for _ in range(2)]
    yield made
    fresh_server.resume()
    for client in made:
        await client.close()


async def connected(client: AsyncLockClient, taken: Any) -> int:
    """``taken`` acquired and released once: ``client`` keeps a connection, and the kind's script
    is loaded, so the next acquire goes out at once and the server can grant it. A fresh
    client's first requests can outlast a short request timeout on a loaded machine: tried
    again, once what such a try left is given back. Returns the client's ``given_back`` then."""
    for _ in range(10):
        await async_until(lambda: client.statistics().giving_back == 0)
        try:
            granted = await taken.acquire(timeout=0)
        except fencelock.LockConnectionError:
            continue
        assert granted
        await taken.release()
        break
    else:
        raise AssertionError("no acquire answered in 10 tries")
    await async_until(lambda: client.statistics().giving_back == 0)
    return client.statistics().given_back


async def unanswered_acquire(server: EmbeddedServer, client: AsyncLockClient, taken: Any) -> int:
    """``taken.acquire`` sent to the stopped server, timed out; the server then runs it. Returns
    the client's ``given_back`` before."""
    given = await connected(client, taken)
    server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            await taken.acquire(timeout=0)
    finally:
        server.resume()
    return given


@pytest.mark.parametrize("primitive", PRIMITIVES)
async def test_a_grant_made_after_its_request_timed_out_is_given_back(
    fresh_server: EmbeddedServer, clients: list[AsyncLockClient], primitive: str
) -> None:
    client, other = clients
    given = await unanswered_acquire(fresh_server, client, taker(client, primitive))
    await async_until(lambda: client.statistics().giving_back == 0)  # the give-back is done
    assert client.statistics().given_back == given + 1  # (it found the grant the server made)
    assert held_keys(fresh_server) == []
    rival = taker(other, "write" if primitive == "read" else primitive)
    assert await rival.acquire(timeout=0)  # at once, not in a ttl
    await rival.release()


async def test_a_release_that_could_not_reach_the_server_is_given_back(
    fresh_server: EmbeddedServer, clients: list[AsyncLockClient]
) -> None:
    """The server stopped while a lock is held: its release cannot even be sent (the request
    before it took the client's connection with it), and raises; the grant is given back once
    the server answers again, not left to its ttl."""
    client, other = clients
    lock = client.lock("held", ttl=TTL)
    given = await connected(client, lock)
    assert await lock.acquire(timeout=0)
    fresh_server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            await lock.held()  # (sent on the connection, which it closes: the server reads it)
        with pytest.raises(fencelock.LockConnectionError):
            await lock.release()  # not sent: a new connection cannot be made
    finally:
        fresh_server.resume()
    await async_until(lambda: client.statistics().giving_back == 0)
    assert client.statistics().given_back == given + 1
    assert held_keys(fresh_server) == []
    rival = other.lock("held", ttl=TTL)
    assert await rival.acquire(timeout=0)
    await rival.release()


async def test_every_hold_of_a_reentrant_lock_is_given_back(
    fresh_server: EmbeddedServer, clients: list[AsyncLockClient]
) -> None:
    """Three holds, none of whose releases could reach the stopped server: the give-back
    takes them all off (a hold a try, at once), not two of them."""
    client, other = clients
    lock = client.lock("reentered", ttl=TTL, reentrant=True)
    given = await connected(client, lock)
    for _ in range(3):
        assert await lock.acquire(timeout=0)
    fresh_server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            await lock.held()  # (sent on the connection, which it closes: the server reads it)
        for _ in range(3):
            with pytest.raises(fencelock.LockConnectionError):
                await lock.release()  # not sent: a new connection cannot be made
    finally:
        fresh_server.resume()
    await async_until(lambda: client.statistics().giving_back == 0)
    assert client.statistics().given_back == given + 1
    assert held_keys(fresh_server) == []
    rival = other.lock("reentered", ttl=TTL)
    assert await rival.acquire(timeout=0)
    await rival.release()


async def test_close_gives_the_give_backs_a_request_timeout_then_forgets_them(
    fresh_server: EmbeddedServer, clients: list[AsyncLockClient]
) -> None:
    """What close() abandons lasts its ttl: the give-back waits for a server that answers."""
    client, _ = clients
    lock = client.lock("closing", ttl=TTL)
    given = await connected(client, lock)
    fresh_server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            await lock.acquire(timeout=0)
        assert client.statistics().giving_back == 1
        await client.close()  # the server still stopped: back within its bounds
        assert client.statistics().giving_back == 0
    finally:
        fresh_server.resume()
    assert held_keys(fresh_server) == [b"fencelock:{closing}:lock"]
    assert client.statistics().given_back == given


async def test_close_does_not_wait_for_a_server_that_is_gone(
    fresh_server: EmbeddedServer,
) -> None:
    """A server killed (its port refuses) ran nothing of what waited in its sockets: close()
    forgets the give-backs for it at once, not after a request timeout (an hour here: a close
    that waited it out would hang the test)."""
    client = AsyncLockClient.from_url(fresh_server.url, socket_timeout=3600)
    lock = client.lock("gone", ttl=TTL)
    assert await lock.acquire(timeout=0)
    fresh_server.kill()
    with pytest.raises(fencelock.LockConnectionError):
        await lock.release()
    assert client.statistics().giving_back == 1
    await client.close()
    assert client.statistics().giving_back == 0


def watchdog_threads() -> set[threading.Thread]:
    """The watchdog workers alive (the asyncio client's renews in a thread too)."""
    return {thread for thread in threading.enumerate() if thread.name == "fencelock-watchdog"}


async def test_a_dropped_client_forgets_its_give_backs_as_close_does(
    fresh_server: EmbeddedServer,
) -> None:
    """Dropped unclosed with a give-back left, the server still stopped: its watchdog ends one
    request timeout later, as at close(), and leaves no thread behind."""
    before = watchdog_threads()
    client = AsyncLockClient.from_url(fresh_server.url, socket_timeout=REQUEST)
    lock = client.lock("dropped", ttl=TTL)
    await connected(client, lock)
    fresh_server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            await lock.acquire(timeout=0)
        assert client.statistics().giving_back == 1
        ours = watchdog_threads() - before
        assert ours  # trying, while the server stays silent
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # (unclosed: on purpose)
            del client, lock
            gc.collect()
        await async_until(lambda: not any(thread.is_alive() for thread in ours))
    finally:
        fresh_server.resume()
