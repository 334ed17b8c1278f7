"""valkey-glide's clients (docs/glide.md): what is the glide route's own. The conformance subset
(the tests marked ``glide`` in the other layers) runs the lock, the waits, the renewals, the
semaphore, the latch and Redlock over them. Sync twin generated into tests/topologies/_sync by
tools/gen_sync.py."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._async.glide_route import AsyncGlideWaiter
from fencelock._async.waiter import Watch
from fencelock._backend import AsyncEvent
from fencelock._glide import async_glide
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer
from tests.clients import GLIDE, AsyncClients
from tests.concurrency import TIMEOUT, AsyncCall, async_until

pytest.importorskip("glide")
pytest.importorskip("glide_sync")  # (the sync twin's)


@pytest.fixture
async def glide_clients() -> AsyncIterator[AsyncClients]:
    clients = AsyncClients(GLIDE)
    yield clients
    await clients.close()


async def test_the_application_client_is_left_open(
    server: EmbeddedServer, raw: redis.Redis, glide_clients: AsyncClients
) -> None:
    """close() closes what fencelock made (its subscriptions' client), never the client it
    was given, which serves the application on."""
    given = await glide_clients.glide(server)
    client = AsyncLockClient(given)
    async with client.lock("left-open", ttl=10):
        pass
    waiter = client.lock("left-open", ttl=10)
    async with client.lock("left-open", ttl=10):  # a wait: its subscriptions' client is made
        assert not await waiter.acquire(timeout=0.05)
    await client.close()
    assert await given.custom_command(["PING"]) == b"PONG"
    assert raw.pubsub_channels() == []  # (its subscriptions' client is closed)


async def test_a_dropped_client_closes_the_glide_client_it_made(
    server: EmbeddedServer, raw: redis.Redis, glide_clients: AsyncClients
) -> None:
    """A client dropped unclosed closes its subscriptions' client (its listener ends with it),
    and leaves the application's open."""
    other = AsyncLockClient(await glide_clients.glide(server))
    held = other.lock("dropped", ttl=30)
    assert await held.acquire(timeout=0)
    given = await glide_clients.glide(server)
    before = len(raw.client_list())
    client = AsyncLockClient(given)
    assert not await client.lock("dropped", ttl=5).acquire(timeout=0.05)  # a wait: made
    assert len(raw.client_list()) > before
    with pytest.warns(ResourceWarning, match="unclosed"):
        del client
        gc.collect()
    await async_until(lambda: len(raw.client_list()) == before)
    assert await given.custom_command(["PING"]) == b"PONG"
    await held.release()
    await other.close()


async def test_a_wait_is_woken_through_a_glide_client_of_its_own(
    server: EmbeddedServer, raw: redis.Redis, glide_clients: AsyncClients
) -> None:
    """The waiter subscribes on a client of fencelock's own: the application's client is not
    subscribed to anything, and gets no message of fencelock's."""
    given = await glide_clients.glide(server)
    client = AsyncLockClient(given, max_poll=3600)
    other = AsyncLockClient(await glide_clients.glide(server))
    held = other.lock("own-sub", ttl=3600)
    assert await held.acquire(timeout=0)
    waiter = client.lock("own-sub", ttl=10)
    call = AsyncCall(lambda: waiter.acquire(timeout=None))
    await async_until(lambda: client.statistics().waiting == 1)
    assert raw.pubsub_channels() != []
    await held.release()
    assert await call.result()
    assert client.statistics().wakeups == 1 and client.statistics().polls == 0
    assert given.try_get_pubsub_message() is None
    await waiter.release()
    await client.close()
    await other.close()


async def test_the_server_is_recognised_through_glide(
    server: EmbeddedServer, server_kind: str, glide_clients: AsyncClients
) -> None:
    """HELLO's reply, a map under glide's RESP3, is read as redis-py's flat list: the native
    commands are known; the operators' views decode too."""
    client = AsyncLockClient(await glide_clients.glide(server))
    lock = client.lock("hello", ttl=10)
    assert await lock.acquire(timeout=0)
    assert client._wiring.topology.protocol.mode.commands.server.startswith(server_kind)
    info = await client.inspect("hello")
    assert info is not None and info.token == lock.token
    assert [held.name async for held in client.locks()] == ["hello"]
    await lock.release()
    await client.close()


async def test_a_key_of_another_type_is_a_clear_error(
    server: EmbeddedServer, raw: redis.Redis, glide_clients: AsyncClients
) -> None:
    """An error reply (WRONGTYPE, which glide renders "WRONGTYPE: ...") reads as redis-py's."""
    raw.set(LockKeys.for_name("typed").fence, "not a number")
    client = AsyncLockClient(await glide_clients.glide(server))
    with pytest.raises(fencelock.LockError, match="another Redis type"):
        await client.lock("typed", ttl=10).acquire(timeout=0)
    assert raw.get(LockKeys.for_name("typed").fence) == "not a number"
    await client.close()


async def test_a_paused_server_bounds_every_call(
    fresh_server: EmbeddedServer, glide_clients: AsyncClients
) -> None:
    """The application's glide client waits for ten minutes (longer than the test's own
    timeout): every call is bounded by fencelock's socket_timeout all the same, a wait's
    subscribing included."""
    given = await glide_clients.glide(fresh_server, request_timeout=600_000)
    client = AsyncLockClient(given, socket_timeout=0.3)
    lock = client.lock("paused", ttl=30)
    assert await lock.acquire(timeout=0)
    fresh_server.pause()
    try:
        with pytest.raises(fencelock.LockConnectionError):
            await lock.extend()
        with pytest.raises(fencelock.LockConnectionError):
            await lock.held()
        with pytest.raises(fencelock.LockConnectionError):
            await client.lock("other", ttl=5).acquire(timeout=1)
        with pytest.raises(fencelock.LockConnectionError):
            await lock.release()
    finally:
        fresh_server.resume()
    await client.close()


async def test_a_waiter_closed_while_its_client_is_made_closes_that_client(
    server: EmbeddedServer, glide_clients: AsyncClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() finds no client while one is being made: the making closes it. (It was kept,
    open, by a waiter closed already.)"""
    glide = async_glide()  # (glide_sync in the sync twin)
    given = await glide_clients.glide(server)
    create = glide.GlideClient.create
    made: list[Any] = []
    making, go = AsyncEvent(), AsyncEvent()

    async def held_create(config: Any) -> Any:  # (the making held until close() has run)
        making.set()
        assert await go.wait(TIMEOUT)
        made.append(await create(config))
        return made[-1]

    monkeypatch.setattr(glide.GlideClient, "create", held_create)
    waiter = AsyncGlideWaiter(given, confirm_timeout=TIMEOUT)

    async def watch() -> None:
        async with waiter.watch("closing", "a test", Watch()):
            pass

    call = AsyncCall(watch)
    assert await making.wait(TIMEOUT)
    await waiter.close()
    go.set()
    with pytest.raises(fencelock.LockConnectionError, match="closed"):
        await call.result()
    [client] = made
    with pytest.raises(glide.ClosingError):
        await client.custom_command(["PING"])


async def test_what_glide_cannot_do_here_is_refused(
    server: EmbeddedServer, glide_clients: AsyncClients
) -> None:
    cluster = await glide_clients.glide_cluster(server)  # (not connected)
    given = await glide_clients.glide(server)
    for nodes in ([given, "not a client"], [given, cluster]):
        with pytest.raises(TypeError, match="Redlock nodes must be"):
            AsyncLockClient(nodes)  # type: ignore[arg-type]
    script = async_glide().Script("return 1")  # (glide's, not a client)
    with pytest.raises(TypeError, match=r"redis must be .*, not .*Script"):
        AsyncLockClient(script)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_replicas"):
        AsyncLockClient(given, min_replicas=1)
