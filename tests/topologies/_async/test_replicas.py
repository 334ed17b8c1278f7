"""Replica acknowledgement (WAIT): a grant a failover could lose is given back.
Sync twin generated into tests/topologies/_sync by tools/gen_sync.py."""

from __future__ import annotations

import pytest

import fencelock
from fencelock._async.client import AsyncLockClient
from fencelock._keys import LockKeys
from fencelock_tools.servers.embedded import EmbeddedServer

KEY = LockKeys.for_name("replicated").lock


async def test_grant_reaches_the_replica(replicated: tuple[EmbeddedServer, EmbeddedServer]) -> None:
    master, replica = replicated
    client = AsyncLockClient.from_url(master.url, min_replicas=1, replica_timeout=2.0)
    lock = client.lock("replicated", ttl=30, auto_renew=True)
    assert await lock.acquire(timeout=0)
    # WAIT returned 1: the replica has the very holder token, before acquire returned
    assert replica.client().get(KEY) == master.client().get(KEY) is not None
    await lock.extend()
    await lock.release()
    await client.close()


async def test_unacknowledged_grant_is_given_back(
    replicated: tuple[EmbeddedServer, EmbeddedServer],
) -> None:
    # pitfall 10: with min_replicas, a grant no replica acknowledged is given back, not held
    master, replica = replicated
    client = AsyncLockClient.from_url(master.url, min_replicas=1, replica_timeout=0.2)
    held = client.lock("replicated", ttl=30)
    assert await held.acquire(timeout=0)
    replica.pause()  # it can no longer acknowledge anything
    try:
        with pytest.raises(fencelock.NotReplicated) as info:
            await held.extend()
        assert (info.value.acked, info.value.wanted) == (0, 1)
        await held.release()
        lock = client.lock("replicated", ttl=30)
        with pytest.raises(fencelock.NotReplicated):
            await lock.acquire(timeout=0)
        assert not master.client().exists(KEY)  # the grant was released, not left behind
        with pytest.raises(fencelock.LockNotOwned):
            _ = lock.token
    finally:
        replica.resume()
    await client.close()


async def test_replica_arguments_are_checked(server: EmbeddedServer) -> None:
    with pytest.raises(ValueError, match="min_replicas"):
        AsyncLockClient.from_url(server.url, min_replicas=-1)
    with pytest.raises(TypeError, match="min_replicas"):
        AsyncLockClient.from_url(server.url, min_replicas="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="replica_timeout"):
        AsyncLockClient.from_url(server.url, min_replicas=1, replica_timeout=10.0)
